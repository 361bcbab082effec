"""Drafter proposal -> target candidates, one translator per method.

A *proposal* is the drafter's k token ids (drafter vocabulary) and the probability
the drafter gave each.  A *candidate* list is what the target verifies: target ids,
each with its drafter span, its kind and q' (product of its sub-token probabilities).

Correctness never depends on the translation (the target checks every candidate);
the translation only decides how much of the draft the target can accept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from omnidraft.seq import common_prefix
from .codec import Codec
from .ngram_cache import NGramCache
from .bridge import UNMAPPED, VocabBridge

DIRECT, NGRAM, RETOK, EOG, SAME, LOOKUP = "direct", "ngram", "retok", "eog", "same", "lookup"


@dataclass
class Candidates:
    ids: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)  # drafter token span [a, b)
    q: list[float] = field(default_factory=list)  # q' = prod of drafter probs over the span

    def add(self, tid: int, kind: str, span: tuple[int, int], q: float) -> None:
        self.ids.append(int(tid))
        self.kinds.append(kind)
        self.spans.append(span)
        self.q.append(float(q))

    def __len__(self) -> int:
        return len(self.ids)

    def truncate(self, n: int) -> "Candidates":
        return Candidates(self.ids[:n], self.kinds[:n], self.spans[:n], self.q[:n])

    def drafted_accepted(self, n_accepted: int) -> int:
        """Drafter tokens covered by the first n_accepted candidates."""
        return self.spans[n_accepted - 1][1] if n_accepted > 0 else 0


@dataclass
class Proposal:
    ids: list[int]  # drafter vocabulary
    probs: list[float]  # drafter probability of each id


class Translator(Protocol):
    def begin(self, target_ids: Sequence[int]) -> None: ...

    def translate(self, proposal: Proposal) -> Candidates: ...

    def learn(self, proposal: Proposal, new_target_ids: Sequence[int]) -> None: ...

    def token_flags(self, draft_ids: Sequence[int]) -> tuple[bool, bool]:
        """(completes a cached n-gram merge, maps directly) for the last drafted token, as predictor features."""


NO_FLAGS = (False, True)  # translators without an n-gram cache: no merge, as if mapped directly


def _prod(xs: Sequence[float]) -> float:
    return float(np.prod(xs)) if len(xs) else 1.0


class IdentityTranslator:
    """Same vocabulary on both sides: candidates are the draft."""

    def begin(self, target_ids: Sequence[int]) -> None:
        pass

    def translate(self, proposal: Proposal) -> Candidates:
        c = Candidates()
        for i, (d, p) in enumerate(zip(proposal.ids, proposal.probs)):
            c.add(d, SAME, (i, i + 1), p)
        return c

    def learn(self, proposal: Proposal, new_target_ids: Sequence[int]) -> None:
        pass

    def token_flags(self, draft_ids: Sequence[int]) -> tuple[bool, bool]:
        return NO_FLAGS



class DirectTranslator:
    """TLI: map shared tokens one to one; stop at the first token without a mapping."""

    def __init__(self, bridge: VocabBridge):
        self.bridge = bridge

    def begin(self, target_ids: Sequence[int]) -> None:
        pass

    def translate(self, proposal: Proposal) -> Candidates:
        c = Candidates()
        for i, (d, p) in enumerate(zip(proposal.ids, proposal.probs)):
            if d in self.bridge.eog_d2t:
                c.add(self.bridge.eog_d2t[d], EOG, (i, i + 1), p)
                break
            t = int(self.bridge.d2t[d])
            if t == UNMAPPED:
                break
            c.add(t, DIRECT, (i, i + 1), p)
        return c

    def learn(self, proposal: Proposal, new_target_ids: Sequence[int]) -> None:
        pass

    def token_flags(self, draft_ids: Sequence[int]) -> tuple[bool, bool]:
        return NO_FLAGS



class _LookBehind:
    """The last few target tokens of the context, for re-tokenising at the boundary.

    A draft's text tokenised on its own can split differently from the same text
    after the context (BPE pre-tokenisation is context dependent).  We tokenise
    tail + draft text and keep what follows the tail, when the tail's own tokens
    come out unchanged (else the draft text alone)."""

    WINDOW = 4

    def __init__(self, target_codec: Codec):
        self.tc = target_codec
        self.tail: list[int] = []

    def reset(self, target_ids: Sequence[int]) -> None:
        self.tail = []
        self.push(target_ids[-self.WINDOW:])

    def push(self, target_ids: Sequence[int]) -> None:
        for t in target_ids:
            if self.tc.engine.is_special[t]:
                self.tail = []  # never re-tokenise across a control token
            else:
                self.tail.append(int(t))
        del self.tail[: -self.WINDOW]

    def canonical(self, text: bytes) -> list[int]:
        """The target tokenizer's tokenisation of ``text`` as it continues the context."""
        if not text:
            return []
        tail = self.tc.decode(self.tail)
        if tail:
            ids = self.tc.encode(tail + text)
            acc = 0
            for j, t in enumerate(ids):
                if acc == len(tail):
                    return ids[j:]
                acc += len(self.tc.token_bytes[t])
                if acc > len(tail):
                    break
        return self.tc.encode(text)


class TextTranslator:
    """SLEM: re-tokenise the drafted text with the target tokenizer (string-level exact match)."""

    def __init__(self, bridge: VocabBridge, draft_codec: Codec, target_codec: Codec):
        self.bridge, self.dc, self.tc = bridge, draft_codec, target_codec
        self.look = _LookBehind(target_codec)

    def begin(self, target_ids: Sequence[int]) -> None:
        self.look.reset(target_ids)

    def translate(self, proposal: Proposal) -> Candidates:
        ids, probs, eog = _split_eog(proposal, self.bridge)
        c = Candidates()
        text = self.dc.decode(ids)
        for tid, span, q in _label(self.look.canonical(text), ids, probs, self.dc, self.tc):
            c.add(tid, RETOK, span, q)
        if eog is not None:
            c.add(eog, EOG, (len(ids), len(ids) + 1), proposal.probs[len(ids)])
        return c

    def learn(self, proposal: Proposal, new_target_ids: Sequence[int]) -> None:
        self.look.push(new_target_ids)

    def token_flags(self, draft_ids: Sequence[int]) -> tuple[bool, bool]:
        return NO_FLAGS



class OmniTranslator:
    """OmniDraft: merge runs found in the n-gram cache, map shared tokens directly,
    re-tokenise the remaining runs as text; learns new merges from verified output.

    Beyond the paper: the token-level result is checked against the target
    tokenizer's own tokenisation of the same text (with a look-behind window); where
    they differ, the canonical one is used from the first difference on, because a
    target model almost always continues with canonical tokens (the cache learns the merges, so such
    corrections become rare).
    """

    def __init__(self, bridge: VocabBridge, cache: NGramCache, draft_codec: Codec, target_codec: Codec,
                 canonical_check: bool = True):
        self.bridge, self.cache, self.dc, self.tc = bridge, cache, draft_codec, target_codec
        self.look = _LookBehind(target_codec)
        self.canonical_check = canonical_check

    def begin(self, target_ids: Sequence[int]) -> None:
        self.look.reset(target_ids)

    def token_flags(self, draft_ids: Sequence[int]) -> tuple[bool, bool]:
        """(completes a cached n-gram merge, maps directly) for the last drafted token."""
        ngram = any(self.cache.get(draft_ids[-n:]) is not None for n in range(2, min(len(draft_ids), 4) + 1))
        return ngram, bool(self.bridge.d2t[draft_ids[-1]] != UNMAPPED)

    def translate(self, proposal: Proposal) -> Candidates:
        ids, probs, eog = _split_eog(proposal, self.bridge)
        c = self._token_level(ids, probs)
        if self.canonical_check and ids:
            canon = self.look.canonical(self.dc.decode(ids))
            if canon != c.ids:
                same = common_prefix(canon, c.ids)
                c = c.truncate(same)
                for tid, span, q in _label(canon, ids, probs, self.dc, self.tc)[same:]:
                    c.add(tid, RETOK, span, q)
        if eog is not None:
            c.add(eog, EOG, (len(ids), len(ids) + 1), proposal.probs[len(ids)])
        return c

    def _token_level(self, ids: list[int], probs: list[float]) -> Candidates:
        c = Candidates()
        i, n = 0, len(ids)
        while i < n:
            hit = self.cache.longest_match(ids, i)
            if hit is not None:
                tid, run = hit
                c.add(tid, NGRAM, (i, i + run), _prod(probs[i: i + run]))
                i += run
                continue
            t = int(self.bridge.d2t[ids[i]])
            if t != UNMAPPED:
                c.add(t, DIRECT, (i, i + 1), probs[i])
                i += 1
                continue
            j = i + 1  # a run with neither: spell its text in target tokens
            while j < n and self.bridge.d2t[ids[j]] == UNMAPPED and self.cache.get(ids[j: j + 2]) is None:
                j += 1
            q = _prod(probs[i:j])
            for tid in self.tc.encode(self.dc.decode(ids[i:j])):
                c.add(tid, RETOK, (i, j), q)
            i = j
        return c

    def learn(self, proposal: Proposal, new_target_ids: Sequence[int]) -> None:
        """Add every multi-token drafter spelling of the verified target tokens.

        Two spellings per token: the drafter's canonical tokenisation of its text, and
        the drafter's actual drafted span when it lines up with the token exactly.
        """
        tb, dtb = self.tc.token_bytes, self.dc.token_bytes
        spans = _drafted_spans(proposal.ids, dtb)
        pos = 0
        for tid in new_target_ids:
            piece = tb[tid]
            if not piece or self.tc.engine.is_special[tid]:
                break
            canon = self.dc.encode(piece)
            if len(canon) >= 2:
                self.cache.add(canon, tid)
            run = spans.get((pos, pos + len(piece)))
            if run is not None and run[1] - run[0] >= 2:
                self.cache.add(proposal.ids[run[0]: run[1]], tid)
            pos += len(piece)
        self.look.push(new_target_ids)


def _split_eog(proposal: Proposal, bridge: VocabBridge) -> tuple[list[int], list[float], int | None]:
    """Proposal up to an end-of-generation token, and that token mapped to the target (if any)."""
    for i, d in enumerate(proposal.ids):
        if d in bridge.eog_d2t:
            return proposal.ids[:i], proposal.probs[:i], bridge.eog_d2t[d]
    return proposal.ids, proposal.probs, None


def _label(target_ids: Sequence[int], draft_ids: Sequence[int], probs: Sequence[float], dc: Codec,
           tc: Codec) -> list[tuple[int, tuple[int, int], float]]:
    """For target tokens spelling the same text as the draft: each one's drafter span and q'.

    A drafter token belongs to the target token in which it starts; q' is the product
    of the probabilities of the drafter tokens that belong to it."""
    starts, pos = [], 0
    for d in draft_ids:
        starts.append(pos)
        pos += len(dc.token_bytes[d])
    out, a, di = [], 0, 0
    for t in target_ids:
        b = a + len(tc.token_bytes[t])
        d0 = di
        while di < len(draft_ids) and starts[di] < b:
            di += 1
        out.append((int(t), (d0, di), _prod(list(probs[d0:di]))))
        a = b
    return out



def _drafted_spans(ids: Sequence[int], token_bytes: list[bytes]) -> dict[tuple[int, int], tuple[int, int]]:
    """Byte range [start, end) of every contiguous run of drafted tokens -> its token range."""
    offsets = [0]
    for d in ids:
        offsets.append(offsets[-1] + len(token_bytes[d]))
    out = {}
    for a in range(len(ids)):
        for b in range(a + 2, min(len(ids), a + 8) + 1):
            out.setdefault((offsets[a], offsets[b]), (a, b))
    return out
