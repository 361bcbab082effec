"""The default generation and the target alone on long prompts, A against B: fa_rows.cpp against ggml's one_chunk
(``--ab fa-rows``: OMNIDRAFT_FA_ROWS=0), or pass prices that follow the context against start-up's (``--ab
context-prices``: --no-context-prices) and against a drafter that reads the whole prompt (--draft-window 0).  One
`omnidraft generate --json` process a run, the configurations alternated per prompt and round, greedy.  Prints and
saves tok/s, time to the first token and whether every default run wrote its target alone's text.

    .venv/bin/python scripts/lab/long_context.py --prompts DIR/*.txt --max-tokens 96 --rounds 2 --out DIR/long.json

A prompt file holds the text as the model should continue it (no chat template).  `--make-prompts DIR` writes the
held-out ones used here: whole HumanEval problems with their canonical solutions (HumanEval 100-105, 140-143, 120-127)
until about 1,000, 1,000 and 2,000 tokens, then the next problem's prompt to complete (p1k, q1k, p2k).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from omnidraft.bench.report import write_json

# label -> (method, environment, extra flags, the label of its target alone)
AB = {
    "fa-rows": {"target fa_rows=1": ("target", {"OMNIDRAFT_FA_ROWS": "1"}, [], "target fa_rows=1"),
                "hybrid fa_rows=1": ("hybrid", {"OMNIDRAFT_FA_ROWS": "1"}, [], "target fa_rows=1"),
                "target fa_rows=0": ("target", {"OMNIDRAFT_FA_ROWS": "0"}, [], "target fa_rows=0"),
                "hybrid fa_rows=0": ("hybrid", {"OMNIDRAFT_FA_ROWS": "0"}, [], "target fa_rows=0")},
    "default": {"target": ("target", {}, [], "target"), "hybrid": ("hybrid", {}, [], "target")},
    "context-prices": {"target": ("target", {}, [], "target"),
                       "hybrid": ("hybrid", {}, [], "target"),
                       "hybrid start-up prices": ("hybrid", {}, ["--no-context-prices"], "target"),
                       "hybrid whole prompt": ("hybrid", {}, ["--draft-window", "0"], "target")},
}


def run(prompt: str, method: str, env: dict, flags: list[str], args: argparse.Namespace) -> dict:
    if args.state:  # every run from the same copy: what one run learns (acceptance, a guard's verdict) moves no other
        tmp = tempfile.mkdtemp(prefix="long-context-state-")
        shutil.copytree(args.state, tmp, dirs_exist_ok=True)
        flags = [*flags, "--state-dir", tmp]
    cmd = [os.path.join(os.path.dirname(sys.executable), "omnidraft"), "generate", "--json", "--max-tokens",
           str(args.max_tokens), "--method", method, "--target", args.target, *flags, "-"]
    out = subprocess.run(cmd, input=prompt, capture_output=True, text=True, check=True, env=dict(os.environ, **env))
    r = json.loads(out.stdout)
    st = r["stats"]
    return {"text": r["text"], "tok_s": st["tokens_per_s"], "first_token_s": st["first_token_s"],
            "prompt_tokens": st["prompt_tokens"], "tau": st["tau"], "total_s": st["total_s"],
            "target_passes": st["target_passes"], "proposed": st["proposed"], "accepted": st["accepted"]}


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


def table_of(runs: dict[str, dict[str, list[dict]]], configs: dict) -> tuple[list[str], dict]:
    """The readable table and the per-prompt summary of the runs (means over rounds)."""
    labels = [k for k in configs if k in next(iter(runs.values()))]
    drafting = [k for k in labels if configs[k][3] != k]
    table = ["| prompt | tokens | " + " | ".join(f"{k} tok/s" for k in labels) + " | "
             + " | ".join(f"{k} / its target alone" for k in drafting)
             + " | end to end (prompt read too) | first token s ("
             + " / ".join(labels) + ") | same text as its target alone |", ""]
    summary = {}
    for name, cfg in runs.items():
        med = {k: statistics.mean(r["tok_s"] for r in v) for k, v in cfg.items()}
        ftt = {k: statistics.mean(r["first_token_s"] for r in v) for k, v in cfg.items()}
        total = {k: statistics.mean(r.get("total_s", 0.0) for r in v) for k, v in cfg.items()}
        # the product's promise: each default run writes what its target alone writes (two attention kernels round
        # differently, so their texts may part: reported, not required)
        same = all({r["text"] for r in cfg[k]} == {r["text"] for r in cfg[configs[k][3]]} for k in drafting)
        summary[name] = {"tok_s": med, "first_token_s": ftt, "total_s": total, "same_text": same,
                         "all_same_text": len({r["text"] for v in cfg.values() for r in v}) == 1}
        table.append(f"| {name} | {next(iter(cfg.values()))[0]['prompt_tokens']} | "
                     + " | ".join(f"{med[k]:.1f}" for k in labels) + " | "
                     + " | ".join(f"{med[k] / med[configs[k][3]]:.2f}x" for k in drafting) + " | "
                     + " / ".join(f"{total[configs[k][3]] / total[k]:.2f}x" if total[k] else "-" for k in drafting)
                     + " | " + " / ".join(f"{ftt[k]:.2f}" for k in labels) + f" | {'yes' if same else 'NO'} |")
    table[1] = "|" + "---|" * (4 + len(labels) + len(drafting))
    return table, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", nargs="+", help="prompt files")
    ap.add_argument("--make-prompts", metavar="DIR", help="write the held-out long prompts into DIR and stop")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ab", choices=sorted(AB), default="fa-rows", help="what the runs compare")
    ap.add_argument("--state", help="a state dir every run starts from a fresh copy of (default: the shared one, "
                                    "which each run teaches)")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--summarize", metavar="JSON", help="print the table of an earlier run's JSON and stop")
    a = ap.parse_args()
    if a.summarize:
        saved = json.loads(Path(a.summarize).read_text())
        print("\n".join(table_of(saved["runs"], AB[saved.get("ab", "fa-rows")])[0]))
        return None
    if a.make_prompts:
        return make_prompts(Path(a.make_prompts))
    if not a.prompts:
        ap.error("--prompts is required")
    runs: dict[str, dict[str, list[dict]]] = {}
    for rnd in range(a.rounds):
        for path in a.prompts:
            prompt = Path(path).read_text()
            order = list(AB[a.ab]) if rnd % 2 == 0 else list(AB[a.ab])[::-1]
            for label in order:
                method, env, flags, _ = AB[a.ab][label]
                r = run(prompt, method, env, flags, a)
                runs.setdefault(Path(path).stem, {}).setdefault(label, []).append(r)
                print(f"round {rnd + 1} {Path(path).stem} ({r['prompt_tokens']} tokens) {label}: "
                      f"{r['tok_s']:.1f} tok/s, first token {r['first_token_s']:.2f} s, tau {r['tau']:.2f}, "
                      f"{r['accepted']} of {r['proposed']} drafted kept", flush=True)
    table, summary = table_of(runs, AB[a.ab])
    print("\n".join(table))
    if a.out:
        write_json(Path(a.out), {"ab": a.ab, "state": a.state, "max_tokens": a.max_tokens, "rounds": a.rounds,
                                 "target": a.target,
                                 "summary": summary, "runs": runs, "table": table})


if __name__ == "__main__":
    main()
