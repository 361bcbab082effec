"""Q5_0 and Q8_0 products through two versions of sbk.cpp, compiled alone (no llama.cpp): the same bits, and what
a pass of n activation rows costs in each (issue 41: the 0.5B's Q4_K_M file is 55 % Q5_0 and 30 % Q8_0 by bytes).

    cp backend/omnidraft/llama/patch/sbk.cpp /tmp/sbk_before.cpp    # before editing
    .venv/bin/python scripts/lab/q50_rows.py --before /tmp/sbk_before.cpp [--out results/.../q50-rows.json]

For every x86 tier this CPU runs, both versions are built with -DSBK_STANDALONE; random weights and Q8_0
activations (tests/sbk_harness.py's layouts) go through both for 1..8 rows, and every output must be the same
float, bit for bit.  Then each version is timed on one thread, the two alternated batch by batch, in three
shapes: 256 x 896 (in L2: instructions), 896 x 4864 (the 0.5B's down projection's share of one thread) and
80,000 x 896 (49 MB, streamed from memory).  Each figure is the best of 30 batches.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from omnidraft.bench.report import write_json  # noqa: E402
from tests import sbk_harness as H  # noqa: E402

AFTER = H.PATCH / "sbk.cpp"
SHAPES = {"L2 (256 x 896)": (256, 28, 200), "down (896 x 4864)": (896, 152, 20), "memory (80,000 x 896)": (80000, 28, 2)}


def build(src: Path, tier: str, out: Path) -> ctypes.CDLL:
    lib = out / f"{src.stem}_{tier}_{abs(hash(str(src)))}.so"
    subprocess.run(["g++", "-O3", "-std=c++17", "-fPIC", "-shared", "-DSBK_STANDALONE", *H.TIERS[tier][0],
                    f"-I{H.PATCH}", str(src), "-o", str(lib)], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.sbk_gemm.restype = ctypes.c_int
    dll.sbk_gemm.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64,
                             ctypes.c_int64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                             ctypes.c_size_t]
    return dll


def same_bits(a: ctypes.CDLL, b: ctypes.CDLL, fmt: str) -> None:
    wtype, _, make_w, make_a, _, _ = H.FORMATS[fmt]
    rng = np.random.default_rng(5)
    for nb in (1, 27, 28, 152, 600):  # 600 blocks: wider than the side tables, the ymm code in both
        w, act = make_w(rng, 33, nb), make_a(rng, 8, nb)
        for n in range(1, 9):
            x, y = H.gemm(a, wtype, 32 * nb, w, act, n), H.gemm(b, wtype, 32 * nb, w, act, n)
            if not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
                raise SystemExit(f"{fmt}, {nb} blocks, {n} rows: the two versions differ")


def timed(dlls: dict[str, ctypes.CDLL], fmt: str, rows: int, nb: int, reps: int, n: int) -> dict[str, float]:
    wtype, _, make_w, make_a, _, _ = H.FORMATS[fmt]
    rng = np.random.default_rng(1)
    w, act = make_w(rng, rows, nb), make_a(rng, 8, nb)
    out = np.zeros((8, rows), np.float32)
    best = {k: float("inf") for k in dlls}
    for _ in range(30):
        for name, dll in dlls.items():
            t = time.perf_counter()
            for _ in range(reps):
                dll.sbk_gemm(wtype, 32 * nb, w.ctypes.data, w.shape[1], 0, rows, act.ctypes.data, act.shape[1], n,
                             out.ctypes.data, rows)
            best[name] = min(best[name], (time.perf_counter() - t) / reps * 1e6)
    return {k: round(v, 1) for k, v in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the other version of sbk.cpp")
    ap.add_argument("--formats", default="q5_0,q8_0", help="comma-separated: q5_0, q8_0")
    ap.add_argument("--out", default="", help="also write the figures to this JSON file")
    args = ap.parse_args()
    fmts = args.formats.split(",")
    flags = H.cpu_flags()
    report = {"cpu": platform.processor() or platform.machine(), "flags": sorted(f for f in flags if "avx" in f),
              "tiers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for tier, (_, needs, _) in H.TIERS.items():
            if not needs <= flags:
                continue
            dlls = {"before": build(Path(args.before), tier, Path(tmp)), "after": build(AFTER, tier, Path(tmp))}
            for fmt in fmts:
                same_bits(dlls["before"], dlls["after"], fmt)
                print(f"{tier} {fmt}: the same bits for 1..8 rows at 1, 27, 28, 152 and 600 blocks")
                report["tiers"][f"{tier} {fmt}"] = {
                    shape: {n: timed(dlls, fmt, rows, nb, reps, n) for n in (1, 2, 4, 8)}
                    for shape, (rows, nb, reps) in SHAPES.items()}
    for tier, shapes in report["tiers"].items():
        print(f"\n{tier}: us per call, one thread (before -> after)")
        print("| shape | " + " | ".join(f"n = {n}" for n in (1, 2, 4, 8)) + " |")
        print("|---|---|---|---|---|")
        for shape, res in shapes.items():
            cells = [f"{r['before']:.0f} -> {r['after']:.0f} ({r['after'] / r['before']:.2f})" for r in res.values()]
            print(f"| {shape} | " + " | ".join(cells) + " |")
    if args.out:
        write_json(Path(args.out), report)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
