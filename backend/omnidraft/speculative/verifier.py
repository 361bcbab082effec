"""Acceptance rules: small pure functions over logits and token ids.

All take ``logits`` of shape (m + 1, n_vocab): row i is the target's distribution
for the token after candidate i (row 0: after the context), and return
(n_accepted, next_token).  The output is then candidates[:n_accepted] + [next_token].

* ``verify_greedy``  - exact: the target's argmax at every position.
* ``verify_exact_sampling`` - exact: the target samples its own token at every
  position with the uniform reserved for that output position (``draw``, the one
  sampler the target alone also uses), and keeps drafts while they match.  For a
  given seed the text is identical to the target alone.
* ``verify_rejection_approx`` - the paper's rejection sampling with merged-token
  probabilities q' = prod q(sub-tokens).  APPROXIMATE: q' is not a distribution over
  the target vocabulary, so the output is not exactly distributed like the target.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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


BLOCK = 256  # tokens per block of the sampler's two-level sum (draw)


def weights(row: np.ndarray, p: SamplingParams) -> tuple[np.ndarray | None, np.ndarray]:
    """The sampling distribution of one logits row, unnormalised: (token ids ascending, or None for the whole
    vocabulary; float64 weights).  Temperature, then top-k, then top-p, as the target alone samples.

    Every draw of a step (the target alone's, each verified row's) comes from here, so a draft is kept
    exactly where the target alone would have sampled it.  The arithmetic runs in place, in float64: on
    152k logits, the fresh temporaries of ``exp(z - max)`` cost more in page faults than the exp itself."""
    ids = None
    z = row
    if p.top_k and p.top_k < z.size:
        ids = top_k_ids(z, p.top_k)
        z = z[ids]
    w = np.subtract(z, z.max(), dtype=np.float64)
    if p.temperature != 1.0:
        w *= 1.0 / max(p.temperature, 1e-6)
    np.exp(w, out=w)
    if p.top_p < 1.0:
        keep = _nucleus(w, p.top_p)
        ids, w = (keep if ids is None else ids[keep]), w[keep]
    return ids, w


def top_k_ids(z: np.ndarray, k: int) -> np.ndarray:
    """Ids (ascending) of every logit at least the k-th largest (ties at the k-th all kept).  The k-th largest
    of every 8th logit is no larger than the whole row's, so the logits at or above it hold the top k: one
    partition of an eighth of the row, then one of that short list, instead of one of the whole row."""
    sub = z[::8]
    cand = np.flatnonzero(z >= np.partition(sub, -k)[-k]) if sub.size >= k else np.arange(z.size)
    kth = np.partition(z[cand], -k)[-k]
    return cand[z[cand] >= kth]


def _nucleus(w: np.ndarray, top_p: float) -> np.ndarray:
    """Positions (ascending) of the smallest set of the heaviest weights whose sum reaches top_p of the total,
    ties ordered by position.  Without a sort of the whole row (15 ms for 152k weights here): the weights
    above a bound are a head of the sorted order, so where they reach top_p only they are sorted (most rows:
    the heaviest weight is 1, and the nucleus rarely reaches below 2**-10 of it); else ``_nucleus_binned``."""
    need = top_p * w.sum()
    head = np.flatnonzero(w >= 2.0 ** -10)
    if w[head].sum() < need:
        return _nucleus_binned(w, need)
    order = head[np.argsort(-w[head], kind="stable")]
    return np.sort(order[: int(np.searchsorted(np.cumsum(w[order]), need)) + 1])


def _nucleus_binned(w: np.ndarray, need: float) -> np.ndarray:
    """``_nucleus`` for a flat row: weights fall in bins by their binary exponent and first 4 mantissa bits
    (16 a halving, heavier first), whole bins go in until the one where the sum reaches ``need``, and only that
    bin's weights are sorted."""
    m, e = np.frexp(w)  # w = m * 2**e, m in [0.5, 1); w == 0: m = e = 0 (no mass; kept out below)
    bins = (1 - e) * 16 + (15 - ((m - 0.5) * 32).astype(np.int64))
    above = np.concatenate([[0.0], np.cumsum(np.bincount(bins, weights=w))])  # above[b]: mass of bins before b
    b = min(int(np.searchsorted(above, need, side="left")) - 1, above.size - 2)
    edge = np.flatnonzero((bins == b) & (w > 0.0))
    order = edge[np.argsort(-w[edge], kind="stable")]
    n = int(np.searchsorted(above[b] + np.cumsum(w[order]), need)) + 1
    keep = (bins < b) & (w > 0.0)
    keep[order[:n]] = True
    return np.flatnonzero(keep)


def draw(row: np.ndarray, p: SamplingParams, u: float) -> tuple[int, float, float, float]:
    """Inverse-CDF sample with a given uniform, deterministic so that it can be replayed: (token, the token's
    CDF interval lo and hi, the total weight), in token-id order.  The CDF is summed in blocks of BLOCK tokens
    (block sums, then one block's running sum): a flat running sum of 152k float64 values, with its fresh 1.2 MB
    output, cost 1.5 ms a row here."""
    ids, w = weights(row, p)
    total = float(w.sum())
    target = u * total
    if w.size > 4 * BLOCK:
        full = w.size // BLOCK * BLOCK
        sums = w[:full].reshape(-1, BLOCK).sum(axis=1)
        ends = np.cumsum(np.append(sums, w[full:].sum()) if full < w.size else sums)
        b = min(int(np.searchsorted(ends, target, side="right")), ends.size - 1)
        base, start = (float(ends[b - 1]) if b else 0.0), b * BLOCK
        part = w[start: start + BLOCK]
    else:
        base, start, part = 0.0, 0, w
    csum = base + np.cumsum(part)
    j = int(np.searchsorted(csum, target, side="right"))
    if j < part.size and part[j] > 0.0:
        pos, lo, hi = start + j, (float(csum[j - 1]) if j else base), float(csum[j])
    else:  # u * total in a rounding gap at a block's end: the last weighted token before it, judged uncertain
        pos, lo, hi = int(np.flatnonzero(w[:start + min(j, part.size - 1) + 1])[-1]), target, target
    return (pos if ids is None else int(ids[pos])), lo, hi, total


def target_probs(row: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The target's sampling distribution after temperature, top-k and top-p, over the whole vocabulary
    (float64, sums to 1): what ``draw`` samples from."""
    ids, w = weights(row, p)
    if ids is None:
        return w / w.sum()
    out = np.zeros(row.size)
    out[ids] = w
    return out / out.sum()


def sample_with(probs: np.ndarray, u: float) -> int:
    """Inverse-CDF sample of a dense distribution with a given uniform (the approximate scheme's resampling)."""
    csum = np.cumsum(probs)
    return int(min(np.searchsorted(csum, u * csum[-1], side="right"), probs.size - 1))


def sample_token(row: np.ndarray, p: SamplingParams, u: float) -> int:
    return int(np.argmax(row)) if p.greedy else draw(row, p, u)[0]


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


def _nucleus_certain(row: np.ndarray, p: SamplingParams, guard: float) -> bool:
    """Whether top-p keeps the same tokens however every logit moves by at most ``guard``.  Such a move scales
    any weight against any other by at most r = exp(2 guard / T), so a set of mass P keeps between
    P / (P + r (1 - P)) and r P / (r P + 1 - P) of the total (``_moved``).  The nucleus (the heaviest tokens
    whose mass first reaches top_p) stays the same set if (1) no token outside it can overtake one inside,
    (2) it still reaches top_p, and (3) no set of all its tokens but one does, the lightest left out (the
    heaviest such set)."""
    _, w = weights(row, replace(p, top_p=1.0))  # temperature and top-k, as draw applies them first
    inside = np.zeros(w.size, dtype=bool)
    inside[_nucleus(w, p.top_p)] = True
    r = float(np.exp(2.0 * guard / max(p.temperature, 1e-6)))
    kept, outside = w[inside], w[~inside]
    total, lightest = float(w.sum()), float(kept.min())
    if outside.size and lightest <= r * float(outside.max()):
        return False
    mass = float(kept.sum()) / total
    return _moved(mass, 1.0 / r) > p.top_p and _moved(mass - lightest / total, r) < p.top_p


def _moved(mass: float, r: float) -> float:
    """A set's share of the total once its weights are scaled by r against the rest's."""
    return r * mass / (r * mass + 1.0 - mass)


def first_uncertain_row(logits: np.ndarray, p: SamplingParams, uniforms: Sequence[float], guard: float) -> int | None:
    """First row whose decision could change if every logit moved by at most ``guard``, else None.

    For a kernel mode whose batched logits are measured to stay within ``bound`` of one-token
    decoding (``guard`` = a safety multiple of it), rows before the returned one decide exactly as the
    target alone would; the returned row must be re-decoded one token at a time.
    Greedy: the top-2 margin is at most 2 * guard.  Sampling: the uniform lies within the CDF shift
    such a move can cause of a boundary of the sampled token, or top-k's k-th/k+1-th logits are that
    close, or top-p's nucleus could gain or lose a token (``_nucleus_certain``).
    """
    for i in range(len(logits)):
        row = logits[i]
        if p.greedy:
            top2 = np.partition(row, -2)[-2:]
            if top2[1] - top2[0] <= 2.0 * guard:
                return i
            continue
        if p.top_k and p.top_k < row.size:
            top = row[top_k_ids(row, p.top_k + 1)]  # the k+1 largest (and ties): no partition of the whole row
            edge = np.partition(top, (-p.top_k - 1, -p.top_k))[-p.top_k - 1:-p.top_k + 1 or None]
            if abs(float(edge[1] - edge[0])) <= 2.0 * guard:
                return i
        if p.top_p < 1.0 and not _nucleus_certain(row, p, guard):
            return i
        _, lo, hi, total = draw(row, p, uniforms[i])
        lo, hi = lo / total, hi / total
        eps = np.expm1(2.0 * guard / max(p.temperature, 1e-6))  # largest CDF shift the move can cause
        if min(uniforms[i] - lo, hi - uniforms[i]) <= eps:
            return i
    return None
