"""Kernel modes for the target: measured fidelity decides what may verify; a guard re-decodes near-ties."""

from __future__ import annotations

import inspect
import textwrap

import numpy as np
import pytest

from omnidraft.llama import invariance
from omnidraft.speculative.generator import GenerationParams, Generator
from omnidraft.llama.invariance import Fidelity
from omnidraft.speculative.methods import make_drafter
from omnidraft.speculative.policy import PolicyConfig
from omnidraft.speculative.verifier import SamplingParams, first_uncertain_row

from tests.lossless_prompts import PROMPTS


# ---------------------------------------------------------------- pure functions, hand-made arrays
def test_guard_flags_a_greedy_near_tie_and_only_it():
    rows = np.array([[0.0, 3.0, 1.0, 2.0],        # margin 1.0: certain
                     [0.0, 2.0, 2.00001, -1.0],   # margin 1e-5: a near-tie
                     [5.0, 0.0, 0.0, 0.0]])
    greedy = SamplingParams()
    assert first_uncertain_row(rows, greedy, [0.5] * 3, guard=1e-4) == 1
    assert first_uncertain_row(rows, greedy, [0.5] * 3, guard=1e-7) is None
    assert first_uncertain_row(rows[:1], greedy, [0.5], guard=0.4) is None
    assert first_uncertain_row(rows[:1], greedy, [0.5], guard=0.6) == 0


def test_guard_flags_a_uniform_on_a_cdf_boundary():
    row = np.log(np.array([[0.25, 0.25, 0.5]]))
    sp = SamplingParams(temperature=1.0, seed=1)
    assert first_uncertain_row(row, sp, [0.2500001], guard=1e-4) == 0   # at the edge of token 0 / token 1
    assert first_uncertain_row(row, sp, [0.37], guard=1e-4) is None     # well inside token 1
    assert first_uncertain_row(row, SamplingParams(temperature=1.0, top_p=0.9), [0.37], guard=1e-4) is None
    assert first_uncertain_row(row, SamplingParams(temperature=1.0, top_p=0.9), [0.2500001], guard=1e-4) == 0


def test_guard_flags_a_nucleus_that_a_small_move_could_change():
    """Top-p keeps {0.5, 0.3} of [0.5, 0.3, 0.2] at top_p 0.8: at 0.8 exactly, a move that lowers their mass
    drops it below top_p and brings the third token in; at 0.79 it is certain unless the move can reach 0.79's
    1 % margin; a third token as heavy as the second could overtake it."""
    sp = SamplingParams(temperature=1.0, top_p=0.8)
    row = np.log(np.array([[0.5, 0.3, 0.2]]))
    assert first_uncertain_row(row, sp, [0.3], guard=1e-4) == 0  # mass 0.8: at top_p
    sp79 = SamplingParams(temperature=1.0, top_p=0.79)
    assert first_uncertain_row(row, sp79, [0.3], guard=1e-4) is None
    assert first_uncertain_row(row, sp79, [0.3], guard=0.05) == 0  # r = e^0.1 moves 0.8 below 0.79
    close = np.log(np.array([[0.5, 0.25, 0.2499, 0.0001]]))
    assert first_uncertain_row(close, SamplingParams(temperature=1.0, top_p=0.7), [0.3], guard=1e-3) == 0
    assert first_uncertain_row(close, SamplingParams(temperature=1.0, top_p=0.7), [0.3], guard=1e-5) is None


@pytest.mark.parametrize("settings", [dict(temperature=1.0, top_p=0.9), dict(temperature=0.7, top_p=0.95),
                                      dict(temperature=0.8, top_k=40, top_p=0.9), dict(temperature=1.5, top_p=0.5)])
def test_a_row_the_guard_calls_certain_draws_the_same_token_after_any_move_within_it(settings):
    """Rows shaped like a model's (a few heavy logits over a long tail, some flat, some with near-ties at the
    nucleus's edge) and moves of every logit by at most the guard (random, and all +-guard with the sign
    chosen to push the nucleus's mass down or up): where the guard says a row is certain, the moved row draws
    the same token for every uniform tried.  It must also call most peaked rows certain, or drafting under a
    guard could never pay on top-p requests."""
    rng = np.random.default_rng(7)
    sp, guard, certain, peaked = SamplingParams(**settings), 1e-3, 0, 0
    for trial in range(300):
        n = 2000
        row = rng.normal(0.0, 2.0 if trial % 3 else 0.3, n)
        row[rng.choice(n, 5, replace=False)] += rng.uniform(4.0, 12.0, 5) * (trial % 3 != 0)
        if trial % 5 == 0:  # a near-tie somewhere in the heavy part
            a, b = np.argsort(row)[-3:-1]
            row[a] = row[b] + rng.uniform(-2e-3, 2e-3)
        us = rng.random(8)
        sure = [u for u in us if first_uncertain_row(row[None], sp, [u], guard) is None]
        peaked += trial % 3 != 0
        certain += bool(sure) and trial % 3 != 0
        if not sure:
            continue
        keep = np.zeros(n, dtype=bool)
        from omnidraft.speculative.verifier import weights, draw
        ids, w = weights(row, sp)
        keep[ids if ids is not None else np.arange(n)] = w > 0
        moves = [rng.uniform(-guard, guard, n), np.where(keep, -guard, guard), np.where(keep, guard, -guard)]
        for move in moves:
            for u in sure:
                assert draw(row + move, sp, u)[0] == draw(row, sp, u)[0], (trial, u)
    assert certain >= 0.6 * peaked, (certain, peaked)


def test_plan_never_lets_argmax_flips_verify():
    exact = Fidelity("exact", 7, 0.4, 0, 70)
    assert invariance.plan_for(exact) == invariance.VerifyPlan("exact", 7)
    identical_fast = Fidelity("fast", 8, 0.0, 0, 70)
    assert invariance.plan_for(identical_fast).guard == 0.0
    tiny = Fidelity("fast", 1, 5.7e-6, 0, 240)
    plan = invariance.plan_for(tiny)
    assert plan.max_batch == 8 and plan.guard == pytest.approx(invariance.GUARD_SAFETY * 5.7e-6)
    assert invariance.plan_for(Fidelity("fast", 1, 0.67, 3, 240)) is None   # Q4_K_M-like: never
    assert invariance.plan_for(Fidelity("fast", 1, 0.05, 0, 240)) is None   # too far even without flips


def test_score_prefers_cheap_batches():
    cheap = Fidelity("fast", 8, 0.0, 0, 70, {str(n): 0.027 * (1 + 0.17 * (n - 1)) for n in range(1, 9)})
    dear = Fidelity("exact", 7, 0.0, 0, 70, {str(n): 0.028 * n for n in range(1, 9)})
    assert invariance.score(cheap, invariance.plan_for(cheap)) > invariance.score(dear, invariance.plan_for(dear))


def test_a_near_tie_in_score_keeps_the_faster_one_token_decode():
    """The 1.5B Q4_K_M's start-up timings on a 2-core Zen 4 (ms, medians of 3): exact scored 1.8 % above fast only
    because its 3-row pass came out cheaper than its 2-row one; fast decodes one token faster and is kept."""
    ms = lambda *t: {str(n): x / 1000 for n, x in enumerate(t, 1)}  # noqa: E731
    exact = Fidelity("exact", 8, 0.0, 0, 70, ms(41.5, 55.1, 52.5, 60.4, 84.9, 90.2, 109.8, 106.4))
    fast = Fidelity("fast", 8, 0.0, 0, 70, ms(39.5, 46.6, 54.2, 63.2, 68.4, 78.4, 88.0, 96.1))
    fids = {invariance.KernelMode.EXACT: exact, invariance.KernelMode.FAST: fast}
    plans = {m: invariance.plan_for(f) for m, f in fids.items()}
    assert invariance.score(exact, plans[invariance.KernelMode.EXACT]) > invariance.score(
        fast, plans[invariance.KernelMode.FAST])
    assert invariance.choose_mode(fids, plans) == invariance.KernelMode.FAST
    # a clear win is kept whatever the one-token decode: exact twice as fast on batches
    exact_fast_batches = Fidelity("exact", 8, 0.0, 0, 70, ms(41.5, *(x / 2 for x in (55.1, 52.5, 60.4, 84.9,
                                                                                       90.2, 109.8, 106.4))))
    fids[invariance.KernelMode.EXACT] = exact_fast_batches
    plans[invariance.KernelMode.EXACT] = invariance.plan_for(exact_fast_batches)
    assert invariance.choose_mode(fids, plans) == invariance.KernelMode.EXACT


def test_auto_times_both_modes_again_in_reverse_order_so_a_slow_phase_decides_nothing(tmp_path_factory, tmp_path,
                                                                                      monkeypatch):
    """A first start times exact, fast, then fast, exact, each mode keeping its faster sample: a slow phase of
    the machine during one timing (a VM's neighbour; the eleventh session's AVX-VNNI build chose exact from a
    start-up whose fast timing ran 1.2-1.8x its later ones) no longer picks the slower mode.  Later starts read
    the cache and time nothing."""
    from tests.gguf_helpers import tiny_gguf

    path, cache = tiny_gguf(tmp_path_factory, "llama", quant="q8_0"), tmp_path / "invariance.json"
    true = {"exact": 1.0, "fast": 0.95}  # ms of a one-row pass: fast is the faster mode
    calls = []

    def passes(engine, sizes, rounds=5, **_):
        calls.append(str(engine.mode))
        slow = 1.5 if len(calls) == 2 else 1.0  # the slow phase: fast's first timing
        return {n: [true[engine.mode] * slow * (1 + 0.3 * (n - 1)) / 1e3] * rounds for n in sizes}

    monkeypatch.setattr(invariance, "sample_passes", passes)
    monkeypatch.setattr(invariance, "_measure_at", lambda engine, prefix, seq: (len(seq), 0.0, 0, len(seq)))
    engine, plan = invariance.load_target(path, 256, 1, "auto", cache)
    engine.close()
    assert calls == ["exact", "fast", "fast", "exact"] and plan.mode == "fast"
    once = {m: Fidelity(m, 8, 0.0, 0, 8, {str(n): true[m] * (1.5 if m == "fast" else 1) * (1 + 0.3 * (n - 1)) / 1e3
                                          for n in range(1, 9)}) for m in invariance.KernelMode}
    assert invariance.choose_mode(once, {m: invariance.plan_for(f) for m, f in once.items()}) == "exact"
    calls.clear()
    engine, again = invariance.load_target(path, 256, 1, "auto", cache)
    engine.close()
    assert calls == [] and again == plan


# ---------------------------------------------------------------- the loop on the real default pair
def _prompt(gen, text, chat):
    return gen.prompt_from_messages([{"role": "user", "content": text}]) if chat else gen.prompt_from_text(text)


GUARDED = (0, 15, 24, 36, 42)  # one prompt of every kind (code .. chat), each in GREEDY: references shared


@pytest.mark.parametrize("sampled", [False, True])
def test_guarded_loop_redecodes_near_ties_and_stays_equal_to_target_alone(default_session, target_reference,
                                                                          sampled):
    """A wide guard (0.5 logits) re-decodes many rows alone; every text still equals the target alone."""
    s = default_session
    gen = Generator(s.target, make_drafter("omnidraft", s.pair), PolicyConfig(name="fixed", k=4), "omnidraft",
                    s.max_verify_batch, guard=0.5)
    redecodes = 0
    for i, (_, p, chat) in enumerate(PROMPTS[j] for j in GUARDED):
        params = GenerationParams(max_tokens=24, temperature=0.8 if sampled else 0.0, seed=77 + i)
        ref = target_reference(s.target, _prompt(gen, p, chat), params)  # greedy: shared with test_lossless
        final = gen.generate(_prompt(gen, p, chat), params)
        assert final.token_ids == ref, p[:40]
        redecodes += final.stats.guard_redecodes
    assert redecodes > 0


def test_a_small_target_reads_long_prompts_in_small_batches_and_stays_lossless(default_session, target_reference,
                                                                             tmp_path):
    """Files under SMALL_TARGET_BYTES read prompts 128 tokens at a time on a CPU (peak RSS); a prompt of several
    such batches, drafted for, gives the target alone's tokens.  Larger files and GPU builds keep 512."""
    s = default_session
    assert s.target.n_batch == invariance.target_batch(s.target.path, 0)  # 128 for the suite's 0.5B
    small, big = tmp_path / "small.gguf", tmp_path / "big.gguf"
    for path, size in ((small, invariance.SMALL_TARGET_BYTES - 1), (big, invariance.SMALL_TARGET_BYTES)):
        with open(path, "wb") as f:
            f.truncate(size)  # sparse: only its size is read
    assert invariance.target_batch(small, 0) == invariance.SMALL_TARGET_BATCH
    assert invariance.target_batch(big, 0) == invariance.target_batch(small, -1) == 512
    gen = Generator(s.target, make_drafter("omnidraft", s.pair), PolicyConfig(name="fixed", k=4), "omnidraft",
                    s.max_verify_batch)
    pin = gen.prompt_from_text(inspect.getsource(textwrap)[:1400])
    assert len(pin.target_ids) > 2 * invariance.SMALL_TARGET_BATCH
    params = GenerationParams(max_tokens=16)
    final = gen.generate(pin, params)
    assert final.stats.proposed > 0 and final.token_ids == target_reference(s.target, pin, params)


def test_prompts_are_read_in_rows_only_where_that_was_measured_faster():
    """The 1.5B q4_0_pure's 64-token read on the 2-core Zen 1 (fast kernels): 2.7 s in 8-row passes, 3.7 s in
    one batch; its exact kernels the other way round; within READ_MARGIN or unmeasured (a GPU): whole batches."""
    fid = lambda batch, rows: Fidelity("fast", 8, 0.0, 0, 70, {}, {"batch": batch, "rows": rows})  # noqa: E731
    assert fid(3.7, 2.7).read_rows == invariance.READ_ROWS
    assert fid(2.3, 2.6).read_rows == 0
    assert fid(1.0, 0.97).read_rows == 0  # inside the margin: nothing to gain worth a change of path
    assert Fidelity("fast", 8, 0.0, 0, 70).read_rows == 0


def test_a_prompt_read_in_rows_leaves_the_state_of_a_token_by_token_read(default_session, monkeypatch):
    """The target reads a prompt READ_ROWS tokens a pass where its start-up measured that faster (load_target sets
    ``read_rows`` from the cached fidelity, whose read was timed both ways).  Rows of up to 8 are bit-identical to
    one-token decoding, so such a read leaves the logits a token-by-token read does, bit for bit."""
    s = default_session
    eng = s.target
    fid = invariance.lookup(eng.path, eng.config, eng.mode, s.state_dir / "invariance.json")
    assert fid is not None and fid.t_read["batch"] > 0 and fid.t_read["rows"] > 0
    assert eng.read_rows == fid.read_rows
    if s.plan.max_batch < invariance.READ_ROWS or s.plan.guard:
        pytest.skip(f"{eng.mode} rows are bit-identical only up to {s.plan.max_batch} here")
    ids = eng.tokenize(inspect.getsource(textwrap.dedent)[:400])
    assert len(ids) > 3 * invariance.READ_ROWS
    eng.reset()
    for t in ids:
        one = eng.decode([t], "last")[0].copy()
    sizes: list[int] = []
    chunk = eng._decode_chunk
    monkeypatch.setattr(eng, "_decode_chunk", lambda c, want: (sizes.append(len(c)), chunk(c, want)))
    monkeypatch.setattr(eng, "read_rows", invariance.READ_ROWS)
    eng.reset()
    rows = eng.decode(ids, "last")[0].copy()
    eng.reset()
    assert max(sizes) == eng.read_rows and sum(sizes) == len(ids)
    assert np.array_equal(rows, one)
    sizes.clear()  # timing the two reads again on this engine still times one whole batch, and keeps its rows
    timed = invariance.time_reads(eng)
    assert sorted(sizes) == [invariance.READ_ROWS] * (invariance.READ_PROBE // invariance.READ_ROWS) + [
        invariance.READ_PROBE] and timed["batch"] > 0 and timed["rows"] > 0 and eng.read_rows == invariance.READ_ROWS


def test_auto_on_the_real_target_picks_a_verifying_mode_and_caches_both_fidelities(default_session):
    """``auto`` on the suite's real target: the session runs fast kernels (named in conftest), so auto measures
    the exact mode it lacks, keeps both fidelities in the state dir, and picks a mode whose batches verify."""
    s = default_session
    assert s.plan.mode == s.target.mode and s.plan.max_batch >= 2
    cache = s.state_dir / "invariance.json"
    engine, plan = invariance.load_target(s.target.path, s.settings.n_ctx, s.settings.threads, "auto", cache)
    engine.close()
    assert plan.mode in ("exact", "fast") and plan.max_batch >= 2
    for mode in ("exact", "fast"):
        cfg = type(s.target.config)(n_ctx=s.settings.n_ctx, n_threads=s.settings.threads,
                                    batch_invariant=(mode == "exact"))
        fid = invariance.lookup(s.target.path, cfg, mode, cache)
        assert fid is not None and fid.positions > 0 and fid.t(1) > 0


def test_fidelity_cache_key_follows_the_build_and_the_kernel_switch(tmp_path, monkeypatch):
    """A rebuilt llama.cpp (new kernels) or OMNIDRAFT_SBQ4=0 computes differently: a fidelity measured
    under one must not be read under the other (a stale "fast mode flips" entry kept Q4_K_M exact)."""
    from omnidraft.llama.engine import EngineConfig

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    cfg = EngineConfig(n_threads=2)
    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    on = invariance._key(gguf, cfg, "fast")
    monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
    assert invariance._key(gguf, cfg, "fast") != on
    monkeypatch.delenv("OMNIDRAFT_SBQ4")
    monkeypatch.setattr(invariance.llama_build, "build_id", lambda: "another build")
    assert invariance._key(gguf, cfg, "fast") != on
