"""``omnidraft adapt --checkpoints``: every checkpoint asked for is measured, also one that falls between two
updates (not a multiple of --interval), and a target drift happens at its point wherever that falls. Until
2026-12-05 the loop stopped only at update boundaries, so such a checkpoint was skipped and such a switch never
happened, without a word (issue 43: a run asking for 1,000 and 1,250 at --interval 32 got neither)."""

from __future__ import annotations

import contextlib
import io

import pytest

pytest.importorskip("torch")

from omnidraft.apps.adapt import run  # noqa: E402
from omnidraft.apps.adapt_config import AdaptConfig  # noqa: E402
from omnidraft.assets.prompts import Item, PromptSet  # noqa: E402
from omnidraft.runtime.session import Settings  # noqa: E402

from tests.gguf_helpers import tiny_gguf  # noqa: E402


def fake_set(name, seed=0):
    texts = ["def add(a, b):\n", "class Stack:\n", "def mean(xs):\n"]
    return PromptSet(name, 1, "test", "none", [Item(f"{name}{i}", t, False, "stream") for i, t in enumerate(texts[:2])]
                     + [Item(f"{name}h", texts[2], False, "heldout")])


def test_checkpoints_between_updates_are_measured_and_a_target_drift_happens_there(tmp_path_factory, monkeypatch):
    """Updates every 2 requests of 4; checkpoints 1 and 3 and the target switch at 3 all fall between updates.
    Each checkpoint measures the drafter in use then (the last update's), and asking for them forces no update."""
    first, second = tiny_gguf(tmp_path_factory, "qwen2"), tiny_gguf(tmp_path_factory, "qwen2", seed=1)
    root = tmp_path_factory.mktemp("checkpoints")
    cfg = AdaptConfig(stream_set="a", n_train=4, interval=2, checkpoints="1,3", drift_target=str(second), drift_at=3,
                      n_heldout=1, old_sets="", max_tokens=6, eval_max_tokens=12, eval_k=2, lr=1e-3, lora_rank=4,
                      qtype="q8_0", out=str(root / "out"))
    settings = Settings(target=str(first), draft=str(tiny_gguf(tmp_path_factory, "llama")), method="omnidraft",
                        policy="fixed", k=2, threads=2, n_ctx=512, draft_n_ctx=512, state_dir=str(root / "state"))
    monkeypatch.setattr("omnidraft.apps.adapt_items.load_set", fake_set)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = run(cfg, settings, threads=2)
    points = [(p["prompts"], p["target"], p["version"]) for p in result["curve"]]
    assert points == [(0, str(first), "base"), (1, str(first), "base"), (3, str(first), "v0001"),
                      (3, str(second), "v0001"), (4, str(second), "v0002")]
    assert len(result["updates"]) == 2  # one per interval, as without the checkpoints
    assert f"target switched: {first} -> {second} (drafter v0001)" in printed.getvalue()
