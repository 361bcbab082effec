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
from dataclasses import dataclass, field
from typing import Callable

from omnidraft.llama.costmodel import CostModel, speedup
from .guard import RateGuard
from .predictor import AcceptancePredictor, DraftFeatures

ACC_PRIOR = 0.7  # the optimistic start of the acceptance estimates: drafting is tried before it is judged


@dataclass
class PolicyConfig:
    name: str = field(default="cost", metadata={"help": "fixed | threshold | gamma | cost"})
    k: int = field(default=4, metadata={"help": "maximum draft length"})
    p_min: float = field(default=0.3, metadata={"help": "stop drafting below this drafter top-1 probability"})
    probe_every: int = field(default=16, metadata={"help": "cost policy: steps between probes when not drafting"})
    gamma: float = field(default=0.6, metadata={"help": "gamma policy: stop when 1 - prod(P_i) exceeds this"})


@dataclass(frozen=True)
class StepOutcome:
    """What the policy learns from one verified step (Generator._step hands it over once)."""

    proposed: int  # candidates the target verified
    accepted: int
    drafted: int = 0  # drafter tokens produced
    verify_s: float = 0.0
    draft_s: float = 0.0
    judged: tuple[DraftFeatures, ...] = ()  # features of the drafted tokens the target judged
    judged_accepted: int = 0  # how many of those it accepted


class StopRule:
    """One step's early stop, handed to the drafter: ``keep_going(depth, features)`` after each drafted token.

    Built by ``DraftPolicy.stop_rule()`` from what the policy knows at the start of the step (its rule,
    the predictor, the measured pass times); it keeps only this step's running products."""

    def __init__(self, cfg: PolicyConfig, predict: Callable[[DraftFeatures], float], t_verify: tuple[float, ...],
                 timed: tuple[bool, ...], t_draft: float):
        self.cfg, self.predict, self.t_verify, self.timed, self.t_draft = cfg, predict, t_verify, timed, t_draft
        self.rule = RULES[cfg.name]
        self.reach = 1.0  # prod of predicted P_i over the tokens drafted so far in this step
        self.expected = 1.0  # 1 + sum of reaches: expected target tokens of this step

    def keep_going(self, depth: int, f: DraftFeatures) -> bool:
        """After drafting the token at ``depth`` (0-based): draft another one?"""
        return self.rule.keep_going(self, depth, f)

    def advance(self, f: DraftFeatures) -> float:
        """Take in one more drafted token's predicted acceptance; return it."""
        p = self.predict(f)
        self.reach *= p
        self.expected += self.reach
        return p

    def drafting_pays(self, depth: int, p: float, f: DraftFeatures) -> bool:
        """Does drafting on (each further token assumed as likely as this one, ``p``) beat stopping here?"""
        # Every longer timed length is compared, not just the next: T_verify(n) need not grow with n (the
        # repacked Q4_0 GEMM makes a 4-token pass cheaper than a 3-token one), and a one-step look would
        # stop before the cheap size.
        n = depth + 1
        if n + 2 >= len(self.t_verify) or not self.timed[n + 2] or not self.timed[n + 1]:
            return f.p_top1 >= self.cfg.p_min  # no timing for a longer batch yet: confidence rule
        now = self.expected / (self.t_verify[n + 1] + n * self.t_draft)
        tokens, reach = self.expected, self.reach
        for m in range(n + 1, len(self.t_verify) - 1):
            if not self.timed[m + 1]:
                break
            reach *= p
            tokens += reach
            if tokens / (self.t_verify[m + 1] + m * self.t_draft) > now:
                return True
        return False


class Rule:
    """One draft-length rule: when a step stops drafting early (``keep_going``), how long a step may be
    (``choose_k``) and why, in words (``note``).  The four register by name in ``RULES``; a policy looks its
    rule up by ``cfg.name`` at each use."""

    seeded_with_costs = False  # whether the policy starts from the session's measured cost model

    def keep_going(self, stop: StopRule, depth: int, f: DraftFeatures) -> bool:
        return True

    def choose_k(self, policy: "DraftPolicy", k: int) -> int:
        return max(k, 0)

    def note(self, policy: "DraftPolicy", k: int) -> str:
        return f"the {policy.cfg.name} policy drafts up to {k} tokens every step"


class Fixed(Rule):
    """Always k (stopping early only at an end-of-generation token)."""


class Threshold(Rule):
    """Up to k, stopping when the drafter's top-1 probability falls below p_min."""

    def keep_going(self, stop: StopRule, depth: int, f: DraftFeatures) -> bool:
        return f.p_top1 >= stop.cfg.p_min


class Gamma(Rule):
    """The paper's rule: stop when 1 - prod(P_i) > gamma."""

    def keep_going(self, stop: StopRule, depth: int, f: DraftFeatures) -> bool:
        stop.advance(f)
        return 1.0 - stop.reach <= stop.cfg.gamma


class Cost(Rule):
    """Keep drafting while one more token raises the expected tokens per second; choose k likewise."""

    seeded_with_costs = True

    def keep_going(self, stop: StopRule, depth: int, f: DraftFeatures) -> bool:
        return stop.drafting_pays(depth, stop.advance(f), f)

    def choose_k(self, policy: "DraftPolicy", k: int) -> int:
        return policy.choose_by_cost(k)

    def note(self, policy: "DraftPolicy", k: int) -> str:
        return policy.cost_note(k)


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
        return self.rule.choose_k(self, self.cap(limit))

    def choose_by_cost(self, k: int) -> int:
        """The cost rule's draft length: the fastest predicted, probing now and then when none pays."""
        if k <= 0 or not self.guard.allows_drafting():
            return 0
        if not self._calibrated():
            return k
        if self.ceiling(k) < 1.0:
            return 0  # even if every drafted token were accepted, this machine would be slower: never probe
        best = self._best_k(k)
        if best > 0:
            self._gap = self.cfg.probe_every
        elif self.steps - self._last_probe >= self._gap:
            # probe: keep the acceptance estimate alive; back off while speculation keeps losing,
            # since each probe makes the drafter catch up on everything written meanwhile
            best, self._last_probe, self._gap = 1, self.steps, min(self._gap * 2, 1024)
        return best

    def stop_rule(self) -> StopRule:
        """This step's early stop for the drafter (``StopRule.keep_going``)."""
        return StopRule(self.cfg, self.predictor.predict, tuple(self.t_verify), tuple(n > 0 for n in self.n_verify),
                        self.t_draft)

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
        return self.rule.note(self, k)

    def cost_note(self, k: int) -> str:
        """The cost rule's note: what its timings and acceptance predicted."""
        timed = [n for n in range(1, k + 1) if self.n_verify[n + 1]]
        if not self._calibrated() or not timed:
            return "the cost policy had no timings yet: it drafted to measure them"
        ceiling = self.ceiling(k)
        g = self.guard
        if g.losing():
            rates = g.stats.last_rates  # None only in a verdict resumed from before the rates were kept
            seen = "by an earlier process" if rates is None else f"{rates[0]:.0f} against {rates[1]:.0f} tokens/s" \
                + (", kept from an earlier process" if g.stats.resumed else "")
            return (f"the cost policy stopped drafting: its drafting steps ran at {g.stats.last_ratio:.2f}x the pace "
                    f"of the target alone, as measured ({seen}), although its cost model predicted a gain")
        if ceiling < 1.0:
            return (f"the cost policy ran the target alone, it is faster on this machine "
                    f"(predicted {ceiling:.2f}x at best, even with every drafted token accepted)")
        best = max(timed, key=self.expected_speed)
        gain = speedup(*self._expected_tokens_cost(best), self.t_verify[1])
        if gain > 1.0:
            return (f"the cost policy drafted where it predicts a gain "
                    f"(predicted {gain:.2f}x at draft length {best})")
        acc = (f"first drafted token accepted {self.acc[0]:.0%} of the time" if any(self.chosen)
               else f"assuming {self.acc[0]:.0%} acceptance, none measured yet")
        return (f"the cost policy mostly ran the target alone, drafting is predicted to be slower here "
                f"({gain:.2f}x at best, {acc}); it probes now and then")

    def _best_k(self, k_max: int) -> int:
        speeds = [self.expected_speed(k) if self.n_verify[k + 1] or k == 0 else 0.0 for k in range(k_max + 1)]
        # lengths never measured yet are tried once, so the cost model fills in
        for k in range(1, k_max + 1):
            if self.n_verify[k + 1] == 0:
                return k
        return max(range(k_max + 1), key=lambda k: speeds[k])

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
            if not hit:
                break
        self.chosen.append(step.proposed)

    def observe_lap(self, drafted: bool, tokens: int, seconds: float) -> None:
        """A step's wall time from its start to the next step's (the loop's share included), for the guard."""
        self.guard.observe(drafted, tokens, seconds)

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
