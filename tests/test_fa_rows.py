"""Flash attention on the CPU, which the engines run by default on setup's build (fa-hook.patch): a verified row
must equal the row decoding computes, also where the KV cache passes 512 cells and whatever the thread count,
and stay close to llama.cpp's plain attention.

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


@pytest.fixture
def hooked(monkeypatch):
    """Setup's build with its kernels and flash attention at their defaults (no switch set)."""
    if not llama_build.has_fa_invariant():
        pytest.skip("this llama.cpp build has no fa-hook.patch (an upstream build): the engines keep flash attention off")
    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    monkeypatch.delenv("OMNIDRAFT_FLASH_ATTN", raising=False)


def _rows(cfg: EngineConfig, prefix: int = PREFIX) -> tuple[np.ndarray, list[np.ndarray]]:
    """The 0.5B's one-token rows after a ``prefix``-token prefix, and its batches of 1..ROWS there."""
    with Engine(models.resolve(models.QWEN_05B), cfg) as e:
        ids = e.tokenize(invariance.PROBE_TEXT)
        return rows_by_batch(e, (ids * (prefix // len(ids) + 1))[:prefix], ids[:ROWS])


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_flash_attention_rows_bit_identical_to_decoding_past_512_cells(mode, hooked):
    cfg = EngineConfig(n_ctx=1024, n_threads=2, batch_invariant=mode == "exact")
    assert cfg.use_flash_attn(), "a CPU engine on setup's build runs flash attention by default"
    single, batches = _rows(cfg)
    for n, rows in enumerate(batches, start=1):
        assert np.array_equal(rows, single[:n]), f"{mode}: a batch of {n} rows differs from one-token decoding"


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_fa_rows_keeps_batches_bit_identical_to_decoding_and_close_to_one_chunk(mode, hooked, monkeypatch):
    """fa_rows.cpp (blocks of the KV cache shared by a pass's items, vectorized over cells) against ggml's one_chunk
    (OMNIDRAFT_FA_ROWS=0), after 600 cells (past 512, 37 of its 16-cell blocks), the fast mode's f16 cache and the exact
    mode's f32 one: every batch of 1..8 rows equal to decoding, bit for bit; the rows differ from one_chunk's (it
    runs) by rounding only, and never in their argmax."""
    if not llama_build.has_fa_rows():
        pytest.skip("this build has no fa_rows.cpp")
    cfg = EngineConfig(n_ctx=1024, n_threads=2, batch_invariant=mode == "exact")
    rows = {}
    for on in ("1", "0"):
        monkeypatch.setenv("OMNIDRAFT_FA_ROWS", on)
        rows[on] = _rows(cfg, prefix=600)
    for n, batch in enumerate(rows["1"][1], start=1):
        assert np.array_equal(batch, rows["1"][0][:n]), f"{mode}: a batch of {n} rows differs from decoding"
    ours, theirs = rows["1"][0], rows["0"][0]
    assert not np.array_equal(ours, theirs), "OMNIDRAFT_FA_ROWS changed nothing: fa_rows.cpp did not run"
    rms = float(np.sqrt(np.mean((ours - theirs) ** 2)))
    assert rms <= 0.05 * float(theirs.std()), f"{mode}: differs from one_chunk by {rms / theirs.std():.3g} of the spread"
    assert np.array_equal(ours.argmax(1), theirs.argmax(1))


def test_flash_attention_rows_do_not_depend_on_the_thread_count(hooked):
    """ggml hands (row, head) pairs to the threads in chunks, and with the hook a single row takes the same path;
    a row's bits must not move with the number of threads (1 against 4, oversubscribed here on purpose)."""
    rows = {threads: _rows(EngineConfig(n_ctx=1024, n_threads=threads))[1][-1] for threads in (1, 4)}
    assert np.array_equal(rows[1], rows[4])


def test_flash_attention_agrees_with_the_plain_attention(hooked):
    """The same rows with flash attention off (llama.cpp's products and softmax): the float sums differ in order
    (and flash attention accumulates V in f16), which 24 layers amplify to 0.024-0.028 of the logits' spread on
    this file; argmax never flips on these rows."""
    rows = {fa: _rows(EngineConfig(n_ctx=1024, n_threads=2, flash_attn=fa))[1][-1] for fa in (False, True)}
    rms = float(np.sqrt(np.mean((rows[True] - rows[False]) ** 2)))
    assert rms <= 0.05 * float(rows[False].std()), f"differs by {rms / rows[False].std():.3g} of the spread"
    assert np.array_equal(rows[True].argmax(1), rows[False].argmax(1))


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


def test_doctor_says_whether_the_engines_run_flash_attention(monkeypatch):
    """The doctor's line follows what EngineConfig's default does: on with the hook, off without it or when
    the kernels are off, and a forcing switch named as such."""
    from omnidraft.apps import doctor

    monkeypatch.delenv("OMNIDRAFT_FLASH_ATTN", raising=False)
    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    line = doctor._flash_attn_line()
    assert line.startswith("on (fa-hook.patch") == EngineConfig().use_flash_attn() == llama_build.has_fa_invariant()
    monkeypatch.setattr(llama_build, "has_fa_invariant", lambda: False)
    assert doctor._flash_attn_line().startswith("off (fa-hook.patch not in this build") and \
        not EngineConfig().use_flash_attn()
    monkeypatch.setattr(llama_build, "has_fa_invariant", lambda: True)
    monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
    assert doctor._flash_attn_line().startswith("off for this process") and not EngineConfig().use_flash_attn()
    monkeypatch.setenv("OMNIDRAFT_FLASH_ATTN", "1")
    assert doctor._flash_attn_line().startswith("on (OMNIDRAFT_FLASH_ATTN=1") and EngineConfig().use_flash_attn()
