"""Issue 43, goal 1's other half: the wall-clock of a stream's drafters on this CPU, against the static drafter.

Each drafter a long stream kept (``omnidraft adapt --keep-drafters``: ``after-NNNN-VERSION.gguf``) drafts for the
target through ``omnidraft bench run`` on its held-out set, beside the control (the static drafter re-exported the
same way), each run with its own target-alone pass, so that a ratio never spans two of this VM's phases.  Rounds
alternate the order (control first, then last).  Prints and saves a table, JSON and a plot.

    python scripts/lab/issue43_wallclock.py --control control-q8_0.gguf \
        --stream humaneval=DIR_OF_CODE_DRAFTERS --stream chat-fresh=DIR_OF_CHAT_DRAFTERS --rounds 2 --out DIR
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

CONFIGS = {"target": "target", "fixed": "hybrid k={k}", "default": "hybrid adaptive"}


def bench(target: str, draft: Path, set_name: str, n: int, max_tokens: int, k: int, out: Path) -> dict:
    """One ``bench run``: the target alone, fixed k and the default, on ``set_name``; the run's figures."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "omnidraft.apps.cli", "bench", "run", "--targets", target, "--draft", str(draft),
            "--sets", set_name, "--n", str(n), "--max-tokens", str(max_tokens), "--methods", "target,hybrid",
            "--ks", str(k), "--no-gamma", "--no-progress", "--no-plots", "--out", str(out)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    res = json.loads(max(out.glob("*.json"), key=lambda p: p.stat().st_mtime).read_text())["runs"][0]["results"]
    row = {}
    for name, key in CONFIGS.items():
        r = res[key.format(k=k)]
        row[name] = {"tok_s": r["tokens_per_s"], "tau": r["tau"], "acceptance": r["acceptance_rate"],
                     "same_output": r["same_output_as_target"]}
    return row


def point_of(path: Path) -> int:
    m = re.match(r"after-(\d+)-", path.name)
    return int(m.group(1)) if m else 0


def run(a) -> dict:
    streams = {s.split("=", 1)[0]: sorted(Path(s.split("=", 1)[1]).glob("after-*.gguf"), key=point_of)
               for s in a.stream}
    rows = []
    for rnd in range(a.rounds):
        for set_name, files in streams.items():
            order = [a.control] + files
            if rnd % 2:
                order.reverse()
            for f in order:
                pt = point_of(f) if f != a.control else 0
                tag = f"r{rnd}-{set_name}-{'control' if f == a.control else f.stem}"
                row = bench(a.target, f, set_name, a.n, a.max_tokens, a.k, a.out / "runs" / tag)
                row.update(round=rnd, set=set_name, prompts=pt, drafter=f.name)
                rows.append(row)
                print(f"{tag}: target {row['target']['tok_s']:.1f}, k={a.k} {row['fixed']['tok_s']:.1f} "
                      f"(tau {row['fixed']['tau']:.2f}), default {row['default']['tok_s']:.1f} tok/s", flush=True)
    return {"rows": rows, "summary": summarize(rows), "settings": {k: str(v) for k, v in vars(a).items()}}


def summarize(rows: list[dict]) -> list[dict]:
    """Per set and point: means over rounds of each configuration's speedup over its own run's target alone, and
    of its tokens a second over the control's in the same round."""
    out = []
    for set_name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == set_name]
        ctrl = {r["round"]: r for r in mine if r["prompts"] == 0}
        for pt in sorted({r["prompts"] for r in mine}):
            rs = [r for r in mine if r["prompts"] == pt]
            s = {"set": set_name, "prompts": pt, "rounds": len(rs),
                 "same_output": all(r[c]["same_output"] for r in rs for c in CONFIGS)}
            for c in ("fixed", "default"):
                s[f"{c}_speedup"] = statistics.mean(r[c]["tok_s"] / r["target"]["tok_s"] for r in rs)
                s[f"{c}_vs_control"] = statistics.mean(r[c]["tok_s"] / ctrl[r["round"]][c]["tok_s"] for r in rs)
                s[f"{c}_tau"] = statistics.mean(r[c]["tau"] for r in rs)
            s["target_tok_s"] = statistics.mean(r["target"]["tok_s"] for r in rs)
            out.append(s)
    return out


def table(summary: list[dict], k: int) -> str:
    lines = [f"| set | requests | target alone tok/s | fixed k = {k}: speedup / vs control / tau | "
             "default: speedup / vs control | same output |", "|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['set']} | {s['prompts'] or 'control'} | {s['target_tok_s']:.1f} | "
                     f"{s['fixed_speedup']:.2f}x / **{s['fixed_vs_control']:.2f}x** / {s['fixed_tau']:.2f} | "
                     f"{s['default_speedup']:.2f}x / **{s['default_vs_control']:.2f}x** | "
                     f"{'yes' if s['same_output'] else 'NO'} |")
    return "\n".join(lines)


def plot(summary: list[dict], path: Path, k: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for set_name in dict.fromkeys(s["set"] for s in summary):
        pts = [s for s in summary if s["set"] == set_name]
        x = [s["prompts"] for s in pts]
        ax.plot(x, [s["fixed_vs_control"] for s in pts], "o-", label=f"{set_name}, fixed k = {k}")
        ax.plot(x, [s["default_vs_control"] for s in pts], "s--", label=f"{set_name}, default")
    ax.axhline(1.2, color="red", lw=0.8, ls=":", label="goal: 1.2x the static drafter")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("stream requests")
    ax.set_ylabel("tokens/s over the static drafter's")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--control", type=Path, required=True, help="the static drafter, re-exported like the stream's")
    ap.add_argument("--stream", action="append", required=True,
                    help="SET=DIR: the held-out set and a folder of one stream's after-NNNN-VERSION.gguf drafters")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n", type=int, default=6, help="held-out prompts a set")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=3, help="the fixed draft length beside the default")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    result = run(a)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "wallclock.json").write_text(json.dumps(result, indent=1))
    md = table(result["summary"], a.k)
    (a.out / "wallclock.md").write_text(md + "\n")
    plot(result["summary"], a.out / "wallclock.png", a.k)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
