"""Target pass times inside the generation loop, by rows and by what the step before did (issue 41).

The cost model times each pass size after a pass of another size (``costmodel.sample_passes``); the loop runs
long stretches of one size.  This runs the target alone and the default (hybrid, cost policy) on a prompt set,
interleaved per prompt, and prints the median target pass per (method, rows, previous step batched or not), with
the drafter's, catch-up and bookkeeping totals: where a drafting step's time goes, and what switching costs.

    python scripts/lab/step_passes.py TARGET SET [--n 6] [--rounds 2] [--tokens 64] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics as st
from pathlib import Path

from omnidraft.assets.snapshot import load_set
from omnidraft.runtime.session import Session
from omnidraft.runtime.settings import Settings
from omnidraft.speculative.generator import GenerationParams


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("set", help="a prompt set name (its held-out split is used)")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    s = Session(Settings(target=a.target)).warm_up()
    items = load_set(a.set).split("heldout")[:a.n]
    params = GenerationParams(max_tokens=a.tokens)
    passes: dict[str, list[float]] = collections.defaultdict(list)
    tot: collections.Counter = collections.Counter()
    for _ in range(a.rounds):
        for it in items:
            for method in ("target", "hybrid"):
                gen = s.generator(method=method)
                p = gen.prompt_from_messages([{"role": "user", "content": it.prompt}]) if it.chat \
                    else gen.prompt_from_text(it.prompt)
                f = gen.generate(p, params)
                prev = 0
                for r in f.steps:
                    passes[f"{method} rows={r.proposed + 1} after {'batched' if prev else 'one-row'}"].append(
                        r.target_s * 1e3)
                    tot[f"{method} drafting ms"] += (r.draft_s - r.catchup_s) * 1e3
                    tot[f"{method} catch-up ms"] += r.catchup_s * 1e3
                    tot[f"{method} step ms"] += r.total_s * 1e3
                    prev = r.proposed
                tot[f"{method} decode ms"] += (f.stats.total_s - f.stats.prefill_s) * 1e3
                tot[f"{method} tokens"] += len(f.token_ids)
    s.close()
    table = {k: {"passes": len(v), "median_ms": round(st.median(v), 2), "mean_ms": round(st.mean(v), 2)}
             for k, v in sorted(passes.items())}
    for k, v in table.items():
        print(f"{k:40s} {v['passes']:5d} passes  median {v['median_ms']:6.2f} ms  mean {v['mean_ms']:6.2f} ms")
    for k in sorted(tot):
        print(f"{k:40s} {tot[k]:10.1f}")
    speeds = {m: tot[f"{m} tokens"] / tot[f"{m} decode ms"] * 1e3 for m in ("target", "hybrid")}
    print(f"tok/s: target alone {speeds['target']:.1f}, default {speeds['hybrid']:.1f} "
          f"({speeds['hybrid'] / speeds['target']:.3f}x)")
    if a.out:
        a.out.write_text(json.dumps({"target": a.target, "set": a.set, "n": a.n, "rounds": a.rounds,
                                     "tokens": a.tokens, "passes": table, "totals": dict(tot),
                                     "tokens_per_s": speeds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
