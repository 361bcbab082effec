"""The small-batch Q4_K / Q6_K / Q5_0 / Q8_0 kernels (backend/omnidraft/llama/patch/sbk.cpp, and the
8-row interleaved Q4_K and Q6_K of the fast mode, sbkx8.cpp and sbq6x8.cpp).

Two levels:

* compiled alone (tests/sbk_harness.py), for every x86 tier this CPU runs: random blocks in ggml's
  layouts, every batch of 1..8 rows bit-identical to one row and within float tolerance of a float64
  reference written from ggml's scalar dequantizers; a drifted row is caught;
* through the product's Engine on the pinned Q4_K_M file, exact mode (plain weights, where the kernel
  runs): rows bit-identical to one-token decoding for 1..8, close to ggml's own kernels
  (``OMNIDRAFT_SBQ4=0`` in the same process), and the invariance probe reporting 8 identical rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import sbk_harness as H
from omnidraft.assets import models
from omnidraft.llama import build as llama_build, invariance
from omnidraft.llama.engine import Engine, EngineConfig
from tests.reference import rows_by_batch

CI = bool(os.environ.get("CI"))
MAX_ROWS = 8


@pytest.fixture(scope="module")
def tiers(tmp_path_factory) -> dict:
    """Each tier this CPU can run, built once; with AVX-512 VNNI also its 256-bit variants (-DSBKX8_YMM,
    -DSBQ6X8_YMM) that two tests below compare it with, so that every compile runs in one parallel batch."""
    if not llama_build.is_x86():
        pytest.skip("the kernel is x86-only")
    flags = H.cpu_flags()
    out_dir = tmp_path_factory.mktemp("sbk")
    runs = [t for t, (_, needs, _) in H.TIERS.items() if needs <= flags]
    extra = [("avx512-vnni", ("SBKX8_YMM",)), ("avx512-vnni", ("SBQ6X8_YMM",))] if "avx512-vnni" in runs else []
    libs = H.build_many([(t, ()) for t in runs] + extra, out_dir)  # later H.build calls of these get the same
    built = {t: libs[t, ()] for t in runs}
    assert "avx2" in built or not CI, "CI on x86 runs at least the AVX2 tier"
    if not built:
        pytest.skip("this CPU has no AVX2")
    return built


def _check_plain(tiers, fmt: str, nb: int, rows: int, seed: int) -> None:
    """One plain-layout format on every tier: one-row outputs within 1e-5 of the float64 reference, and every
    batch of 2..8 rows bit-identical to one-row decoding."""
    wtype, block, make_w, make_a, deq_w, deq_a = H.FORMATS[fmt]
    rng = np.random.default_rng(seed)
    k = block * nb
    w, act = make_w(rng, rows, nb), make_a(rng, MAX_ROWS, nb)
    ref = deq_a(act) @ deq_w(w).T
    for tier, dll in tiers.items():
        assert dll.sbk_gemm.__name__  # loaded
        one = np.stack([H.gemm(dll, wtype, k, w, act[j:j + 1], 1)[0] for j in range(MAX_ROWS)])
        err = float(np.abs(one - ref).max() / np.abs(ref).max())
        assert err < 1e-5, f"{tier} {fmt}, {nb} blocks: {err:.2e} of the largest output from the float64 reference"
        for n in range(2, MAX_ROWS + 1):
            assert np.array_equal(H.gemm(dll, wtype, k, w, act, n), one[:n]), f"{tier} {fmt}: a batch of {n} differs"


@pytest.mark.parametrize("fmt", sorted(H.FORMATS))
def test_every_tier_rows_bit_identical_and_match_reference(tiers, fmt):
    _check_plain(tiers, fmt, 6 if H.FORMATS[fmt][1] == 256 else 40, rows=37, seed=11)


@pytest.mark.parametrize("nb", [41, 513])
def test_q8_0_odd_and_long_rows_bit_identical_and_match_reference(tiers, nb):
    """The AVX-512 Q8_0 path takes two blocks a vector from a contiguous copy of the activations (+ 128, the
    weights' sums taken off): an odd last block runs with its upper half zero (41 blocks), rows longer than the
    copy holds take the ymm code (513)."""
    _check_plain(tiers, "q8_0", nb, rows=9, seed=nb)


@pytest.mark.parametrize("nb", [41, 513])
def test_q5_0_every_tier_gives_the_same_bits(tiers, nb):
    """VNNI builds take Q5_0's weights as unsigned bytes 0..31 and the -16 offset from sums of the activations
    (q50_row_vnni); AVX2 keeps |w| and the sign of x.  Each lane sums the same integers and every float step is
    the same, so every tier gives the same floats, rows of 1..8 alike.  513 blocks is past the offset table:
    the sign-trick code on every tier."""
    if len(tiers) < 2:
        pytest.skip("one x86 tier on this CPU: nothing to compare")
    _check_plain(tiers, "q5_0", nb, rows=9, seed=nb)
    rng = np.random.default_rng(nb + 1)
    w, act = H.q5_0_blocks(rng, 9, nb), H.q8_0_rows(rng, MAX_ROWS, nb)
    outs = {t: H.gemm(dll, H.Q5_0, 32 * nb, w, act, MAX_ROWS) for t, dll in tiers.items()}
    first = next(iter(outs))
    for t, out in outs.items():
        assert np.array_equal(out, outs[first]), f"{t} differs from {first}"


def _check_interleaved(tiers, gemm_x8, wtype, k, w, wx8, rows, act, ref, name):
    """An 8-row-interleaved kernel on every tier: one-row outputs within float tolerance of the float64
    reference and of the plain-layout kernel on the same weights (only summation order differs), every batch
    of 2..8 rows bit-identical to one-row decoding, and a partial group of weight rows refused."""
    for tier, dll in tiers.items():
        one = np.stack([gemm_x8(dll, k, wx8, rows, act[j:j + 1], 1)[0] for j in range(MAX_ROWS)])
        err = float(np.abs(one - ref).max() / np.abs(ref).max())
        assert err < 1e-5, f"{tier} {name}: {err:.2e} of the largest output from the float64 reference"
        plain = H.gemm(dll, wtype, k, w, act, MAX_ROWS)
        assert float(np.abs(one - plain).max() / np.abs(ref).max()) < 1e-5, f"{tier}: {name} and plain disagree"
        for n in range(2, MAX_ROWS + 1):
            assert np.array_equal(gemm_x8(dll, k, wx8, rows, act, n), one[:n]), f"{tier} {name}: a batch of {n} differs"
        with pytest.raises(ValueError):
            gemm_x8(dll, k, wx8, 12, act, 1)  # not a whole group of 8 weight rows


def test_interleaved_q4_k_rows_bit_identical_and_match_reference(tiers):
    """sbkx8.cpp: Q4_K in ggml's 8-row interleave (the fast mode's layout) through the same checks, and
    within float tolerance of the plain-layout kernel on the same weights (only summation order differs)."""
    rng = np.random.default_rng(5)
    nsb, rows = 6, 24
    k = nsb * H.QK_K
    w, act = H.q4k_blocks(rng, rows, nsb), H.q8k_rows(rng, MAX_ROWS, nsb)
    ref = H.deq_q8k(act) @ H.deq_q4k(w).T
    _check_interleaved(tiers, H.gemm_x8, H.Q4_K, k, w, H.to_x8(w), rows, act, ref, "x8")


def test_interleaved_q4_k_512_bit_path_gives_the_256_bit_bits(tiers, tmp_path):
    """The AVX-512 tier multiplies with zmm registers (8 rows a vector); its integer sums must be the ymm
    code's (-DSBKX8_YMM), so every output is the same float, for every batch size."""
    if "avx512-vnni" not in tiers:
        pytest.skip("no AVX-512 VNNI here")
    rng = np.random.default_rng(11)
    nsb, rows = 4, 32
    w, act = H.q4k_blocks(rng, rows, nsb), H.q8k_rows(rng, MAX_ROWS, nsb)
    wx8, ymm = H.to_x8(w), H.build("avx512-vnni", tmp_path, ("SBKX8_YMM",))
    for n in range(1, MAX_ROWS + 1):
        zmm_out = H.gemm_x8(tiers["avx512-vnni"], nsb * H.QK_K, wx8, rows, act, n)
        assert np.array_equal(zmm_out, H.gemm_x8(ymm, nsb * H.QK_K, wx8, rows, act, n)), f"{n} rows differ"


def test_interleaved_q4_k_drifted_row_is_caught(tiers):
    rng = np.random.default_rng(3)
    w, act = H.q4k_blocks(rng, 16, 2), H.q8k_rows(rng, MAX_ROWS, 2)
    dll, wx8 = next(iter(tiers.values())), H.to_x8(w)
    before = H.gemm_x8(dll, 2 * H.QK_K, wx8, 16, act, MAX_ROWS)
    act[6, 4 + 300] ^= 0x01  # block 1, value 4 of activation row 6
    after = H.gemm_x8(dll, 2 * H.QK_K, wx8, 16, act, MAX_ROWS)
    assert not np.array_equal(before[6], after[6])
    assert np.array_equal(np.delete(before, 6, 0), np.delete(after, 6, 0))


def _q6_k_case(rng, rows: int, nsb: int):
    """Random Q6_K weights and Q8_K activations with the corners the integer sums must hold: a block of
    weights all 63 under scales -128 against activations all -128 (the largest |products| and block sums)."""
    w, act = H.q6k_blocks(rng, rows, nsb), H.q8k_rows(rng, MAX_ROWS, nsb)
    w.reshape(rows, nsb, 210)[:, 1, 0:192] = 0xFF
    w.reshape(rows, nsb, 210)[:, 1, 192:208] = 0x80
    blocks = act.reshape(MAX_ROWS, nsb, 292)
    blocks[:, 1, 4:260] = 0x80
    blocks[:, 1, 260:292] = np.full(16, -2048, np.int16).view(np.uint8)
    return w, act


def test_interleaved_q6_k_rows_bit_identical_and_match_reference(tiers):
    """sbq6x8.cpp: Q6_K in ggml's 8-row interleave (the fast mode's layout, make_block_q6_Kx8) through the
    same checks, and within float tolerance of the plain-layout kernel on the same weights."""
    rng = np.random.default_rng(7)
    nsb, rows = 5, 24
    k = nsb * H.QK_K
    w, act = _q6_k_case(rng, rows, nsb)
    ref = H.deq_q8k(act) @ H.deq_q6k(w).T
    _check_interleaved(tiers, H.gemm_q6x8, H.Q6_K, k, w, H.to_q6x8(w), rows, act, ref, "q6x8")


def test_interleaved_q6_k_tiers_give_the_same_bits(tiers, tmp_path):
    """The 512-bit code (8 rows a vector) and the 256-bit one (-DSBQ6X8_YMM, what AVX2 and AVX-VNNI
    builds run) sum the same integers in the same lanes: every output is the same float."""
    rng = np.random.default_rng(13)
    nsb, rows = 3, 16
    w, act = _q6_k_case(rng, rows, nsb)
    wx8, k = H.to_q6x8(w), nsb * H.QK_K
    builds = dict(tiers)
    if "avx512-vnni" in tiers:
        builds["avx512-vnni-ymm"] = H.build("avx512-vnni", tmp_path, ("SBQ6X8_YMM",))
    outs = {t: H.gemm_q6x8(dll, k, wx8, rows, act, MAX_ROWS) for t, dll in builds.items()}
    first = next(iter(outs.values()))
    for t, out in outs.items():
        assert np.array_equal(out, first), f"{t} differs from {next(iter(outs))}"


def test_interleaved_q6_k_drifted_row_is_caught(tiers):
    rng = np.random.default_rng(4)
    w, act = H.q6k_blocks(rng, 16, 2), H.q8k_rows(rng, MAX_ROWS, 2)
    dll, wx8 = next(iter(tiers.values())), H.to_q6x8(w)
    before = H.gemm_q6x8(dll, 2 * H.QK_K, wx8, 16, act, MAX_ROWS)
    act[3, 292 + 4 + 77] ^= 0x01  # block 1, value 77 of activation row 3
    after = H.gemm_q6x8(dll, 2 * H.QK_K, wx8, 16, act, MAX_ROWS)
    assert not np.array_equal(before[3], after[3])
    assert np.array_equal(np.delete(before, 3, 0), np.delete(after, 3, 0))


def test_a_drifted_row_is_caught(tiers):
    """The checks above can fail: one activation byte changed in row 5 changes that row only."""
    wtype, block, make_w, make_a, _, _ = H.FORMATS["q4_K"]
    rng = np.random.default_rng(2)
    w, act = make_w(rng, 16, 4), make_a(rng, MAX_ROWS, 4)
    dll = next(iter(tiers.values()))
    before = H.gemm(dll, wtype, 4 * block, w, act, MAX_ROWS)
    act[5, 100] ^= 0x01
    after = H.gemm(dll, wtype, 4 * block, w, act, MAX_ROWS)
    assert not np.array_equal(before[5], after[5])
    assert np.array_equal(np.delete(before, 5, 0), np.delete(after, 5, 0))


def test_refuses_what_it_does_not_take(tiers):
    dll = next(iter(tiers.values()))
    w = np.zeros((8, 18), np.uint8)
    with pytest.raises(ValueError):
        H.gemm(dll, 2, 32, w, np.zeros((1, 34), np.uint8), 1)  # Q4_0 goes through sbq4, not here
    with pytest.raises(ValueError):
        H.gemm(dll, H.Q8_0, 32, w, np.zeros((9, 34), np.uint8), 9)  # more rows than it takes


# ---------------------------------------------------------------- through llama.cpp
def _require_kernel() -> None:
    if llama_build.sbk_variant():
        return
    if CI and llama_build.is_x86():
        pytest.fail("CI on x86 must run the patched build (scripts/setup/setup.sh builds it)")
    pytest.skip("this llama.cpp build has no small-batch K-quant kernel")



@pytest.fixture(scope="module")
def q4_k_m_target() -> Path:
    """The default target as users download it: Q4_K_M (Q4_K, Q6_K, Q5_0 and a Q8_0 output head)."""
    return models.resolve(models.QWEN_05B)


def test_q4_k_m_rows_bit_identical_and_close_to_ggml(q4_k_m_target, monkeypatch):
    _require_kernel()
    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    with Engine(q4_k_m_target, EngineConfig(n_ctx=512, n_threads=2, batch_invariant=True)) as e:
        ids = e.tokenize(invariance.PROBE_TEXT)
        prefix, seq = ids[:20], ids[20:20 + MAX_ROWS]
        single, batches = rows_by_batch(e, prefix, seq)
        for n, rows in enumerate(batches, start=1):
            assert np.array_equal(rows, single[:n]), f"a batch of {n} rows differs from one-token decoding"
        monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
        theirs, _ = rows_by_batch(e, prefix, seq)
    assert not np.array_equal(single, theirs), "OMNIDRAFT_SBQ4=0 did not reach ggml's kernels"
    # Float summation order differs from ggml's vec_dot, and 24 layers amplify it (ggml's own repacked
    # kernels differ from its plain ones by 0.028 of the spread on this file; this kernel by 0.023).
    rms = float(np.sqrt(np.mean((single - theirs) ** 2)))
    assert rms <= 0.05 * float(theirs.std()), f"differs from ggml's kernels by {rms / theirs.std():.3g} of the spread"
    assert np.mean(single.argmax(1) == theirs.argmax(1)) >= 0.75


def test_invariance_probe_reports_eight_identical_rows_for_q4_k_m(q4_k_m_target, monkeypatch):
    """What the product reads at start-up: the exact mode of the file users have verifies 8 rows."""
    _require_kernel()
    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    with Engine(q4_k_m_target, EngineConfig(n_ctx=512, n_threads=2, batch_invariant=True)) as e:
        fid = invariance.measure(e, MAX_ROWS, timing=False)
    assert (fid.max_identical, fid.bound, fid.flips) == (MAX_ROWS, 0.0, 0)


def test_fast_mode_q4_k_m_verifies_exactly_through_the_interleaved_kernel(q4_k_m_target, monkeypatch):
    """The fast mode repacks the file's Q4_K matrices (block_q4_Kx8); with sbkx8 its 1..8-row passes are
    bit-identical to its decoding, so the Q4_K_M file verifies drafts in either mode.  Without the
    kernels (OMNIDRAFT_SBQ4=0) ggml's repacked gemv/gemm run, which are not (argmax flips on this file)."""
    _require_kernel()
    if not llama_build.has_sbkx8():
        pytest.fail("the build has sbk.cpp but not sbkx8.cpp: setup's check should have rebuilt it")
    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    with Engine(q4_k_m_target, EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)) as e:
        fid = invariance.measure(e, MAX_ROWS, timing=False)
        ids = e.tokenize(invariance.PROBE_TEXT)
        single, _ = rows_by_batch(e, ids[:20], ids[20:20 + MAX_ROWS])
        monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
        theirs, _ = rows_by_batch(e, ids[:20], ids[20:20 + MAX_ROWS])
    assert (fid.max_identical, fid.bound, fid.flips) == (MAX_ROWS, 0.0, 0)
    assert not np.array_equal(single, theirs), "OMNIDRAFT_SBQ4=0 did not reach ggml's kernels"
    rms = float(np.sqrt(np.mean((single - theirs) ** 2)))
    assert rms <= 0.05 * float(theirs.std()), f"differs from ggml's kernels by {rms / theirs.std():.3g} of the spread"


# Run in a child process: a product ggml cannot place aborts the process (GGML_ASSERT in the scheduler).
_SWITCH_AND_BATCHES = """
import os, sys
import numpy as np
from omnidraft.llama import invariance
from omnidraft.llama.engine import Engine, EngineConfig

def close(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2))) <= 0.05 * float(b.std())

os.environ.pop("OMNIDRAFT_SBQ4", None)
with Engine(sys.argv[1], EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)) as e:
    ids = e.tokenize(invariance.PROBE_TEXT)[:40]
    single = np.stack([e.decode([t], "last")[0].copy() for t in ids])  # one row at a time
    e.reset()
    prompt = np.array(e.decode(ids, "all"), copy=True)  # 40 rows: Q6_K 8 at a time, Q4_K through ggml's gemm
    assert close(prompt, single), "a 40-row batch differs from one-row decoding"
    os.environ["OMNIDRAFT_SBQ4"] = "0"  # after the load: Q4_K back to ggml, the repacked Q6_K stays on sbq6x8
    for n in (1, 5, 9):
        e.rollback(30)
        rows = e.decode(ids[30:30 + n], "all")
        assert close(rows, single[30:30 + n]), f"{n} rows after OMNIDRAFT_SBQ4=0 differ"
with Engine(sys.argv[1], EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)) as e:  # 0 at load
    os.environ.pop("OMNIDRAFT_SBQ4")  # the plain Q6_K goes to sbk.cpp, the Q4_K to sbkx8
    e.decode(ids[:30], "none")
    assert close(e.decode(ids[30:38], "all"), single[30:38]), "a model loaded with OMNIDRAFT_SBQ4=0 differs"
print("ok")
"""


def test_fast_mode_q6_k_is_repacked_only_where_every_product_is_taken(q4_k_m_target):
    """The fast mode repacks Q6_K for sbq6x8.cpp, a layout x86 ggml has no kernel for: every product on
    such a matrix must go through the hook, and the load-time choice must hold while the process runs.
    1137d34 re-read OMNIDRAFT_SBQ4 at every graph: set to 0 after the load, ggml's repack buffer declined
    the repacked matrices' products and the scheduler aborted (GGML_ASSERT(*cur_backend_id != -1)).
    Here: batches of 40 rows (prompts), OMNIDRAFT_SBQ4=0 after the load and at load."""
    _require_kernel()
    env = {k: v for k, v in os.environ.items() if k != "OMNIDRAFT_SBQ4"}
    run = subprocess.run([sys.executable, "-c", _SWITCH_AND_BATCHES, str(q4_k_m_target)], env=env,
                         capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    why = [x for x in out.splitlines() if "GGML_ASSERT" in x or "Error" in x] or [out[-2000:]]
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), f"exit {run.returncode}: " + "\n".join(why)


def test_doctor_names_the_k_quant_kernel(monkeypatch):
    from omnidraft.apps import doctor

    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    lines, _ = doctor.build_section()
    line = next(x for x in lines if x.startswith("small-batch K-quant kernel:"))
    if llama_build.sbk_variant():
        assert ", on:" in line
        monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
        assert "off for this process" in doctor._sbk_line()
    else:
        assert "not in this build" in line
