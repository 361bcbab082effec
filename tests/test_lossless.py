"""End to end on the real default pair: every method's output equals the target alone.

Greedy: token for token.  Seeded sampling: the same text for the same seed.  The
reference is written independently of the speculative loop (one token per pass).
"""

import pytest

from omnidraft.speculative.generator import GenerationParams

from tests.lossless_prompts import GREEDY, PROMPTS

MAX_TOKENS = 24
# Greedy: the default method runs all 31 GREEDY prompts; every other method runs one half of them (the
# halves alternate through GREEDY, so each holds every kind), so every prompt meets omnidraft and two other
# methods, and the two text-level translators (tli, slem) between them meet every prompt.
GREEDY_BY_METHOD = {"omnidraft": GREEDY, "tli": GREEDY[0::2], "slem": GREEDY[1::2],
                    "prompt-lookup": GREEDY[1::2], "hybrid": GREEDY[0::2]}
# Seeded sampling: omnidraft on every fifth prompt, the others on every second of those (same seeds, so
# the target-alone references are shared).
SEEDED = list(enumerate(PROMPTS[::5]))
SEEDED_BY_METHOD = {"omnidraft": SEEDED, "slem": SEEDED[0::2], "hybrid": SEEDED[1::2]}


def _prompt(gen, text, chat):
    return gen.prompt_from_messages([{"role": "user", "content": text}]) if chat else gen.prompt_from_text(text)


@pytest.fixture(scope="module")
def reference(default_session, target_reference):
    """The target alone's greedy tokens for a prompt (one run per prompt per session: target_reference)."""
    gen = default_session.generator("target")
    params = GenerationParams(max_tokens=MAX_TOKENS)
    return lambda p, chat: target_reference(default_session.target, _prompt(gen, p, chat), params)


@pytest.mark.parametrize("method", list(GREEDY_BY_METHOD))
def test_greedy_output_equals_target_alone(default_session, reference, method):
    gen = default_session.generator(method)
    gen.policy.cfg.name = "fixed"  # always speculate: exercise verification, not the cost model
    mismatches, proposed = [], 0
    for kind, p, chat in GREEDY_BY_METHOD[method]:
        final = gen.generate(_prompt(gen, p, chat), GenerationParams(max_tokens=MAX_TOKENS))
        proposed += final.stats.proposed
        if final.token_ids != reference(p, chat):
            mismatches.append((kind, p[:30]))
    assert not mismatches, f"{method}: {len(mismatches)} prompts differ from the target alone: {mismatches}"
    assert proposed > 0  # the drafter really proposed


@pytest.mark.parametrize("method", list(SEEDED_BY_METHOD))
def test_seeded_sampling_equals_target_alone(default_session, target_reference, method):
    gen = default_session.generator(method)
    gen.policy.cfg.name = "fixed"
    for i, (_, p, chat) in SEEDED_BY_METHOD[method]:
        params = GenerationParams(max_tokens=MAX_TOKENS, temperature=0.8, top_p=0.95, top_k=40, seed=1234 + i)
        ref = target_reference(default_session.target, _prompt(gen, p, chat), params)  # one run for both methods
        final = gen.generate(_prompt(gen, p, chat), params)
        assert final.token_ids == ref, p[:40]


def test_different_seeds_give_different_samples(default_session):
    gen = default_session.generator("target")
    pin = _prompt(gen, "Once upon a time", False)
    outs = {tuple(gen.generate(pin, GenerationParams(max_tokens=16, temperature=1.0, seed=s)).token_ids)
            for s in range(4)}
    assert len(outs) > 1


def test_target_method_matches_reference_and_counts_passes(default_session, reference):
    gen = default_session.generator("target")
    final = gen.generate(_prompt(gen, PROMPTS[0][1], False), GenerationParams(max_tokens=MAX_TOKENS))
    assert final.token_ids == reference(PROMPTS[0][1], False)
    assert final.stats.target_passes == len(final.token_ids) or final.finish_reason == "stop"
    assert final.stats.tau == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("policy", ["gamma", "threshold"])
def test_adaptive_drafting_stays_lossless(default_session, reference, policy):
    """Drafts stopped early by the predictor (gamma) or by confidence (threshold): same output."""
    from omnidraft.speculative.generator import Generator
    from omnidraft.speculative.methods import make_drafter
    from omnidraft.speculative.policy import PolicyConfig

    drafter = make_drafter("omnidraft", default_session.pair)
    drafted = []  # drafter tokens per step: what k = 6 bounds

    def recorded(k, stop, draft=drafter.draft):
        d = draft(k, stop)
        drafted.append(d.drafted)
        return d

    drafter.draft = recorded
    gen = Generator(default_session.target, drafter, PolicyConfig(name=policy, k=6), "omnidraft",
                    default_session.max_verify_batch)
    candidates = set()  # target candidates per step: one drafter token may translate into several
    # 6 prompts, every kind (code, prose, two unicode, whitespace, chat), all from GREEDY: their target-alone
    # references are the greedy test's (target_reference), not three more runs (PROMPTS[2::8] had 3 outside it)
    for _, p, chat in GREEDY[2::5]:
        final = gen.generate(_prompt(gen, p, chat), GenerationParams(max_tokens=MAX_TOKENS))
        candidates.update(final.stats.draft_lengths)
        assert final.token_ids == reference(p, chat), p[:40]
    assert len(set(drafted) - {0}) >= 2  # it really varied the draft length
    assert max(drafted) <= 6 and max(candidates) <= default_session.max_verify_batch - 1
