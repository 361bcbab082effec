"""The default generation and its target alone on long prompts in one process, as a server serves them.

long_context.py starts one `omnidraft generate` process a run, so every default run is a process's first request:
its policy starts from the prior and the prices of the context timed once.  Here one session serves every request
(each a fresh one: the prompt read again, no prefix reused), the two configurations alternated per prompt and round,
the order flipped each round, so the policy carries what it learned from one request to the next, as `serve` does.
Greedy; every default run must write its target alone's text.  Prints and saves per run: generation tok/s (after
the first token), first token, tau, and the target's pass times by rows (medians, ms).

    .venv/bin/python scripts/lab/long_served.py --prompts DIR/p2k.txt DIR/q1k.txt --rounds 3 --out OUT.json

Prompt files: long_context.py --make-prompts DIR (held-out HumanEval problems with their solutions).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

from omnidraft.bench.report import write_json
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams

CONFIGS = ("target", "hybrid")  # the target alone, and the default method under its cost policy


def passes_by_rows(steps) -> tuple[dict[int, float], dict[int, int]]:
    """The target's pass times in a generation's steps by rows (the last token and the drafts): medians in ms, and
    how many passes of each size."""
    rows = collections.defaultdict(list)
    for step in steps:
        rows[step.proposed + 1].append(step.target_s * 1e3)
    return ({n: round(statistics.median(v), 1) for n, v in sorted(rows.items())},
            {n: len(v) for n, v in sorted(rows.items())})


def one_run(session: Session, method: str, text: str, params: GenerationParams) -> tuple[dict, list[int]]:
    gen = session.generator(method=method)
    final = gen.generate(gen.prompt_for(text, False), params)
    st = final.stats
    pass_ms, passes = passes_by_rows(final.steps)
    return ({"tok_s": st.tokens_per_s, "first_token_s": st.first_token_s, "tau": st.tau, "pass_ms": pass_ms,
             "passes": passes}, final.token_ids)


def summary(runs: list[dict], prompts: list[str]) -> list[str]:
    lines = ["| prompt | target alone tok/s | default tok/s | default / target alone, per round | of the means |",
             "|---|---|---|---|---|"]
    for p in prompts:
        alone = [r["tok_s"] for r in runs if r["prompt"] == p and r["config"] == "target"]
        default = [r["tok_s"] for r in runs if r["prompt"] == p and r["config"] == "hybrid"]
        per = ", ".join(f"{d / a:.2f}x" for a, d in zip(alone, default))
        lines.append(f"| {p} | {' / '.join(f'{x:.1f}' for x in alone)} | {' / '.join(f'{x:.1f}' for x in default)} "
                     f"| {per} | {statistics.mean(default) / statistics.mean(alone):.3f}x |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", nargs="+", type=Path, required=True, help="raw-text prompt files")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True, help="JSON results (a .md table beside it)")
    a = ap.parse_args()
    session = Session(Settings(target=a.target, method="hybrid"))
    session.warm_up()
    params = GenerationParams(max_tokens=a.max_tokens)
    runs = []
    for r in range(a.rounds):
        for f in a.prompts:
            texts = {}
            for config in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
                run, texts[config] = one_run(session, config, f.read_text(), params)
                runs.append({"round": r, "prompt": f.stem, "config": config, **run})
                print(json.dumps(runs[-1]), flush=True)
            if texts["target"] != texts["hybrid"]:
                raise SystemExit(f"{f.stem}, round {r}: the default's output differs from its target alone's")
    table = summary(runs, [f.stem for f in a.prompts])
    print("\n".join(table))
    write_json(a.out, {"target": a.target, "max_tokens": a.max_tokens, "rounds": a.rounds, "runs": runs,
                       "table": table})
    a.out.with_suffix(".md").write_text("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
