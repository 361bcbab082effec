"""A real `omnidraft serve` process for end-to-end tests: free loopback port, private state dir."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from omnidraft.assets import models

N_CTX = 2048


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SEEDED = ("invariance.json", "costmodel.json", "threads.json", "formats.json")
# Set by tests/conftest.py to a folder of this pytest session: what any test's start-up measured lands
# there, so on a machine without a user state (a clean CI clone) only the first start measures.
SHARED_ENV = "OMNIDRAFT_TEST_SHARED_STATE"


def _table(path: Path) -> dict:
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def _merge(dst: Path, *sources: Path) -> None:
    """Add to ``dst`` the entries of ``sources`` it lacks (never a dropped one: None means "measure again")."""
    table = _table(dst)
    new = {k: v for src in sources for k, v in _table(src).items() if v is not None and k not in table}
    if new:
        tmp = dst.with_name(dst.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**table, **new}, indent=1))
        os.replace(tmp, dst)


def seed_state(state: Path) -> Path:
    """Seed a test's private state dir with what start-up measures once per machine (kernel fidelity, cost
    model): from the user's state dir, and from every state dir seeded earlier in this pytest session (a
    session or server started there measured what the user's state lacked), so no test pays it again."""
    state.mkdir(parents=True, exist_ok=True)
    sources = [models.cache_dir() / "state"]
    if os.environ.get(SHARED_ENV):
        shared = Path(os.environ[SHARED_ENV])
        shared.mkdir(parents=True, exist_ok=True)
        seeded = shared / "seeded-dirs.txt"
        earlier = seeded.read_text().splitlines() if seeded.exists() else []
        for name in SEEDED:
            _merge(shared / name, *(Path(d) / name for d in earlier))
        if str(state) not in earlier:
            with open(seeded, "a") as f:
                f.write(f"{state}\n")
        sources.append(shared)
    for name in SEEDED:
        _merge(state / name, *(src / name for src in sources))
    return state


@contextlib.contextmanager
def serve_process(tmp_path: Path, *extra: str, ready_s: float = 180.0):
    """`omnidraft serve` on a free loopback port, private state dir; yields the base URL."""
    for name in (models.QWEN_05B, models.DEFAULT_DRAFT):
        if not models.is_verified(models.get_spec(name)):
            pytest.skip(f"{name} not downloaded (make test pulls it)")
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    seed_state(state)
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "omnidraft.apps.cli", "serve", "--port", str(port), "--threads", "2",
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
