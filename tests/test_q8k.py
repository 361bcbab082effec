"""q8k.cpp: x86 Q8_K activations quantized with AVX2 must be the bytes ggml's scalar reference writes.

Every Q4_K and Q6_K product quantizes its activations first; the kernels' exactness (batched rows
bit-identical to one-row decoding) holds whatever the quantizer, but the product's target alone stays
bit-identical to upstream llama.cpp's only if these bytes are the reference's.  The reference here is
the real one, quantize_row_q8_K_ref in the installed build's libggml-base, checked on blocks made to hit
its corners: halves that round to even, ties of |x| with opposite signs, all-zero blocks, tiny and huge
values, NaN and infinity.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from tests import sbk_harness as H
from omnidraft.llama import build as llama_build

QK = 256
BLOCK = 292  # float d, int8 qs[256], int16 bsums[16]


def _lib_dir() -> Path:
    import llama_cpp  # the installed build (patched by setup)

    return Path(llama_cpp.__file__).parent / "lib"


@pytest.fixture(scope="module")
def ref():
    """ggml's scalar reference, from the installed build's libggml-base."""
    if not llama_build.is_x86():
        pytest.skip("q8k.cpp is x86-only")
    lib = ctypes.CDLL(str(_lib_dir() / "libggml-base.so"))
    fn = lib.quantize_row_q8_K_ref
    fn.restype, fn.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return fn


def _blocks(rng) -> np.ndarray:
    """Blocks of 256 floats: ordinary activations and the reference's corners."""
    out = [rng.standard_normal(QK).astype(np.float32) * s for s in (1e-3, 0.3, 1.0, 40.0)]
    halves = (np.arange(QK, dtype=np.float32) - 128) + np.float32(0.5)  # x.5 at iscale = 1 / -1
    for top in (-127.0, 127.0):
        b = np.clip(halves, -126.5, 126.5).astype(np.float32)
        b[7] = top  # max = -127 makes iscale exactly 1, +127 exactly -1: every other value is a half
        out.append(b)
    tie = rng.standard_normal(QK).astype(np.float32)
    tie[[3, 200]] = [-5.0, 5.0]  # the first of equal |x| decides the sign of max
    out.append(tie)
    tie2 = tie.copy()
    tie2[[3, 200]] = [5.0, -5.0]
    out.append(tie2)
    out.append(np.zeros(QK, np.float32))
    one = np.zeros(QK, np.float32)
    one[255] = -3e-38  # a lone tiny value at the end
    out.append(one)
    out.append((rng.standard_normal(QK) * 1e30).astype(np.float32))
    for bad in (np.nan, np.inf, -np.inf):  # garbage in: the reference's own garbage out
        b = rng.standard_normal(QK).astype(np.float32)
        b[[10, 77]] = bad
        out.append(b)
    return np.concatenate(out)


def _quantize(fn, x: np.ndarray) -> np.ndarray:
    y = np.zeros((len(x) // QK, BLOCK), np.uint8)
    fn(x.ctypes.data, y.ctypes.data, len(x))
    return y


def _assert_same(got: np.ndarray, want: np.ndarray, x: np.ndarray, who: str) -> None:
    for b in range(len(want)):
        if not np.any(x[b * QK:(b + 1) * QK]):
            # an all-zero block: the reference leaves its sums unwritten (d = 0 cancels them); q8k writes zeros
            assert np.array_equal(got[b, :260], want[b, :260]) and not got[b, 260:].any(), f"{who}: zero block {b}"
            continue
        assert np.array_equal(got[b], want[b]), f"{who}: block {b} differs from quantize_row_q8_K_ref"


def test_every_tier_writes_the_reference_bytes(ref, tmp_path):
    flags = H.cpu_flags()
    runs = [t for t, (_, needs, _) in H.TIERS.items() if needs <= flags]
    if not runs:
        pytest.skip("this CPU has no AVX2")
    x = _blocks(np.random.default_rng(5))
    want = _quantize(ref, x)
    for tier, dll in H.build_many([(t, ()) for t in runs], tmp_path).items():
        got = np.zeros_like(want)
        assert dll.sbk_quantize_q8_K(x.ctypes.data, got.ctypes.data, len(x)) == 1, f"{tier}: not compiled in"
        _assert_same(got, want, x, tier[0])


def test_installed_build_quantizes_as_the_reference(ref):
    """ggml's own entry point in the installed build (what every Q4_K / Q6_K product calls); a patched build
    carries q8k.cpp behind it."""
    if llama_build.sbk_variant() is not None:  # setup's patched build, not an upstream one
        assert llama_build.has_q8k(), "the patched build lacks q8k.cpp: rerun setup"
    cpu = ctypes.CDLL(str(_lib_dir() / "libggml-cpu.so"))
    fn = cpu.quantize_row_q8_K
    fn.restype, fn.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    rng = np.random.default_rng(9)
    x = np.concatenate([_blocks(rng), (rng.standard_normal(QK * 64) * 2).astype(np.float32)])
    _assert_same(_quantize(fn, x), _quantize(ref, x), x, "installed quantize_row_q8_K")
