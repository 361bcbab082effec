"""One trainer update on a tiny generated model moves its drafts toward the streamed text (issue 26).

The model is random (tests.gguf_helpers, the real 32,000-token llama vocabulary); the "stream" is four records
whose output is the same line of JavaScript after different prompts, as the target would write it.  Before and
after one update, the published GGUF is asked in llama.cpp (the runtime that drafts) for its greedy draft at
every position of that line after a prompt the update never saw: the drafts must go from chance to a third of
the line or more.  The same update with lr 0 must leave them where they were, so the test fails if training does nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from omnidraft.llama.engine import Engine, EngineConfig  # noqa: E402
from omnidraft.online.records import SCHEMA  # noqa: E402
from omnidraft.trainer.service import Trainer, TrainerConfig  # noqa: E402

from tests.gguf_helpers import tiny_gguf  # noqa: E402

STREAMED = " const total = items.reduce((sum, item) => sum + item.price, 0);"
PROMPTS = ["function checkout(items) {\n", "export function cartTotal(items) {\n", "// the basket\n",
           "async function order(items) {\n"]
HELD_OUT_PROMPT = "module.exports = function price(items) {\n"


def _record(i: int, prompt_ids: list[int], out: list[int], fp: str) -> dict:
    """What a server records when the target writes ``out`` (drafter ids, all directly mapped, target sure)."""
    n = len(out)
    return {"schema": SCHEMA, "id": f"r{i:010d}", "created": 0.0, "method": "omnidraft", "drafter_version": "base",
            "draft_fp": fp, "target_fp": "t", "k": 1, "prompt_ids": prompt_ids, "output_ids": out, "dm": [1] * n,
            "ngram": [0] * n, "topk_ids": [[o] for o in out], "topk_probs": [[0.9]] * n, "rest_mass": [0.1] * n,
            "target_ids": list(range(n)), "n_sub": [1] * n, "from_draft": [0] * n, "stats": {}}


def _drafts_on_line(gguf, prompt_ids: list[int], line: list[int]) -> int:
    """Positions of ``line`` (after ``prompt_ids``) where the drafter's greedy next token is the line's next."""
    eng = Engine(gguf, EngineConfig(n_ctx=256, n_threads=2, batch_invariant=False))
    try:
        seq = prompt_ids + line
        logits = np.asarray(eng.decode(seq, "all"))
    finally:
        eng.close()
    rows = range(len(prompt_ids) - 1, len(seq) - 1)  # row j predicts token j + 1
    return sum(int(np.argmax(logits[j]) == seq[j + 1]) for j in rows)


def _one_update(base, tmp_path, lr: float):
    """The trainer's own update (full fine-tuning, its passes over the records; the default LoRA's rank-16 deltas
    on a 64-wide random model are most of its width) at a step size for that model, for which the prompts' text
    is noise to fit, not a domain to learn (prompt_lam 0)."""
    trainer = Trainer(TrainerConfig(base=str(base), state_dir=str(tmp_path / f"t-{lr}"), interval=4, lr=lr,
                                    lora_rank=0, prompt_lam=0.0, qtype="q8_0", threads=2))
    vocab = Engine(base, EngineConfig(vocab_only=True))
    try:
        line = vocab.tokenize(STREAMED)
        held = vocab.tokenize(HELD_OUT_PROMPT, add_bos=vocab.add_bos)
        recs = [_record(i, vocab.tokenize(p, add_bos=vocab.add_bos), line, trainer.vocab().fp)
                for i, p in enumerate(PROMPTS)]
    finally:
        vocab.close()
    assert trainer.receive(recs)["accepted"] == 4
    meta = trainer.maybe_update()
    assert meta is not None and meta["check"]["ok"], meta
    return trainer.registry.current()[1], held, line


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_gguf(tmp_path_factory, "llama")


def test_one_update_moves_the_drafts_toward_the_streamed_text(base, tmp_path):
    published, held, line = _one_update(base, tmp_path, lr=1e-2)
    before = _drafts_on_line(base, held, line)
    after = _drafts_on_line(published, held, line)
    print(f"drafts matching the streamed line: {before} -> {after} of {len(line)}")
    assert before <= len(line) // 4  # a random model drafts the line by chance only
    assert after >= len(line) // 3 and after >= before + len(line) // 4  # measured: 0 -> 12 of 22


def test_without_learning_the_drafts_stay(base, tmp_path):
    """The control: the same update at lr 0 publishes a drafter that drafts as the base does."""
    published, held, line = _one_update(base, tmp_path, lr=0.0)
    assert abs(_drafts_on_line(published, held, line) - _drafts_on_line(base, held, line)) <= 1
