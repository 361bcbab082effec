"""What one more activation row costs in the two Q4_K small-batch kernels and the two Q6_K ones (Q4_K_M files hold
Q6_K for a third of their bytes; the fast mode repacks it 8 rows at a time, sbq6x8.cpp), compiled alone (no llama.cpp).

    .venv/bin/python scripts/lab/sbk_rows.py [--out results/issue41/x8/sbk-rows.json]

sbk.cpp multiplies Q4_K weights in ggml's plain layout (the exact mode), sbkx8.cpp in ggml's 8-row
interleave (block_q4_Kx8, the fast mode).  Both are built for every x86 tier this CPU runs
(tests/sbk_harness.py), on random blocks of one thread's share of a 1.5B layer: a 256 x 1536 matrix that
stays in L2 (what the arithmetic costs: instructions, not memory; small enough that the call's own overhead
shows), a 1,024 x 1536 one in L3, and a 35,840 x 1536 one (31 MB, streamed from memory).  Where the L3 and
memory shapes cost the same per weight row, one thread is bound by instructions, not by memory.  Each figure is the best of 40 batches (the machine is shared; the minimum is the least
disturbed run).  One thread, so the two cores' scheduling does not enter.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from omnidraft.bench.report import write_json  # noqa: E402
from tests import sbk_harness as H  # noqa: E402

K = 1536
SHAPES = {"L2-resident (256 rows)": (256, 40), "L3-resident (1,024 rows)": (1024, 10), "memory (35,840 rows)": (35840, 3)}


def best_us(fn, reps: int, batches: int = 40) -> float:
    best = float("inf")
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6


def measure(dll, rows: int, reps: int) -> dict:
    rng = np.random.default_rng(1)
    nsb = K // H.QK_K
    w, act = H.q4k_blocks(rng, rows, nsb), H.q8k_rows(rng, 8, nsb)
    w6 = H.q6k_blocks(rng, rows, nsb)
    wx8, w6x8, out = H.to_x8(w), H.to_q6x8(w6), np.zeros((8, rows), np.float32)
    res = {}
    for n in (1, 2, 4, 8):
        plain = best_us(lambda: dll.sbk_gemm(H.Q4_K, K, w.ctypes.data, w.shape[1], 0, rows, act.ctypes.data,
                                             act.shape[1], n, out.ctypes.data, rows), reps)
        x8 = best_us(lambda: dll.sbk_q4kx8_gemm(K, wx8.ctypes.data, 0, rows, act.ctypes.data, act.shape[1], n,
                                                out.ctypes.data, rows), reps)
        q6 = best_us(lambda: dll.sbk_gemm(H.Q6_K, K, w6.ctypes.data, w6.shape[1], 0, rows, act.ctypes.data,
                                          act.shape[1], n, out.ctypes.data, rows), reps)
        q6x8 = best_us(lambda: dll.sbk_q6kx8_gemm(K, w6x8.ctypes.data, 0, rows, act.ctypes.data, act.shape[1], n,
                                                  out.ctypes.data, rows), reps)
        res[n] = {"plain_us": round(plain, 2), "x8_us": round(x8, 2), "q6k_plain_us": round(q6, 2),
                  "q6k_x8_us": round(q6x8, 2)}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="", help="also write the figures to this JSON file")
    args = ap.parse_args()
    flags = H.cpu_flags()
    report = {"cpu": platform.processor() or platform.machine(), "flags": sorted(f for f in flags if "avx" in f),
              "k": K, "tiers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for tier, (_, needs, _) in H.TIERS.items():
            if not needs <= flags:
                continue
            dll = H.build(tier, Path(tmp))
            report["tiers"][tier] = {shape: measure(dll, rows, reps) for shape, (rows, reps) in SHAPES.items()}
    for tier, shapes in report["tiers"].items():
        for shape, res in shapes.items():
            print(f"\n{tier}, {shape}: us per call (n activation rows)")
            print("| n | Q4_K plain (sbk.cpp) | Q4_K x8 (sbkx8.cpp) | Q6_K plain (sbk.cpp; 1.46x the bytes) | Q6_K x8 "
                  "(sbq6x8.cpp) |")
            print("|---|---|---|---|---|")
            for n, r in res.items():
                print(f"| {n} | {r['plain_us']:.1f} | {r['x8_us']:.1f} | {r['q6k_plain_us']:.1f} | {r['q6k_x8_us']:.1f} |")
    if args.out:
        write_json(Path(args.out), report)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
