"""The cost policy's drafting steps on one held-out set, as `bench run` runs its default configuration (a fresh
policy, seeded with the run's timing rounds; 6 prompts x 64 tokens): per prompt, the steps that drafted, what
they kept and the policy's timings; per step that drafted, its acceptance estimates and probe budget; and the
target passes' measured times by size against the cost model's (issue 41: a run whose two-token passes cost
2.0 decodes where the model said 1.47).

With ``--steps --all`` every step is printed with the predicted speedup of each draft length and the drafter's lag,
and each request's start with why the drafter read its prompt or not (issue 43: a 30-layer drafter whose pauses
kept themselves going).

    .venv/bin/python scripts/lab/policy_trace.py --target qwen2.5-coder-0.5b --set humaneval [--steps [--all]]
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))
from omnidraft.assets import snapshot  # noqa: E402
from omnidraft.bench import runner  # noqa: E402
from omnidraft.runtime.session import Session  # noqa: E402
from omnidraft.runtime.settings import Settings  # noqa: E402
from omnidraft.speculative.generator import GenerationParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="qwen2.5-coder-0.5b")
    ap.add_argument("--draft", default="smollm2-135m-d8-qwen:q4_0_pure+fr")
    ap.add_argument("--set", default="humaneval", help="held-out prompt set")
    ap.add_argument("--steps", action="store_true", help="print every drafting step's policy state")
    ap.add_argument("--all", action="store_true", help="with --steps: every step's, with its predicted speedups")
    ap.add_argument("--n", type=int, default=6, help="requests, cycling the set's held-out prompts")
    ap.add_argument("--temperature", type=float, default=0.0, help="sampled requests at this temperature")
    ap.add_argument("--seed", type=int, default=0, help="with --temperature: request i's seed is seed + i")
    args = ap.parse_args()
    session = Session(Settings(target=args.target, draft=args.draft, method="omnidraft"))
    ctx = runner.BenchContext(session)
    ctx.start_costs()
    cfg = runner.Config("hybrid", 4, "cost")
    gen, log = ctx.generator(cfg), []
    pol, choose = gen.policy, gen.policy.choose_k

    def traced(limit: int) -> int:  # the policy's state at each step that drafts
        k = choose(limit)
        if k or args.all:
            speeds = [round(pol.expected_speed(n) * pol.t_verify[1], 3) for n in range(min(limit, 4) + 1)]
            log.append(dict(step=pol.steps, k=k, probe=pol._probing, acc=[round(a, 2) for a in pol.acc[:3]],
                            acc_long=[round(a, 2) for a in pol.acc_long[:2]], credit_ms=round(pol.credit * 1e3, 1),
                            lag=pol.lag, predicted=speeds, guard_alone=pol.guard.stats.alone_steps,
                            guard_blocked=pol.guard.stats.blocked_steps, guard_ratio=pol.guard.stats.last_ratio,
                            guard_rates=pol.guard.stats.last_rates, spells=pol.guard.stats.spells))
        return k
    pol.choose_k = traced
    real_begin = pol.begin_request

    def begin(unread: int = 0, expected: int = 0) -> bool:  # why a request's start reads its prompt or not
        read = real_begin(unread, expected)
        o = pol._outlook(pol.cfg.k, note=True)
        log.append(dict(step=pol.steps, begin=read, unread=unread, expected=expected, paid=pol.rule.reads_prompt(o),
                        speeds=[round(x * pol.t_verify[1], 3) for x in o.speeds],
                        long_speeds=[round(x * pol.t_verify[1], 3) for x in o.long_speeds],
                        catchup_ms=round(pol.catchup_cost(unread) * 1e3, 1), k=0, probe=False))
        return read
    pol.begin_request = begin
    by_rows: dict[int, list[float]] = collections.defaultdict(list)
    items = snapshot.load_set(args.set).split("heldout")
    for i in range(args.n):
        item = items[i % len(items)]
        prompt = gen.prompt_for(item.prompt, item.chat)
        params = GenerationParams(max_tokens=64, temperature=args.temperature, seed=args.seed + i)
        n0, final = len(log), gen.generate(prompt, params)
        drafted = [s.accepted for s in final.steps if s.proposed]
        n_probes = sum(r["probe"] for r in log[n0:] if r["k"])
        for s in final.steps:
            by_rows[s.proposed + 1].append(s.target_s)
        print(f"request {i}: prompt of {len(prompt.target_ids)} tokens: {len(drafted)} drafting steps kept {sum(drafted)}, "
              f"{n_probes} probes; T(1..3) "
              f"{[round(x * 1e3, 1) for x in pol.t_verify[1:4]]} ms, drafter {pol.t_draft * 1e3:.2f} ms a token")
    if args.steps:
        for r in log:
            print(r)
    model = ctx.cost_for(cfg)
    for n, v in sorted(by_rows.items()):
        print(f"{n}-token passes: {len(v)}, median {statistics.median(v) * 1e3:.1f} ms "
              f"(cost model {model.t_verify[n] * 1e3:.1f})")


if __name__ == "__main__":
    main()
