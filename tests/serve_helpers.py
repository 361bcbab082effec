"""A real `omnidraft serve` process for end-to-end tests: free loopback port, private state dir."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from omnidraft import models

N_CTX = 2048


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed_state(state: Path) -> Path:
    """Copy what start-up measures once per machine (kernel fidelity, cost model) from the user's state
    dir into a test's private one, so each test does not pay the measurement again."""
    state.mkdir(parents=True, exist_ok=True)
    for name in ("invariance.json", "costmodel.json"):
        known = models.cache_dir() / "state" / name
        if known.exists() and not (state / name).exists():
            shutil.copy(known, state / name)
    return state


@contextlib.contextmanager
def serve_process(tmp_path: Path, *extra: str, ready_s: float = 180.0):
    """`omnidraft serve` on a free loopback port, private state dir; yields the base URL."""
    for name in (models.DEFAULT_TARGET, models.DEFAULT_DRAFT):
        if not models.is_verified(models.get_spec(name)):
            pytest.skip(f"{name} not downloaded (make test pulls it)")
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    seed_state(state)
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "omnidraft.cli", "serve", "--port", str(port), "--threads", "2",
         "--n-ctx", str(N_CTX), "--draft-n-ctx", str(N_CTX), "--state-dir", str(state), *extra],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {(tmp_path / 'server.log').read_text()[-2000:]}")
            try:
                if requests.get(url + "/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not come up")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
