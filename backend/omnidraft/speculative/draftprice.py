"""What the drafter's passes cost, as a ``DraftPolicy`` (policy.py) prices a draft: learnt from the steps that
drafted (``StepOutcome``), seeded from the cost model's drafter passes of 1..4 tokens.

A k-token draft is k one-token passes, the first of which also reads what the drafter has not seen: the step's own
tokens (about ``read0``: the last drafted token and the target's next, or a correction) and the ``lag`` the target
wrote since the drafter last drafted.  A lag past CATCHUP_MIN is read in a pass of its own before drafting, caught
up on, and priced per token apart (``catchup_s``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .step import CATCHUP_MIN, StepOutcome

READ0_PRIOR = 1.5  # tokens a step's first drafter pass reads after a drafting step, until timed (a correction, or 2)
CATCHUP_PRIOR = 0.25  # a caught-up token's seconds as a share of a one-token drafter pass, until one is timed


@dataclass
class DraftPrice:
    t_draft: float = 0.0  # EMA seconds of a one-token drafter pass: a drafted token
    n_draft: int = 0
    t_read: float = 0.0  # EMA seconds of each further token a first pass reads
    n_read: int = 0
    read0: float = READ0_PRIOR  # EMA tokens a first pass reads after a drafting step
    n_read0: int = 0
    t_catchup: float = 0.0  # EMA seconds per target token caught up on (else CATCHUP_PRIOR of a pass)
    n_catchup: int = 0

    def seed(self, t_draft: float, t_draft_n: dict[int, float] | None = None) -> None:
        """A one-token pass, and from the passes of n tokens (``t_draft_n``) the price of a token read."""
        self.t_draft, self.n_draft = t_draft, max(self.n_draft, 1)
        if t_draft_n and len(t_draft_n) > 1 and 1 in t_draft_n:
            top = max(t_draft_n)
            self.t_read, self.n_read = max(t_draft_n[top] - t_draft_n[1], 0.0) / (top - 1), max(self.n_read, 1)

    def passes_s(self, k: int, lag: int) -> float:
        """Seconds of the drafter's k passes of a k-token draft, ``lag`` target tokens after its last draft.

        Priced at one rate per drafted token, as it was, a price learnt from one-token drafts after idle steps (up
        to 8 tokens read in one pass) made every longer draft k times too dear: the 30-layer drafter's token read
        7.5-9.5 ms that way against 6.8-7.8 inside fixed three-token drafts (1.5B Q4_K_M, 2-core Zen 4), and the
        default drafted one token a step on 64-89 of 314-340 steps while its drafting steps ran 1.23-1.40x the
        pace of the target alone."""
        if k <= 0:
            return 0.0
        read = 1.0 if lag > CATCHUP_MIN else self.read0 + lag
        return k * self.t_draft + max(read - 1.0, 0.0) * self.t_read

    def catchup_s(self, lag: int) -> float:
        """Seconds the drafter would spend reading what the target wrote while it sat idle, before drafting.

        Short lags are read inside the first drafting pass (``passes_s``).  ``lag`` counts target tokens and the
        drafter's threshold (CATCHUP_MIN) its own: about as many, and the price per token is learnt in the
        policy's unit.  Pricing it changed no measured speedup beyond the runs' spread
        (results/issue41/ab-catchup-avx2, -avx512); it is priced because it is paid."""
        if lag <= CATCHUP_MIN:
            return 0.0
        return lag * (self.t_catchup if self.n_catchup else CATCHUP_PRIOR * self.t_draft)

    def learn(self, step: StepOutcome, lag: int) -> None:
        """The pass times of one step that drafted (``lag``: the target tokens the drafter had not seen)."""
        if step.catchup_s > 0 and lag > 0:
            self.t_catchup = ema(self.t_catchup, step.catchup_s / lag, self.n_catchup)
            self.n_catchup += 1
        if not step.drafted:
            return
        if not step.first_read:  # a drafter that does not time its first pass: every token priced alike
            self._one(step.draft_s / step.drafted)
            return
        if step.drafted > 1:
            self._one((step.draft_s - step.first_s) / (step.drafted - 1))
        elif step.first_read == 1 or step.first_s < self.t_draft:  # a one-token pass, or the machine sped up
            self._one(step.first_s)
        if step.first_read > 1:
            per = max(step.first_s - self.t_draft, 0.0) / (step.first_read - 1)
            self.t_read = ema(self.t_read, per, self.n_read)
            self.n_read += 1
        if lag == 0 and not step.catchup_s:
            self.read0 = ema(self.read0, float(step.first_read), self.n_read0)
            self.n_read0 += 1

    def _one(self, seconds: float) -> None:
        self.t_draft = ema(self.t_draft, seconds, self.n_draft)
        self.n_draft += 1

    def stats(self) -> dict:
        return {"one_token": round(self.t_draft * 1e3, 3), "per_token_read": round(self.t_read * 1e3, 3),
                "first_read": round(self.read0, 2)}


def ema(old: float, new: float, count: int, alpha: float = 0.2) -> float:
    """An exponential moving average that starts at its first value."""
    return new if count == 0 else (1 - alpha) * old + alpha * new
