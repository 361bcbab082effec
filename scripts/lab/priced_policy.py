"""The cost policy on a priced clock: its decisions with the machine's drift replaced by a drift one can seed.

On a 2-core VM whose pace moves by 20 % within minutes, the same policy on the same prompts drafted mostly one
token a step in some `bench run`s and two or three in others (issue 41): what it decides depends on what it timed.
So an A/B of two policies on this VM needs many runs to tell 5 % apart.  Here the real models draft and verify (the
acceptance is real), but every time the policy observes is priced from one table: a target pass of n rows is T(n),
a drafter pass T_d(tokens read), times a drift seeded per run:
- start-up's cost model: each T(n) times its own lognormal factor (``--seed-noise``), as five timing rounds read it;
- the loop: a pace that wanders (AR(1) in log, stationary spread ``--drift``, correlation ``--memory`` steps) times a
  per-pass jitter (``--jitter``).
Every run gets a fresh policy seeded from its noisy start-up table; the same seeds give the same drift to each
version (run this script under each version's PYTHONPATH).  The result is the modelled speedup: the target alone's
priced time over the default's, the drift left out of the pricing (the table's own values), so what differs between
versions is only what they chose.  The output must equal the target alone's.

    PYTHONPATH=BACKEND python scripts/lab/priced_policy.py --sets humaneval --seeds 8 --out OUT.json
    python scripts/lab/priced_policy.py --compare BEFORE.json AFTER.json...    # paired by seed
    PYTHONPATH=BACKEND python scripts/lab/priced_policy.py --sets humaneval --first-seed 7 --seeds 1 --trace --out T

Long prompts (``--prompt-files``, raw text: long_context.py's) want the table of their context: the pass prices
there (``omnidraft.llama.ctxcost``'s points) and the drafter's pass in its window (draft_context.py), e.g. for
p2k's 2,262 tokens on the 2-core Zen 4, ``--t-verify 45,52.7,65.3,77.4,90,102.6,115.2,127.8 --t-draft
2.2,2.5,3.0,3.45``.  Their prompts are read once (each run after the first reuses the target's cache of it).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from omnidraft.llama.costmodel import speedup, t_of
from omnidraft.assets.snapshot import load_set
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig
from omnidraft.speculative.step import StepOutcome

sys.path.insert(0, str(Path(__file__).parent))
from policy_ab import prompt_args  # noqa: E402

# the 1.5B Q4_K_M and the shipped drafter on a 2-core Zen 4: the medians of 12 `bench run`s' cost models
# (results/issue41/zen4-33/hold-ab, d8)
T_VERIFY_MS = "34.7,37.2,42.5,48.2,53.4,59.6,72.6,80.9"
T_DRAFT_MS = "1.69,1.93,2.32,2.65"
OVERHEAD_MS = 0.6  # a step's translation and bookkeeping


class Clock:
    """The priced times one run's policy observes: the table, the run's drift, and what it modelled."""

    def __init__(self, t_verify: dict[int, float], t_draft: dict[int, float], rng: np.random.Generator,
                 drift: float, memory: float, jitter: float):
        self.tv, self.td, self.rng = t_verify, t_draft, rng  # seconds by tokens (costmodel.t_of extrapolates)
        self.rho = math.exp(-1.0 / memory)
        self.step_sd = drift * math.sqrt(1 - self.rho ** 2)
        self.jitter, self.log_pace = jitter, rng.normal(0, drift)
        self.modelled_s = 0.0  # the default's steps priced at the table (no drift)
        self.last = 0.0  # the last step's observed seconds

    def pace(self) -> float:
        self.log_pace = self.rho * self.log_pace + self.rng.normal(0, self.step_sd)
        return math.exp(self.log_pace + self.rng.normal(0, self.jitter))

    def price(self, step: StepOutcome, lag: int) -> StepOutcome:
        """``step`` with its seconds from the table, as observed under this run's drift."""
        verify = t_of(self.tv, step.proposed + 1)
        first = t_of(self.td, step.first_read or 1) if step.drafted else 0.0
        draft = first + max(step.drafted - 1, 0) * self.td[1]
        catchup = t_of(self.td, lag) if step.catchup_s > 0 and lag > 0 else 0.0
        self.modelled_s += verify + draft + catchup + OVERHEAD_MS * 1e-3
        p = self.pace()
        self.last = p * (verify + draft + catchup) + OVERHEAD_MS * 1e-3
        return StepOutcome(step.proposed, step.accepted, step.drafted, p * verify, p * draft, step.judged,
                           step.judged_accepted, p * catchup, step.first_read, p * first)


def priced(policy: DraftPolicy, clock: Clock) -> DraftPolicy:
    """Make ``policy`` observe ``clock``'s times instead of the wall clock's (this instance only)."""
    observe, observe_lap = policy.observe, policy.observe_lap
    policy.observe = lambda step: observe(clock.price(step, policy.lag))
    policy.observe_lap = lambda drafted, tokens, seconds: observe_lap(drafted, tokens, clock.last)
    return policy


def start_up(table: dict[int, float], rng: np.random.Generator, noise: float) -> dict[int, float]:
    """Start-up's timing of ``table`` (seconds by tokens), each size off by its own factor."""
    return {n: t * math.exp(rng.normal(0, noise)) for n, t in table.items()}


def seconds(ms: str) -> dict[int, float]:
    """A table given in ms for 1, 2, ... tokens, in seconds by tokens."""
    return {n + 1: float(x) * 1e-3 for n, x in enumerate(ms.split(","))}


def traced(policy: DraftPolicy) -> list[dict]:
    """Record, at each of ``policy``'s draft-length choices, the length and what chose it (this instance only)."""
    steps, choose = [], policy.choose_k

    def choose_k(limit: int) -> int:
        k, t1 = choose(limit), policy.t_verify[1]
        steps.append({"k": k, "acc": [round(x, 3) for x in policy.acc[:4]],
                      "acc_long": [round(x, 3) for x in policy.acc_long[:4]], "t1_ms": round(1e3 * t1, 2),
                      "ratio": [round(policy.t_verify[n] / t1, 3) if t1 else 0.0 for n in range(2, 6)],
                      "since_t1": policy._since_t1, "probe": policy._probing})
        return k

    policy.choose_k = choose_k
    return steps


def run_seed(session: Session, cache, items, params, seed: int, a) -> dict:
    rng = np.random.default_rng(seed)
    tv, td = seconds(a.t_verify), seconds(a.t_draft)
    clock = Clock(tv, td, rng, a.drift, a.memory, a.jitter)
    policy = DraftPolicy(PolicyConfig(name=a.policy, k=a.k))
    seed_td = start_up(td, rng, a.seed_noise)
    policy.seed_costs(start_up(tv, rng, a.seed_noise), seed_td[1], seed_td)
    trace = traced(policy) if a.trace else None
    session.pair.cache = copy.deepcopy(cache)  # each run starts from the same n-gram cache
    gen = session.compose("hybrid", session.pair, priced(policy, clock))
    outs, tokens = [], 0
    for item in items:
        final = gen.generate(gen.prompt_for(item.prompt, item.chat), params)
        outs.append(final.token_ids)
        tokens += final.stats.completion_tokens
    return {"seed": seed, "speedup": speedup(tokens, clock.modelled_s, tv[1] + OVERHEAD_MS * 1e-3),
            "tokens": tokens, "outputs": outs,
            "draft_lengths": dict(sorted(policy.lengths.items())), "t1_ms": round(policy.t_verify[1] * 1e3, 2),
            "acc_long": [round(x, 3) for x in policy.acc_long],
            **({"trace": trace} if trace is not None else {})}


def compare(base: Path, others: list[Path]) -> None:
    """Each of ``others`` against ``base``, run by run (same seed, same drift): the mean relative difference."""
    ref = json.loads(base.read_text())["sets"]
    for path in others:
        sets = json.loads(path.read_text())["sets"]
        for s, v in sets.items():
            a = {r["seed"]: r["speedup"] for r in ref[s]["runs"]}
            d = [r["speedup"] / a[r["seed"]] - 1 for r in v["runs"] if r["seed"] in a]
            se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
            print(f"{path.name} {s}: {v['mean']:.4f} against {ref[s]['mean']:.4f}, "
                  f"paired {100 * statistics.mean(d):+.2f} % (standard error {100 * se:.2f} %), "
                  f"ahead in {sum(x > 0 for x in d)} of {len(d)} runs")


def prompt_sets(a: argparse.Namespace):
    """(name, items) of each held-out set in ``--sets``, or of each ``--prompt-files`` file (a set of one)."""
    if a.prompt_files:
        for f in a.prompt_files:
            yield f.stem, [SimpleNamespace(prompt=f.read_text(), chat=False)]
        return
    for s in a.sets.split(","):
        yield s, load_set(s).split("heldout")[: a.n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", type=Path, nargs="+", metavar="JSON", help="BEFORE AFTER...: compare saved runs")
    prompt_args(ap)
    ap.add_argument("--t-verify", default=T_VERIFY_MS, help="ms of a target pass of 1, 2, ... tokens")
    ap.add_argument("--t-draft", default=T_DRAFT_MS, help="ms of a drafter pass reading 1, 2, ... tokens")
    ap.add_argument("--seeds", type=int, default=8, help="runs, each with its own drift")
    ap.add_argument("--first-seed", type=int, default=0, help="the first run's seed (the others follow)")
    ap.add_argument("--policy", default="cost", help="the draft-length rule (fixed: no timing decides)")
    ap.add_argument("-k", type=int, default=4, help="the longest draft")
    ap.add_argument("--seed-noise", type=float, default=0.05, help="spread of start-up's T(n), lognormal sd")
    ap.add_argument("--drift", type=float, default=0.10, help="spread of the loop's pace, lognormal sd")
    ap.add_argument("--memory", type=float, default=50.0, help="steps over which the pace keeps its drift")
    ap.add_argument("--jitter", type=float, default=0.03, help="each pass's own spread, lognormal sd")
    ap.add_argument("--trace", action="store_true", help="keep each step's length, estimates and T(n) / T(1)")
    ap.add_argument("--prompt-files", type=Path, nargs="+", metavar="TXT",
                    help="raw-text prompts (long_context.py's), each a set of one, instead of --sets")
    ap.add_argument("--out", type=Path, help="JSON file")
    a = ap.parse_args()
    if a.compare:
        return compare(a.compare[0], a.compare[1:])
    if a.out is None:
        ap.error("--out is required")
    # the table prices every pass: prices that follow the context would time the machine's passes instead
    session = Session(Settings(target=a.target, method="hybrid", context_prices=False))
    alone_gen = session.compose("target", None, DraftPolicy(PolicyConfig(k=0)))
    # a long prompt is read once, then reused: runs differ only in what comes after it
    params = GenerationParams(max_tokens=a.max_tokens, reuse_prefix=bool(a.prompt_files))
    cache = copy.deepcopy(session.pair.cache)
    data = {"command": " ".join(sys.argv), "table_ms": {"t_verify": a.t_verify, "t_draft": a.t_draft},
            "noise": {k: getattr(a, k) for k in ("seed_noise", "drift", "memory", "jitter")}, "sets": {}}
    for s, items in prompt_sets(a):
        ref = [alone_gen.generate(alone_gen.prompt_for(it.prompt, it.chat), params).token_ids for it in items]
        seeds = range(a.first_seed, a.first_seed + a.seeds)
        runs = [run_seed(session, cache, items, params, seed, a) for seed in seeds]
        for r in runs:
            if r.pop("outputs") != ref:
                raise SystemExit(f"{s} seed {r['seed']}: output differs from the target alone's")
            print(s, {k: v for k, v in r.items() if k != "trace"}, flush=True)
        sp = [r["speedup"] for r in runs]
        data["sets"][s] = {"runs": runs, "mean": statistics.mean(sp), "min": min(sp), "max": max(sp)}
        print(f"{s}: modelled speedup mean {statistics.mean(sp):.3f} [{min(sp):.3f}-{max(sp):.3f}]", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
