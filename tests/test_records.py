"""Training records: a hand-made pair (exact layout) and a real generation on the default pair."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from omnidraft.speculative.drafters import PromptInput
from omnidraft.speculative.generator import Final, GenerationParams, GenerationStats
from omnidraft.online.records import SCHEMA, RecordError, build_record, validate


def _fake_pair():
    # target vocab: 0 'a', 1 'b', 2 'ab', 3 'c';  drafter vocab: 0 '<s>', 1 'a', 2 'b', 3 'c'
    t2d = np.array([1, 2, -1, 3], dtype=np.int32)
    d_bytes = {b"a": 1, b"b": 2, b"c": 3}
    codec = SimpleNamespace(encode=lambda data: [d_bytes[bytes([c])] for c in data])
    draft = SimpleNamespace(add_bos=True, tokenize=lambda text, add_bos, special: [0] + codec.encode(text))
    bridge = SimpleNamespace(t2d=t2d, draft_fp="dfp", target_fp="tfp")
    return SimpleNamespace(bridge=bridge, draft_codec=codec, target_codec=SimpleNamespace(
        token_bytes=[b"a", b"b", b"ab", b"c"]), draft=draft)


def _step(new, accepted, topk):
    # only the fields build_record reads (StepRecord grows fields over time)
    return SimpleNamespace(accepted=accepted, new_tokens=new, topk=topk)


def test_layout_on_hand_made_pair():
    tk = lambda ids, ps: (np.array(ids, np.int32), np.array(ps, np.float32))  # noqa: E731
    steps = [_step([0, 2], 1, [tk([0, 2], [0.7, 0.2]), tk([2, 3], [0.5, 0.4])]),
             _step([3, 1], 0, [tk([3, 0], [0.9, 0.05]), tk([1, 2], [0.6, 0.3])])]
    stats = GenerationStats("omnidraft", completion_tokens=4, target_passes=2, proposed=2, accepted=1)
    final = Final("aabcb", [0, 2, 3, 1], "length", stats, steps)
    r = build_record(final, PromptInput([0], b"ca"), _fake_pair(), "omnidraft", "base")
    assert r["schema"] == SCHEMA and json.loads(json.dumps(r)) == r
    assert r["prompt_ids"] == [0, 3, 1]
    assert r["output_ids"] == [1, 1, 2, 3, 2]  # 'ab' (unmapped) spelled a, b
    assert r["dm"] == [1, 0, 0, 1, 1] and r["ngram"] == [0, 1, 1, 0, 0]
    assert r["n_sub"] == [1, 2, 1, 1] and r["from_draft"] == [1, 0, 0, 0]
    assert r["topk_ids"][0] == [1] and r["topk_probs"][0] == pytest.approx([0.7])  # 'ab' unmapped: in rest
    assert r["rest_mass"][0] == pytest.approx(0.3)
    assert r["topk_ids"][3] == [3, 1] and r["rest_mass"][3] == pytest.approx(0.05)
    assert r["topk_ids"][4] == [2] and r["rest_mass"][4] == pytest.approx(0.4)
    assert r["topk_ids"][1] is None and r["stats"]["accepted"] == 1
    validate(r)
    bad = dict(r, dm=[1, 1, 0, 1, 1])
    with pytest.raises(RecordError):
        validate(bad)


@pytest.mark.slow
def test_record_from_real_generation(default_session):
    s = default_session
    gen = s.generator("omnidraft")
    prompt = gen.prompt_from_messages([{"role": "user", "content": "Write a Python function that reverses a string."}])
    final = gen.generate(prompt, GenerationParams(max_tokens=48, record_topk=8))
    r = validate(build_record(final, prompt, s.pair, "omnidraft", s.drafter_version))
    json.dumps(r)
    n = len(r["output_ids"])
    assert len(r["target_ids"]) == len(final.token_ids) and n >= len(final.token_ids)
    dm, ng = np.array(r["dm"]), np.array(r["ngram"])
    assert ((dm + ng) == 1).all() and dm.sum() > 0
    assert max(r["output_ids"] + r["prompt_ids"]) < s.draft.n_vocab
    # the output positions spell exactly the target's text, in drafter tokens
    assert s.pair.draft_codec.decode(r["output_ids"]) == s.target.detokenize(final.token_ids)
    for i in np.flatnonzero(dm):
        ps = r["topk_probs"][i]
        assert 0 < len(ps) <= 8 and sum(ps) <= 1.0 + 1e-5
        assert sum(ps) + r["rest_mass"][i] == pytest.approx(1.0, abs=1e-5)
        assert r["output_ids"][i] == s.pair.bridge.t2d[r["target_ids"][_owner(r, i)]]
    assert r["prompt_ids"][:2] == s.draft.tokenize(prompt.text, add_bos=s.draft.add_bos, special=True)[:2]


def _owner(r: dict, pos: int) -> int:
    """Index of the target token that output position ``pos`` belongs to."""
    return int(np.searchsorted(np.cumsum(r["n_sub"]), pos, side="right"))
