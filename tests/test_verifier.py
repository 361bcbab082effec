"""Verification rules on hand-made logits: no model involved."""

import numpy as np
import pytest

from omnidraft.speculative.verifier import (SamplingParams, sample_token, target_probs, top_k_ids,
                                            verify_exact_sampling, verify_greedy, verify_rejection_approx)


def onehot_rows(argmaxes, vocab=6):
    rows = np.zeros((len(argmaxes), vocab), dtype=np.float32)
    for i, a in enumerate(argmaxes):
        rows[i, a] = 5.0
    return rows


def test_greedy_accepts_matching_prefix_and_returns_target_token():
    logits = onehot_rows([1, 2, 3, 4])
    assert verify_greedy([1, 2, 3], logits) == (3, 4)  # all accepted + bonus
    assert verify_greedy([1, 5, 3], logits) == (1, 2)  # stops at the first mismatch
    assert verify_greedy([], logits[:1]) == (0, 1)


def test_exact_sampling_equals_target_alone_token_by_token():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 50)).astype(np.float32)
    p = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=1)
    u = rng.random(5)
    alone = [sample_token(logits[i], p, u[i]) for i in range(5)]
    # drafts equal to the target's own choices are all kept
    assert verify_exact_sampling(alone[:4], logits, p, u) == (4, alone[4])
    # a wrong draft at position 2: the target's own token replaces it
    wrong = alone[:2] + [(alone[2] + 1) % 50, alone[3]]
    assert verify_exact_sampling(wrong, logits, p, u) == (2, alone[2])


def test_top_k_and_top_p_restrict_support():
    row = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float64)).astype(np.float32)
    p = target_probs(row, SamplingParams(temperature=1.0, top_k=2))
    assert np.count_nonzero(p) == 2 and p[0] > p[1] > 0
    p = target_probs(row, SamplingParams(temperature=1.0, top_p=0.7))
    assert set(np.flatnonzero(p)) == {0, 1}
    assert p.sum() == pytest.approx(1.0)


def test_sampling_distribution_matches_target_probs():
    row = np.array([0.0, 1.0, 2.0], dtype=np.float32)
    p = SamplingParams(temperature=1.0)
    u = np.random.default_rng(3).random(20000)
    counts = np.bincount([sample_token(row, p, x) for x in u], minlength=3) / len(u)
    assert np.allclose(counts, target_probs(row, p), atol=0.015)


def test_rejection_approx_accepts_when_p_dominates_q():
    logits = onehot_rows([1, 2, 3]) * 4  # target nearly certain
    rng = np.random.default_rng(0)
    n, nxt = verify_rejection_approx([1, 2], [0.5, 0.5], logits, SamplingParams(1.0), rng)
    assert n == 2 and nxt == 3
    n, nxt = verify_rejection_approx([4, 2], [0.9, 0.5], logits, SamplingParams(1.0), rng)
    assert n == 0 and nxt == 1  # p(4) ~ 0: rejected, resampled from the target


def _dense_reference(row, p):
    """The sampler before it was made fast: a dense float64 softmax, top-p by a stable sort of the whole row."""
    z = row.astype(np.float64) / max(p.temperature, 1e-6)
    if p.top_k and p.top_k < z.size:
        z = np.where(z >= np.partition(z, -p.top_k)[-p.top_k], z, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    if p.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        keep = order[: int(np.searchsorted(np.cumsum(probs[order]), p.top_p)) + 1]
        probs = np.where(np.isin(np.arange(probs.size), keep), probs, 0.0)
        probs /= probs.sum()
    return probs


def _rows(rng, vocab=151_936):
    """Logits like a model's (one peaked row, one flat one, one with exact ties at the top) at the target's size."""
    peaked = (rng.standard_normal(vocab) * 2.5 - 8).astype(np.float32)
    peaked[rng.integers(vocab, size=3)] = [9.0, 8.0, 6.5]
    flat = (rng.standard_normal(vocab) * 0.4).astype(np.float32)
    ties = np.round(rng.standard_normal(vocab), 1).astype(np.float32)
    return [peaked, flat, ties]


@pytest.mark.parametrize("p", [SamplingParams(1.0), SamplingParams(0.7, top_p=0.95), SamplingParams(1.0, top_p=0.9),
                               SamplingParams(0.8, top_k=40), SamplingParams(0.8, top_k=40, top_p=0.9),
                               SamplingParams(1.5, top_p=0.99), SamplingParams(0.02, top_p=0.5)])
def test_the_fast_sampler_draws_what_a_dense_softmax_and_a_full_sort_give(p):
    """The sampler sums its CDF in blocks, keeps top-k from a partition of an eighth of the row and top-p from the
    weights above 2**-10 or from binned weights (the flat row): the same support, the same probabilities (to
    float64 rounding) and, for uniforms not within rounding of a boundary, the same token as the dense reference."""
    rng = np.random.default_rng(5)
    for row in _rows(rng):
        ref = _dense_reference(row, p)
        got = target_probs(row, p)
        assert np.array_equal(np.flatnonzero(got), np.flatnonzero(ref))
        assert np.abs(got - ref).max() < 1e-12
        csum = np.cumsum(ref)
        for u in rng.random(40):
            if np.abs(csum - u).min() < 1e-9:
                continue
            assert sample_token(row, p, u) == int(np.searchsorted(csum, u, side="right"))


def test_top_k_ids_are_every_logit_at_or_above_the_kth_largest():
    """top_k_ids partitions an eighth of the row first; it must still find every logit a full partition finds
    (ties at the k-th all in), on a row where the top is spread and on one made of ties."""
    rng = np.random.default_rng(9)
    for row in _rows(rng):
        for k in (1, 8, 40, 1000):
            ref = np.flatnonzero(row >= np.partition(row, -k)[-k])
            assert np.array_equal(top_k_ids(row, k), ref)
