"""How many tokens to draft: ``DraftPolicy`` keeps what the steps taught it (pass times, acceptance per draft
position, the acceptance predictor, the rate guard) and hands its rule (rules.py: fixed, threshold, gamma,
cost) the values it decides from.
"""

from __future__ import annotations

import collections
from dataclasses import replace
from typing import Callable

from omnidraft.llama.costmodel import CostModel, speedup
from omnidraft.llama.ctxcost import MIN_CONTEXT
from .guard import RateGuard
from .predictor import AcceptancePredictor
from .rules import (ACC_PRIOR, POLICIES, RULES, Outlook, PolicyConfig, Rule, StepCosts,  # noqa: F401 (re-exported)
                    StopRule, expected_tokens)
from .draftprice import DraftPrice, ema
from .step import StepOutcome  # re-exported: what the policy observes

LONG_RUN = 200  # candidates per position the long-run acceptance averages over (stretches of text: ~12 steps)
PRIOR_RUN = 20  # the prior's weight in it, in candidates: a first trial of six steps does not decide it alone
STALE_T1 = 16  # steps without a one-token pass after which larger passes re-derive T(1) (_rederive_t1)
LEAN = 0.03  # each drafting step, a position it did not reach leans this far to the prior (_lean_unreached)
CREDIT_STEPS = 256  # the probes' budget saves up at most this many one-token passes' worth of its share


class DraftPolicy:
    def __init__(self, cfg: PolicyConfig, predictor: AcceptancePredictor | None = None):
        if cfg.name not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, not {cfg.name!r}")
        if cfg.k < 0:
            raise ValueError("k must be >= 0")
        if not (0.0 <= cfg.probe_budget < 1.0 and 0.0 <= cfg.margin < 1.0):
            raise ValueError(f"probe_budget and margin are shares, in [0, 1), not {cfg.probe_budget}, {cfg.margin}")
        self.cfg = cfg
        self.predictor = predictor or AcceptancePredictor()
        self.lengths: dict[int, int] = {}  # drafted-token count per step -> steps
        n = cfg.k + 2
        self.t_verify = [0.0] * (n + 1)  # EMA seconds of a target pass of n tokens
        self.n_verify = [0] * (n + 1)
        # T(n) / T(1) by which the other sizes follow each live T(1): the seeded cost model's, then each size's own
        # as last timed (``observe``).  A pass's cost grows with the context and the machine's pace drifts
        self._ratio: dict[int, float] = {}
        # the same ratios, kept: the least T(n) / T(1) a stale T(1) is re-derived by (``_rederive_t1``)
        self._startup_ratio: dict[int, float] = {}
        self._seed_ratio: dict[int, float] = {}  # the seeded cost model's, at its short context (``follow_context``)
        self._since_t1 = 0  # steps observed since the last one-token pass
        self.price = DraftPrice()  # the drafter's passes and its catching up (draftprice.py)
        # target tokens written since the drafter last drafted (it reads them before its next draft)
        self.lag = 0
        self.unread = 0  # of ``lag``, the prompt tokens the drafter left unread at the request's start
        self.left = 0  # target tokens the request may still write (0: not known)
        self.cells = 0  # the target's context as of the latest step (``at_context``, then each step's tokens)
        self.t1_short, self.n_t1_short = 0.0, 0  # one-token passes under MIN_CONTEXT cells (runtime.costs' drift)
        self.unresumed = 0  # steps where drafting again would not have repaid the drafter's reading (stats)
        self.acc = [ACC_PRIOR] * n  # EMA P(candidate i accepted | i-1 accepted), optimistic start
        # the same over the long run, for the guard's tokens of a drafting step: a mean of the last ~LONG_RUN
        # candidates at a position, starting as if PRIOR_RUN of them had been kept at ACC_PRIOR
        self.acc_long, self.n_long = [ACC_PRIOR] * n, [PRIOR_RUN] * n
        self._proposed = 0  # the latest observed step's candidates
        self.steps = 0
        # probing's budget: seconds it may still lose against the target alone (each step not a probe adds
        # probe_budget of its time, each probe takes off what it lost or adds what it gained)
        self.credit = 0.0
        self._last_probe = 0
        self._probing = False  # this step (chosen last by choose_k) is a probe
        self.chosen: collections.deque[int] = collections.deque(maxlen=4096)  # recent draft lengths only
        self.guard = RateGuard()  # the cost rule's check of its model against the pace it achieves

    def at_context(self, cells: int) -> None:
        """A request's prompt is read: the target holds ``cells`` tokens (each step adds its own)."""
        self.cells = cells

    def begin_request(self, unread: int = 0, expected: int = 0) -> bool:
        """A new request: how much of a draft the target keeps depends on what is being written (a prompt in
        Japanese after one in Spanish), so an estimate under the prior leans halfway back up to it (one over it
        stays: where drafting breaks even above the prior, leaning down undid what the probes had learnt).  Without
        this, one request where drafting lost left the estimate where no draft length paid, and probes backed
        off to one in 1,024 steps never corrected it: the default ran 0.96x the target alone on 12 man pages in
        rotating languages, where fixed k = 4 ran 1.18x.  The probes' budget carries over: where a probe is dear
        (the AVX2 path: one more row is 0.6 decodes), probing again at each request's start lost 2-3 %.

        Returns whether the drafter should read the prompt now (``Drafter.begin``'s ``read``): not where no draft
        length is predicted to pay, or the guard has drafting stopped (the prompt's ``unread`` tokens become the
        drafter's lag, paid only by a probe: reading 110 tokens took it 34 ms on the AVX2 path, 1.4-2.5 % of a
        64-token request that never drafts), nor where it costs more than drafting is predicted to save over the
        ``expected`` tokens (0: not known, not weighed; ``_read_pays``)."""
        self.acc = [max(a, 0.5 * a + 0.5 * ACC_PRIOR) for a in self.acc]
        self.lag, self.left = 0, expected
        o = replace(self._outlook(self.cfg.k, note=True), allowed=not self.guard.losing())
        read = self.rule.reads_prompt(o) and self._read_pays(o, unread, expected)
        if not read:  # the drafter reads the ``unread`` prompt tokens only if a step asks it to draft
            self.lag = unread
        self.unread = self.lag
        return read

    def _read_pays(self, o: Outlook, unread: int, expected: int) -> bool:
        """Does drafting save, over the ``expected`` target tokens of the request, more than the drafter takes to read
        the ``unread`` prompt tokens (priced as catching up)?  Weighed at the long-run acceptance, not the estimate
        the request's start leaned towards the prior: that one is a reason to try drafting, not to pay for a read.
        Unweighed, on a 2-core Zen 1 EPYC (T(2) 1.51 decodes, held-out JavaScript, 64 tokens a request) the
        drafter's reading took 1.0 s of a 46.8 s run of 6 requests, and the default ran 0.96x the target alone."""
        best = max((o.long_speeds[n] for n in range(1, o.k + 1) if o.timed[n]), default=0.0)
        if not expected or not best or not o.speeds[0]:
            return True
        saving = expected * (1.0 / o.speeds[0] - 1.0 / best)
        return saving > self.catchup_cost(unread)

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
        o = self._outlook(k) if rule.seeded_with_costs else Outlook(k)
        c = rule.choose(o)
        self.unresumed += not o.resume
        self._probing = c.probe
        if c.probe:
            self._last_probe = self.steps
        return c.k

    def probe_due(self) -> bool:
        """May the next step probe?  At least ``probe_every`` steps after the last probe, and only while the
        budget covers what a probe is predicted to lose: its drafted token and extra row beyond what the target
        alone pays for the tokens it is expected to yield.  Where probes win, they refill the budget and come
        every ``probe_every`` steps; where they lose, the budget spaces them out (it replaced a back-off from 16 to
        1,024 steps whatever a probe cost).  The drafter's catching up on what the target wrote is charged when
        paid, not predicted: it grows with the gap, so pricing it ahead would never let the budget catch up; where
        it is dear (a missed token read for 1.5 % of a decode), each probe's charge defers the next by more than
        the last gap.  A prompt left unread is known at the start and does not grow, and a probe that reads it
        pays for all of it (``_read_pays``: 1.0 s of a 46.8 s run on a Zen 1): so a probe is priced with it, and
        one dearer than the budget saves up (CREDIT_STEPS one-token passes) waits for a request that reads it."""
        if self.steps - self._last_probe < self.cfg.probe_every:
            return False
        # at the long-run acceptance: a new request leans ``acc`` towards the prior, which prices a probe as free
        loss = self.t_verify[2] + self.passes_s(1, lag=0) - expected_tokens(self.acc_long, 1) * self.t_verify[1]
        return self.credit >= loss + self.catchup_cost(self.unread)

    def _outlook(self, k: int, note: bool = False) -> Outlook:
        """What the cost rule weighs; the guard is asked (which counts its steps) only for a step's choice."""
        if not note and (k <= 0 or not self.guard.allows_drafting()):
            return Outlook(k, allowed=False)
        if not self._calibrated() and not note:
            return Outlook(k)
        timed = tuple(n == 0 or self.n_verify[n + 1] > 0 for n in range(k + 1))
        long_speeds = tuple(self.expected_speed(n, self.acc_long) if t else 0.0 for n, t in enumerate(timed))
        o = Outlook(k, True, self._calibrated(), self.ceiling(k),
                    tuple(self.expected_speed(n) if t else 0.0 for n, t in enumerate(timed)), timed,
                    self.probe_due(), margin=self.cfg.margin, long_speeds=long_speeds,
                    resume=self._resume_pays(long_speeds))
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
                        StepCosts(tuple(self.t_verify), tuple(n > 0 for n in self.n_verify), self.t_draft,
                                  self.passes_s(1) - self.t_draft))

    def expected_speed(self, k: int, acc: list[float] | None = None) -> float:
        """Predicted target tokens per second at draft length k (0 = target alone), at the recent acceptance
        estimates or at ``acc``."""
        tokens, cost = self._expected_tokens_cost(k, acc)
        return tokens / cost if cost > 0 else 0.0

    def _expected_tokens_cost(self, k: int, acc: list[float] | None = None) -> tuple[float, float]:
        """(expected target tokens, seconds) of a step drafting k tokens while drafting goes on: the drafter's debt
        after a pause is weighed apart (``_resume_pays``)."""
        return expected_tokens(self.acc if acc is None else acc, k), self.t_verify[k + 1] + self.passes_s(k, lag=0)

    def _resume_pays(self, speeds: tuple[float, ...]) -> bool:
        """After a pause the drafter first reads what the target wrote meanwhile: a debt paid once, whatever the
        draft length, and not again while drafting goes on.  Does drafting over the tokens the request has left, at
        the best of ``speeds`` (long-run acceptance), save more than that?  Priced into each step's speed instead,
        as it was, the debt grew with every idle step, so a pause kept itself going: with the 30-layer drafter on
        HumanEval (1.5B Q4_K_M, 2-core Zen 4), its first drafted token estimated at 73 %, a one-token draft's
        predicted speed fell from 0.75x to 0.52x the target alone's as the lag grew from 10 to 20 tokens, and
        after a dip to 35 % from 0.98x to 0.49x in 14 steps: drafting resumed only at a probe or the next request
        (results/issue41/zen4-32, traces)."""
        debt = self.catchup_cost() + self.passes_s(1) - self.passes_s(1, lag=0)
        best = max(speeds[1:], default=0.0)
        if debt <= 0 or not self.left or not best or not speeds[0]:
            return True
        return self.left * (1.0 / speeds[0] - 1.0 / best) > debt

    @property
    def t_draft(self) -> float:
        """Seconds of a one-token drafter pass: a drafted token."""
        return self.price.t_draft

    def passes_s(self, k: int, lag: int | None = None) -> float:
        """Seconds of the drafter's passes of a k-token draft, ``lag`` (else the current lag) target tokens after its
        last draft (``DraftPrice.passes_s``)."""
        return self.price.passes_s(k, self.lag if lag is None else lag)

    def catchup_cost(self, lag: int | None = None) -> float:
        """Seconds the drafter would spend catching up on ``lag`` target tokens (else the current lag) before
        drafting (``DraftPrice.catchup_s``); ``lag``: another count than the tokens owed now (a prompt it may read)."""
        return self.price.catchup_s(self.lag if lag is None else lag)

    def ceiling(self, k_max: int) -> float:
        """Best speedup over the target alone at 100 % acceptance, from the measured timings."""
        base = self.t_verify[1]
        best = 0.0
        for k in range(1, k_max + 1):
            if self.n_verify[k + 1]:
                best = max(best, speedup(k + 1, self.t_verify[k + 1] + self.passes_s(k, lag=0), base))
        return best if best else float("inf")  # nothing measured yet: do not rule speculation out

    def note(self, limit: int) -> str:
        """Why this policy drafts or not, in words, from what it knows now (for the summary line)."""
        k = self.cap(limit)
        if k <= 0:
            return "no room to draft (draft length 0)"
        return self.rule.note(self._outlook(k, note=True))

    def _calibrated(self) -> bool:
        return self.n_verify[1] > 0 and self.price.n_draft > 0

    # ----------------------------------------------------------- observations
    def observe(self, step: StepOutcome) -> None:
        """Learn from one verified step: pass times, acceptance per position, and (per drafted token,
        tokens after the first rejection censored) the acceptance predictor.

        Each T(1) rescales the other sizes by their ratio to it, timed ones too (their ratio as last timed, while
        T(1) was fresh): kept as absolute times, a two-token pass timed in one of a 2-core VM's slow spells
        (37.2 ms against a T(1) of 36.3) stayed that dear once the spell ended (T(1) 29 ms) and drafting had
        stopped, so it never resumed; the rate guard, which times whole steps, still catches a ratio that errs
        the other way."""
        n = step.proposed + 1
        if n < len(self.t_verify):
            self.t_verify[n] = ema(self.t_verify[n], step.verify_s, self.n_verify[n])
            self.n_verify[n] += 1
            if n == 1:
                self._since_t1 = 0
                self._follow_t1(1)
                if self.cells < MIN_CONTEXT:
                    self.t1_short = ema(self.t1_short, step.verify_s, self.n_t1_short)
                    self.n_t1_short += 1
            else:
                self._since_t1 += 1
                self._rederive_t1(n)
                if self._since_t1 < STALE_T1 and self.t_verify[1] > 0:
                    self._ratio[n] = self.t_verify[n] / self.t_verify[1]
        self._charge(step)
        self.price.learn(step, self.lag)
        self.lag = 0 if step.drafted or step.catchup_s else self.lag + step.accepted + 1
        self.left = max(self.left - step.accepted - 1, 0)
        self.cells += step.accepted + 1
        self.unread = min(self.unread, self.lag)
        if step.drafted:
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
        if step.proposed:  # positions the draft stopped short of (_lean_unreached)
            self._lean_unreached(step.proposed)
        self.chosen.append(step.proposed)
        self._proposed = step.proposed

    def _lean_unreached(self, proposed: int) -> None:
        """Lean each position past a draft of ``proposed`` tokens a little back towards the prior.

        An estimate learns only where drafts reach, and the lengths drafted follow the estimates: a few misses at
        the second token made two-token drafts look slower than one, they stopped, and that estimate froze until the
        request's end.  On a priced clock (``scripts/lab/priced_policy.py``: real drafts of held-out HumanEval, the
        1.5B Q4_K_M, pass times from one table and a seeded drift, ``_rederive_t1`` as now) the default drafted one
        token on 122 of 163 steps with the second position's estimate at 0.36-0.48, its long-run mean at
        0.51-0.60.  Like a new request's lean (``begin_request``), an estimate that has stopped learning goes back
        towards the optimistic prior, so that the length is tried again; at 0.03 a step, half-way in about 23 steps.
        Leaning towards the position before instead (the first learns at every drafting step) gained half as much on
        HumanEval: where the first position's estimate is low too, it does not unfreeze the second."""
        for i in range(proposed, len(self.acc)):
            self.acc[i] += LEAN * (ACC_PRIOR - self.acc[i])

    def _rederive_t1(self, n: int) -> None:
        """Once T(1) has gone ``STALE_T1`` steps unmeasured, re-derive it, and every size not timed now, from the
        freshly timed n-token pass: T(1) = T(n) / (n's ratio), T(m) = (m's ratio) x T(1).

        T(1) is learnt only from steps that do not draft.  A slow spell of the machine (seen on a 2-core Zen 1 VM:
        one-token passes at 150 ms for a few steps, 50 ms otherwise) lifts it; where drafting then looks cheap
        against it, the policy drafts every step and never times a one-token pass again: the estimate stays
        stale and the target alone looks slow for good (HumanEval with the 0.5B ran 0.77x the target alone,
        drafting on 195 of 277 steps at 55 % kept).  Passes of more tokens, timed as the policy drafts, say what
        the pace is now.

        Both ways, and the other sizes with it.  T(1) used to be only held down (the lowest T(n) / ratio seen), and
        the sizes not drafted kept their times from whenever they were last rescaled: on a 2-core Zen 4 whose pace
        wanders by 10 % over ~50 steps, T(1) ratcheted down to the fastest spell's pace (32.4 -> 27.1 ms in 100 steps
        of one-token drafts) while T(3) stayed at an older one, so T(3) / T(1) read 1.55 where it is 1.23 and the
        policy drafted one token on 127 of 158 steps of held-out HumanEval.  Derived from one live size, the table
        keeps its ratios whatever the pace does: on the priced clock (``scripts/lab/priced_policy.py``, 24 seeds)
        +1.1 % on held-out HumanEval, +2.6 % with ``_lean_unreached``, chat -0.1 / -0.4 % (standard errors 0.3-0.6
        %); both in three alternated ``bench run``s, the default 1.56x -> 1.69x its target alone on HumanEval (counts
        priced with one table).  n's ratio is the larger of start-up's and its last one timed while T(1) was fresh
        (at or above start-up's on the CPUs here), so that an error in it finds drafting dearer, not cheaper.  Only
        once T(1) is stale: where one-token passes come often they speak for themselves (on a GPU the first one after
        a batched pass costs twice the others, and re-deriving T(1) at every drafting step made the policy flip
        between drafting and not, paying that first pass each time)."""
        if self._startup_ratio.get(n) and self._since_t1 >= STALE_T1:  # n was seeded, and has just been timed live
            self.t_verify[1] = self.t_verify[n] / max(self._startup_ratio[n], self._ratio.get(n, 0.0))
            self._follow_t1(n)

    def follow_context(self, growth: dict[int, float]) -> None:
        """Price passes for the context at hand (llama.ctxcost): ``growth[n]`` is T(n) / T(1) there over the seeded
        model's, a size not in it grows as the largest below it that is, and an empty one restores the seeded prices.
        The ratios learnt live move with start-up's, so that a ratio learnt at 2,000 cells is not carried into a
        100-token request, nor the other way round."""
        for n, seed in self._seed_ratio.items():
            now = seed * growth.get(max((m for m in growth if m <= n), default=0), 1.0)
            self._ratio[n] = self._ratio.get(n, now) * now / self._startup_ratio[n]
            self._startup_ratio[n] = now
        self._follow_t1(1)

    def _follow_t1(self, timed: int) -> None:
        """Put every size with a ratio, but the one just ``timed``, at its ratio to T(1)."""
        for m, r in self._ratio.items():
            if m != timed:
                self.t_verify[m] = r * self.t_verify[1]

    def _charge(self, step: StepOutcome) -> None:
        """Settle the probes' budget for one step (before the step's times update the estimates)."""
        if self._probing and step.proposed:
            lone = (step.accepted + 1) * self.t_verify[1]  # what the target alone pays for these tokens
            self.credit -= step.verify_s + step.draft_s + step.catchup_s - lone
        else:
            self.credit += self.cfg.probe_budget * step.verify_s
        self.credit = min(self.credit, self.cfg.probe_budget * CREDIT_STEPS * self.t_verify[1])

    def observe_lap(self, drafted: bool, tokens: int, seconds: float) -> None:
        """A step's wall time from its start to the next step's (the loop's share included), for the guard.

        A drafting step is credited the tokens its draft length yields at the long-run acceptance, not the
        tokens it got: the guard checks what the cost model's timings missed (issue 28), and a trial of six steps
        inside a stretch of text the drafter does not know would otherwise read as a slow machine.  On HumanEval
        (1.5B Q4_K_M, exact kernels, 2-core Zen 4) such trials stopped drafting for 170 of ~250 steps: 0.94x the
        target alone where fixed k = 4 ran 1.20x (results/issue41/e2e-peer-zmm, round 2)."""
        if self._probing and self._proposed:  # the budget prices probes; the guard judges what the model paid for
            self.guard.skip(drafted)
            return
        if drafted and self._proposed:
            tokens = expected_tokens(self.acc_long, min(self._proposed, len(self.acc_long)))
        self.guard.observe(drafted, tokens, seconds)

    def stats(self) -> dict:
        return {"policy": self.cfg.name, "draft_lengths": dict(sorted(self.lengths.items())),
                "calibration": self.predictor.calibration(),
                "draft_pass_ms": self.price.stats(),
                "target_pass_ms": [round(t * 1e3, 1) for t in self.t_verify[1:]], "unresumed_steps": self.unresumed,
                "position_acceptance": [round(a, 3) for a in self.acc], "guard": self.guard.summary()}

    def seed_costs(self, t_verify: dict[int, float], t_draft: float, t_draft_n: dict[int, float] | None = None) -> None:
        """Start from a measured cost model instead of learning it from scratch; ``t_draft_n``: the drafter's pass
        of n tokens, whose slope prices a token its first pass reads."""
        for n, t in t_verify.items():
            if n < len(self.t_verify):
                self.t_verify[n], self.n_verify[n] = t, max(self.n_verify[n], 1)
                if n > 1 and t_verify.get(1):
                    self._ratio[n] = self._startup_ratio[n] = self._seed_ratio[n] = t / t_verify[1]
        self.price.seed(t_draft, t_draft_n)


def seeded_policy(cfg: PolicyConfig, method: str, costs: Callable[[], CostModel],
                  predictor: AcceptancePredictor | None = None) -> DraftPolicy:
    """A policy for ``method``; the cost policy of a drafting method starts from ``costs()`` (called only
    then), with free drafting for prompt lookup."""
    policy = DraftPolicy(cfg, predictor)
    if RULES[cfg.name].seeded_with_costs and method != "target":
        cm = costs()
        free = method == "prompt-lookup"
        policy.seed_costs(cm.t_verify, 0.0 if free else cm.t_draft, None if free else cm.t_draft_n)
    return policy
