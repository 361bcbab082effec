"""The served drafter's llama.cpp batch: resident memory after a prompt and the prompt's reading time, per size
(issue 41, memory; ``runtime.pair.DRAFT_BATCH``).

    python scripts/lab/drafter_batch.py [--draft NAME] [--batches 512,64] [--rounds 4] [--out FILE.json]

Each size's memory is measured in a child process of its own (the drafter loaded as the pair loads it, a
1,000-token prompt read, 8 one-token passes): RSS growth over the interpreter, and the child's peak RSS.
Reading times are best of ``--rounds``, sizes interleaved in one process.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from omnidraft.assets import models
from omnidraft.llama.engine import Engine, EngineConfig

PROMPT = "def f(x):\n    return x * 2\n" * 200


def engine(name: str, n_batch: int) -> Engine:
    return Engine(models.resolve(name), EngineConfig(n_ctx=2048, n_threads=2, n_batch=n_batch, batch_invariant=False))


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def memory(name: str, n_batch: int) -> dict:
    """In this (child) process: RSS growth after loading, after the prompt, and the peak."""
    r0 = rss_mb()
    e = engine(name, n_batch)
    loaded = rss_mb() - r0
    ids = e.tokenize(PROMPT)[:1000]
    e.decode(ids, "none")
    for t in ids[:8]:
        e.decode([t], "last")
    return {"n_batch": n_batch, "loaded_mb": round(loaded), "after_prompt_mb": round(rss_mb() - r0),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def reading_ms(name: str, batches: list[int], rounds: int) -> dict[int, float]:
    es = {nb: engine(name, nb) for nb in batches}
    ids = es[batches[0]].tokenize(PROMPT)[:1000]
    best = {nb: float("inf") for nb in batches}
    for _ in range(rounds):
        for nb, e in es.items():
            e.reset()
            t0 = time.perf_counter()
            e.decode(ids, "none")
            best[nb] = min(best[nb], (time.perf_counter() - t0) * 1e3)
    return {nb: round(t) for nb, t in best.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", default=models.SERVED_DRAFT)
    ap.add_argument("--batches", default="512,64")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(memory(a.draft, a.child)))
        return 0
    batches = [int(b) for b in a.batches.split(",")]
    rows = []
    for nb in batches:
        out = subprocess.run([sys.executable, __file__, "--draft", a.draft, "--child", str(nb)],
                             capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    ms = reading_ms(a.draft, batches, a.rounds)
    for r in rows:
        r["prompt_ms"] = ms[r["n_batch"]]
        print(f"n_batch {r['n_batch']:4d}: loaded +{r['loaded_mb']} MB, after a 1,000-token prompt "
              f"+{r['after_prompt_mb']} MB, peak {r['peak_rss_mb']} MB, prompt read in {r['prompt_ms']} ms")
    if a.out:
        a.out.write_text(json.dumps({"draft": a.draft, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
