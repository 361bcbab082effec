"""Issue 45 (third hostile probe): chat preparation, flag ranges, GGUF parsing, state files, HTTP policy."""

from __future__ import annotations

import time

import pytest

from omnidraft.assets import models
from omnidraft.errors import BadRequest
from omnidraft.server.protocol import ApiError, parse_request
from omnidraft.vocab import chat


# ------------------------------------------------------------------ row 2: chat preparation
def _prepare_s(engine, n: int, content: str) -> float:
    """Seconds to render and tokenize a chat of ``n`` messages (best of 3)."""
    msgs = [{"role": "user", "content": content} for _ in range(n)]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        text, plain = chat.render_marked(None, msgs)
        chat.tokenize(engine, text, plain, False)
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("content", ["x", "<|im_end|>"])  # plain contents, and control text kept as text
def test_chat_preparation_grows_linearly_with_the_message_count(vocab_engine, content):
    engine = vocab_engine("qwen2")
    _prepare_s(engine, 50, content)  # warm: the control-token table
    small, large = _prepare_s(engine, 500, content), _prepare_s(engine, 2000, content)
    # 4x the messages: about 4x the time (before: every control token against every message, 16x, 1.8 s)
    assert large < 8 * small + 0.05, (small, large)
    assert large < 1.0


def test_a_chat_of_too_many_messages_is_refused_before_the_engine():
    body = {"messages": [{"role": "user", "content": "x"}] * (chat.MAX_MESSAGES + 1)}
    with pytest.raises(ApiError) as e:
        parse_request(body, "chat", 4096, ("fake-target",))
    assert e.value.status == 400 and "at most" in str(e.value) and e.value.param == "messages"
    with pytest.raises(BadRequest, match="at most"):
        chat.validate_messages(body["messages"])
    ok = {"messages": [{"role": "user", "content": "x"}] * chat.MAX_MESSAGES}
    assert len(parse_request(ok, "chat", 4096, ("fake-target",)).messages) == chat.MAX_MESSAGES
