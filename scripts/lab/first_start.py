"""A target's first start with `--kernels auto`: which kernel mode it chose, how long it took, the pass times.

    PYTHONPATH=<a llama-cpp-python build> python scripts/lab/first_start.py qwen2.5-coder-1.5b

Each run uses a fresh fidelity cache, so both modes are measured as on a new machine (``invariance.load_target``,
2k context, 2 threads).  BENCHMARKS "The small pair within its memory goal" quotes its output for the AVX-VNNI
build (one row per run; the row before e2fda00 ran on the commit before it).
"""
from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from omnidraft.assets import models
from omnidraft.llama import invariance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", help="a model name or .gguf path")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("omnidraft.llama.engine", "omnidraft.llama_cpp"):
        logging.getLogger(name).setLevel(logging.ERROR)
    cache = Path(tempfile.mkdtemp()) / "invariance.json"
    t = time.perf_counter()
    engine, plan = invariance.load_target(models.resolve(args.target), 2048, args.threads, "auto", cache)
    print(f"chose {plan.mode} in {time.perf_counter() - t:.1f} s", flush=True)
    engine.close()
    for entry in json.loads(cache.read_text()).values():
        print(entry["mode"], {n: round(1e3 * x, 1) for n, x in entry["t_pass"].items() if n in ("1", "2", "4", "8")})


if __name__ == "__main__":
    main()
