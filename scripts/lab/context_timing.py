"""How ``llama.ctxcost`` times passes at a long context, against what the loop pays there.

At the context a prompt file leaves (the served pair, the target's fast mode):
- T(n) / T(1), n = 2..5, timed as ``time_at_context`` does (back to back, each pass rolled back, the fastest of 3),
  and the same with a drafter pass before each timed pass, as the loop interleaves them; ``--repeats`` times each;
- a one-row pass after a one-row pass and after a three-row pass (does changing the batch's shape cost anything?);
- the target's pass times in the loop, by rows: fixed k = 4 and k = 2 (medians).

    .venv/bin/python scripts/lab/context_timing.py --prompt DIR/p2k.txt --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from omnidraft.bench.report import write_json
from omnidraft.llama import costmodel
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams

sys.path.insert(0, str(Path(__file__).parent))
from long_served import passes_by_rows  # noqa: E402


def ratios(target, before, rounds: int = 3) -> dict:
    base, fill = target.n_past, list(target.tokens[-5:])
    best = {n: float("inf") for n in range(1, 6)}
    for _ in range(rounds):
        for n in best:
            best[n] = min(best[n], costmodel.timed_pass(target, fill[:n], base, before))
    target.rollback(base)
    return {"t1_ms": round(best[1] * 1e3, 2), "ratios": {n: round(best[n] / best[1], 3) for n in range(2, 6)}}


def shape_switch(target, passes: int = 20) -> dict:
    """Median ms of a one-row pass after a one-row pass, and after a three-row pass; the same for three rows."""
    base, fill = target.n_past, list(target.tokens[-3:])

    def one(n: int) -> float:
        target.rollback(base)
        t0 = time.perf_counter()
        target.decode(fill[:n], "all")
        return time.perf_counter() - t0

    out = {"t1_after_t1": [one(1) for _ in range(passes)], "t1_after_t3": [], "t3_after_t1": []}
    for _ in range(passes):
        one(3)
        out["t1_after_t3"].append(one(1))
        out["t3_after_t1"].append(one(3))
    out["t3_after_t3"] = [one(3) for _ in range(passes)]
    target.rollback(base)
    return {k: round(statistics.median(v) * 1e3, 2) for k, v in out.items()}


def live(session: Session, text: str, k: int, max_tokens: int) -> dict:
    gen = session.generator(method="hybrid", k=k, policy="fixed")
    final = gen.generate(gen.prompt_for(text, False), GenerationParams(max_tokens=max_tokens, reuse_prefix=True))
    pass_ms, passes = passes_by_rows(final.steps)
    return {n: {"passes": passes[n], "median_ms": ms} for n, ms in pass_ms.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", type=Path, required=True, help="a raw-text prompt file")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96, help="tokens of each live run")
    ap.add_argument("--out", type=Path, required=True, help="JSON results")
    a = ap.parse_args()
    session = Session(Settings(target=a.target, method="hybrid"))
    session.warm_up()
    text, t, d = a.prompt.read_text(), session.target, session.draft
    # the target reads the prompt, the drafter its window (a fixed length always has it read)
    gen = session.generator(method="hybrid", k=2, policy="fixed")
    gen.generate(gen.prompt_for(text, False), GenerationParams(max_tokens=2, reuse_prefix=True))

    tok = d.tokenize(" x")[-1:]  # what the drafter's pass reads does not change what it costs

    def drafter_pass() -> None:
        base = d.n_past
        d.decode(tok, "last")
        d.rollback(base)

    data = {"prompt": a.prompt.name, "target_cells": t.n_past, "drafter_cells": d.n_past, "timed": []}
    for r in range(a.repeats):
        data["timed"].append({"back_to_back": ratios(t, None), "drafter_pass_before": ratios(t, drafter_pass),
                              "shape_switch_ms": shape_switch(t)})
        print(json.dumps(data["timed"][-1]), flush=True)
    data["live"] = {f"fixed k={k}": live(session, text, k, a.max_tokens) for k in (4, 2)}
    print(json.dumps(data["live"]), flush=True)
    write_json(a.out, data)


if __name__ == "__main__":
    main()
