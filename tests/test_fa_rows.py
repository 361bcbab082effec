"""Flash attention on the CPU, which the engines run by default on setup's build (fa-hook.patch): a verified row
must equal the row decoding computes, also where the KV cache passes 512 cells.

Upstream ggml splits one query row's KV cache over the threads from 512 cells up and sums the partial softmaxes
afterwards, while rows of a batch (2..63) sum over the cells in order: the same row then differs between
decoding and verification (on a 1.5B Q4_K_M, batches of 7 and 8 after a 250-token prefix differed by up to
0.33 in a logit).  The hook keeps decoding on the batch's path.
"""

from __future__ import annotations

import numpy as np
import pytest

from omnidraft.assets import models
from omnidraft.llama import build as llama_build, invariance
from omnidraft.llama.engine import Engine, EngineConfig
from tests.reference import rows_by_batch

ROWS = 8
PREFIX = 252  # decoding then crosses 256 cells, where llama.cpp pads the KV cache it attends to to 512


def _require_hook() -> None:
    if not llama_build.has_fa_invariant():
        pytest.skip("this llama.cpp build has no fa-hook.patch (an upstream build): the engines keep flash attention off")


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_flash_attention_rows_bit_identical_to_decoding_past_512_cells(mode, monkeypatch):
    _require_hook()
    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    monkeypatch.delenv("OMNIDRAFT_FLASH_ATTN", raising=False)
    cfg = EngineConfig(n_ctx=1024, n_threads=2, batch_invariant=mode == "exact")
    assert cfg.use_flash_attn(), "a CPU engine on setup's build runs flash attention by default"
    with Engine(models.resolve(models.QWEN_05B), cfg) as e:
        ids = e.tokenize(invariance.PROBE_TEXT)
        prefix = (ids * (PREFIX // len(ids) + 1))[:PREFIX]
        single, batches = rows_by_batch(e, prefix, ids[:ROWS])
    for n, rows in enumerate(batches, start=1):
        assert np.array_equal(rows, single[:n]), f"{mode}: a batch of {n} rows differs from one-token decoding"


def test_flash_attention_stays_off_where_rows_would_differ(monkeypatch):
    """No hook at run time (OMNIDRAFT_SBQ4=0) or a GPU: the default leaves flash attention off; a flag wins."""
    monkeypatch.delenv("OMNIDRAFT_FLASH_ATTN", raising=False)
    monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
    assert not EngineConfig().use_flash_attn()
    monkeypatch.delenv("OMNIDRAFT_SBQ4")
    assert not EngineConfig(n_gpu_layers=-1).use_flash_attn()
    assert EngineConfig(flash_attn=True, n_gpu_layers=-1).use_flash_attn()
    assert not EngineConfig(flash_attn=False).use_flash_attn()
    monkeypatch.setenv("OMNIDRAFT_FLASH_ATTN", "0")  # the A/B switch
    assert not EngineConfig().use_flash_attn()
