"""The trainer side of ``omnidraft adapt``, as child processes: ``omnidraft trainer serve`` (the online trainer,
met as a server meets it: records over HTTP, versions in its registry on disk) and ``omnidraft trainer export``
(the control: the untrained drafter through the publishing path).  Nothing here imports the trainer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from omnidraft import httpguard
from omnidraft.online.registry import DrafterRegistry


def trainer_cli(*args: str) -> list[str]:
    """argv of ``omnidraft <args>`` in a child Python that imports this same package."""
    return [sys.executable, "-m", "omnidraft.apps.cli", *args]


# where the trainer's children import first (a host whose CUDA build of llama.cpp aborts beside torch in the
# trainer's export: its CPU build there; scripts/device/adapt_device.sh)
TRAINER_PATH_ENV = "OMNIDRAFT_TRAINER_PATH"


def child_env() -> dict:
    root = str(Path(__file__).resolve().parents[2])  # the directory holding this package (apps/ -> omnidraft/ -> it)
    first = os.environ.get(TRAINER_PATH_ENV, "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (first, root, os.environ.get("PYTHONPATH")) if p)}


def export_control(base: str, qtype: str, out_dir: Path, threads: int = 0) -> tuple[Path, dict]:
    """The untrained drafter through the trainer's export path (``omnidraft trainer export``, its own process):
    GGUF -> torch -> GGUF ``qtype`` -> check."""
    argv = trainer_cli("trainer", "export", "--base", base, "--out", str(out_dir / f"control-{qtype or 'base'}.gguf"),
                       "--qtype", qtype, "--threads", str(threads))
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"trainer export failed ({done.returncode}): {done.stderr[-2000:]}")
    meta = json.loads(done.stdout.strip().splitlines()[-1])
    path = Path(meta.pop("path"))
    if not qtype:  # named after the quantization it got, like the trainer's
        path = path.rename(out_dir / f"control-{meta['qtype']}.gguf")
    return path, meta


class TrainerProcess:
    """``omnidraft trainer serve`` as a child process on a free loopback port.  Adapt meets it as a server
    does: records posted to it (Uploader), versions read from its registry on disk; ``/v1/status`` says
    when an update is done."""

    def __init__(self, state_dir: Path, options: list[str], log_path: Path, start_s: float = 120.0,
                 wait: bool = True):
        """Start the trainer; ``wait=False`` returns at once (``wait_ready`` then waits for it to listen), so that
        its start-up runs beside other work."""
        self.state_dir, self.log_path = state_dir, log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(trainer_cli("trainer", "serve", "--state-dir", str(state_dir), "--port", "0",
                                                 *options), stdout=self._log, stderr=subprocess.STDOUT,
                                     env=child_env())
        self.start_s = start_s
        self.updates: dict[int, dict] = {}  # update number -> its metadata, as the trainer reported it
        self.url: str | None = None
        if wait:
            self.wait_ready()

    def wait_ready(self) -> "TrainerProcess":
        """Block until the trainer listens (at most ``start_s`` from this call); its URL, token and registry."""
        if self.url is None:
            try:
                self.url = self._wait_url(self.log_path, self.start_s)
            except BaseException:
                self.stop()
                raise
            self.token = httpguard.read_token(self.state_dir / httpguard.TOKEN_FILE)
            self.registry = DrafterRegistry(self.state_dir / "registry")
        return self

    def _wait_url(self, log_path: Path, start_s: float) -> str:
        end = time.monotonic() + start_s
        while time.monotonic() < end:
            for line in log_path.read_text().splitlines():
                if line.startswith("trainer on http://"):
                    return line.split()[2]
            if self.proc.poll() is not None:
                raise RuntimeError(f"the trainer exited ({self.proc.returncode}): {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"the trainer did not start within {start_s:.0f} s (log: {log_path})")

    def status(self) -> dict:
        req = urllib.request.Request(self.url + "/v1/status", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            st = json.loads(resp.read())
        self.updates.update({m["update"]: m for m in st.get("history", [])})
        return st

    def wait_idle(self, timeout: float = 600.0) -> dict:
        """Block until no update is pending or running; the trainer's last status."""
        end = time.monotonic() + timeout
        st = self.status()
        while time.monotonic() < end and (st["busy"] or st["untrained"] >= st["interval"]):
            time.sleep(0.2)
            st = self.status()
        return st

    def history(self) -> list[dict]:
        return [self.updates[n] for n in sorted(self.updates)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
