"""How many tokens to draft.

* ``fixed``     - always k (stopping early only at an end-of-generation token).
* ``threshold`` - up to k, stopping when the drafter's top-1 probability falls below p_min.
* ``gamma``     - the paper's rule: stop when 1 - prod(P_i) > gamma, P_i from the online
  acceptance predictor (predictor.py).
* ``cost``      - (default) per drafted token, keep drafting while one more token raises the
  expected tokens per second, from the predictor's P_i and the timings measured online
  (T_verify(n), T_draft).  Before drafting, a draft length is chosen from the same cost
  model and the acceptance observed per draft position; when no length beats the target
  alone it drafts nothing, probing now and then (with back-off) so that it notices when
  speculation starts paying again: never slower than the target alone.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace
from typing import Callable

from omnidraft.llama.costmodel import CostModel, speedup
from .guard import RateGuard
from .predictor import AcceptancePredictor, DraftFeatures
from .step import StepOutcome

ACC_PRIOR = 0.7  # the optimistic start of the acceptance estimates: drafting is tried before it is judged
LONG_RUN = 200  # candidates per position the long-run acceptance averages over (stretches of text: ~12 steps)
PRIOR_RUN = 20  # the prior's weight in it, in candidates: a first trial of six steps does not decide it alone


@dataclass
class PolicyConfig:
    name: str = field(default="cost", metadata={"help": "fixed | threshold | gamma | cost"})
    k: int = field(default=4, metadata={"help": "maximum draft length"})
    p_min: float = field(default=0.3, metadata={"help": "stop drafting below this drafter top-1 probability"})
    probe_every: int = field(default=16, metadata={"help": "cost policy: steps between probes when not drafting"})
    gamma: float = field(default=0.6, metadata={"help": "gamma policy: stop when 1 - prod(P_i) exceeds this"})


@dataclass(frozen=True)
class StepCosts:
    """The measured times a step's early stop weighs, as they stood at the step's start."""

    t_verify: tuple[float, ...]  # seconds of a target pass of n tokens, by n
    timed: tuple[bool, ...]  # whether T_verify(n) was measured, by n
    t_draft: float  # seconds per drafter token


@dataclass(frozen=True)
class Drafted:
    """One drafted token as a rule judges it: its depth (0-based), its features and, for rules that predict,
    its predicted acceptance ``p`` and this step's running products with it included."""

    depth: int
    features: DraftFeatures
    p: float = 1.0
    reach: float = 1.0  # prod of predicted P_i over the tokens drafted so far in this step
    expected: float = 1.0  # 1 + sum of reaches: expected target tokens of this step


class StopRule:
    """One step's early stop, handed to the drafter: ``keep_going(depth, features)`` after each drafted token.

    Built by ``DraftPolicy.stop_rule()`` from what the policy knows at the start of the step (its rule,
    the predictor, the measured pass times); it keeps only this step's running products, and hands its
    rule values (``Drafted``, ``StepCosts``), never itself."""

    def __init__(self, cfg: PolicyConfig, predict: Callable[[DraftFeatures], float], costs: StepCosts):
        self.cfg, self.predict, self.costs = cfg, predict, costs
        self.rule = RULES[cfg.name]
        self.reach = 1.0
        self.expected = 1.0

    def keep_going(self, depth: int, f: DraftFeatures) -> bool:
        """After drafting the token at ``depth`` (0-based): draft another one?"""
        p = 1.0
        if self.rule.predicts:
            p = self.predict(f)
            self.reach *= p
            self.expected += self.reach
        return self.rule.keep_going(Drafted(depth, f, p, self.reach, self.expected), self.cfg, self.costs)


def drafting_pays(d: Drafted, p_min: float, c: StepCosts) -> bool:
    """Does drafting on after ``d`` (each further token assumed as likely as it, ``d.p``) beat stopping here?"""
    # Every longer timed length is compared, not just the next: T_verify(n) need not grow with n (the
    # repacked Q4_0 GEMM makes a 4-token pass cheaper than a 3-token one), and a one-step look would
    # stop before the cheap size.
    n = d.depth + 1
    if n + 2 >= len(c.t_verify) or not c.timed[n + 2] or not c.timed[n + 1]:
        return d.features.p_top1 >= p_min  # no timing for a longer batch yet: confidence rule
    now = d.expected / (c.t_verify[n + 1] + n * c.t_draft)
    tokens, reach = d.expected, d.reach
    for m in range(n + 1, len(c.t_verify) - 1):
        if not c.timed[m + 1]:
            break
        reach *= d.p
        tokens += reach
        if tokens / (c.t_verify[m + 1] + m * c.t_draft) > now:
            return True
    return False


@dataclass(frozen=True)
class Outlook:
    """What a policy knows before a step (or, for its note, at the end of a request), handed to its rule."""

    k: int  # the longest draft this step may have
    allowed: bool = True  # the rate guard lets this step draft (asked only by rules that weigh costs)
    calibrated: bool = False  # a one-token target pass and a drafter token have been timed
    ceiling: float = float("inf")  # best speedup over the target alone at 100 % acceptance
    speeds: tuple[float, ...] = ()  # predicted target tokens/s per draft length 0..k (0.0: not timed)
    timed: tuple[bool, ...] = ()  # per draft length 0..k: a target pass of its rows has been timed
    probe_due: bool = False  # steps since the last probe reached the back-off gap
    gains: tuple[float, ...] = ()  # (notes only) predicted speedup over the target alone per draft length
    first_acceptance: float = ACC_PRIOR  # (notes only) the estimate for the first drafted token
    measured: bool = False  # (notes only) some step has drafted
    guard_note: str = ""  # (notes only) why the rate guard stopped drafting, "" while it has not


@dataclass(frozen=True)
class Choice:
    """A rule's draft length for one step; ``paid``: a length predicted to gain; ``probe``: one drafted token
    only to keep the estimates alive (the policy backs its probes off)."""

    k: int
    paid: bool = False
    probe: bool = False


def best_length(speeds: tuple[float, ...], timed: tuple[bool, ...]) -> int:
    """The fastest predicted draft length; a length never timed is tried first, so the cost model fills in."""
    for k in range(1, len(speeds)):
        if not timed[k]:
            return k
    return max(range(len(speeds)), key=lambda k: speeds[k])


class Rule:
    """One draft-length rule: when a step stops drafting early (``keep_going``), how long a step may be
    (``choose``) and why, in words (``note``), each from values the policy hands over.  The four register by
    name in ``RULES``; a policy looks its rule up by ``cfg.name`` at each use."""

    name = ""
    predicts = False  # whether keep_going needs the predictor's P_i (Drafted.p, reach, expected)
    seeded_with_costs = False  # starts from the measured cost model; ``choose`` gets a full Outlook (else k)

    def keep_going(self, d: Drafted, cfg: PolicyConfig, costs: StepCosts) -> bool:
        return True

    def choose(self, o: Outlook) -> Choice:
        return Choice(max(o.k, 0))

    def note(self, o: Outlook) -> str:
        return f"the {self.name} policy drafts up to {o.k} tokens every step"


class Fixed(Rule):
    """Always k (stopping early only at an end-of-generation token)."""

    name = "fixed"


class Threshold(Rule):
    """Up to k, stopping when the drafter's top-1 probability falls below p_min."""

    name = "threshold"

    def keep_going(self, d: Drafted, cfg: PolicyConfig, costs: StepCosts) -> bool:
        return d.features.p_top1 >= cfg.p_min


class Gamma(Rule):
    """The paper's rule: stop when 1 - prod(P_i) > gamma."""

    name, predicts = "gamma", True

    def keep_going(self, d: Drafted, cfg: PolicyConfig, costs: StepCosts) -> bool:
        return 1.0 - d.reach <= cfg.gamma


class Cost(Rule):
    """Keep drafting while one more token raises the expected tokens per second; choose k likewise."""

    name, predicts, seeded_with_costs = "cost", True, True

    def keep_going(self, d: Drafted, cfg: PolicyConfig, costs: StepCosts) -> bool:
        return drafting_pays(d, cfg.p_min, costs)

    def choose(self, o: Outlook) -> Choice:
        """The fastest predicted length, probing now and then when none pays."""
        if o.k <= 0 or not o.allowed:
            return Choice(0)
        if not o.calibrated:
            return Choice(o.k)
        if o.ceiling < 1.0:
            return Choice(0)  # even if every drafted token were accepted, this machine would be slower: never probe
        best = best_length(o.speeds, o.timed)
        if best > 0:
            return Choice(best, paid=True)
        # probe: keep the acceptance estimate alive; the policy backs off while speculation keeps losing,
        # since each probe makes the drafter catch up on everything written meanwhile
        return Choice(1, probe=True) if o.probe_due else Choice(0)

    def note(self, o: Outlook) -> str:
        """What its timings and acceptance predicted."""
        timed = [n for n in range(1, o.k + 1) if o.timed[n]]
        if not o.calibrated or not timed:
            return "the cost policy had no timings yet: it drafted to measure them"
        if o.guard_note:
            return o.guard_note
        if o.ceiling < 1.0:
            return (f"the cost policy ran the target alone, it is faster on this machine "
                    f"(predicted {o.ceiling:.2f}x at best, even with every drafted token accepted)")
        best = max(timed, key=lambda n: o.speeds[n])
        gain = o.gains[best]
        if gain > 1.0:
            return (f"the cost policy drafted where it predicts a gain "
                    f"(predicted {gain:.2f}x at draft length {best})")
        acc = (f"first drafted token accepted {o.first_acceptance:.0%} of the time" if o.measured
               else f"assuming {o.first_acceptance:.0%} acceptance, none measured yet")
        return (f"the cost policy mostly ran the target alone, drafting is predicted to be slower here "
                f"({gain:.2f}x at best, {acc}); it probes now and then")


RULES: dict[str, Rule] = {"fixed": Fixed(), "threshold": Threshold(), "gamma": Gamma(), "cost": Cost()}
POLICIES = tuple(RULES)


class DraftPolicy:
    def __init__(self, cfg: PolicyConfig, predictor: AcceptancePredictor | None = None):
        if cfg.name not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, not {cfg.name!r}")
        if cfg.k < 0:
            raise ValueError("k must be >= 0")
        self.cfg = cfg
        self.predictor = predictor or AcceptancePredictor()
        self.lengths: dict[int, int] = {}  # drafted-token count per step -> steps
        n = cfg.k + 2
        self.t_verify = [0.0] * (n + 1)  # EMA seconds of a target pass of n tokens
        self.n_verify = [0] * (n + 1)
        # T(n) / T(1) from a seeded cost model, for sizes this session has not timed itself: a pass's
        # cost grows with the context, so these follow the live T(1) instead of staying at start-up values
        self._seeded_ratio: dict[int, float] = {}
        self.t_draft = 0.0  # EMA seconds per drafter token
        self.n_draft = 0
        self.acc = [ACC_PRIOR] * n  # EMA P(candidate i accepted | i-1 accepted), optimistic start
        # the same over the long run, for the guard's tokens of a drafting step: a mean of the last ~LONG_RUN
        # candidates at a position, starting as if PRIOR_RUN of them had been kept at ACC_PRIOR
        self.acc_long, self.n_long = [ACC_PRIOR] * n, [PRIOR_RUN] * n
        self._proposed = 0  # the latest observed step's candidates
        self.steps = 0
        self._last_probe = 0
        self._gap = cfg.probe_every
        self.chosen: collections.deque[int] = collections.deque(maxlen=4096)  # recent draft lengths only
        self.guard = RateGuard()  # the cost rule's check of its model against the pace it achieves

    def begin_request(self) -> None:
        """A new request: how much of a draft the target keeps depends on what is being written (a prompt in
        Japanese after one in Spanish), so the acceptance estimates lean halfway back to the prior and probing
        starts again at its shortest gap.  Without this, one request where drafting lost left the estimate
        where no draft length paid, and probes that backed off to 1,024 steps never corrected it: the default
        ran 0.96x the target alone on 12 man pages in rotating languages, where fixed k = 4 ran 1.18x."""
        self.acc = [0.5 * a + 0.5 * ACC_PRIOR for a in self.acc]
        self._gap, self._last_probe = self.cfg.probe_every, self.steps

    # ------------------------------------------------------------- decisions
    def cap(self, limit: int) -> int:
        """The longest draft this step may have: the policy's k within the generator's ``limit``."""
        return min(self.cfg.k, limit)

    @property
    def rule(self) -> Rule:
        return RULES[self.cfg.name]

    def choose_k(self, limit: int) -> int:
        self.steps += 1
        k = self.cap(limit)
        rule = self.rule
        c = rule.choose(self._outlook(k) if rule.seeded_with_costs else Outlook(k))
        if c.paid:
            self._gap = self.cfg.probe_every
        if c.probe:
            self._last_probe, self._gap = self.steps, min(self._gap * 2, 1024)
        return c.k

    def _outlook(self, k: int, note: bool = False) -> Outlook:
        """What the cost rule weighs; the guard is asked (which counts its steps) only for a step's choice."""
        if not note and (k <= 0 or not self.guard.allows_drafting()):
            return Outlook(k, allowed=False)
        if not self._calibrated() and not note:
            return Outlook(k)
        timed = tuple(n == 0 or self.n_verify[n + 1] > 0 for n in range(k + 1))
        o = Outlook(k, True, self._calibrated(), self.ceiling(k),
                    tuple(self.expected_speed(n) if t else 0.0 for n, t in enumerate(timed)), timed,
                    self.steps - self._last_probe >= self._gap)
        if not note:
            return o
        gains = tuple(speedup(*self._expected_tokens_cost(n), self.t_verify[1]) for n in range(k + 1))
        return replace(o, gains=gains, first_acceptance=self.acc[0], measured=any(self.chosen),
                       guard_note=self._guard_note())

    def _guard_note(self) -> str:
        g = self.guard
        if not g.losing():
            return ""
        rates = g.stats.last_rates  # None only in a verdict resumed from before the rates were kept
        seen = "by an earlier process" if rates is None else f"{rates[0]:.0f} against {rates[1]:.0f} tokens/s" \
            + (", kept from an earlier process" if g.stats.resumed else "")
        return (f"the cost policy stopped drafting: its drafting steps ran at {g.stats.last_ratio:.2f}x the pace "
                f"of the target alone, as measured ({seen}), although its cost model predicted a gain")

    def stop_rule(self) -> StopRule:
        """This step's early stop for the drafter (``StopRule.keep_going``)."""
        return StopRule(self.cfg, self.predictor.predict,
                        StepCosts(tuple(self.t_verify), tuple(n > 0 for n in self.n_verify), self.t_draft))

    def expected_speed(self, k: int) -> float:
        """Predicted target tokens per second at draft length k (0 = target alone)."""
        tokens, cost = self._expected_tokens_cost(k)
        return tokens / cost if cost > 0 else 0.0

    def _expected_tokens_cost(self, k: int) -> tuple[float, float]:
        """(expected target tokens, seconds) of a step drafting k tokens."""
        tokens, reach = 1.0, 1.0
        for i in range(k):
            reach *= self.acc[i]
            tokens += reach
        return tokens, self.t_verify[k + 1] + k * self.t_draft

    def ceiling(self, k_max: int) -> float:
        """Best speedup over the target alone at 100 % acceptance, from the measured timings."""
        base = self.t_verify[1]
        best = 0.0
        for k in range(1, k_max + 1):
            if self.n_verify[k + 1]:
                best = max(best, speedup(k + 1, self.t_verify[k + 1] + k * self.t_draft, base))
        return best if best else float("inf")  # nothing measured yet: do not rule speculation out

    def note(self, limit: int) -> str:
        """Why this policy drafts or not, in words, from what it knows now (for the summary line)."""
        k = self.cap(limit)
        if k <= 0:
            return "no room to draft (draft length 0)"
        return self.rule.note(self._outlook(k, note=True))

    def _calibrated(self) -> bool:
        return self.n_verify[1] > 0 and self.n_draft > 0

    # ----------------------------------------------------------- observations
    def observe(self, step: StepOutcome) -> None:
        """Learn from one verified step: pass times, acceptance per position, and (per drafted token,
        tokens after the first rejection censored) the acceptance predictor."""
        n = step.proposed + 1
        if n < len(self.t_verify):
            self.t_verify[n] = _ema(self.t_verify[n], step.verify_s, self.n_verify[n])
            self.n_verify[n] += 1
            self._seeded_ratio.pop(n, None)
            if n == 1:
                for m, r in self._seeded_ratio.items():
                    self.t_verify[m] = r * self.t_verify[1]
        if step.drafted:
            self.t_draft = _ema(self.t_draft, step.draft_s / step.drafted, self.n_draft)
            self.n_draft += 1
            self.lengths[len(step.judged)] = self.lengths.get(len(step.judged), 0) + 1
        if step.judged:
            self.predictor.update(list(step.judged), step.judged_accepted)
        for i in range(min(step.proposed, len(self.acc))):
            hit = 1.0 if i < step.accepted else 0.0
            self.acc[i] = 0.9 * self.acc[i] + 0.1 * hit
            self.n_long[i] += 1
            self.acc_long[i] += (hit - self.acc_long[i]) / min(self.n_long[i], LONG_RUN)
            if not hit:
                break
        self.chosen.append(step.proposed)
        self._proposed = step.proposed

    def observe_lap(self, drafted: bool, tokens: int, seconds: float) -> None:
        """A step's wall time from its start to the next step's (the loop's share included), for the guard.

        A drafting step is credited the tokens its draft length yields at the long-run acceptance, not the
        tokens it got: the guard checks what the cost model's timings missed (issue 28), and a trial of six steps
        inside a stretch of text the drafter does not know would otherwise read as a slow machine.  On HumanEval
        (1.5B Q4_K_M, exact kernels, 2-core Zen 4) such trials stopped drafting for 170 of ~250 steps: 0.94x the
        target alone where fixed k = 4 ran 1.20x (results/issue41/e2e-peer-zmm, round 2)."""
        if drafted and self._proposed:
            tokens = self._long_run_tokens(self._proposed)
        self.guard.observe(drafted, tokens, seconds)

    def _long_run_tokens(self, proposed: int) -> float:
        """Expected target tokens of a step verifying ``proposed`` candidates, at the long-run acceptance."""
        tokens, reach = 1.0, 1.0
        for i in range(min(proposed, len(self.acc_long))):
            reach *= self.acc_long[i]
            tokens += reach
        return tokens

    def stats(self) -> dict:
        return {"policy": self.cfg.name, "draft_lengths": dict(sorted(self.lengths.items())),
                "calibration": self.predictor.calibration(),
                "position_acceptance": [round(a, 3) for a in self.acc], "guard": self.guard.summary()}

    def seed_costs(self, t_verify: dict[int, float], t_draft: float) -> None:
        """Start from a measured cost model instead of learning it from scratch."""
        for n, t in t_verify.items():
            if n < len(self.t_verify):
                self.t_verify[n], self.n_verify[n] = t, max(self.n_verify[n], 1)
                if n > 1 and t_verify.get(1):
                    self._seeded_ratio[n] = t / t_verify[1]
        self.t_draft, self.n_draft = t_draft, max(self.n_draft, 1)


def seeded_policy(cfg: PolicyConfig, method: str, costs: Callable[[], CostModel],
                  predictor: AcceptancePredictor | None = None) -> DraftPolicy:
    """A policy for ``method``; the cost policy of a drafting method starts from ``costs()`` (called only
    then), with free drafting for prompt lookup."""
    policy = DraftPolicy(cfg, predictor)
    if RULES[cfg.name].seeded_with_costs and method != "target":
        cm = costs()
        policy.seed_costs(cm.t_verify, cm.t_draft if method != "prompt-lookup" else 0.0)
    return policy


def _ema(old: float, new: float, count: int, alpha: float = 0.2) -> float:
    return new if count == 0 else (1 - alpha) * old + alpha * new
