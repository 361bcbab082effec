"""Direct map between a drafter vocabulary and a target vocabulary.

Tokens are compared by their raw bytes (llama.cpp's token_to_piece), which already
undoes SentencePiece '▁', byte-level BPE 'Ġ'/'Ċ' and '<0xNN>' byte-fallback
spellings, so two vocabularies agree on a token exactly when it spells the same
bytes.  Special (control) tokens never map, except end-of-generation tokens whose
text is identical on both sides (e.g. '<|im_end|>' in two ChatML models).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from omnidraft.errors import VocabularyMismatch

UNMAPPED = -1


def vocab_fingerprint(token_bytes: Sequence[bytes]) -> str:
    """Stable id of a vocabulary (the n-gram cache file is keyed by a pair of these)."""
    h = hashlib.sha256()
    for b in token_bytes:
        h.update(len(b).to_bytes(2, "little"))
        h.update(b)
    return h.hexdigest()[:16]


@dataclass
class VocabBridge:
    d2t: np.ndarray  # int32[n_draft]: target id or UNMAPPED
    t2d: np.ndarray  # int32[n_target]: drafter id or UNMAPPED
    eog_d2t: dict[int, int]  # drafter end-of-generation id -> target one with the same text
    draft_fp: str
    target_fp: str

    @property
    def n_shared(self) -> int:
        return int((self.d2t != UNMAPPED).sum())

    @property
    def same_vocab(self) -> bool:
        return self.draft_fp == self.target_fp

    def coverage(self) -> tuple[float, float]:
        """Shared tokens as a share of (drafter vocab, target vocab)."""
        return self.n_shared / len(self.d2t), self.n_shared / len(self.t2d)


def build_bridge(draft, target) -> VocabBridge:
    """``draft``/``target`` expose token_bytes, is_special, eog_ids and special_text() (an Engine)."""
    by_bytes: dict[bytes, int] = {}
    for tid, b in enumerate(target.token_bytes):
        if b and not target.is_special[tid]:
            by_bytes.setdefault(b, tid)
    d2t = np.full(len(draft.token_bytes), UNMAPPED, dtype=np.int32)
    t2d = np.full(len(target.token_bytes), UNMAPPED, dtype=np.int32)
    for did, b in enumerate(draft.token_bytes):
        if not b or draft.is_special[did]:
            continue
        tid = by_bytes.get(b)
        if tid is not None:
            d2t[did] = tid
            if t2d[tid] == UNMAPPED:
                t2d[tid] = did
    if not (d2t != UNMAPPED).any():
        raise VocabularyMismatch("drafter and target share no token: they cannot be paired")
    target_eog = {target.special_text(t): t for t in sorted(target.eog_ids)}
    eog = {d: target_eog[draft.special_text(d)] for d in sorted(draft.eog_ids) if draft.special_text(d) in target_eog}
    return VocabBridge(d2t, t2d, eog, vocab_fingerprint(draft.token_bytes), vocab_fingerprint(target.token_bytes))
