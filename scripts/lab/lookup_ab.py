"""Free lookup drafts at their own length: the default against a variant, alternated per prompt (issue 41).

In the default, the cost policy's ``choose_k`` caps every draft of a step, prompt lookup's included, and where
it chooses 0 the lookup is not consulted at all: lookup drafts cost no drafter pass, only the target's extra
rows.  The variant (a lab patch of one generator, not product code) proposes a lookup match of up to
``--lookup-k`` tokens whatever ``choose_k`` says, and asks the model drafter only with the length ``choose_k``
chose.  Both run on the same prompts, the order rotated per prompt, several rounds; output must equal the
target alone's.

    python scripts/lab/lookup_ab.py --target qwen2.5-coder-1.5b --rounds 2 --out results/issue41/zen4-19/lookup-ab.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from omnidraft.assets.snapshot import load_set
from omnidraft.bench import runner
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.drafters import prompt_lookup
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import PolicyConfig, seeded_policy
from omnidraft.speculative.step import Draft

sys.path.insert(0, str(Path(__file__).parent))
from e2e_peer import cpu_flags  # noqa: E402
from policy_ab import prompt_args  # noqa: E402


def free_lookup(gen, lookup_k: int) -> dict:
    """Patch ``gen`` so that a lookup match is proposed at up to ``lookup_k`` tokens; returns its counters."""
    hybrid, policy, n = gen.drafter, gen.policy, {"lookup_steps": 0, "forced": 0}
    look, chosen = hybrid.lookup, {"k": 0}
    choose = policy.choose_k

    def choose_k(limit):
        chosen["k"] = choose(limit)
        has = bool(prompt_lookup(look.tokens, 1, look.max_ngram, look.min_ngram))
        if has and chosen["k"] == 0:
            n["forced"] += 1
        return max(chosen["k"], min(lookup_k, limit)) if has else chosen["k"]

    def draft(k, stop):
        free = look.draft(k, stop)
        if len(free.candidates):
            n["lookup_steps"] += 1
            return free
        return hybrid.model.draft(chosen["k"], stop) if chosen["k"] > 0 else Draft()

    policy.choose_k, hybrid.draft = choose_k, draft
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    prompt_args(ap)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--lookup-k", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True, help="JSON file")
    a = ap.parse_args()
    session = Session(Settings(target=a.target, threads=0, n_ctx=4096, draft_n_ctx=4096, method="omnidraft"))
    ctx = runner.BenchContext(session)
    ctx.start_costs()
    gens = {"target": session.compose("target", ctx.pair, seeded_policy(PolicyConfig(k=0), "target", ctx.cost_for))}
    for name in ("default", "free-lookup"):
        gens[name] = session.compose("hybrid", ctx.pair, seeded_policy(PolicyConfig(), "hybrid", ctx.cost_for))
    counters = free_lookup(gens["free-lookup"], a.lookup_k)
    params = GenerationParams(max_tokens=a.max_tokens)
    data = {"command": " ".join(sys.argv), "machine": cpu_flags(), "target": a.target, "sets": {}}
    for s in a.sets.split(","):
        items = load_set(s).split("heldout")[: a.n]
        rounds = []
        for r in range(a.rounds):
            tally = {name: [0, 0.0] for name in gens}
            outs = {name: [] for name in gens}
            for i, item in enumerate(items):
                names = list(gens)
                for name in names[i % 3:] + names[: i % 3]:
                    gen = gens[name]
                    final = gen.generate(gen.prompt_for(item.prompt, item.chat), params)
                    tally[name][0] += final.stats.completion_tokens
                    tally[name][1] += final.stats.generation_s
                    outs[name].append(final.token_ids)
            if any(outs[nm] != outs["target"] for nm in gens):
                raise SystemExit(f"{s} round {r}: output differs from the target alone's")
            speed = {nm: t / sec for nm, (t, sec) in tally.items()}
            rounds.append({nm: round(v / speed["target"], 4) for nm, v in speed.items()} |
                          {"target_tok_s": round(speed["target"], 2)})
            print(s, f"round {r}:", rounds[-1], counters, flush=True)
        data["sets"][s] = {"rounds": rounds, "mean": {nm: round(sum(rd[nm] for rd in rounds) / len(rounds), 4)
                                                      for nm in ("default", "free-lookup")}}
    data["counters"] = counters
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=1))
    print(json.dumps({s: v["mean"] for s, v in data["sets"].items()}))


if __name__ == "__main__":
    main()
