"""Never slower than the target alone, as measured rather than as modelled.

The cost policy prices a step from pass times sampled at start-up and refined by the steps it takes.
Where those samples mislead, drafting loses while the model says it wins.  Seen on an H100 (issue 28): a
one-token pass timed between batched ones cost 4.85 ms at start-up, while the target running alone
(one-token passes in a row) took 2.15 ms a pass.  The policy never ran a step of the target alone, so it
never learnt that price, and it drafted at 0.65x the target alone.

The guard looks at what the loop achieved instead: tokens per second of the steps that drafted against
runs of target-alone steps (the first step of a run is not counted: it follows a batched pass).  Its
seconds are measured; a drafting step's tokens are those its draft length yields at the long-run acceptance
(``DraftPolicy.observe_lap``), since judging a timing error by a few steps' luck stops drafting in every hard
stretch of text, and the drafter's catching up after a pause is left out (a price of the pause).  It
takes a short run of target-alone steps now and then to know that pace, and when drafting is measurably
slower it stops drafting for a spell that doubles while drafting keeps losing, each spell ended by a
trial of drafting steps measured afresh.  A clear loss stops drafting after one trial; a close one only once
it has held for more steps, since acceptance comes in stretches (text the drafter knows, text it does not)
and a few steps in a hard stretch look like a slow machine.  A losing verdict is judged against the target
alone timed within the last few steps, re-timed first where its pace is older: a machine that slowed since (a
laptop or phone throttling, a shared VM) would otherwise read as drafting losing.  Its latest verdict is kept
with the cost model's state (``Session.save_state``, ``guard.json``): a new process on the same machine, build
and models starts its first spell at once where drafting was losing (``resume``), instead of paying again to
find out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GuardConfig:
    # Defaults from a simulation of the H100's measured costs and of a CPU where drafting wins by 1.45x
    # (tests/test_policy.py's _simulate): the H100 case reaches 0.91 / 0.95 / 0.97 of the target alone over
    # 100 / 350 / 1,500 steps (0.79 / 0.90 / 0.97 with a first run after 32 steps and 8-step trials), and the
    # CPU case keeps its speedup within 0.5 %.  ``clear`` and ``settle``: on the device Xeon at 4 threads
    # (2026-11-28) a 6-step trial inside a hard stretch of text read 0.87x, and the spell that followed cost
    # HumanEval 0.96x where fixed k = 4 ran 1.21x; with stretches of text simulated, waiting for 32 steps before
    # calling a close loss keeps such a CPU within 1 % of no guard (5 % lost before), for about 1 point on the
    # H100 case, whose loss is clear.
    first: int = 4  # steps before the first run of target-alone steps
    run: int = 4  # steps in such a run (the first is a lone pass after a batched one, not counted)
    every: int = 256  # steps between runs while drafting (the pace changes as the context grows)
    margin: float = 0.97  # drafting must reach this share of the target alone's tokens per second
    clear: float = 0.85  # below this share a trial's few steps suffice to stop drafting
    settle: int = 32  # drafting steps before a loss between ``clear`` and ``margin`` counts
    trial: int = 6  # drafting steps measured before a verdict (and after each spell)
    spell: int = 64  # first spell without drafting; doubled while drafting keeps losing
    max_spell: int = 1024
    # a losing verdict needs the target alone timed within this many steps: a pace from a run up to ``every`` steps
    # back let drift in the machine's speed pass for a loss (a 2-core VM: spells at 0.945x and 0.97x where drafting
    # ran 1.19x, BENCHMARKS.md thirty-eighth session; a laptop or phone that throttles does the same)
    fresh: int = 16


class Pace:
    """Tokens per second over recent steps: sums that decay by ``decay`` per step added."""

    def __init__(self, decay: float):
        self.decay, self.tokens, self.seconds, self.steps = decay, 0.0, 0.0, 0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens = self.tokens * self.decay + tokens
        self.seconds = self.seconds * self.decay + seconds
        self.steps += 1

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def reset(self) -> None:
        self.tokens, self.seconds, self.steps = 0.0, 0.0, 0


@dataclass
class GuardStats:
    alone_steps: int = 0  # steps the guard ran the target alone to measure its pace
    blocked_steps: int = 0  # steps it ran the target alone because drafting was slower
    spells: int = 0  # times it stopped drafting
    last_ratio: float | None = None  # drafting's pace over the target alone's at the latest verdict
    last_rates: tuple[float, float] | None = None  # (drafting, alone) tokens/s behind that verdict
    resumed: bool = False  # started from an earlier process's losing verdict (RateGuard.resume)


class RateGuard:
    """``allows_drafting()`` once per step before the policy chooses a length; ``observe()`` once per step
    after it, with the step's wall time from its start to the next step's."""

    def __init__(self, cfg: GuardConfig | None = None):
        self.cfg = cfg or GuardConfig()
        self.alone, self.drafting = Pace(0.9), Pace(0.95)
        self.stats = GuardStats()
        self._step = 0
        self._run_left = 0  # target-alone steps still to take in the current run
        self._next_run = self.cfg.first
        self._blocked_until = 0
        self._spell = self.cfg.spell
        self._prev_alone = False
        self._alone_at = -(10 ** 9)  # the step of the latest target-alone pass counted in the alone pace

    def allows_drafting(self) -> bool:
        self._step += 1
        if self._run_left > 0 or self._step >= self._next_run:
            if self._run_left == 0:  # a run starts
                self._run_left, self._next_run = self.cfg.run, self._step + self.cfg.every
            self._run_left -= 1
            self.stats.alone_steps += 1
            return False
        if self._step < self._blocked_until:
            self.stats.blocked_steps += 1
            return False
        return True

    def observe(self, drafted: bool, tokens: float, seconds: float) -> None:
        if seconds <= 0:
            return
        if drafted:
            self.drafting.add(tokens, seconds)
            self._judge()
        elif self._prev_alone:
            self.alone.add(tokens, seconds)
            self._alone_at = self._step
        self._prev_alone = not drafted

    def skip(self, drafted: bool) -> None:
        """A step the guard does not judge (a probe: drafting the cost model itself predicts to lose); the
        target-alone pass after it still follows a batched one, so it is not counted either."""
        self._prev_alone = not drafted

    def ratio(self) -> float | None:
        """Drafting's measured pace over the target alone's, once both are known."""
        if self.alone.steps < 2 or self.drafting.steps < self.cfg.trial:
            return None
        return self.drafting.rate / self.alone.rate

    def losing(self) -> bool:
        """Whether the latest verdict found drafting slower than the target alone (so it stopped drafting)."""
        r = self.stats.last_ratio
        return r is not None and r < self.cfg.margin

    def verdict(self) -> dict | None:
        """What a later process starts from (:meth:`resume`): the latest verdict and the spell drafting would
        sit out next if it lost again.  None before the first verdict."""
        if self.stats.last_ratio is None:
            return None
        return {"ratio": self.stats.last_ratio, "spell": self._spell, "rates": self.stats.last_rates}

    def resume(self, verdict: dict | None) -> None:
        """Start from an earlier process's verdict.  Where drafting was losing, the spell without drafting starts
        at once instead of after the measuring (about ten steps of drafting at a loss, 1-6 % of a short run on
        the H100); the trial at its end judges afresh, so a machine where drafting has come to pay drafts again.
        A winning verdict, or none, changes nothing."""
        try:
            ratio, spell = float(verdict["ratio"]), int(verdict["spell"])
            rates = verdict.get("rates")  # absent from verdicts kept before the rates were
            rates = (float(rates[0]), float(rates[1])) if rates else None
        except (TypeError, KeyError, ValueError, IndexError):
            return
        if ratio >= self.cfg.margin:
            return
        self.stats.last_ratio = round(ratio, 3)
        self.stats.last_rates = rates
        self._spell = min(max(spell, self.cfg.spell), self.cfg.max_spell)
        self._blocked_until = self._step + self._spell + 1
        self.stats.resumed = True

    def _judge(self) -> None:
        r = self.ratio()
        if r is None:
            return
        self.stats.last_ratio = round(r, 3)
        # kept apart: a losing verdict resets the drafting pace below, and the policy's note quotes both
        self.stats.last_rates = (round(self.drafting.rate, 1), round(self.alone.rate, 1))
        if r >= self.cfg.margin:
            self._spell = self.cfg.spell
            return
        if r >= self.cfg.clear and self.drafting.steps < self.cfg.settle:
            return  # a close loss over a few steps is as likely a hard stretch of text as a slow machine
        if self._step - self._alone_at > self.cfg.fresh:  # time the target alone now, then judge again
            self.alone.reset()
            self._next_run = self._step + 1
            return
        self._blocked_until = self._step + self._spell + 1
        self._spell = min(2 * self._spell, self.cfg.max_spell)
        self.stats.spells += 1
        self.drafting.reset()  # the trial after the spell is judged on its own steps

    def summary(self) -> dict:
        s = self.stats
        return {"alone_tok_s": round(self.alone.rate, 1), "drafting_tok_s": round(self.drafting.rate, 1),
                "alone_steps": s.alone_steps, "blocked_steps": s.blocked_steps, "spells": s.spells,
                "last_ratio": s.last_ratio, "resumed": s.resumed}
