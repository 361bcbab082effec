"""How the cost policy's early stop would do against other stops, replayed on traces of fixed k = 4 (issue 41).

The cost policy caps a step at the length its per-position acceptance estimates predict fastest, then drafts
token by token and stops where drafting on is not predicted to beat stopping (``rules.drafting_pays``: every
further token projected as likely as the last one drafted).  Replayed: that ("now"), the early stop alone within
k, fixed lengths, and the stop projecting by each depth's observed acceptance.  This records,
for every step of a fixed k = 4 generation (held-out prompts, greedy), the acceptance predictor's p of each
drafted token (as the policy would see it, before the step updates it) and how many the target accepted, then
replays stops on those steps: each step's tokens are min(accepted, L) + 1 and its seconds T_verify(L + 1) +
L * T_draft for the length L a stop reaches, with the run's own measured pass times.  Steps are priced as if
independent (a shorter draft would shift later steps' positions): a ranking of stops, not a speed.

    python scripts/lab/stop_traces.py --target qwen2.5-coder-1.5b --sets humaneval,chat-fresh \\
        --out results/issue41/zen4-19/stop-traces.json
    python scripts/lab/stop_traces.py --replay results/issue41/zen4-19/stop-traces.json \\
        --t-verify 40.7,44.7,49.5,54.4,63.6 --out results/issue41/zen4-19/stop-replay-humaneval-costs.json

A run's own T_verify(2..4) come from the start-up timing where a fixed k = 4 never re-times them (on a noisy VM
they can read T(2) > T(4)): ``--t-verify`` prices the replay with a table measured elsewhere (ms, n = 1..5).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from omnidraft.assets.snapshot import load_set
from omnidraft.bench import runner
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import PolicyConfig, expected_tokens, seeded_policy
from omnidraft.speculative.rules import ACC_PRIOR, Drafted, StepCosts, drafting_pays

sys.path.insert(0, str(Path(__file__).parent))
from e2e_peer import cpu_flags  # noqa: E402
from policy_ab import prompt_args  # noqa: E402

K = 4


def record(gen) -> list[dict]:
    """Wrap ``gen.policy.observe`` so that every drafter step leaves (ps, accepted) in the returned list."""
    policy, steps = gen.policy, []
    observe = policy.observe

    def traced(step):
        if step.judged and step.drafted == step.proposed:  # drafter steps (lookup drafts cost no pass)
            steps.append({"p": [round(policy.predictor.predict(f), 4) for f in step.judged],
                          "p_top1": [round(f.p_top1, 4) for f in step.judged],
                          "accepted": step.judged_accepted, "proposed": step.proposed})
        observe(step)

    policy.observe = traced
    return steps


def stop_current(p: list[float], costs: StepCosts, p_min: float) -> int:
    """The length the cost policy's early stop reaches on these predicted ps (``rules.drafting_pays``)."""
    reach, expected = 1.0, 1.0
    for depth, pi in enumerate(p):
        reach *= pi
        expected += reach
        if depth + 1 == len(p):
            return len(p)
        d = Drafted(depth, _Feat(pi), pi, reach, expected)
        if not drafting_pays(d, p_min, costs):
            return depth + 1
    return len(p)


class _Feat:  # drafting_pays reads features.p_top1 only where no longer length is timed
    def __init__(self, p):
        self.p_top1 = p


def stop_depth_rates(p: list[float], costs: StepCosts, rates: list[float]) -> int:
    """The same comparison, each further token projected at the depth's observed conditional acceptance."""
    reach, expected = 1.0, 1.0
    t = costs.t_verify
    for depth, pi in enumerate(p):
        reach *= pi
        expected += reach
        n = depth + 1
        if n == len(p):
            return n
        now = expected / (t[n + 1] + n * costs.t_draft)
        tokens, r = expected, reach
        better = False
        for m in range(n + 1, len(p) + 1):
            r *= rates[m - 1]
            tokens += r
            if tokens / (t[m + 1] + m * costs.t_draft) > now:
                better = True
                break
        if not better:
            return n
    return len(p)


def capped(steps: list[dict], costs: StepCosts, td: float, p_min: float) -> list[int]:
    """The lengths of the loop's cost policy: its early stop within the length ``choose_k`` predicts fastest from
    per-position acceptance EMAs (``DraftPolicy.acc``, updated as ``observe`` does: censored at the first miss)."""
    t, acc, out = costs.t_verify, [ACC_PRIOR] * (K + 2), []
    for s in steps:
        k = max(range(1, K + 1), key=lambda n: expected_tokens(acc, n) / (t[n + 1] + n * td))
        L = stop_current(s["p"][:k], costs, p_min)
        a = min(s["accepted"], L)
        for i in range(L):
            acc[i] = 0.9 * acc[i] + 0.1 * (1.0 if i < a else 0.0)
            if i >= a:
                break
        out.append(L)
    return out


def price(steps: list[dict], lengths: list[int], t: list[float], td: float) -> float:
    """Target tokens per second over the steps at those lengths, as a multiple of the target alone's."""
    tokens = sum(min(s["accepted"], L) + 1 for s, L in zip(steps, lengths))
    secs = sum(t[L + 1] + L * td for L in lengths)
    return tokens / secs * t[1]


def replay(steps: list[dict], t: list[float], td: float, p_min: float) -> dict:
    costs = StepCosts(tuple(t), tuple(True for _ in t), td)
    reached = [sum(1 for s in steps if s["accepted"] >= m) for m in range(K + 1)]
    rates = [reached[m + 1] / reached[m] if reached[m] else 0.0 for m in range(K)]  # P(hit at m | reached m)
    out = {"rates": [round(r, 3) for r in rates], "steps": len(steps)}
    for L in range(1, K + 1):
        out[f"fixed {L}"] = price(steps, [L] * len(steps), t, td)
    cur = [stop_current(s["p"], costs, p_min) for s in steps]
    dep = [stop_depth_rates(s["p"], costs, rates) for s in steps]
    cap = capped(steps, costs, td, p_min)
    out["cost stop (now)"] = price(steps, cap, t, td)
    out["cost stop within k"] = price(steps, cur, t, td)
    out["cost stop, depth rates"] = price(steps, dep, t, td)
    out["lengths (now)"] = {L: cap.count(L) for L in range(1, K + 1)}
    out["lengths (within k)"] = {L: cur.count(L) for L in range(1, K + 1)}
    out["lengths (depth rates)"] = {L: dep.count(L) for L in range(1, K + 1)}
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def replay_file(src: Path, t_verify: str, out: Path) -> None:
    """The replay of an earlier run's traces, priced with ``t_verify`` (ms) where given, else with its own."""
    data = json.loads(src.read_text())
    res = {"source": str(src), "t_verify_ms": t_verify, "sets": {}}
    for name, v in data["sets"].items():
        ms = [float(x) for x in t_verify.split(",")] if t_verify else v["t_verify_ms"]
        res["sets"][name] = replay(v["steps"], [0.0] + [x / 1e3 for x in ms], v["t_draft_ms"] / 1e3,
                                   PolicyConfig().p_min)
        print(name, json.dumps(res["sets"][name]), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    prompt_args(ap)
    ap.add_argument("--t-verify", default="", help="ms of a target pass of n = 1..5 tokens, to price with")
    ap.add_argument("--replay", type=Path, help="replay the traces of an earlier --out file instead of generating")
    ap.add_argument("--out", type=Path, required=True, help="JSON file")
    a = ap.parse_args()
    if a.replay:
        return replay_file(a.replay, a.t_verify, a.out)
    session = Session(Settings(target=a.target, threads=0, n_ctx=4096, draft_n_ctx=4096, method="omnidraft"))
    ctx = runner.BenchContext(session)
    ctx.start_costs()
    cfg = PolicyConfig(name="fixed", k=K)
    gen = session.compose("hybrid", ctx.pair, seeded_policy(cfg, "hybrid", ctx.cost_for))
    params = GenerationParams(max_tokens=a.max_tokens)
    data = {"command": " ".join(sys.argv), "machine": cpu_flags(), "target": a.target, "sets": {}}
    for name in a.sets.split(","):
        steps = record(gen)
        for item in load_set(name).split("heldout")[: a.n]:
            gen.generate(gen.prompt_for(item.prompt, item.chat), params)
        gen.policy.observe = type(gen.policy).observe.__get__(gen.policy)
        t = [0.0] + [gen.policy.t_verify[n] for n in range(1, K + 2)]
        res = replay(steps, t, gen.policy.t_draft, PolicyConfig().p_min)
        data["sets"][name] = {"t_verify_ms": [round(1e3 * x, 2) for x in t[1:]],
                              "t_draft_ms": round(1e3 * gen.policy.t_draft, 2), "replay": res, "steps": steps}
        print(name, json.dumps(res), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
