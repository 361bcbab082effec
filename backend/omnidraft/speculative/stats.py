"""What a generation reports, counted once: per output token (``TokenLogprob``) and per speculative step
(``StepRecord``), both values of ``step.py``, and per answer (``GenerationStats``); ``GenerationStats.add``
sums answers into totals, so the benchmarks (a configuration's run) and the server (everything since start)
report acceptance, tau and speed by the same definitions as each answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from .step import StepRecord, TokenLogprob  # noqa: F401 - the step's values live in step.py

# Where a speculative step's wall time goes, each phase timed as a whole (step.PhaseClock):
# draft = the drafter's passes (and its per-token features), translate = drafter tokens into target ids
# and the drafter catching up with the target's text, target = the target's verification pass,
# sample = accepting/sampling from its logits (with the near-tie guard and the KV rollback),
# bookkeeping = the rest: the policy's choice, records, text out to the consumer.  They sum to the step.
STEP_PARTS = ("draft", "translate", "target", "sample", "bookkeeping")


@dataclass
class GenerationStats:
    """One answer's counts and seconds, or (``add``) the sums over many answers."""

    method: str
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV was kept from the previous request
    completion_tokens: int = 0
    target_passes: int = 0
    # 1 when the target ended the answer with an end-of-generation token (not text); in totals: such answers
    stop_tokens: int = 0
    proposed: int = 0
    accepted: int = 0
    ngram_proposed: int = 0
    ngram_accepted: int = 0
    prefill_s: float = 0.0
    # from the request's start to its first output token out of the loop: the prompt read (target and drafter)
    # and the first step; what a user waits before text appears, and where reading prompts in rows shows
    first_token_s: float = 0.0
    draft_s: float = 0.0
    translate_s: float = 0.0
    verify_s: float = 0.0
    target_s: float = 0.0
    sample_s: float = 0.0
    bookkeeping_s: float = 0.0
    step_s: float = 0.0  # the steps' wall time: the sum of the five parts (STEP_PARTS)
    total_s: float = 0.0
    draft_lengths: list[int] = field(default_factory=list)
    guard_redecodes: int = 0  # near-ties re-decoded one token at a time (guarded kernel mode only)
    policy_note: str = ""  # why the policy drafted or not, in words (DraftPolicy.note)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tau(self) -> float:
        """Target tokens produced per target forward pass: the end-of-generation token counts (the pass that
        produced only it was a pass that produced a token), so tau >= 1 whenever a pass ran."""
        return (self.completion_tokens + self.stop_tokens) / self.target_passes if self.target_passes else 0.0

    @property
    def generation_s(self) -> float:
        """Seconds after the prompt: the speculative loop."""
        return self.total_s - self.prefill_s

    @property
    def tokens_per_s(self) -> float:
        gen = self.generation_s
        return self.completion_tokens / gen if gen > 0 else 0.0

    @property
    def python_s(self) -> float:
        """Loop seconds spent neither drafting, translating nor verifying."""
        return max(0.0, self.generation_s - self.draft_s - self.translate_s - self.verify_s)

    def add_step(self, step: StepRecord) -> None:
        """Count one speculative step (one target pass)."""
        self.target_passes += 1
        self.proposed += step.proposed
        self.accepted += step.accepted
        self.ngram_proposed += step.ngram_proposed
        self.ngram_accepted += step.ngram_accepted
        self.draft_s += step.draft_s
        self.translate_s += step.translate_s
        self.verify_s += step.verify_s
        self.target_s += step.target_s
        self.sample_s += step.sample_s
        self.bookkeeping_s += step.bookkeeping_s
        self.step_s += step.total_s
        self.draft_lengths.append(step.proposed)
        self.guard_redecodes += step.redecoded

    def close_step(self, step: StepRecord, wall_s: float, sync_s: float = 0.0) -> None:
        """The loop's end of a counted step: ``wall_s`` from the step's start to the next one's, of which the
        loop after ``Generator._step`` took what the record lacks; ``sync_s`` of that was the drafter catching
        up with the target's text (translate), the rest bookkeeping.  Into the record and these sums."""
        tail = wall_s - step.total_s
        for obj in (step, self):
            obj.translate_s += sync_s
            obj.bookkeeping_s += tail - sync_s
        step.total_s = wall_s
        self.step_s += tail

    def step_breakdown(self) -> dict:
        """Per step: ``ms`` of each part (STEP_PARTS, and ``step``, their sum) and each part's ``share`` of it."""
        n, total = self.target_passes, self.step_s
        parts = {p: getattr(self, f"{p}_s") for p in STEP_PARTS}
        return {"ms": {**{p: v * 1e3 / n if n else 0.0 for p, v in parts.items()},
                       "step": total * 1e3 / n if n else 0.0},
                "share": {p: v / total if total else 0.0 for p, v in parts.items()}}

    def add(self, other: GenerationStats) -> GenerationStats:
        """Sum another answer's counts and seconds into these (every int and float field); the per-answer
        fields (method, draft_lengths, policy_note) stay this object's.  Returns self."""
        for f in fields(self):
            v = getattr(other, f.name)
            if type(v) in (int, float):
                setattr(self, f.name, getattr(self, f.name) + v)
        return self

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(acceptance_rate=self.acceptance_rate, tau=self.tau, tokens_per_s=self.tokens_per_s,
                 python_s=self.python_s)
        return d

    def summary(self) -> str:
        """One line: tokens drafted and accepted out of those produced, why, then the speed."""
        why = f": {self.policy_note}" if self.policy_note else ""
        acc = f"acceptance {self.acceptance_rate:.1%}, " if self.proposed else ""  # no rate of nothing
        return (f"[{self.method}] drafted {self.proposed} and accepted {self.accepted} of "
                f"{self.completion_tokens} tokens{why}; {acc}{self.tau:.2f} tokens/target pass, "
                f"{self.tokens_per_s:.1f} tok/s")

