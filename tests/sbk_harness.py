"""The small-batch K-quant/Q8_0 kernel (backend/omnidraft/llama/patch/sbk.cpp) compiled on its own.

Builds sbk.cpp with ``-DSBK_STANDALONE`` for one x86 tier into a shared library, and writes weight and
activation blocks in ggml's byte layouts from numpy, with a float64 reference written from ggml's
scalar dequantizers (ggml-quants.c), so that the kernel can be checked without llama.cpp: every batch of
1..8 rows bit-identical to one row, and within float tolerance of the reference.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

PATCH = Path(__file__).resolve().parents[1] / "backend" / "omnidraft" / "llama" / "patch"
SOURCES = (PATCH / "sbk.cpp", PATCH / "sbkx8.cpp", PATCH / "sbq6x8.cpp",  # plain; Q4_K and Q6_K in 8-row interleaves
           PATCH / "q8k.cpp")  # the Q8_K activations
SOURCE_COST = {"sbkx8.cpp": 3, "sbq6x8.cpp": 2, "sbk.cpp": 1}  # compile order only (13.6 / 5.6 / 2.5 s, AVX2)
Q5_0, Q8_0, Q4_K, Q6_K = 6, 8, 12, 14
QK_K = 256

# tier -> (compiler flags, the /proc/cpuinfo flags a CPU needs to run it, variant the build reports)
TIERS = {
    "avx2": (["-mavx2", "-mfma", "-mf16c"], {"avx2", "fma", "f16c"}, 1),
    "avx-vnni": (["-mavx2", "-mfma", "-mf16c", "-mavxvnni"], {"avx2", "fma", "f16c", "avx_vnni"}, 2),
    "avx512-vnni": (["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"],
                    {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}, 3),
}


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


_built: dict[tuple[str, tuple[str, ...]], ctypes.CDLL] = {}  # (tier, defines) -> library, this process
_objects: dict[tuple[str, Path, tuple[str, ...]], Path] = {}  # (tier, source, defines it reads) -> object file


def _cxx() -> str:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise RuntimeError("no C++ compiler on PATH")
    return cxx


_GCC_ONLY = ("--param=max-combine-insns=2",)


def _compile_flags(cxx: str) -> tuple[str, ...]:
    """GCC 12's RTL combine pass spends 38 of sbkx8.cpp's 41 s (AVX2 tier; 9 s on the others) trying 3- and
    4-instruction combinations inside its fully unrolled 8-row blocks.  Limited to pairs, the compile takes
    13.6 s and the AVX2 object differs from -O3's by three address instructions outside the row sums (GCC
    12.2, Debian 12; 2-core Intel VM).  The tests check what the source computes, so they take the cheaper
    compile; the llama.cpp build keeps ggml's flags.  scripts/lab/sbk_rows.py times these objects too: with
    and without the flag, scripts/lab/x8_kernel_bench.cpp timed the AVX2 kernel alike, within this VM's
    run-to-run spread."""
    out = subprocess.run([cxx, "-v"], capture_output=True, text=True).stderr
    return _GCC_ONLY if "gcc version" in out and "clang" not in out.lower() else ()


def _reads(src: Path, defines: tuple[str, ...]) -> tuple[str, ...]:
    """The ``defines`` whose names occur in ``src`` or in the headers beside it: the only ones that can change
    its object file (-DSBKX8_YMM reaches sbkx8.cpp alone), so the other sources' objects are shared."""
    text = src.read_text() + "".join(h.read_text() for h in sorted(PATCH.glob("*.h")))
    return tuple(d for d in defines if d.split("=")[0] in text)


def build_many(builds: list[tuple[str, tuple[str, ...]]], out_dir: Path) -> dict[tuple[str, tuple[str, ...]], ctypes.CDLL]:
    """``build`` for several (tier, defines) at once: every source is compiled once per tier and the defines it
    reads (the same -O3 flags as one whole-library command), the compiles spread over this machine's cores."""
    todo = {}
    for tier, defines in builds:
        for src in SOURCES:
            key = (tier, src, _reads(src, defines))
            if key not in _objects:
                todo[key] = out_dir / f"{src.stem}_{tier}{''.join('_' + d for d in key[2])}.o"

    cxx = _cxx()
    extra = _compile_flags(cxx)

    def compile_one(key) -> None:
        tier, src, defines = key
        subprocess.run([cxx, "-O3", "-std=c++17", "-fPIC", "-DSBK_STANDALONE", *TIERS[tier][0], *extra,
                        *(f"-D{d}" for d in defines), "-c", str(src), "-o", str(todo[key])],
                       check=True, capture_output=True)

    # the longest compiles first (sbkx8, then sbq6x8; AVX2 before the VNNI tiers), so none starts last
    order = sorted(todo, key=lambda key: (-SOURCE_COST.get(key[1].name, 0), TIERS[key[0]][2]))
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        list(pool.map(compile_one, order))  # list(): a failed compile raises here
    _objects.update(todo)
    return {(tier, defines): _link(tier, defines, out_dir) for tier, defines in builds}


def _link(tier: str, defines: tuple[str, ...], out_dir: Path) -> ctypes.CDLL:
    if (tier, defines) in _built:
        return _built[tier, defines]
    lib = out_dir / f"sbk_{tier}{''.join('_' + d for d in defines)}.so"
    objs = [_objects[tier, src, _reads(src, defines)] for src in SOURCES]
    subprocess.run([_cxx(), "-shared", "-fPIC", *map(str, objs), "-o", str(lib)], check=True, capture_output=True)
    dll = ctypes.CDLL(str(lib))
    dll.sbk_gemm.restype = ctypes.c_int
    dll.sbk_gemm.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64,
                             ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                             ctypes.c_size_t]
    dll.sbk_q4kx8_gemm.restype = ctypes.c_int
    dll.sbk_q4kx8_gemm.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                   ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    dll.sbk_q6kx8_gemm.restype = ctypes.c_int
    dll.sbk_q6kx8_gemm.argtypes = dll.sbk_q4kx8_gemm.argtypes
    dll.sbk_quantize_q8_K.restype = ctypes.c_int
    dll.sbk_quantize_q8_K.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    _built[tier, defines] = dll
    return dll


def build(tier: str, out_dir: Path, defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """sbk.cpp, sbkx8.cpp, sbq6x8.cpp and q8k.cpp as one shared library for one tier (g++ or c++ from PATH);
    ``defines``: extra -D switches (e.g. ``SBKX8_YMM``), which also name the library.  Built once per process
    (``build_many`` builds several at once)."""
    return build_many([(tier, defines)], out_dir)[tier, defines]


def gemm(dll: ctypes.CDLL, wtype: int, k: int, w: np.ndarray, act: np.ndarray, n: int) -> np.ndarray:
    """Run the kernel: w is (rows, row_bytes) uint8, act (>= n, act_row_bytes) uint8; returns (n, rows)."""
    rows = w.shape[0]
    out = np.full((n, rows), np.nan, dtype=np.float32)
    ok = dll.sbk_gemm(wtype, k, w.ctypes.data, w.shape[1], 0, rows, act.ctypes.data, act.shape[1], n,
                      out.ctypes.data, rows)
    if not ok:
        raise ValueError(f"sbk_gemm refused type {wtype} with {n} rows")
    return out


def gemm_x8(dll: ctypes.CDLL, k: int, wx8: np.ndarray, rows: int, act: np.ndarray, n: int) -> np.ndarray:
    """The interleaved Q4_K kernel: wx8 from ``to_x8``; returns (n, rows)."""
    out = np.full((n, rows), np.nan, dtype=np.float32)
    if not dll.sbk_q4kx8_gemm(k, wx8.ctypes.data, 0, rows, act.ctypes.data, act.shape[1], n, out.ctypes.data, rows):
        raise ValueError(f"sbk_q4kx8_gemm refused k={k}, {rows} weight rows, {n} activation rows")
    return out


def gemm_q6x8(dll: ctypes.CDLL, k: int, wx8: np.ndarray, rows: int, act: np.ndarray, n: int) -> np.ndarray:
    """The interleaved Q6_K kernel (sbq6x8.cpp): wx8 from ``to_q6x8``; returns (n, rows)."""
    out = np.full((n, rows), np.nan, dtype=np.float32)
    if not dll.sbk_q6kx8_gemm(k, wx8.ctypes.data, 0, rows, act.ctypes.data, act.shape[1], n, out.ctypes.data, rows):
        raise ValueError(f"sbk_q6kx8_gemm refused k={k}, {rows} weight rows, {n} activation rows")
    return out


# ---------------------------------------------------------------- random blocks in ggml's layouts
def _f16(rng, n, lo, hi) -> np.ndarray:
    return rng.uniform(lo, hi, n).astype(np.float16)


def q4k_blocks(rng, rows: int, nsb: int) -> np.ndarray:
    """(rows, nsb*144) bytes: fp16 d, dmin, 12 bytes of scales/mins, 128 bytes of nibbles."""
    out = np.zeros((rows, nsb, 144), dtype=np.uint8)
    out[:, :, 0:2] = _f16(rng, rows * nsb, 1e-3, 2e-2).view(np.uint8).reshape(rows, nsb, 2)
    out[:, :, 2:4] = _f16(rng, rows * nsb, 1e-3, 2e-2).view(np.uint8).reshape(rows, nsb, 2)
    out[:, :, 4:] = rng.integers(0, 256, (rows, nsb, 140), dtype=np.uint8)
    return out.reshape(rows, -1)


def q6k_blocks(rng, rows: int, nsb: int) -> np.ndarray:
    """(rows, nsb*210) bytes: ql[128], qh[64], int8 scales[16], fp16 d."""
    out = rng.integers(0, 256, (rows, nsb, 210), dtype=np.uint8)
    out[:, :, 208:210] = _f16(rng, rows * nsb, 1e-3, 2e-2).view(np.uint8).reshape(rows, nsb, 2)
    return out.reshape(rows, -1)


def q8_0_blocks(rng, rows: int, nb: int, low: int = -128) -> np.ndarray:
    """(rows, nb*34) bytes: fp16 d, 32 int8 (``low`` -128 exercises the |w| = 128 corner)."""
    out = np.zeros((rows, nb, 34), dtype=np.uint8)
    out[:, :, 0:2] = _f16(rng, rows * nb, 1e-3, 2e-2).view(np.uint8).reshape(rows, nb, 2)
    out[:, :, 2:] = rng.integers(low, 128, (rows, nb, 32), dtype=np.int8).view(np.uint8)
    return out.reshape(rows, -1)


def q5_0_blocks(rng, rows: int, nb: int) -> np.ndarray:
    """(rows, nb*22) bytes: fp16 d, 32 fifth bits, 16 bytes of nibbles."""
    out = rng.integers(0, 256, (rows, nb, 22), dtype=np.uint8)
    out[:, :, 0:2] = _f16(rng, rows * nb, 1e-3, 2e-2).view(np.uint8).reshape(rows, nb, 2)
    return out.reshape(rows, -1)


def q8k_rows(rng, n: int, nsb: int) -> np.ndarray:
    """(n, nsb*292) bytes of block_q8_K: float d, 256 int8 in [-127, 127], int16 sums of each 16."""
    q = rng.integers(-127, 128, (n, nsb, QK_K), dtype=np.int8)
    out = np.zeros((n, nsb, 292), dtype=np.uint8)
    out[:, :, 0:4] = rng.uniform(1e-3, 5e-2, (n, nsb)).astype(np.float32).view(np.uint8).reshape(n, nsb, 4)
    out[:, :, 4:260] = q.view(np.uint8)
    bsums = q.reshape(n, nsb, 16, 16).astype(np.int16).sum(-1, dtype=np.int16)
    out[:, :, 260:292] = bsums.view(np.uint8).reshape(n, nsb, 32)
    return out.reshape(n, -1)


def q8_0_rows(rng, n: int, nb: int) -> np.ndarray:
    return q8_0_blocks(rng, n, nb, low=-127)


# ---------------------------------------------------------------- float64 dequantizers (ggml-quants.c)
def _f16_at(b: np.ndarray, off: int) -> np.ndarray:
    return b[..., off:off + 2].copy().view(np.float16)[..., 0].astype(np.float64)


def deq_q4k(w: np.ndarray) -> np.ndarray:
    rows = w.shape[0]
    b = w.reshape(rows, -1, 144)
    d, dmin = _f16_at(b, 0), _f16_at(b, 2)
    q = b[..., 4:16].astype(np.int64)
    sc, mn = np.zeros(b.shape[:2] + (8,)), np.zeros(b.shape[:2] + (8,))
    for j in range(8):  # get_scale_min_k4
        if j < 4:
            sc[..., j], mn[..., j] = q[..., j] & 63, q[..., j + 4] & 63
        else:
            sc[..., j] = (q[..., j + 4] & 0xF) | ((q[..., j - 4] >> 6) << 4)
            mn[..., j] = (q[..., j + 4] >> 4) | ((q[..., j] >> 6) << 4)
    qs = b[..., 16:].astype(np.int64)
    vals = np.zeros(b.shape[:2] + (QK_K,))
    for p in range(4):
        byte = qs[..., 32 * p:32 * p + 32]
        for half, nib in ((0, byte & 0xF), (1, byte >> 4)):
            s = 2 * p + half
            vals[..., 32 * s:32 * s + 32] = (d * sc[..., s])[..., None] * nib - (dmin * mn[..., s])[..., None]
    return vals.reshape(rows, -1)


def to_x8(w: np.ndarray) -> np.ndarray:
    """Plain Q4_K rows (a multiple of 8) in ggml's block_q4_Kx8 layout, written from make_block_q4_Kx8."""
    rows = w.shape[0]
    b = w.reshape(rows // 8, 8, -1, 144).transpose(0, 2, 1, 3)  # [group][block][row][bytes]
    out = np.zeros(b.shape[:2] + (1152,), dtype=np.uint8)
    out[..., 0:16] = b[..., 0:2].reshape(b.shape[:2] + (16,))
    out[..., 16:32] = b[..., 2:4].reshape(b.shape[:2] + (16,))
    q = b[..., 4:16].astype(np.int64)
    for half in range(2):  # sub-blocks 0-3, then 4-7: get_scale_min_k4, then packed 12 bytes each
        for i in range(4):
            if half == 0:
                s, m = q[..., i] & 63, q[..., i + 4] & 63
            else:
                s = ((q[..., i] & 192) >> 2) | (q[..., i + 8] & 15)
                m = ((q[..., i + 4] & 192) >> 2) | ((q[..., i + 8] & 240) >> 4)
            o = 32 + 48 * half + 12 * i
            out[..., o:o + 4] = (s[..., :4] & 63) + ((s[..., 4:] & 48) << 2)
            out[..., o + 4:o + 8] = (m[..., :4] & 63) + ((m[..., 4:] & 48) << 2)
            out[..., o + 8:o + 12] = (s[..., 4:] & 15) + ((m[..., 4:] & 15) << 4)
    qs = b[..., 16:]  # chunk k: row k % 8, bytes 8*(k // 8)..
    out[..., 128:] = qs.reshape(b.shape[:2] + (8, 16, 8)).transpose(0, 1, 3, 2, 4).reshape(b.shape[:2] + (1024,))
    return np.ascontiguousarray(out.reshape(rows // 8, -1))


def to_q6x8(w: np.ndarray) -> np.ndarray:
    """Plain Q6_K rows (a multiple of 8) in ggml's block_q6_Kx8 layout with interleave 8, written from
    repack.h's struct and make_block_q6_Kx8: d[8], scales[16 groups][8 rows], then ql and qh in chunks of
    8 bytes, chunk k from row k % 8 at byte 8*(k // 8)."""
    rows = w.shape[0]
    b = w.reshape(rows // 8, 8, -1, 210).transpose(0, 2, 1, 3)  # [group][block][row][bytes]
    lead = b.shape[:2]

    def chunks(part: np.ndarray) -> np.ndarray:  # [.., row, bytes] -> chunk-interleaved bytes
        n = part.shape[-1] // 8
        return part.reshape(lead + (8, n, 8)).transpose(0, 1, 3, 2, 4).reshape(lead + (-1,))

    out = np.concatenate([b[..., 208:210].reshape(lead + (16,)),                  # d of rows 0..7
                          b[..., 192:208].transpose(0, 1, 3, 2).reshape(lead + (128,)),  # scales[g][row]
                          chunks(b[..., 0:128]), chunks(b[..., 128:192])], axis=-1)
    assert out.shape[-1] == 1680
    return np.ascontiguousarray(out.reshape(rows // 8, -1))


def deq_q6k(w: np.ndarray) -> np.ndarray:
    rows = w.shape[0]
    b = w.reshape(rows, -1, 210)
    ql, qh = b[..., 0:128].astype(np.int64), b[..., 128:192].astype(np.int64)
    sc = b[..., 192:208].view(np.int8).astype(np.float64)
    d = _f16_at(b, 208)
    vals = np.zeros(b.shape[:2] + (QK_K,))
    for c in range(2):
        l0, l1, h = ql[..., 64 * c:64 * c + 32], ql[..., 64 * c + 32:64 * c + 64], qh[..., 32 * c:32 * c + 32]
        parts = [(l0 & 0xF) | ((h & 3) << 4), (l1 & 0xF) | (((h >> 2) & 3) << 4),
                 (l0 >> 4) | (((h >> 4) & 3) << 4), (l1 >> 4) | (((h >> 6) & 3) << 4)]
        for k, q in enumerate(parts):
            for half in range(2):
                g = 8 * c + 2 * k + half
                lo = 128 * c + 32 * k + 16 * half
                vals[..., lo:lo + 16] = (d * sc[..., g])[..., None] * (q[..., 16 * half:16 * half + 16] - 32)
    return vals.reshape(rows, -1)


def deq_q8_0(w: np.ndarray) -> np.ndarray:
    rows = w.shape[0]
    b = w.reshape(rows, -1, 34)
    return (_f16_at(b, 0)[..., None] * b[..., 2:].view(np.int8)).reshape(rows, -1)


def deq_q5_0(w: np.ndarray) -> np.ndarray:
    rows = w.shape[0]
    b = w.reshape(rows, -1, 22)
    qh = b[..., 2:6].copy().view(np.uint32)[..., 0].astype(np.int64)
    qs = b[..., 6:22].astype(np.int64)
    bits = (qh[..., None] >> np.arange(32)) & 1
    vals = np.concatenate([(qs & 0xF) | (bits[..., :16] << 4), (qs >> 4) | (bits[..., 16:] << 4)], axis=-1) - 16
    return (_f16_at(b, 0)[..., None] * vals).reshape(rows, -1)


def deq_q8k(a: np.ndarray) -> np.ndarray:
    n = a.shape[0]
    b = a.reshape(n, -1, 292)
    d = b[..., 0:4].copy().view(np.float32)[..., 0].astype(np.float64)
    return (d[..., None] * b[..., 4:260].view(np.int8)).reshape(n, -1)


FORMATS = {  # name -> (ggml type, values per block, weight maker, activation maker, w dequant, act dequant)
    "q4_K": (Q4_K, QK_K, q4k_blocks, q8k_rows, deq_q4k, deq_q8k),
    "q6_K": (Q6_K, QK_K, q6k_blocks, q8k_rows, deq_q6k, deq_q8k),
    "q8_0": (Q8_0, 32, q8_0_blocks, q8_0_rows, deq_q8_0, deq_q8_0),
    "q5_0": (Q5_0, 32, q5_0_blocks, q8_0_rows, deq_q5_0, deq_q8_0),
}
