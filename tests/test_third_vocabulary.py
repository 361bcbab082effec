"""A third vocabulary: SmolLM2 (49k byte-level BPE) drafting for Gemma-3-270M (262k SentencePiece)."""

import pytest

from omnidraft.speculative.generator import GenerationParams
from omnidraft.runtime.session import Session, Settings

from tests.serve_helpers import seed_state

PROMPTS = ["def fibonacci(n):\n", "The quick brown fox", "日本語の文章：東京は", "Emoji: 🐱🐶 and"]


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    # exact kernels named, not auto, whose first start times both modes twice (tests/test_kernel_modes.py)
    s = Session(Settings(target="gemma3-270m", threads=2, n_ctx=1024, draft_n_ctx=1024, policy="fixed", k=3,
                         kernels="exact", state_dir=str(seed_state(tmp_path_factory.mktemp("gemma")))))
    yield s
    s.close()


@pytest.mark.parametrize("method", ["omnidraft", "slem", "tli"])
def test_greedy_output_equals_gemma_alone(gemma, target_reference, method):
    gen = gemma.generator(method)
    proposed = 0
    for p in PROMPTS:
        pin = gen.prompt_from_text(p)
        final = gen.generate(pin, GenerationParams(max_tokens=16))
        proposed += final.stats.proposed
        # the target alone's run is shared by the three methods (target_reference)
        assert final.token_ids == target_reference(gemma.target, pin, GenerationParams(max_tokens=16)), p
    assert proposed > 0


def test_bridge_between_three_vocabularies(gemma):
    b = gemma.pair.bridge
    assert b.n_shared > 20000 and not b.same_vocab
    draft_cov, target_cov = b.coverage()
    assert 0.5 < draft_cov <= 1.0 and 0.0 < target_cov < 0.5
