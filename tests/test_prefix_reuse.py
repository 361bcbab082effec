"""Prefix reuse across requests: turn 2 of a chat prefills only its new tokens, and the output is
exactly the target alone's with the same reuse."""

from __future__ import annotations

from omnidraft.speculative.generator import GenerationParams, Generator
from tests.reference import reference_target_tokens
from omnidraft.speculative.methods import make_drafter
from omnidraft.speculative.policy import PolicyConfig

TURN1 = [{"role": "user", "content": "Write a Python function that reverses a string."}]


def _turn2(answer: str) -> list[dict]:
    return TURN1 + [{"role": "assistant", "content": answer},
                    {"role": "user", "content": "Now make it skip whitespace."}]


def test_second_turn_reuses_the_first_and_equals_the_target_alone(default_session):
    s = default_session
    gen = Generator(s.target, make_drafter("omnidraft", s.pair), PolicyConfig(name="fixed", k=4), "omnidraft",
                    s.max_verify_batch, s.plan.guard)
    reuse = GenerationParams(max_tokens=24, reuse_prefix=True)
    first = gen.generate(gen.prompt_from_messages(TURN1), reuse)
    p2 = gen.prompt_from_messages(_turn2(first.text))
    second = gen.generate(p2, reuse)
    assert second.stats.reused_tokens >= len(gen.prompt_from_messages(TURN1).target_ids) - 8
    assert second.stats.reused_tokens < len(p2.target_ids)

    # the target alone, one token per pass, with the same reuse from its own first turn
    ref1 = reference_target_tokens(s.target, gen.prompt_from_messages(TURN1), GenerationParams(max_tokens=24))
    assert ref1 == first.token_ids
    ref2 = reference_target_tokens(s.target, p2, reuse)
    assert second.token_ids == ref2


def test_reuse_is_off_by_default_and_a_changed_prefix_is_recomputed(default_session):
    s = default_session
    gen = s.generator("target")
    a = gen.generate(gen.prompt_from_text("def add(a, b):"), GenerationParams(max_tokens=8))
    assert a.stats.reused_tokens == 0
    b = gen.generate(gen.prompt_from_text("def add(a, b):"), GenerationParams(max_tokens=8, reuse_prefix=True))
    assert b.stats.reused_tokens > 0 and b.token_ids == a.token_ids
    c = gen.generate(gen.prompt_from_text("class Stack:"), GenerationParams(max_tokens=8, reuse_prefix=True))
    cold = gen.generate(gen.prompt_from_text("class Stack:"), GenerationParams(max_tokens=8))
    assert c.token_ids == cold.token_ids
