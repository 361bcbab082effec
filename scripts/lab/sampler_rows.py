"""The sampler per row on real logits: this checkout's ``verifier.sample_token`` against the dense version it replaced
(a float64 softmax over the whole row, a sort of every token above 1e-9 for top-p, one running sum of the vocabulary),
kept here verbatim as the reference (issue 41, thirty-fifth session).

Rows: the target's logits at the last 60 positions of 3 held-out HumanEval and 3 chat-fresh prompts (teacher-forced,
one pass each).  For each sampling setting: the best of 3 timings of one sample a row, and how many rows both give the
same token for the same uniforms.

    python scripts/lab/sampler_rows.py --target qwen2.5-coder-1.5b --out results/issue41/zen4-35/sampler/rows
"""
from __future__ import annotations

import argparse
import json
import timeit
from pathlib import Path

import numpy as np

from omnidraft.assets import models, snapshot
from omnidraft.bench import report
from omnidraft.runtime.session import Session
from omnidraft.runtime.settings import Settings
from omnidraft.speculative.verifier import SamplingParams, sample_token

SETTINGS = [SamplingParams(1.0), SamplingParams(0.7), SamplingParams(0.7, top_p=0.95), SamplingParams(1.0, top_p=0.9),
            SamplingParams(0.8, top_k=40), SamplingParams(0.8, top_k=40, top_p=0.9), SamplingParams(1.5, top_p=0.99)]


def dense_sample(row: np.ndarray, p: SamplingParams, u: float) -> int:
    """The sampler before the thirty-fifth session, as it was."""
    z = row.astype(np.float64) / max(p.temperature, 1e-6)
    if p.top_k and p.top_k < z.size:
        kth = np.partition(z, -p.top_k)[-p.top_k]
        z = np.where(z >= kth, z, -np.inf)
    z -= z.max()
    probs = np.exp(z)
    probs /= probs.sum()
    if p.top_p < 1.0:
        idx = np.flatnonzero(probs > 1e-9)
        if probs[idx].sum() < p.top_p:
            idx = np.arange(probs.size)
        order = idx[np.argsort(-probs[idx], kind="stable")]
        keep = order[: int(np.searchsorted(np.cumsum(probs[order]), p.top_p) + 1)]
        out = np.zeros_like(probs)
        out[keep] = probs[keep]
        probs = out / out.sum()
    csum = np.cumsum(probs)
    return int(min(np.searchsorted(csum, u * csum[-1], side="right"), probs.size - 1))


def real_rows(target: str) -> np.ndarray:
    s = Session(Settings(target=target, draft=models.SERVED_DRAFT, method="target", n_ctx=4096, draft_n_ctx=4096))
    t = s.models.target
    rows = []
    for name in ("humaneval", "chat-fresh"):
        for item in snapshot.load_set(name).split("heldout")[:3]:
            ids = t.tokenize(item.prompt)[-200:]
            t.reset()
            rows += list(np.array(t.decode(ids, "all"))[-60:])
    s.close()
    return np.array(rows, dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=models.QWEN_15B, help="target model whose logits are sampled")
    ap.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    rows = real_rows(args.target)
    u = np.random.default_rng(1).random(len(rows))
    table = []
    for p in SETTINGS:
        best = lambda f: min(timeit.repeat(lambda: [f(r, p, 0.37) for r in rows], number=1, repeat=3))  # noqa: E731
        same = sum(sample_token(r, p, x) == dense_sample(r, p, x) for r, x in zip(rows, u))
        table.append({"temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p, "rows": len(rows),
                      "dense_ms": 1e3 * best(dense_sample) / len(rows), "ms": 1e3 * best(sample_token) / len(rows),
                      "same_token": int(same)})
    lines = [f"Machine: {report.machine()}", f"Target {args.target}, {len(rows)} rows", "",
             "| temperature | top-k | top-p | dense (before) ms a row | this sampler ms a row | same token |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['temperature']} | {r['top_k'] or '-'} | {r['top_p']} | {r['dense_ms']:.2f} | {r['ms']:.2f} | "
              f"{r['same_token']} of {r['rows']} |" for r in table]
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps({"machine": report.machine(), "rows": table}, indent=1))
        args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
