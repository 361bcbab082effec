"""Issue 45 row 1: a model file that aborts llama.cpp (GGML_ASSERT, SIGABRT) is refused after a check in a
child process, never loaded in the serving process; the server keeps its drafter, reports the refused
version, and does so again after a restart; ``generate --draft`` on such a file says why in one line."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omnidraft.assets import models
from omnidraft.errors import InvalidModelFile
from omnidraft.llama import loadcheck
from omnidraft.llama.engine import Engine, EngineConfig

DRAFT = models.DEFAULT_DRAFT


def crafted(tmp_path: Path, key: str, value: int, name: str = "") -> Path:
    """The bundled drafter with one uint32 metadata value replaced (its sha256 would be published valid)."""
    out = tmp_path / (name or f"{key.replace('.', '_')}-{value}.gguf")
    shutil.copyfile(models.resolve(DRAFT), out)
    with open(out, "r+b") as f:
        head = f.read(1 << 20)
        needle = struct.pack("<Q", len(key)) + key.encode()
        i = head.find(needle)
        assert i >= 0 and struct.unpack_from("<I", head, i + len(needle))[0] == 4  # GGUF uint32
        f.seek(i + len(needle) + 4)
        f.write(struct.pack("<I", value))
    return out


@pytest.fixture(autouse=True)
def private_verdicts(tmp_path, monkeypatch):
    monkeypatch.setattr(loadcheck, "verdicts_path", lambda: tmp_path / "loadcheck.json")
    monkeypatch.setattr(loadcheck, "_memo", {})


@pytest.mark.parametrize("key,value,why", [("llama.block_count", 0, "GGML_ASSERT"),
                                           ("llama.block_count", 4_000_000_000, "GGML_ASSERT"),
                                           ("llama.context_length", 1, "too short")])
def test_a_file_that_aborts_llama_cpp_is_refused_not_loaded(tmp_path, key, value, why):
    bad = crafted(tmp_path, key, value)
    with pytest.raises(InvalidModelFile, match=why) as e:  # before this change: SIGABRT of this very process
        Engine(bad, EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False))
    assert "\n" not in str(e.value) and "refused" in str(e.value)


def test_the_verdict_is_kept_per_file(tmp_path, monkeypatch):
    bad = crafted(tmp_path, "llama.block_count", 0)
    cfg = EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)
    with pytest.raises(InvalidModelFile):
        Engine(bad, cfg)
    monkeypatch.setattr(loadcheck, "_memo", {})  # a new process: the verdict comes from the file, no child
    monkeypatch.setattr(loadcheck, "check_in_child", lambda *a: pytest.fail("checked again"))
    with pytest.raises(InvalidModelFile, match="GGML_ASSERT"):
        Engine(bad, cfg)
    good = tmp_path / "good.gguf"
    shutil.copyfile(bad, good)  # another file (path, inode): checked on its own
    with pytest.raises(pytest.fail.Exception, match="checked again"):
        Engine(good, cfg)


def test_verdicts_of_files_that_are_gone_are_dropped_at_the_next_write(tmp_path):
    """The table is read at every load: a deleted file's verdicts (a retired drafter version, a test's temporary
    model) leave it when another verdict is written, those of files still there stay."""
    import json

    cfg = EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)
    gone, kept, new = (crafted(tmp_path, "llama.block_count", 0, name) for name in ("gone.gguf", "kept.gguf",
                                                                                    "new.gguf"))
    for path in (gone, kept):
        with pytest.raises(InvalidModelFile):
            Engine(path, cfg)
    loadcheck.mark_trusted(models.resolve(DRAFT))
    table = json.loads(loadcheck.verdicts_path().read_text())
    assert sum(str(gone) in k for k in table) == 1 and len(table) == 3
    gone.unlink()
    with pytest.raises(InvalidModelFile):
        Engine(new, cfg)
    table = json.loads(loadcheck.verdicts_path().read_text())
    assert not [k for k in table if str(gone) in k]
    assert [sum(str(p) in k for k in table) for p in (kept, new, models.resolve(DRAFT))] == [1, 1, 1]


def test_the_server_keeps_serving_and_reports_a_drafter_that_aborts_llama_cpp(default_session, tmp_path):
    from omnidraft.online.registry import DrafterRegistry
    from omnidraft.server.cli import WatchedRegistry
    from omnidraft.server.metrics import Metrics
    from omnidraft.speculative.generator import GenerationParams

    session = default_session
    reg = DrafterRegistry(tmp_path / "registry", base_path=models.resolve(DRAFT))
    bad = reg.publish(crafted(tmp_path, "llama.block_count", 0), {"note": "aborts llama.cpp"})
    before = session.drafter_version
    try:
        for restart in range(2):  # the second pass: a restarted server (fresh registry view, nothing remembered)
            session.swaps.forget_refusals()
            loadcheck._memo.clear()
            metrics = Metrics()
            session.registry = WatchedRegistry(DrafterRegistry(reg.root), metrics)
            assert reg.current()[0] == bad
            assert not session.maybe_swap()
            assert session.drafter_version == before
            assert bad in metrics.stats_view()["problems"]["drafter_version"]
            assert "GGML_ASSERT" in metrics.stats_view()["problems"]["drafter_version"]
            gen = session.generator("omnidraft")
            assert gen.generate(gen.prompt_from_text("x = 1\n"), GenerationParams(max_tokens=4)).token_ids
        reg.rollback("base")  # rolled back: the problem is cleared
        session.maybe_swap()
        assert "drafter_version" not in metrics.stats_view()["problems"]
    finally:
        session.registry = None


def test_generate_with_a_drafter_that_aborts_llama_cpp_says_why(tmp_path):
    bad = crafted(tmp_path, "llama.block_count", 0)
    from tests.serve_helpers import seed_state

    state = seed_state(tmp_path / "state")
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "omnidraft.apps.cli", "generate", "--method", "omnidraft",
                        "--draft", str(bad), "--threads", "2", "--n-ctx", "512", "--state-dir", str(state),
                        "--max-tokens", "2", "hi"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])  # was 134 (SIGABRT)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "GGML_ASSERT" in errors[0] and str(bad) in errors[0], p.stderr[-2000:]
    assert time.time() - t0 < 120


def test_a_context_llama_cpp_caps_below_the_batch_size_does_not_abort():
    """n_ctx 300: llama.cpp allows batches of 300 tokens in its 512-token context; a 400-token prompt was
    decoded as one chunk of 400 and aborted the process (GGML_ASSERT n_tokens_all <= n_batch)."""
    code = ("from omnidraft.assets import models\n"
            "from omnidraft.llama.engine import Engine, EngineConfig\n"
            f"e = Engine(models.resolve({DRAFT!r}), EngineConfig(n_ctx=300, n_threads=2, batch_invariant=False))\n"
            "assert e.n_ctx >= 400, e.n_ctx\n"
            "print(e.decode(list(range(100, 500)), 'last').shape)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-1500:])
