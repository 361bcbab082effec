"""The drafter's window (drafters.window_start): it reads only a long prompt's latest tokens, its start moves in
strides so a growing chat keeps its cached prefix, and the output stays the target alone's."""

import pytest

from omnidraft.speculative.drafters import WINDOW_STRIDE_SHARE, window_start
from tests.test_ctxcost import _long_prompt


@pytest.mark.parametrize("window", [256, 1000])
def test_the_window_keeps_at_least_its_size_and_moves_in_strides(window):
    stride = window // WINDOW_STRIDE_SHARE
    assert window_start(window, window) == 0 and window_start(10, 0) == 0 and window_start(10 ** 6, 0) == 0
    starts = []
    for n in range(1, 4 * window):
        s = window_start(n, window)
        assert s == 0 if n <= window else window <= n - s < window + stride, (n, s)
        assert s % stride == 0
        starts.append(s)
    assert starts == sorted(starts)  # a prompt that grows never moves the start back
    assert len(set(starts)) == 3 * WINDOW_STRIDE_SHARE  # one start per stride the prompt grows past the window


def test_a_long_prompt_is_read_from_its_window_and_the_output_stays_the_target_alones(default_session,
                                                                                       target_reference):
    from omnidraft.speculative.generator import GenerationParams, Generator
    from omnidraft.speculative.methods import make_drafter
    from omnidraft.speculative.policy import PolicyConfig

    s = default_session
    drafter = make_drafter("omnidraft", s.pair)
    drafter.window = 256
    read = []
    prefill = drafter.engine.prefill
    drafter.engine.prefill = lambda ids, *a: read.append(len(ids)) or prefill(ids, *a)
    try:
        gen = Generator(s.target, drafter, PolicyConfig(name="fixed", k=4), "omnidraft", s.max_verify_batch)
        prompt = gen.prompt_from_text(_long_prompt(900))
        params = GenerationParams(max_tokens=24)
        final = gen.generate(prompt, params)
    finally:
        del drafter.engine.prefill  # the session's drafter engine is shared with other tests
    whole = len(prompt.tokenize(drafter.engine))
    assert whole > 600 and read and 256 <= read[0] < 256 + 256 // WINDOW_STRIDE_SHARE, (whole, read)
    assert drafter.ctx[:read[0]] == prompt.tokenize(drafter.engine)[-read[0]:]  # the latest tokens, in order
    assert final.token_ids == target_reference(s.target, prompt, params)
    assert final.stats.proposed > 0 and final.stats.accepted > 0, final.stats


def test_a_prompt_grown_by_a_turn_reuses_the_drafters_cached_window(default_session):
    """A chat resends its history each turn: while the window's start stays put, the drafter reads only the new
    tokens, from the cache the last request left."""
    from omnidraft.speculative.drafters import PromptInput
    from omnidraft.speculative.methods import make_drafter

    s = default_session
    drafter = make_drafter("omnidraft", s.pair)
    drafter.window = 256
    e = drafter.engine
    turn = "\n# and now, a test for it:\ndef test_wrap():\n"
    text = _long_prompt(900)
    while True:  # a first prompt whose window starts where the grown one's does
        first, grown = (PromptInput([1], t.encode()) for t in (text, text + turn))
        n1, n2 = len(first.tokenize(e)), len(grown.tokenize(e))
        if window_start(n1, 256) == window_start(n2, 256):
            break
        text = text[:-40]
    drafter.begin(first)
    decoded = []
    decode = e.decode
    e.decode = lambda ids, *a: decoded.append(len(ids)) or decode(ids, *a)
    try:
        drafter.begin(grown)
    finally:
        del e.decode  # the session's drafter engine is shared with other tests
    assert n2 - n1 >= 8 and 0 < sum(decoded) <= n2 - n1 + 2, (n1, n2, decoded)
    assert len(e.tokens) == n2 - window_start(n2, 256) - 1  # the window but its last token, which draft() reads
