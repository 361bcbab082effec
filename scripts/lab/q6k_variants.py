"""Which Q6_K matrices the fast mode should repack for sbq6x8.cpp: T(n) of one file's fast-mode engines, each
loaded with a different OMNIDRAFT_SBQ6X8 (read by sbkx8.cpp as each matrix loads: ``none``, ``all`` (the
default), ``noout``: every Q6_K matrix but the output one), passes alternated in one process (a noisy 2-core VM:
only that compares).

    PYTHONPATH=<build> .venv/bin/python scripts/lab/q6k_variants.py FILE [--rounds 40] [--out DIR]

Each pass decodes n tokens at position ~60 asking logits for every row (what verification asks) and is rolled
back, so every sample sees the same context.  The order of the engines rotates each round.  Prints and writes
(DIR/q6k-variants-<time>.json) per variant and n: the minimum, the 10/25/50/75 % quantiles, and the median of
the per-round ratio to ``none`` (same round).  Where other work stops or shares the cores, the samples it hits
only get longer: the minimum and the low quantiles are then the fairer comparison.
"""

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from omnidraft.apps.doctor import cpu_name

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n" * 3
VARIANTS = ("none", "all", "noout")
NS = (1, 4, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="results/issue41/q6k-reland")
    a = ap.parse_args()

    from omnidraft.assets import models
    from omnidraft.llama import build as llama_build
    from omnidraft.llama.engine import Engine, EngineConfig

    engs = {}
    for v in VARIANTS:
        os.environ["OMNIDRAFT_SBQ6X8"] = v  # read as each Q6_K matrix loads
        engs[v] = Engine(models.resolve(a.file), EngineConfig(n_threads=a.threads, n_ctx=1024, batch_invariant=False))
    os.environ.pop("OMNIDRAFT_SBQ6X8")
    prompt = engs["none"].tokenize(PROMPT)
    for e in engs.values():
        e.decode(prompt, "none")
    t = {(v, n): [] for v in VARIANTS for n in NS}
    for r in range(a.rounds):
        order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
        for n in NS:
            for v in order:
                e = engs[v]
                t0 = time.perf_counter()
                e.decode(prompt[r % 7: r % 7 + n], "all")
                t[(v, n)].append((time.perf_counter() - t0) * 1e3)
                e.rollback(len(prompt))
    skip = 2  # warm-up rounds
    out = {"file": str(a.file), "cpu": cpu_name(), "threads": a.threads, "rounds": a.rounds, "warmup_dropped": skip,
           "build": llama_build.build_id(), "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "variants": {"none": "no Q6_K repacked (plain Q6_K through sbk.cpp)",
                        "all": "every Q6_K matrix repacked (block_q6_Kx8, sbq6x8.cpp), output.weight too",
                        "noout": "every Q6_K matrix but the output one repacked"},
           "ms": {}}
    for v in VARIANTS:
        for n in NS:
            x = np.array(t[(v, n)][skip:])
            ratio = x / np.array(t[("none", n)][skip:])
            out["ms"][f"{v} T({n})"] = {"min": round(float(x.min()), 2),
                                        "p10": round(float(np.percentile(x, 10)), 2),
                                        "median": round(float(np.median(x)), 2),
                                        "p25": round(float(np.percentile(x, 25)), 2),
                                        "p75": round(float(np.percentile(x, 75)), 2),
                                        "ratio_to_none_median": round(float(np.median(ratio)), 4),
                                        "ratio_p25": round(float(np.percentile(ratio, 25)), 4),
                                        "ratio_p75": round(float(np.percentile(ratio, 75)), 4)}
            m = out["ms"][f"{v} T({n})"]
            print(f"{v:6s} T({n}) min {m['min']:.1f} p10 {m['p10']:.1f} median {m['median']:.1f} ms [{m['p25']:.1f}, "
                  f"{m['p75']:.1f}]  "
                  f"/none {m['ratio_to_none_median']:.3f} [{m['ratio_p25']:.3f}, {m['ratio_p75']:.3f}]")
    out["samples_ms"] = {f"{v} T({n})": [round(s, 2) for s in t[(v, n)]] for v in VARIANTS for n in NS}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    path = Path(a.out) / f"q6k-variants-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(path)
    for e in engs.values():
        e.close()


if __name__ == "__main__":
    main()
