"""Drafters behind one narrow protocol: begin / draft / accept / stats.

``draft(k, stop)`` returns one plain value, a ``Draft``: the candidates, what the drafter knew about
each token it drafted, and what drafting cost; ``accept(verdict)`` hands back what the target decided, one
``Verdict`` (both in ``step.py``).  New drafters are composed (a model engine + a
translator), not subclassed, and registered by method name in ``methods.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from omnidraft.vocab.codec import Codec
from omnidraft.llama.engine import Engine
from omnidraft.errors import ContextOverflow
from omnidraft.vocab import chat
from omnidraft.vocab.translator import LOOKUP, Candidates, Proposal, Translator

from .rules import StopRule
from .predictor import DraftFeatures
from .step import CATCHUP_MIN, Draft, Verdict


@dataclass
class PromptInput:
    """What every drafter is told about a new request."""

    target_ids: list[int]
    text: bytes  # the rendered prompt, special tokens written out as text
    messages: list[dict] | None = None
    # character spans of text that are plain text (message contents; a whole completion prompt):
    # control-token text there is never parsed as a control token (chat.tokenize); None = no such spans
    plain: list[tuple[int, int]] | None = None

    def tokenize(self, engine: Engine) -> list[int]:
        """This prompt in another engine's vocabulary (its own BOS rule), contents kept as text."""
        if self.plain is None:
            return engine.tokenize(self.text, add_bos=engine.add_bos, special=True)
        return chat.tokenize(engine, self.text.decode("utf-8"), self.plain, engine.add_bos)


@dataclass
class DraftCounters:
    """Per drafter, over its life: its own counts (the generator's statistics count the steps)."""

    drafts: int = 0
    drafted_tokens: int = 0  # drafter tokens produced
    draft_s: float = 0.0
    translate_s: float = 0.0
    catchup_s: float = 0.0  # reading text written while the drafter sat idle
    # drafter decodes by tokens fed: the first of a step also ingests the target's last tokens,
    # so it costs more than a one-token decode; the cost model prices each size separately
    pass_hist: dict[int, int] = field(default_factory=dict)

    def add(self, d: Draft) -> Draft:
        self.drafts += 1
        self.drafted_tokens += d.drafted
        self.draft_s += d.draft_s
        self.translate_s += d.translate_s
        self.catchup_s += d.catchup_s
        return d

    def as_dict(self) -> dict:
        return {**self.__dict__, "pass_hist": dict(self.pass_hist)}


class Drafter(Protocol):
    name: str
    window: int  # the most prompt tokens ``begin`` reads (0: all; a drafter without a model reads none)

    def begin(self, prompt: PromptInput, read: bool = True) -> None:
        """Start a new request with this prompt.  ``read=False``: the policy expects no drafting to pay, so a
        drafter with a model of its own may leave the prompt unread until it is first asked to draft (read then
        as catching up, ``Draft.catchup_s``), or never."""

    def draft(self, k: int, stop: StopRule) -> Draft:
        """Propose up to k drafter tokens as target candidates; ``stop.keep_going(depth, features)`` may end early."""

    def accept(self, verdict: Verdict) -> None:
        """What the target decided on the last draft: the candidates it kept, its new tokens and their text."""

    def stats(self) -> dict:
        """This drafter's counters (DraftCounters), for metrics and benchmarks."""


class ModelDrafter:
    """A small LM drafting in its own vocabulary, translated for the target."""

    def __init__(self, name: str, engine: Engine, translator: Translator, codec: Codec,
                 allowed: np.ndarray | None = None, eog_ids: frozenset[int] = frozenset(), window: int = 0):
        """``window``: read only a prompt's latest ``window`` to 1.25 x ``window`` tokens (``window_start``; 0: all)."""
        self.name, self.engine, self.translator, self.codec = name, engine, translator, codec
        self.window = window
        # a frequency-ranked head (FR-Spec): logits column j is token head[j]; the row is cut to the head and
        # every per-token step (mask, argmax, features) runs over its K columns instead of the whole vocabulary
        self._head = engine.head_ids
        # additive mask: 0 where the drafter may propose, -inf elsewhere (TLI uses the shared vocab)
        self._bias = None if allowed is None else np.where(allowed, 0.0, -np.inf).astype(np.float32)
        if self._bias is not None and self._head is not None:
            self._bias = self._bias[self._head]
        self._eog = eog_ids
        self.counters = DraftCounters()
        self.ctx: list[int] = []  # the drafter's view of prompt + output, in its own ids
        self.last: Proposal = Proposal([], [])
        self._queued_ids: list[int] = []  # target output not yet in the drafter's context
        self._queued_bytes = b""
        self.disabled = False  # set when the drafter's context is full: the target goes on alone

    def begin(self, prompt: PromptInput, read: bool = True) -> None:
        ids = self._prompt_ids(prompt)
        ids = ids[window_start(len(ids), self.window):]
        self.translator.begin(prompt.target_ids)
        self.ctx = ids
        self.disabled = len(ids) + 16 > self.engine.n_ctx
        self.last = Proposal([], [])
        self._queued_ids, self._queued_bytes = [], b""
        if self.disabled:
            return
        if read:
            self.engine.prefill(ids)  # all but the last token; that one is decoded by draft()
        elif not self.engine.reuse_prefix(ids):  # what an earlier request left that this one starts with
            self.engine.reset()  # as prefill() starts a context from nothing: the same KV when it is read

    def _prompt_ids(self, prompt: PromptInput) -> list[int]:
        e = self.engine
        ids = prompt.tokenize(e)
        return ids or [e.bos_id if e.bos_id >= 0 else 0]

    def draft(self, k: int, stop: StopRule) -> Draft:
        if self.disabled or k <= 0:
            return Draft()
        t_sync = self._sync()
        todo = self.ctx[len(self.engine.tokens):]
        ids: list[int] = []
        probs: list[float] = []
        feats: list[DraftFeatures] = []
        catchup_s, first_read, first_s, t0 = 0.0, 0, 0.0, time.perf_counter()
        try:
            if len(todo) > CATCHUP_MIN:  # text written while it sat idle: read apart, priced apart (Draft.catchup_s)
                self.engine.decode(todo[:-1], "none")
                todo = todo[-1:]
                catchup_s = time.perf_counter() - t0
                t0 += catchup_s
            for depth in range(k):
                if depth == 1:  # the first pass, as it also reads the target's tokens since the last draft
                    first_s = time.perf_counter() - t0
                row = self.engine.decode(todo, "last")[0]
                if depth == 0:
                    first_read = len(todo)
                self.counters.pass_hist[len(todo)] = self.counters.pass_hist.get(len(todo), 0) + 1
                if self._head is not None:
                    row = row[:len(self._head)]
                if self._bias is not None:
                    row = row + self._bias
                j = int(np.argmax(row))
                d = j if self._head is None else int(self._head[j])
                if self.engine.is_special[d] and d not in self._eog:
                    break
                f = DraftFeatures.from_row(row, j, depth)
                f.token = d
                ids.append(d)
                probs.append(f.p_top1)
                f.ngram, f.direct = self.translator.token_flags(ids)
                feats.append(f)
                if d in self._eog or not stop.keep_going(depth, f):
                    break
                todo = [d]
        except ContextOverflow:
            self.disabled = True
        t1 = time.perf_counter()
        first_s = first_s or (t1 - t0 if first_read else 0.0)  # one pass in all
        self.last = Proposal(ids, probs)
        cands = self.translator.translate(self.last)
        t2 = time.perf_counter()
        return self.counters.add(Draft(cands, tuple(feats), len(ids), t1 - t0, t_sync + t2 - t1,
                                       catchup_s=catchup_s, first_read=first_read, first_s=first_s))

    def accept(self, verdict: Verdict) -> None:
        # Text the target wrote while the drafter sat idle is only queued: when the policy
        # stops drafting for a while, the drafter costs nothing until it is asked again.
        self._queued_ids.extend(verdict.tokens)
        self._queued_bytes += verdict.text
        if self.last.ids:
            self.counters.translate_s += self._sync()

    def _sync(self) -> float:
        """Bring the drafter's context up to the target's text; the one rollback per step.  Returns its seconds."""
        if not self._queued_ids and not self.last.ids:
            return 0.0
        t0 = time.perf_counter()
        new_ids, new_bytes = self._queued_ids, self._queued_bytes
        self._queued_ids, self._queued_bytes = [], b""
        self.translator.learn(self.last, new_ids)
        tb = self.codec.token_bytes
        kept, used = 0, 0  # drafted tokens whose text the target confirmed
        for d in self.last.ids:
            piece = tb[d]
            if not piece or not new_bytes.startswith(piece, used):
                break
            kept += 1
            used += len(piece)
        self.ctx += self.last.ids[:kept] + self.codec.encode(new_bytes[used:])
        self.engine.reuse_prefix(self.ctx)
        self.last = Proposal([], [])
        return time.perf_counter() - t0

    def stats(self) -> dict:
        return {"name": self.name, **self.counters.as_dict()}


class PromptLookupDrafter:
    """No model: propose the continuation of the latest earlier match of the context's last n-gram."""

    window = 0  # nothing to read: it searches the whole context as target ids

    def __init__(self, name: str = "prompt-lookup", max_ngram: int = 3, min_ngram: int = 1):
        self.name, self.max_ngram, self.min_ngram = name, max_ngram, min_ngram
        self.tokens: list[int] = []
        self.counters = DraftCounters()

    def begin(self, prompt: PromptInput, read: bool = True) -> None:
        self.tokens = list(prompt.target_ids)  # no model: nothing to read

    def draft(self, k: int, stop: StopRule) -> Draft:
        t0 = time.perf_counter()
        found = prompt_lookup(self.tokens, k, self.max_ngram, self.min_ngram)
        c = Candidates()
        for i, t in enumerate(found):
            c.add(t, LOOKUP, (i, i + 1), 1.0)
        return self.counters.add(Draft(c, draft_s=time.perf_counter() - t0))

    def accept(self, verdict: Verdict) -> None:
        self.tokens.extend(verdict.tokens)

    def stats(self) -> dict:
        return {"name": self.name, **self.counters.as_dict()}


class LookupFirstDrafter:
    """Free drafts first: where the context already holds a continuation (prompt lookup on an n-gram of
    ``min_ngram``+ tokens), propose it and skip the model's passes; otherwise ask the model drafter.

    Composed, not subclassed: both drafters see every request and every accepted token, so the model
    drafter's context stays complete (it only queues text while lookup drafts, at no cost)."""

    def __init__(self, name: str, model: Drafter, min_ngram: int = 2, max_ngram: int = 4):
        self.name, self.model = name, model
        self.lookup = PromptLookupDrafter(f"{name}/lookup", max_ngram=max_ngram, min_ngram=min_ngram)

    @property
    def window(self) -> int:
        """The model's: lookup searches the whole prompt, only the model reads it."""
        return self.model.window

    def begin(self, prompt: PromptInput, read: bool = True) -> None:
        self.lookup.begin(prompt)
        self.model.begin(prompt, read)

    def draft(self, k: int, stop: StopRule) -> Draft:
        free = self.lookup.draft(k, stop)
        return free if len(free.candidates) else self.model.draft(k, stop)

    def accept(self, verdict: Verdict) -> None:
        self.lookup.accept(verdict)
        self.model.accept(verdict)

    def stats(self) -> dict:
        return {**self.model.stats(), "name": self.name, "lookup": self.lookup.stats()}


WINDOW_STRIDE_SHARE = 4  # the window's start moves in steps of a quarter of it


def window_start(n: int, window: int) -> int:
    """Where a drafter with a ``window`` starts reading a context of ``n`` tokens: 0 if it fits, else as late as
    leaves at least ``window`` tokens, in steps of window / WINDOW_STRIDE_SHARE, so that the start stays put while a
    chat's prompt grows by a turn and the drafter keeps its cache of the prefix (``Engine.reuse_prefix``).

    Why a window: each of a drafter's passes attends over its whole cache, and it reads the prompt before it drafts.
    The served drafter on a 2-core Zen 4 ran a one-token pass in 3.4 ms at 128 cells and 10.6 ms at 2,048 (a quarter
    of the 1.5B target's decode there), and took 2.2 s to read 2,048 tokens (``scripts/lab/draft_context.py``).  On
    three held-out 1.2-2.3k-token prompts the default ran 1.15-1.53x its target alone with a window of 512, 1.09-1.39x
    reading the whole prompt (BENCHMARKS.md "Long prompts, continued").  Lookup drafting (hybrid) still searches the
    whole prompt."""
    if not window or n <= window:
        return 0
    stride = max(1, window // WINDOW_STRIDE_SHARE)
    return (n - window) // stride * stride


def prompt_lookup(tokens: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Tokens that followed the most recent earlier occurrence of the longest matching suffix n-gram."""
    n_tok = len(tokens)
    for n in range(min(max_ngram, n_tok - 1), min_ngram - 1, -1):
        suffix = list(tokens[n_tok - n:])
        for start in range(n_tok - n - 1, -1, -1):
            if list(tokens[start: start + n]) == suffix:
                follow = list(tokens[start + n: start + n + k])
                if follow:
                    return follow
    return []

