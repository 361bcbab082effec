"""The cost policy's settings against the target alone, in one process, prompts interleaved (issue 41).

Where speculation barely pays or loses (the AVX2 code path: one more row is 0.6 decodes), a default that drafts
now and then can run a few per cent under the target alone; `bench run` times one round, whose spread is about
that size.  This runs the target alone, the default and each ``--variant`` (PolicyConfig fields, e.g.
``margin=0,probe_budget=0``) on the same prompts for several rounds, each configuration with its own policy kept
across the rounds (as a server keeps it), the order rotated per prompt, and reports each one's tokens/s over the
target alone's per round, over the loop (tokens / generation seconds, as `bench run`) and over whole requests
(tokens / seconds from the request's start: the target's and the drafter's prompt reading included).

    PYTHONPATH=<AVX2 build> python scripts/lab/policy_ab.py --target qwen2.5-coder-1.5b --sets humaneval,chat-fresh \\
        --rounds 4 --variant "never=margin=0.99,probe_budget=0" --out results/issue41/zen5/policy-ab-avx2.json
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from omnidraft.assets.snapshot import load_set
from omnidraft.bench import runner
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import PolicyConfig, seeded_policy

sys.path.insert(0, str(Path(__file__).parent))
from e2e_peer import cpu_flags  # noqa: E402


def variant(spec: str) -> tuple[str, PolicyConfig]:
    """``name=field=value,field=value`` -> (name, the default PolicyConfig with those fields)."""
    name, _, fields = spec.partition("=")
    cfg = PolicyConfig()
    for kv in filter(None, fields.split(",")):
        key, _, value = kv.partition("=")
        cfg = replace(cfg, **{key: type(getattr(cfg, key))(value)})
    return name, cfg


def prompt_args(ap: argparse.ArgumentParser) -> None:
    """The options of the in-process policy labs (this one, lookup_ab.py, stop_traces.py): target, prompts."""
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--sets", default="humaneval,chat-fresh", help="held-out prompt sets")
    ap.add_argument("--n", type=int, default=6, help="prompts per set")
    ap.add_argument("--max-tokens", type=int, default=64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    prompt_args(ap)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variant", action="append", default=[], help="name=field=value,... (PolicyConfig)")
    ap.add_argument("--out", type=Path, required=True, help="JSON file (a .md table beside it)")
    a = ap.parse_args()
    session = Session(Settings(target=a.target, threads=0, n_ctx=4096, draft_n_ctx=4096, method="omnidraft"))
    ctx = runner.BenchContext(session)
    ctx.start_costs()
    configs = [("default", PolicyConfig())] + [variant(v) for v in a.variant]
    gens = {"target": session.compose("target", ctx.pair, seeded_policy(PolicyConfig(k=0), "target", ctx.cost_for))}
    for name, cfg in configs:
        gens[name] = session.compose("hybrid", ctx.pair, seeded_policy(cfg, "hybrid", ctx.cost_for))
    params = GenerationParams(max_tokens=a.max_tokens)
    items = [it for s in a.sets.split(",") for it in load_set(s).split("heldout")[: a.n]]
    rounds = []
    for r in range(a.rounds):
        tally = {name: [0, 0.0, 0.0] for name in gens}  # tokens, loop seconds, whole-request seconds
        outputs: dict[str, list] = {name: [] for name in gens}
        for i, item in enumerate(items):
            names = list(gens)
            for name in names[i % len(names):] + names[: i % len(names)]:
                gen = gens[name]
                final = gen.generate(gen.prompt_for(item.prompt, item.chat), params)
                tally[name][0] += final.stats.completion_tokens
                tally[name][1] += final.stats.generation_s
                tally[name][2] += final.stats.total_s
                outputs[name].append(final.token_ids)
        differ = [name for name in gens if outputs[name] != outputs["target"]]
        if differ:
            raise SystemExit(f"round {r}: {differ} wrote other tokens than the target alone")
        speed = {name: t / s for name, (t, s, _) in tally.items()}
        whole = {name: t / w for name, (t, _, w) in tally.items()}
        rounds.append({name: round(v / speed["target"], 4) for name, v in speed.items()} |
                      {"target_tok_s": round(speed["target"], 2)} |
                      {"whole": {name: round(v / whole["target"], 4) for name, v in whole.items()}})
        print(f"round {r}: " + ", ".join(f"{k} {v}" for k, v in rounds[-1].items()), flush=True)
    stats = {name: gens[name].policy.stats() for name, _ in configs}
    data = {"command": " ".join(sys.argv), "machine": cpu_flags(), "target": a.target, "sets": a.sets,
            "n": a.n, "max_tokens": a.max_tokens, "variants": {n: vars(c) for n, c in configs},
            "rounds": rounds, "policy_stats": stats}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=1))
    names = list(gens)
    md = [f"# Policy A/B: {a.target}, {a.sets}, {a.n} prompts a set x {a.max_tokens} tokens", "",
          f"Machine: {data['machine']}", "", "Each configuration over the target alone: in the loop / whole requests.", "",
          "| round | target alone tok/s | " + " | ".join(names[1:]) + " |", "|---|---|" + "---|" * (len(names) - 1)]
    for i, rd in enumerate(rounds):
        md.append(f"| {i} | {rd['target_tok_s']} | "
                  + " | ".join(f"{rd[n]:.3f}x / {rd['whole'][n]:.3f}x" for n in names[1:]) + " |")
    mean = {n: sum(rd[n] for rd in rounds) / len(rounds) for n in names[1:]}
    wmean = {n: sum(rd["whole"][n] for rd in rounds) / len(rounds) for n in names[1:]}
    md.append("| mean | | " + " | ".join(f"**{mean[n]:.3f}x / {wmean[n]:.3f}x**" for n in names[1:]) + " |")
    a.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
