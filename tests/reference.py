"""The target alone, one token per pass, written independently of the speculative loop: what the lossless
tests compare every method's output with."""

from __future__ import annotations

import numpy as np

from omnidraft.llama.engine import Engine
from omnidraft.speculative.generator import GenerationParams, PromptInput, sample_token


def reference_target_tokens(target: Engine, prompt: PromptInput, params: GenerationParams) -> list[int]:
    """The target alone, one token per pass, written independently of the loop above (for tests)."""
    ids = prompt.target_ids
    max_new = min(params.max_tokens, target.n_ctx - len(ids))
    sp = params.sampling()
    uniforms = np.random.default_rng(params.seed).random(max_new + 8)
    kept = 0
    if params.reuse_prefix:  # the same reuse as the loop: the KV of the common prefix stays
        while kept < min(len(target.tokens), len(ids) - 1) and target.tokens[kept] == ids[kept]:
            kept += 1
        target.rollback(kept)
    if not kept:
        target.reset()
    if len(ids) - 1 > kept:
        target.decode(ids[kept:-1], "none")
    out: list[int] = []
    last = ids[-1]
    while len(out) < max_new:
        row = target.decode([last], "last")[0]
        last = sample_token(row, sp, uniforms[len(out)])
        if last in target.eog_ids:
            break
        out.append(last)
    return out


def rows_by_batch(engine: Engine, prefix: list[int], seq: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """One-token logits for each of seq after prefix, and the rows of every batch seq[:n], n = 1..len(seq): what
    the small-batch kernel tests compare (a verified row must equal the row decoding computed)."""
    engine.reset()
    engine.decode(prefix, "none")
    single = np.stack([engine.decode([t], "last")[0].copy() for t in seq])
    batches = []
    for n in range(1, len(seq) + 1):
        engine.rollback(len(prefix))
        batches.append(np.array(engine.decode(seq[:n], "all"), copy=True))
    return single, batches
