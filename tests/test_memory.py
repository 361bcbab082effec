"""What a load costs in memory against what this host has available (runtime.memory): the KV cache read from the
header, and a session that says so before it loads a pair that does not fit."""

from __future__ import annotations

import logging

import pytest

from gguf_tools.header import kv_values_per_token
from omnidraft.assets import models
from omnidraft.llama import hostmem
from omnidraft.runtime import memory
from omnidraft.runtime.session import Session, Settings
from tests.gguf_helpers import tiny_gguf

WARNING = "less memory available than the model pair needs"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_gguf(tmp_path_factory, "qwen2"), tiny_gguf(tmp_path_factory, "llama")


def test_the_kv_cache_a_token_takes_comes_from_the_header(pair, tmp_path):
    target, draft = pair
    assert kv_values_per_token(target) == 2 * 2 * (16 + 16)  # 2 layers x 2 KV heads x (key + value), 64 / 4 wide
    size = target.stat().st_size
    assert memory.engine_bytes(target, 1000) == size + memory.ENGINE_BYTES + 1000 * 128 * memory.KV_VALUE_BYTES
    assert memory.engine_bytes(target, 1000, file_bytes=5) == 5 + memory.ENGINE_BYTES + 1000 * 128 * 4
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf")
    assert memory.engine_bytes(junk, 1000) == 10 + memory.ENGINE_BYTES  # its load refuses it, with its own message
    real = models.model_path(models.get_spec(models.QWEN_05B))
    if real.is_file():  # 24 layers x 2 KV heads x (64 + 64)
        assert kv_values_per_token(real) == 6144


def _session(pair, root, free_mb, caplog) -> str:
    target, draft = pair
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="omnidraft.runtime.memory"):
        hostmem_free = (lambda meminfo=None: free_mb << 20) if free_mb is not None else (lambda meminfo=None: None)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(hostmem, "available_bytes", hostmem_free)
            s = Session(Settings(target=str(target), draft=str(draft), threads=2, n_ctx=512, draft_n_ctx=512,
                                 method="omnidraft", policy="fixed", state_dir=str(root)))
            s.close()
    return caplog.text


def test_a_session_short_of_memory_says_so_before_it_loads(pair, tmp_path, caplog):
    """Two engines need 2 x 96 MiB beside their files: 100 MB available is short, 1 GB is not, and a host that
    cannot say (no /proc/meminfo) is not warned."""
    text = _session(pair, tmp_path, 100, caplog)
    assert WARNING in text and "105 MB free" in text and "MB needed" in text and "smaller target" in text
    assert WARNING not in _session(pair, tmp_path, 1024, caplog)
    assert WARNING not in _session(pair, tmp_path, None, caplog)


def test_doctor_says_what_the_pairs_need():
    """For a phone's choice between the targets: what each downloaded target needs with the served drafter."""
    from omnidraft.apps import doctor

    if not models.is_verified(models.get_spec(models.QWEN_05B)):
        pytest.skip("the 0.5B is not downloaded here")
    need = memory.pair_bytes(Settings(target=models.QWEN_05B))
    line = f"memory: {models.QWEN_05B} with {Settings().draft} needs about {need / 1e6:,.0f} MB at 4096 tokens"
    assert any(line in x for x in doctor.cache_section())
    assert need > models.model_path(models.get_spec(models.QWEN_05B)).stat().st_size + 2 * memory.ENGINE_BYTES
