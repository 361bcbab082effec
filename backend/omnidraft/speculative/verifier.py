"""Acceptance rules: small pure functions over logits and token ids.

All take ``logits`` of shape (m + 1, n_vocab): row i is the target's distribution
for the token after candidate i (row 0: after the context), and return
(n_accepted, next_token).  The output is then candidates[:n_accepted] + [next_token].

* ``verify_greedy``  - exact: the target's argmax at every position.
* ``verify_exact_sampling`` - exact: the target samples its own token at every
  position with the uniform reserved for that output position, and keeps drafts
  while they match.  For a given seed the text is identical to the target alone.
* ``verify_rejection_approx`` - the paper's rejection sampling with merged-token
  probabilities q' = prod q(sub-tokens).  APPROXIMATE: q' is not a distribution over
  the target vocabulary, so the output is not exactly distributed like the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def verify_greedy(candidates: Sequence[int], logits: np.ndarray) -> tuple[int, int]:
    for i, c in enumerate(candidates):
        t = int(np.argmax(logits[i]))
        if t != c:
            return i, t
    return len(candidates), int(np.argmax(logits[len(candidates)]))


def target_probs(row: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The target's sampling distribution after temperature, top-k and top-p (float64, sums to 1)."""
    z = row.astype(np.float64) / max(p.temperature, 1e-6)
    if p.top_k and p.top_k < z.size:
        kth = np.partition(z, -p.top_k)[-p.top_k]
        z = np.where(z >= kth, z, -np.inf)
    z -= z.max()
    probs = np.exp(z)
    probs /= probs.sum()
    if p.top_p < 1.0:
        probs = _top_p(probs, p.top_p)
    return probs


def _top_p(probs: np.ndarray, top_p: float) -> np.ndarray:
    # Sorting 150k probabilities per position is slow; the nucleus almost always lies among
    # tokens above 1e-9, so sort those and fall back to a full sort only if it does not.
    idx = np.flatnonzero(probs > 1e-9)
    if probs[idx].sum() < top_p:
        idx = np.arange(probs.size)
    order = idx[np.argsort(-probs[idx], kind="stable")]
    csum = np.cumsum(probs[order])
    keep = order[: int(np.searchsorted(csum, top_p) + 1)]
    out = np.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


def sample_with(probs: np.ndarray, u: float) -> int:
    """Inverse-CDF sample with a given uniform: deterministic, so it can be replayed."""
    csum = np.cumsum(probs)
    return int(min(np.searchsorted(csum, u * csum[-1], side="right"), probs.size - 1))


def sample_token(row: np.ndarray, p: SamplingParams, u: float) -> int:
    return int(np.argmax(row)) if p.greedy else sample_with(target_probs(row, p), u)


def verify_exact_sampling(candidates: Sequence[int], logits: np.ndarray, p: SamplingParams,
                          uniforms: Sequence[float]) -> tuple[int, int]:
    """``uniforms[i]`` is the uniform of the output position candidate i would occupy."""
    for i, c in enumerate(candidates):
        t = sample_token(logits[i], p, uniforms[i])
        if t != c:
            return i, t
    n = len(candidates)
    return n, sample_token(logits[n], p, uniforms[n])


def verify_rejection_approx(candidates: Sequence[int], q_candidates: Sequence[float], logits: np.ndarray,
                            p: SamplingParams, rng: np.random.Generator) -> tuple[int, int]:
    """APPROXIMATE (the paper's): accept c_i with min(1, p(c_i) / q'(c_i)).

    ``q_candidates[i]`` is q' of candidate i (product of its drafter sub-token probabilities).  On a
    rejection the next token is drawn from the target's own distribution: the drafter's distribution
    over target ids is not known across vocabularies, so there is no residual max(0, p - q) to take.
    """
    for i, c in enumerate(candidates):
        probs = target_probs(logits[i], p)
        q = max(float(q_candidates[i]), 1e-12)
        if rng.random() < min(1.0, probs[c] / q):
            continue
        return i, sample_with(probs, rng.random())
    n = len(candidates)
    return n, sample_with(target_probs(logits[n], p), rng.random())


def first_uncertain_row(logits: np.ndarray, p: SamplingParams, uniforms: Sequence[float], guard: float) -> int | None:
    """First row whose decision could change if every logit moved by at most ``guard``, else None.

    For a kernel mode whose batched logits are measured to stay within ``bound`` of one-token
    decoding (``guard`` = a safety multiple of it), rows before the returned one decide exactly as the
    target alone would; the returned row must be re-decoded one token at a time.
    Greedy: the top-2 margin is at most 2 * guard.  Sampling: the uniform lies within the CDF shift
    such a move can cause of a boundary of the sampled token, or top-k's k-th/k+1-th logits are that
    close.  Top-p sampling in a guarded mode is not judged here: every row counts as uncertain.
    """
    for i in range(len(logits)):
        row = logits[i]
        if p.greedy:
            top2 = np.partition(row, -2)[-2:]
            if top2[1] - top2[0] <= 2.0 * guard:
                return i
            continue
        if p.top_p < 1.0:
            return i
        if p.top_k and p.top_k < row.size:
            edge = np.partition(row, (-p.top_k - 1, -p.top_k))[-p.top_k - 1:-p.top_k + 1 or None]
            if abs(float(edge[1] - edge[0])) <= 2.0 * guard:
                return i
        probs = target_probs(row, p)
        csum = np.cumsum(probs)
        t = sample_with(probs, uniforms[i])
        lo, hi = (csum[t - 1] if t > 0 else 0.0), csum[t]
        eps = np.expm1(2.0 * guard / max(p.temperature, 1e-6))  # largest CDF shift the move can cause
        if min(uniforms[i] * csum[-1] - lo, hi - uniforms[i] * csum[-1]) <= eps:
            return i
    return None
