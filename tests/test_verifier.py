"""Verification rules on hand-made logits: no model involved."""

import numpy as np
import pytest

from omnidraft.speculative.verifier import (SamplingParams, sample_token, target_probs, verify_exact_sampling,
                                verify_greedy, verify_rejection_approx)


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
