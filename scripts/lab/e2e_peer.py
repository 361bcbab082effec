"""The default generation against plain llama-cpp-python, processes alternated (issue 41).

The product and the peer cannot share a process: the peer is llama-cpp-python as pip builds it (no patch),
whose ggml libraries clash with the patched ones.  So each round runs, per target, one `omnidraft bench run`
on this build (the target alone, fixed k = 4 and the default cost policy, interleaved per prompt) and one on
the upstream build with `--peer` (its target alone and `Llama.create_completion`, all cores), then the other
order in the next round.  Machine drift between rounds shows as the spread of the product's own target-alone
figures, which both runs measure.

    python scripts/lab/e2e_peer.py --peer-path /tmp/upstream --targets qwen2.5-coder-1.5b \\
        --sets humaneval,code-other,chat-fresh --rounds 2 --out results/issue41/e2e-peer

Writes each run's JSON and Markdown under OUT/runs/, and OUT/summary.{json,md} from every run there (so a
later call with --first-round adds rounds; --rounds 0 only summarizes).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = "hybrid adaptive"  # what `omnidraft generate` runs: the cost policy, k <= 4


def cpu_flags() -> str:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    keep = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
                 "")
    return f"{model or platform.processor()}, {os.cpu_count()} cores, " + " ".join(f for f in keep if f in flags)


def bench(target: str, args, out: Path, peer: bool) -> Path:
    """One `omnidraft bench run`; returns the JSON it wrote."""
    cmd = [sys.executable, "-c", "from omnidraft.apps.cli import main; main()", "bench", "run", "--targets", target,
           "--sets", args.sets,
           "--n", str(args.n), "--max-tokens", str(args.max_tokens), "--no-gamma", "--no-progress",
           "--no-plots", "--out", str(out)]
    # the peer's process loads the pinned file (--wide off): no wide-copy timing under the upstream build
    cmd += ["--methods", "target", "--peer", "--wide", "off"] if peer else ["--methods", "target,hybrid", "--ks", "4"]
    cmd += args.sampling.split()
    env = dict(os.environ)
    if peer:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (args.peer_path, env.get("PYTHONPATH")) if p)
    before = set(out.glob("*.json")) if out.exists() else set()
    print("+", "PYTHONPATH=" + args.peer_path if peer else "", "omnidraft", " ".join(cmd[3:]), flush=True)
    subprocess.run(cmd, env=env, check=True)
    (new,) = set(out.glob("*.json")) - before
    return new


def rows(path: Path, side: str) -> list[dict]:
    data = json.loads(path.read_text())
    found = []
    for run in data["runs"]:
        for name, res in run["results"].items():
            found.append({"side": side, "target": run["target"], "set": run["set"]["name"], "config": name,
                          "tok_s": res["tokens_per_s"], "first_ms": res.get("first_token_ms"), "tau": res["tau"],
                          "kernels": run["kernels"]["mode"],
                          "same_output": res.get("same_output_as_target"), "file": str(path)})
    return found


def summarize(found: list[dict]) -> list[dict]:
    table = []
    for target in dict.fromkeys(r["target"] for r in found):
        for name in dict.fromkeys(r["set"] for r in found if r["target"] == target):
            def pick(side, config, key="tok_s"):
                return [r[key] for r in found if (r["target"], r["set"], r["side"], r["config"]) ==
                        (target, name, side, config) and r.get(key) is not None]  # older runs: no first_ms
            own, default = pick("product", "target"), pick("product", DEFAULT)
            peer, peer_own = pick("peer", "llama-cpp-python"), pick("peer", "target")
            k4 = pick("product", "hybrid k=4")
            same = all(r["same_output"] in (True, None) for r in found if (r["target"], r["set"]) == (target, name))
            m = lambda xs: statistics.mean(xs) if xs else None  # noqa: E731 - a run may lack one side
            ratio = lambda a, b: a / b if a and b else None  # noqa: E731
            table.append({"target": target, "set": name, "rounds": len(default), "target_alone": m(own),
                          "target_alone_spread": [min(own), max(own)] if own else None, "default": m(default),
                          "k4": m(k4), "peer": m(peer), "upstream_target_alone": m(peer_own),
                          "default_vs_target": ratio(m(default), m(own)), "default_vs_peer": ratio(m(default), m(peer)),
                          "target_vs_peer": ratio(m(own), m(peer)), "same_output": same,
                          # ms from a request's start to its first token (prompt read included); runs before
                          # 2026-12-06 lack it
                          "first_ms": {"target": m(pick("product", "target", "first_ms")),
                                       "default": m(pick("product", DEFAULT, "first_ms")),
                                       "peer": m(pick("peer", "llama-cpp-python", "first_ms"))}})
    return table


def markdown(table: list[dict], meta: dict) -> str:
    lines = [f"# Default generation against plain llama-cpp-python ({meta['date']})", "",
             f"CPU: {meta['cpu']}", f"Command: `{meta['command']}`", "",
             "| target | set | rounds | target alone tok/s (min-max) | default tok/s | k=4 tok/s | "
             "plain llama-cpp-python tok/s | default / target alone | default / plain | target alone / plain | "
             "same output | first token ms: target alone / default / plain |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    for r in table:
        spread = r["target_alone_spread"] or [None, None]
        lines.append(f"| {r['target']} | {r['set']} | {r['rounds']} | {f(r['target_alone'], '.1f')} "
                     f"({f(spread[0], '.1f')}-{f(spread[1], '.1f')}) | {f(r['default'], '.1f')} | "
                     f"{f(r['k4'], '.1f')} | {f(r['peer'], '.1f')} | **{f(r['default_vs_target'], '.2f')}x** | "
                     f"**{f(r['default_vs_peer'], '.2f')}x** | {f(r['target_vs_peer'], '.2f')}x | "
                     f"{'yes' if r['same_output'] else 'NO'} | "
                     + " / ".join(f(r["first_ms"][k], ".0f") for k in ("target", "default", "peer")) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-path", required=True, help="directory holding plain llama-cpp-python (pip --target)")
    ap.add_argument("--targets", default="qwen2.5-coder-1.5b", help="comma-separated target models")
    ap.add_argument("--sets", default="humaneval,code-other,chat-fresh", help="held-out prompt sets")
    ap.add_argument("--n", type=int, default=6, help="prompts per set")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens per prompt")
    ap.add_argument("--rounds", type=int, default=2, help="rounds; the order flips each round")
    ap.add_argument("--sampling", default="", help="bench run's sampling flags for every run, e.g. "
                    "'--temperature 0.8 --top-k 40 --top-p 0.9' (default: greedy)")
    ap.add_argument("--first-round", type=int, default=0,
                    help="number of the first round (odd: the peer first); the summary reads every run under OUT")
    ap.add_argument("--out", type=Path, default=Path("results/e2e-peer"), help="output directory")
    args = ap.parse_args()
    for r in range(args.first_round, args.first_round + args.rounds):
        for target in args.targets.split(","):
            for peer in ((False, True) if r % 2 == 0 else (True, False)):
                bench(target, args, args.out / "runs" / ("peer" if peer else "product"), peer)
    found = [row for side in ("product", "peer") for path in sorted((args.out / "runs" / side).glob("*.json"))
             for row in rows(path, side)]
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_flags(), "command": " ".join(sys.argv),
            "load_average": os.getloadavg()}
    table = summarize(found)
    (args.out / "summary.json").write_text(json.dumps({"meta": meta, "table": table, "runs": found}, indent=1))
    (args.out / "summary.md").write_text(markdown(table, meta))
    print(markdown(table, meta))


if __name__ == "__main__":
    main()
