"""Whether llama.cpp can load a model file without killing the process: the one check every model goes through.

llama.cpp stops the whole process (``GGML_ASSERT``, SIGABRT) on some files a header check cannot tell from good
ones: ``block_count`` 0 or past its limit.  (A context length of 1 made llama.cpp allow batches of 1 token, and
the first prompt aborted; the engine now keeps its chunks within what llama.cpp allows, and such a file is refused
as unusable.)  A server that loaded such a drafter died, and died again on every restart.  So
before a model is loaded in this process, a child process loads it with the same settings, checks its context
length, and decodes a few tokens.  The verdict is kept per file (path, size, mtime,
inode), settings and llama.cpp version in ``<cache>/loadcheck.json``, so a file costs the child once; files the
model cache marks trusted (``mark_trusted``: the pinned models, verified by sha256 against pins known to load,
and the re-quantized copies made from them) skip it.  The child is ``loadcheck_child``.

``Engine.__init__`` calls ``ensure_loadable``, so the server, ``generate``, the trainer and the gguf tools are all
covered.  A refused file raises InvalidModelFile with one line saying why."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import llama_cpp

from omnidraft import paths, statefile
from omnidraft.errors import InvalidModelFile

log = logging.getLogger(__name__)

CHILD_ENV = "OMNIDRAFT_LOADCHECK_CHILD"  # set in the child: it loads the file itself, unchecked
TIMEOUT_S = 600.0  # a load that takes longer is refused (and checked again next time: it may have been load)
PROBE_TOKENS = 8  # decoded in the child, so a graph that cannot be built fails there
CHECK_VERSION = 2  # part of each verdict's key: a changed check judges every file again
MIN_CONTEXT = 64  # a file whose own context length is shorter (1 was seen) is refused: the CLI's --n-ctx floor
# settings that change what llama.cpp does with the file (threads do not)
_CONFIG_KEYS = ("n_ctx", "n_batch", "n_gpu_layers", "vocab_only", "flash_attn", "mmap", "batch_invariant")

_memo: dict[str, dict] = {}
_lock = threading.Lock()


def verdicts_path() -> Path:
    return paths.cache_dir() / "loadcheck.json"


def ensure_loadable(path: str | os.PathLike, config) -> None:
    """Return if llama.cpp loads ``path`` with ``config`` (an EngineConfig) in a child process; else raise
    InvalidModelFile saying why.  Checked once per file and settings; the child's own load is not checked."""
    if os.environ.get(CHILD_ENV) == "1":
        return
    path = Path(path)
    if _trusted(path):
        return
    key = _key(path, config)
    with _lock:  # one child at a time per process; the rest read its verdict
        verdict = _known(key)
        if verdict is None:
            verdict = check_in_child(path, [config])
            if verdict.get("final", True):
                _remember(key, verdict)
        _memo[key] = verdict
    if not verdict["ok"]:
        raise InvalidModelFile(f"{path}: refused, llama.cpp cannot use this model ({verdict['why']})")


def check_together(path: str | os.PathLike, configs) -> None:
    """Check ``path`` under several settings (EngineConfigs) in one child, in the order given, as a process that
    loads the file under each in turn (``invariance.load_target``: the target in both kernel modes) would: one
    interpreter start instead of one per setting.  Settings with a verdict already are left out.  Only where
    every load passes are the verdicts kept; else none is, and ``ensure_loadable`` checks each setting alone
    when it comes to it, so a refusal names its own reason and each verdict is what a child of its own says."""
    if os.environ.get(CHILD_ENV) == "1":
        return
    path = Path(path)
    if _trusted(path):
        return
    with _lock:
        todo: dict[str, object] = {}
        for config in configs:
            try:
                key = _key(path, config)
            except OSError:  # no such file: the engine's own load says so
                return
            if key not in todo and not _known(key):
                todo[key] = config
        if len(todo) < 2:  # one: its own check, as ever
            return
        verdict = check_in_child(path, list(todo.values()))
        if verdict["ok"]:
            for key in todo:
                _remember(key, verdict)
                _memo[key] = verdict


def _remember(key: str, verdict: dict) -> None:
    """Keep ``verdict`` in the cache file, and drop the verdicts of files that are gone: adaptation publishes and
    retires drafter versions, tests write models into temporary folders, and the table (read at every load)
    grew by every such file (1,482 entries, 435 kB, after a few dozen test runs)."""
    statefile.write(verdicts_path(), key, verdict, keep=_file_exists)


def _file_exists(key: str) -> bool:
    """Whether the file a verdict's key names (``_key``, ``_file_key``) is still there."""
    parts = key.split("|")
    return os.path.exists(parts[1] if parts[0] == "trusted" else parts[0])


def _known(key: str) -> dict | None:
    """The verdict kept for ``key`` (this process's, else the cache file's), or None."""
    return _memo.get(key) or statefile.read(verdicts_path(), key)


def check_in_child(path: Path, configs: list) -> dict:
    """Load ``path`` in a child process under each EngineConfig of ``configs`` in turn: {"ok": True} when every
    load passes, else {"ok": False, "why": one line[, "final": False]}."""
    threads = min(2, os.cpu_count() or 1)
    cfgs = [{**{k: getattr(c, k) for k in _CONFIG_KEYS}, "n_threads": threads, "n_threads_batch": threads}
            for c in configs]
    env = dict(os.environ, **{CHILD_ENV: "1"})
    cmd = [sys.executable, "-m", "omnidraft.llama.loadcheck_child", str(path), json.dumps(cfgs)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"loading it took over {TIMEOUT_S:.0f} s", "final": False}
    if p.returncode == 0:
        return {"ok": True}
    return {"ok": False, "why": _reason(p.returncode, p.stdout, p.stderr)}


def _reason(rc: int, stdout: str, stderr: str) -> str:
    """One line: the child's own refusal, else llama.cpp's assertion and how the child ended."""
    lines = [ln.strip() for ln in (stdout + "\n" + stderr).splitlines() if ln.strip()]
    said = [ln[len("refused: "):] for ln in lines if ln.startswith("refused: ")]
    if said:
        return said[-1][:300]
    how = f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.Signals._value2member_map_ \
        else f"exit code {rc}"
    asserts = [ln for ln in lines if "GGML_ASSERT" in ln or "error" in ln.lower()]
    detail = asserts[0] if asserts else (lines[-1] if lines else "no output")
    if "/src/" in detail:  # llama.cpp's source path: keep the file name
        detail = detail[detail.rfind("/") + 1:]
    return f"loading it in a child process ended with {how}: {detail[:300]}"


def _key(path: Path, config) -> str:
    st = path.stat()
    cfg = ",".join(f"{k}={getattr(config, k)}" for k in _CONFIG_KEYS)
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{cfg}|llama.cpp {llama_cpp.__version__}|check {CHECK_VERSION}"


def _file_key(path: Path) -> str | None:
    try:
        real = path.resolve()
        st = real.stat()
    except OSError:
        return None
    return f"trusted|{real}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"


def mark_trusted(path: str | os.PathLike) -> None:
    """Record that ``path``, as it is now, is known to load (the model cache calls this for files it verified)."""
    key = _file_key(Path(path))
    if key is None or _memo.get(key):
        return
    with _lock:
        if not statefile.read(verdicts_path(), key):
            _remember(key, {"trusted": True})
        _memo[key] = {"trusted": True}


def _trusted(path: Path) -> bool:
    """Marked by ``mark_trusted`` while the file kept its size, mtime and inode."""
    key = _file_key(path)
    if key is None:
        return False
    if key not in _memo:
        _memo[key] = statefile.read(verdicts_path(), key) or {}
    return bool(_memo[key].get("trusted"))
