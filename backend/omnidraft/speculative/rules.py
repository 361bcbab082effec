"""The draft-length rules a ``DraftPolicy`` (policy.py) applies, and the values they are handed.

* ``fixed``     - always k (stopping early only at an end-of-generation token).
* ``threshold`` - up to k, stopping when the drafter's top-1 probability falls below p_min.
* ``gamma``     - the paper's rule: stop when 1 - prod(P_i) > gamma, P_i from the online
  acceptance predictor (predictor.py).
* ``cost``      - (default) per drafted token, keep drafting while one more token raises the
  expected tokens per second, from the predictor's P_i and the timings measured online
  (T_verify(n), T_draft).  Before drafting, a draft length is chosen from the same cost
  model and the acceptance observed per draft position; when no length beats the target
  alone it drafts nothing, probing now and then so that it notices when speculation starts
  paying again, as often as a budget of ``probe_budget`` of the time allows: probes lose at
  most that against the target alone.

A rule is a strategy: it reads values (``PolicyConfig``, ``StepCosts``, ``Drafted``, ``Outlook``) and returns
values (a bool, a ``Choice``, a note); it never calls back into the policy that owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .predictor import DraftFeatures

ACC_PRIOR = 0.7  # the optimistic start of the acceptance estimates: drafting is tried before it is judged


@dataclass
class PolicyConfig:
    name: str = field(default="cost", metadata={"help": "fixed | threshold | gamma | cost"})
    k: int = field(default=4, metadata={"help": "maximum draft length"})
    p_min: float = field(default=0.3, metadata={"help": "stop drafting below this drafter top-1 probability"})
    probe_every: int = field(default=16, metadata={
        "help": "cost policy: fewest steps between probes when not drafting"})
    probe_budget: float = field(default=0.005, metadata={
        "help": "cost policy: the share of the time its probes may lose while drafting does not pay"})
    # the model's own error: drafting steps measured 0.98-0.99 of their prediction on the AVX2 path, where
    # acceptance hovering at break-even (69 % for one token) drafted at a predicted 1.00x and lost 2 %
    margin: float = field(default=0.02, metadata={
        "help": "cost policy: draft only where predicted to beat the target alone by this share"})
    gamma: float = field(default=0.6, metadata={"help": "gamma policy: stop when 1 - prod(P_i) exceeds this"})


@dataclass(frozen=True)
class StepCosts:
    """The measured times a step's early stop weighs, as they stood at the step's start."""

    t_verify: tuple[float, ...]  # seconds of a target pass of n tokens, by n
    timed: tuple[bool, ...]  # whether T_verify(n) was measured, by n
    t_draft: float  # seconds of a one-token drafter pass: a drafted token
    t_first: float = 0.0  # what the step's first pass costs beyond one token (it reads the target's last tokens)


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
    now = d.expected / (c.t_verify[n + 1] + n * c.t_draft + c.t_first)
    tokens, reach = d.expected, d.reach
    for m in range(n + 1, len(c.t_verify) - 1):
        if not c.timed[m + 1]:
            break
        reach *= d.p
        tokens += reach
        if tokens / (c.t_verify[m + 1] + m * c.t_draft + c.t_first) > now:
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
    probe_due: bool = False  # the probes' budget covers one more (policy.py: DraftPolicy.probe_due)
    margin: float = 0.0  # a timed length must beat the target alone's predicted speed by this share to be paid
    gains: tuple[float, ...] = ()  # (notes only) predicted speedup over the target alone per draft length
    first_acceptance: float = ACC_PRIOR  # (notes only) the estimate for the first drafted token
    measured: bool = False  # (notes only) some step has drafted
    guard_note: str = ""  # (notes only) why the rate guard stopped drafting, "" while it has not
    long_speeds: tuple[float, ...] = ()  # ``speeds`` at the long-run acceptance (policy.py: acc_long); () not weighed
    # drafting again after a pause repays the drafter's reading of what was written meanwhile (``_resume_pays``)
    resume: bool = True


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

    def reads_prompt(self, o: Outlook) -> bool:
        """Whether a request should start with the drafter reading the prompt: where it will draft."""
        return o.k > 0


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
        if best := self._paid(o):
            return Choice(best, paid=True)
        # probe: keep the acceptance estimate alive, as often as the policy's budget for probing allows (each
        # probe makes the drafter catch up on everything written meanwhile and verifies a row that may not pay)
        return Choice(1, probe=True) if o.probe_due else Choice(0)

    def reads_prompt(self, o: Outlook) -> bool:
        """Only where some length is predicted to pay (or nothing is timed yet): a probe pays the prompt's reading
        when it comes, the request's start need not."""
        if o.k <= 0 or not o.allowed:
            return False
        return not o.calibrated or (o.ceiling >= 1.0 and self._paid(o) > 0)

    @staticmethod
    def _paid(o: Outlook) -> int:
        """The fastest predicted length where it beats the target alone by the margin (or was never timed), at the
        recent acceptance and at the long-run one.  The recent estimate alone, where drafting breaks even near
        the drafter's usual acceptance (a 2-core Zen 1 EPYC: T(2) 1.5-1.6 decodes, break-even at 56-67 % for one
        drafted token, held-out HumanEval 54-66 % kept), drafted after each lucky run and at every request's
        start (leaned to the prior): 0.97-0.99x the target alone.

        Of the lengths both estimates pay for, the fastest at the recent one.  Only the recent estimate's fastest
        was weighed, and where the long-run estimate did not pay for that one, nothing was drafted: on sampled
        chat (1.5B, temperature 1, 2-core Zen 5) the long-run acceptance paid 1.13x for one drafted token and
        1.01x for four, the recent one 1.2-1.6x, rising with the draft (first token 44-64 %, the next ones
        66-70 % once it was kept); four were the recent estimate's fastest, so the policy drafted nothing for
        three whole requests (192 steps) while the drafter's growing lag priced out the probes."""
        best = best_length(o.speeds, o.timed)
        if best <= 0 or not o.timed[best]:
            return best
        if not o.resume:
            return 0
        bar = (1.0 + o.margin) * o.speeds[0]
        paid = [n for n in range(1, len(o.speeds))
                if o.speeds[n] >= bar and (not o.long_speeds or o.long_speeds[n] >= bar)]
        return max(paid, key=lambda n: o.speeds[n], default=0)

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
        if gain >= 1.0 + o.margin:
            return (f"the cost policy drafted where it predicts a gain "
                    f"(predicted {gain:.2f}x at draft length {best})")
        acc = (f"first drafted token accepted {o.first_acceptance:.0%} of the time" if o.measured
               else f"assuming {o.first_acceptance:.0%} acceptance, none measured yet")
        verdict = (f"predicted to gain too little here ({gain:.2f}x at best, under its {o.margin:.0%} margin"
                   if gain >= 1.0 else f"predicted to be slower here ({gain:.2f}x at best")
        return f"the cost policy mostly ran the target alone, drafting is {verdict}, {acc}); it probes now and then"


RULES: dict[str, Rule] = {"fixed": Fixed(), "threshold": Threshold(), "gamma": Gamma(), "cost": Cost()}
POLICIES = tuple(RULES)


def expected_tokens(acc: list[float], k: int) -> float:
    """Expected target tokens of a step verifying k candidates, candidate i kept with P ``acc[i]`` once i-1 was."""
    tokens, reach = 1.0, 1.0
    for a in acc[:k]:
        reach *= a
        tokens += reach
    return tokens
