"""One speculative step as values: what was drafted (``Draft``), what the target decided (``Verdict``), and
what the step reports (``StepRecord``, built from the two and the step's phase times).

The generator reads as plan -> draft -> one target pass -> verify -> commit; these are the values that pass
between the phases, and ``PhaseClock`` times each phase as a whole.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from omnidraft.vocab.translator import NGRAM, Candidates
from .predictor import DraftFeatures

ROOT = -1  # the parent of a first candidate: the last token the target already holds
# A drafting step leaves the drafter a few tokens behind (the accepted ones, the target's next); more than this
# is text the target wrote while the policy ran it alone, read in a pass of its own before drafting (Draft.catchup_s)
CATCHUP_MIN = 8


@dataclass(frozen=True)
class Draft:
    """One drafting call's result: the candidates with their parents, what the drafter knew about each token
    it drafted, and what drafting cost.  ``parents[i]`` is the index of candidate i's parent (``ROOT`` for
    the last target token); left empty it is a chain, the simplest tree: (ROOT, 0, 1, ...)."""

    candidates: Candidates = field(default_factory=Candidates)
    features: tuple[DraftFeatures, ...] = ()  # one per drafted token (model drafters), for the policy
    drafted: int = 0  # drafter tokens produced (can differ from the candidates across vocabularies)
    draft_s: float = 0.0
    translate_s: float = 0.0
    parents: tuple[int, ...] = ()
    # the drafter reading text the target wrote while it sat idle (a cost of the pause, not of this draft: kept
    # out of draft_s, which prices a drafted token for the cost model)
    catchup_s: float = 0.0
    # the first drafter pass: the tokens it read (its own and the target's since the last draft; 0: not reported)
    # and its seconds, of draft_s.  Later passes read one token each, so they cost less (DraftPrice.passes_s)
    first_read: int = 0
    first_s: float = 0.0

    def __post_init__(self):
        if not self.parents:
            object.__setattr__(self, "parents", tuple(range(ROOT, len(self.candidates) - 1)))
        if len(self.parents) != len(self.candidates):
            raise ValueError(f"{len(self.parents)} parents for {len(self.candidates)} candidates")

    def __len__(self) -> int:
        return len(self.candidates)

    @property
    def is_chain(self) -> bool:
        return self.parents == tuple(range(ROOT, len(self.candidates) - 1))

    def cut(self, n: int) -> Draft:
        """The first ``n`` candidates (of a chain: what one target pass may verify); features and costs kept."""
        if n >= len(self.candidates):
            return self
        return replace(self, candidates=self.candidates.truncate(max(n, 0)), parents=self.parents[:max(n, 0)])

    def judged(self, n_accepted: int) -> tuple[tuple[DraftFeatures, ...], int]:
        """(features of the drafted tokens the target judged, how many of them it accepted), given how many
        of these candidates it kept.  Tokens after the first rejection were never judged; with every
        candidate kept, neither were those after them."""
        acc = min(self.candidates.drafted_accepted(n_accepted), len(self.features))
        return (self.features if n_accepted < len(self.candidates) else self.features[:acc]), acc


@dataclass(frozen=True)
class Verdict:
    """What one target pass decided: the accepted path through the draft, then the target's own next token.

    ``logits`` are the rows that decided, one per new token (a view of the target's buffer: valid until its
    next decode); ``text`` is the new tokens' text as the target spells it, for drafters following along."""

    path: tuple[int, ...]  # indices of the accepted candidates, first to last (a chain: 0 .. accepted - 1)
    tokens: tuple[int, ...]  # the step's new target tokens: the accepted candidates', then the next token
    logits: np.ndarray | None = None
    redecoded: bool = False  # a guarded kernel mode re-decoded a near-tie one token at a time
    text: bytes = b""

    @classmethod
    def chain(cls, draft_ids, n_accepted: int, next_token: int, logits: np.ndarray | None = None,
              redecoded: bool = False, text: bytes = b"") -> Verdict:
        """The verdict on a chain: its first ``n_accepted`` candidates kept, then ``next_token``."""
        return cls(tuple(range(n_accepted)), tuple(draft_ids[:n_accepted]) + (next_token,), logits, redecoded, text)

    @property
    def accepted(self) -> int:
        return len(self.path)

    @property
    def next_token(self) -> int:
        return self.tokens[-1]


@dataclass(frozen=True)
class StepOutcome:
    """What the policy learns from one verified step (``of``: from its Draft and Verdict)."""

    proposed: int  # candidates the target verified
    accepted: int
    drafted: int = 0  # drafter tokens produced
    verify_s: float = 0.0
    draft_s: float = 0.0
    judged: tuple[DraftFeatures, ...] = ()  # features of the drafted tokens the target judged
    judged_accepted: int = 0  # how many of those it accepted
    catchup_s: float = 0.0  # the drafter reading text written while it sat idle (Draft.catchup_s)
    first_read: int = 0  # tokens the first drafter pass read (Draft.first_read; 0: not reported)
    first_s: float = 0.0  # its seconds, of draft_s

    @classmethod
    def of(cls, draft: Draft, verdict: Verdict, verify_s: float) -> StepOutcome:
        judged, judged_acc = draft.judged(verdict.accepted)
        return cls(len(draft), verdict.accepted, draft.drafted, verify_s, draft.draft_s, judged, judged_acc,
                   draft.catchup_s, draft.first_read, draft.first_s)


class PhaseClock:
    """The seconds of a step's phases, each timed as a whole: ``with clock("target"): ...``.  ``total`` runs
    from the clock's start to ``stop()``."""

    def __init__(self):
        self.start = time.perf_counter()
        self.s: dict[str, float] = {}
        self.total = 0.0

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.s[phase] = self.s.get(phase, 0.0) + time.perf_counter() - t0

    def stop(self) -> PhaseClock:
        self.total = time.perf_counter() - self.start
        return self


@dataclass
class TokenLogprob:
    """One output token as the target scored it: log-softmax at temperature 1 of the row that chose it."""

    id: int
    piece: bytes  # the token's text (control tokens as their text, e.g. b'<|im_end|>')
    logprob: float
    top: list[tuple[int, bytes, float]]  # (id, piece, logprob) of the most likely tokens, most likely first


@dataclass
class StepRecord:
    """One speculative step: what the trainer and the metrics see."""

    proposed: int
    accepted: int
    drafted: int  # drafter tokens produced (can differ from proposed candidates across vocabularies)
    ngram_proposed: int
    ngram_accepted: int
    new_tokens: list[int]
    draft_s: float  # drafting, the drafter's catching up included
    translate_s: float
    verify_s: float  # the target pass and the acceptance: target_s + sample_s
    total_s: float  # the step's wall time: every part below, and (once the loop closes it) its text and accept
    # per new token: (target ids, probabilities) of the target's top-k at that position, if recorded
    topk: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    redecoded: bool = False  # a guarded kernel mode re-decoded a near-tie one token at a time
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per new token, if params.logprobs is set
    target_s: float = 0.0  # the target's pass (llama_decode) alone
    sample_s: float = 0.0  # acceptance or sampling from its rows, the guard's re-decode, the KV rollback
    bookkeeping_s: float = 0.0  # the policy, records, the loop's text and its consumer
    catchup_s: float = 0.0  # of draft_s: the drafter reading text written while it sat idle (Draft.catchup_s)

    @classmethod
    def of(cls, draft: Draft, verdict: Verdict, clock: PhaseClock, topk: list | None = None,
           logprobs: list[TokenLogprob] | None = None) -> StepRecord:
        """The record of a step that drafted ``draft`` (as verified) and decided ``verdict``, timed by
        ``clock``: its "target" phase, its "verify" phase (the ``sample`` part of stats.STEP_PARTS), and the
        rest of its total, less the drafter's own drafting and translation, as bookkeeping (the policy's
        choice, the drafter call's overhead, observing)."""
        c, n = draft.candidates, verdict.accepted
        ng = [kind == NGRAM for kind in c.kinds]
        target_s, sample_s = clock.s.get("target", 0.0), clock.s.get("verify", 0.0)
        drafting = draft.draft_s + draft.catchup_s
        book = clock.total - target_s - sample_s - drafting - draft.translate_s
        return cls(len(c), n, draft.drafted, sum(ng), sum(ng[:n]), list(verdict.tokens), drafting,
                   draft.translate_s, target_s + sample_s, clock.total, topk or [], verdict.redecoded,
                   logprobs or [], target_s=target_s, sample_s=sample_s, bookkeeping_s=book,
                   catchup_s=draft.catchup_s)
