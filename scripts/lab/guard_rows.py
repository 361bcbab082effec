"""How often a guarded kernel mode must decode a sampled row again, on real logits (the thirty-sixth session's top-p
judgement, ``verifier._nucleus_certain``).

A guarded mode (a build whose batched rows are only within a measured bound of one-token decoding: GPU builds,
kernels without a bit-identical small-batch path) re-decodes the first verified row whose draw such an error could
change; the rows after it are wasted.  Before this session every top-p row counted as uncertain.  Here: the share of
real rows (``sampler_rows.real_rows``: up to the last 60 of 3 held-out HumanEval and 3 chat-fresh prompts, 294 for the
1.5B) whose draw the guard calls certain, per sampling setting and guard, for one uniform a row.

    python scripts/lab/guard_rows.py --target qwen2.5-coder-1.5b --out results/issue41/zen5-36/guard-rows
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from omnidraft.bench import report
from omnidraft.llama.invariance import GUARD_SAFETY
from omnidraft.speculative.verifier import SamplingParams, first_uncertain_row
from sampler_rows import real_rows  # the same rows as the sampler's timing (scripts/lab)

SETTINGS = [SamplingParams(1.0), SamplingParams(0.7, top_p=0.95), SamplingParams(1.0, top_p=0.9),
            SamplingParams(0.8, top_k=40), SamplingParams(0.8, top_k=40, top_p=0.9), SamplingParams(1.5, top_p=0.99)]
BOUNDS = (5.7e-6, 1e-5, 1e-4)  # measured batched-row bounds are of this size (tests/test_kernel_modes: 5.7e-6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--out", required=True, help="a folder: rows.json and rows.md")
    a = ap.parse_args()
    rows = real_rows(a.target)
    us = np.random.default_rng(0).random(len(rows))
    table = []
    for sp in SETTINGS:
        line = {"setting": f"T {sp.temperature:g}" + (f", top-k {sp.top_k}" if sp.top_k else "")
                + (f", top-p {sp.top_p:g}" if sp.top_p < 1 else ""), "rows": len(rows)}
        for bound in BOUNDS:
            g = GUARD_SAFETY * bound
            certain = sum(first_uncertain_row(r[None], sp, [u], g) is None for r, u in zip(rows, us))
            line[f"certain at bound {bound:g}"] = round(certain / len(rows), 3)
        table.append(line)
        print(line, flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.json").write_text(json.dumps({"target": a.target, "guard_safety": GUARD_SAFETY, "table": table,
                                               "machine": report.machine()}, indent=1))
    cols = list(table[0])
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(str(line[c]) for c in cols) + " |" for line in table]
    title = f"# Rows a guarded mode calls certain ({a.target}, guard = {GUARD_SAFETY:g} x bound)"
    (out / "rows.md").write_text(title + "\n\n" + "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
