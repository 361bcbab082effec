"""The default generation and the target alone on long prompts, fa_rows.cpp against ggml's one_chunk
(OMNIDRAFT_FA_ROWS=0): one `omnidraft generate --json` process a run, the four configurations alternated per prompt
and round, greedy.  Prints and saves tok/s, time to the first token and whether every configuration wrote the same
text.

    .venv/bin/python scripts/lab/long_context.py --prompts DIR/*.txt --max-tokens 96 --rounds 2 --out DIR/long.json

A prompt file holds the text as the model should continue it (no chat template).  `--make-prompts DIR` writes the
held-out ones used here: whole HumanEval problems with their canonical solutions (HumanEval 100-105, 140-143, 120-127)
until about 1,000, 1,000 and 2,000 tokens, then the next problem's prompt to complete (p1k, q1k, p2k).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from omnidraft.bench.report import write_json

CONFIGS = [("target", "1"), ("hybrid", "1"), ("target", "0"), ("hybrid", "0")]


def run(prompt: str, method: str, fa_rows: str, args: argparse.Namespace) -> dict:
    cmd = [os.path.join(os.path.dirname(sys.executable), "omnidraft"), "generate", "--json", "--max-tokens",
           str(args.max_tokens), "--method", method, "--target", args.target, "-"]
    out = subprocess.run(cmd, input=prompt, capture_output=True, text=True, check=True,
                         env=dict(os.environ, OMNIDRAFT_FA_ROWS=fa_rows))
    r = json.loads(out.stdout)
    st = r["stats"]
    return {"text": r["text"], "tok_s": st["tokens_per_s"], "first_token_s": st["first_token_s"],
            "prompt_tokens": st["prompt_tokens"], "tau": st["tau"]}


def make_prompts(out: Path) -> None:
    import gzip

    from omnidraft.assets import models
    from omnidraft.llama.engine import Engine, EngineConfig

    rows = [json.loads(line) for line in gzip.open(models.cache_dir() / "datasets" / "HumanEval.jsonl.gz", "rt")]
    out.mkdir(parents=True, exist_ok=True)
    with Engine(models.resolve("qwen2.5-coder-1.5b"), EngineConfig(vocab_only=True)) as e:
        for name, start, tokens in (("p1k", 100, 1000), ("q1k", 140, 1000), ("p2k", 120, 2000)):
            body, i = "", start
            while len(e.tokenize(body)) < tokens:
                body += rows[i]["prompt"] + rows[i]["canonical_solution"] + "\n\n"
                i += 1
            (out / f"{name}.txt").write_text(body + rows[i]["prompt"])


def table_of(runs: dict[str, dict[str, list[dict]]]) -> tuple[list[str], dict]:
    """The readable table and the per-prompt summary of the runs (means over rounds)."""
    table = ["| prompt | tokens | target alone (one_chunk / fa_rows) | default (one_chunk / fa_rows) | default / its "
             "target alone (one_chunk / fa_rows) | first token s (one_chunk / fa_rows) | same text as the target alone | "
             "one_chunk's text |", ""]
    summary = {}
    for name, cfg in runs.items():
        med = {k: statistics.mean(r["tok_s"] for r in v) for k, v in cfg.items()}
        ftt = {k: statistics.mean(r["first_token_s"] for r in v) for k, v in cfg.items()}
        # the product's promise: the default writes what its target alone writes, for each attention kernel; the two
        # kernels round differently, so their texts may part (reported, not required)
        same = all(len({r["text"] for k, v in cfg.items() if k.endswith(fa) for r in v}) == 1 for fa in "01")
        kernels_agree = len({r["text"] for v in cfg.values() for r in v}) == 1
        summary[name] = {"tok_s": med, "first_token_s": ftt, "same_text": same, "kernels_same_text": kernels_agree}
        t0, t1, h0, h1 = (med["target fa_rows=0"], med["target fa_rows=1"], med["hybrid fa_rows=0"],
                          med["hybrid fa_rows=1"])
        table.append(f"| {name} | {next(iter(cfg.values()))[0]['prompt_tokens']} | {t0:.1f} / {t1:.1f} | {h0:.1f} / "
                     f"{h1:.1f} | {h0 / t0:.2f}x / {h1 / t1:.2f}x | {ftt['target fa_rows=0']:.2f} / "
                     f"{ftt['target fa_rows=1']:.2f} | {'yes' if same else 'NO'} | "
                     f"{'the same' if kernels_agree else 'another'} |")
    table[1] = "|---|---|---|---|---|---|---|---|"
    return table, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", nargs="+", help="prompt files")
    ap.add_argument("--make-prompts", metavar="DIR", help="write the held-out long prompts into DIR and stop")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--summarize", metavar="JSON", help="print the table of an earlier run's JSON and stop")
    a = ap.parse_args()
    if a.summarize:
        runs = json.loads(Path(a.summarize).read_text())["runs"]
        print("\n".join(table_of(runs)[0]))
        return None
    if a.make_prompts:
        return make_prompts(Path(a.make_prompts))
    if not a.prompts:
        ap.error("--prompts is required")
    runs: dict[str, dict[str, list[dict]]] = {}
    for rnd in range(a.rounds):
        for path in a.prompts:
            prompt = Path(path).read_text()
            order = CONFIGS if rnd % 2 == 0 else CONFIGS[::-1]
            for method, fa in order:
                r = run(prompt, method, fa, a)
                runs.setdefault(Path(path).stem, {}).setdefault(f"{method} fa_rows={fa}", []).append(r)
                print(f"round {rnd + 1} {Path(path).stem} ({r['prompt_tokens']} tokens) {method:6s} fa_rows={fa}: "
                      f"{r['tok_s']:.1f} tok/s, first token {r['first_token_s']:.2f} s, tau {r['tau']:.2f}", flush=True)
    table, summary = table_of(runs)
    print("\n".join(table))
    if a.out:
        write_json(Path(a.out), {"max_tokens": a.max_tokens, "rounds": a.rounds, "target": a.target,
                                 "summary": summary, "runs": runs, "table": table})


if __name__ == "__main__":
    main()
