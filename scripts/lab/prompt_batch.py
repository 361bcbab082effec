"""Prompt reading time and peak RSS of a target at a given llama.cpp batch (issue 41, memory).

    python scripts/lab/prompt_batch.py qwen2.5-coder-0.5b fast 128
    python scripts/lab/prompt_batch.py qwen2.5-coder-0.5b exact 512 --reps 1
    python scripts/lab/prompt_batch.py qwen2.5-coder-1.5b fast 512 --read-rows 8   # 8 tokens a pass

``--read-rows 8`` reads the prompt as ``llama.invariance.READ_ROWS`` passes do where start-up measured them
faster (BENCHMARKS "Prompts read 8 rows a pass"); run with ``PYTHONPATH=<plain llama-cpp-python>`` for the peer.

One configuration per process, so that the peak (VmHWM) is this configuration's alone: run the batches
alternately, several times, on a quiet machine.  The prompt is about 900 tokens of `textwrap`'s source at 2k
context; the time is the best of ``--reps`` cold reads.  BENCHMARKS "Lighter small pairs" quotes its output
(the choice of ``llama.invariance.SMALL_TARGET_BATCH``).
"""
from __future__ import annotations

import argparse
import inspect
import json
import re
import textwrap
import time

from omnidraft.assets import models
from omnidraft.llama.engine import Engine, EngineConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target")
    ap.add_argument("mode", choices=("fast", "exact"))
    ap.add_argument("n_batch", type=int)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--read-rows", type=int, default=0, help="tokens a pass (0: the whole batch)")
    args = ap.parse_args()
    cfg = EngineConfig(n_ctx=2048, batch_invariant=args.mode == "exact", n_batch=args.n_batch)
    with Engine(models.resolve(args.target), cfg) as e:
        e.read_rows = args.read_rows
        ids = e.tokenize(inspect.getsource(textwrap)[:3600])[:1000]
        best = float("inf")
        for _ in range(args.reps):
            e.reset()
            t = time.perf_counter()
            e.prefill(ids, reuse=False)
            best = min(best, time.perf_counter() - t)
    hwm = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1)) // 1024
    print(json.dumps({"target": args.target, "mode": args.mode, "n_batch": args.n_batch,
                      "read_rows": args.read_rows, "tokens": len(ids),
                      "prompt_ms": round(best * 1000), "peak_rss_mb": hwm}))


if __name__ == "__main__":
    main()
