"""logprobs / top_logprobs (issue 16 item 3): the target's own log-softmax (temperature 1) per output token,
the same with and without drafting; carried through the text stream and the OpenAI shapes."""

from __future__ import annotations

import json
import math

import pytest

from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig
from omnidraft.vocab.textstream import TextStream

PROMPT = "def fibonacci(n):\n"
CHAT = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]


# ------------------------------------------------------------ text stream marks (no model)
def _push(ts: TextStream, pieces: list[bytes], names: list[str]):
    return ts.push(b"".join(pieces), False, [(len(p), n) for p, n in zip(pieces, names)])


def test_mark_waits_for_the_character_its_bytes_complete():
    ts = TextStream()
    euro = "€".encode()
    assert [c.marks for c in _push(ts, [b"a", euro[:2]], ["a", "e1"])] == [[(0, "a")]]
    out = _push(ts, [euro[2:], b"b"], ["e2", "b"])
    assert [(c.text, c.marks) for c in out] == [("€b", [(1, "e1"), (1, "e2"), (2, "b")])]


def test_marks_cut_with_the_stop_string():
    ts = TextStream(["\n\n"])
    out = _push(ts, [b"x = 1", b"\n"], ["x", "nl"])  # "\n" could start the stop: held back with its mark
    assert [(c.text, c.marks) for c in out] == [("x = 1", [(0, "x")])]
    out = _push(ts, [b"\n", b"y"], ["nl2", "y"])  # stop found: marks starting inside the stop go
    assert ts.stopped and ts.text == "x = 1" and out == []
    ts = TextStream(["END"])
    out = _push(ts, [b"ab", b"cEN", b"D"], ["ab", "cEN", "D"])  # a token across the cut is kept
    assert "".join(c.text for c in out) == "abc"
    assert [m for c in out for m in c.marks] == [(0, "ab"), (2, "cEN")]


def test_mark_released_without_new_text_rides_an_empty_chunk():
    ts = TextStream(["bc"])
    assert [c.text for c in _push(ts, [b"ab"], ["ab"])] == ["a"]  # "b" held: "ab" not complete yet
    out = _push(ts, [b"c"], ["c"])
    assert ts.stopped and [(c.text, c.marks) for c in out] == [("", [(0, "ab")])]


def test_end_drops_marks_of_a_cut_off_character():
    ts = TextStream()
    _push(ts, [b"a", "€".encode()[:1]], ["a", "partial"])
    assert [m for c in ts.finish() for m in c.marks] == [] and ts.released == [(0, "a")]


# ------------------------------------------------------------ the real pair
def _run(session, method: str, **kw):
    gen = session.generator(method)
    if method != "target":
        gen.policy = DraftPolicy(PolicyConfig(name="fixed", k=4))
    params = GenerationParams(max_tokens=48, logprobs=5, **kw)
    return gen.generate(gen.prompt_from_text(PROMPT), params)


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.8, "seed": 7}], ids=["greedy", "sampled"])
def test_logprobs_equal_with_and_without_drafting(default_session, sampling):
    spec = _run(default_session, "omnidraft", **sampling)
    ref = _run(default_session, "target", **sampling)
    assert spec.stats.accepted > 0, "nothing accepted: the comparison would not exercise verification rows"
    assert spec.token_ids == ref.token_ids
    assert len(spec.logprobs) == len(ref.logprobs) == len(spec.token_ids)
    for a, b in zip(spec.logprobs, ref.logprobs):
        assert a.id == b.id and a.piece == b.piece
        assert abs(a.logprob - b.logprob) <= 1e-5
        assert [i for i, _, _ in a.top] == [i for i, _, _ in b.top]
        assert max(abs(x - y) for (_, _, x), (_, _, y) in zip(a.top, b.top)) <= 1e-5
    # the entries spell the returned text
    assert b"".join(lp.piece for lp in spec.logprobs).decode() == spec.text
    greedy_top1 = [lp.top[0][0] == lp.id for lp in spec.logprobs]
    assert all(greedy_top1) if not sampling else sum(greedy_top1) > len(greedy_top1) // 2


def test_logprobs_off_costs_nothing(default_session):
    gen = default_session.generator("target")
    final = gen.generate(gen.prompt_from_text(PROMPT), GenerationParams(max_tokens=4))
    assert final.logprobs == [] and all(s.logprobs == [] for s in final.steps)


# ------------------------------------------------------------ through the Flask app
@pytest.fixture(scope="module")
def client(default_session, tmp_path_factory):
    from omnidraft.server import ServerConfig, create_app
    from omnidraft.server.app import shutdown
    app = create_app(default_session, ServerConfig(app_dir=str(tmp_path_factory.mktemp("app"))))
    yield app.test_client()
    shutdown(app)


EXT = {"omnidraft": {"method": "omnidraft", "policy": "fixed", "k": 4}}


def _sse(resp) -> list[dict]:
    body = resp.get_data(as_text=True)
    return [json.loads(b[6:]) for b in body.split("\n\n") if b.startswith("data: {")]


def _sdk_parses(model: str, d: dict) -> None:
    """The official client's own types read the answer's logprobs."""
    types = pytest.importorskip("openai").types
    for part in model.split("."):
        types = getattr(types, part)
    lp = types.model_validate(d).choices[0].logprobs
    assert lp is not None and (lp.content is not None if hasattr(lp, "content") else lp.tokens is not None)


def _check_entry(token: str, logprob: float, tops: list[tuple[str, float]], n: int):
    assert isinstance(token, str) and logprob <= 0.0
    assert len(tops) == n
    vals = [v for _, v in tops]
    assert vals == sorted(vals, reverse=True)
    assert sum(math.exp(v) for v in vals) <= 1.0 + 1e-6
    if tops:
        assert logprob <= vals[0] + 1e-9


def _check_chat(content: list[dict], n: int) -> str:
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert bytes(e["bytes"]).decode("utf-8", "replace") == e["token"]
        for t in e["top_logprobs"]:
            assert set(t) == {"token", "logprob", "bytes"} and isinstance(t["bytes"], list)
        _check_entry(e["token"], e["logprob"], [(t["token"], t["logprob"]) for t in e["top_logprobs"]], n)
    return bytes(b for e in content for b in e["bytes"]).decode("utf-8", "replace")


def _check_legacy(lp: dict, n: int, offset0: int) -> str:
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    k = len(lp["tokens"])
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == k
    for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert tok in top and top[tok] == v  # the sampled token is always listed
        alts = sorted(top.items(), key=lambda kv: -kv[1])
        assert n <= len(top) <= n + 1
        _check_entry(tok, v, alts[:n], n)
    assert lp["text_offset"] == sorted(lp["text_offset"]) and (not k or lp["text_offset"][0] == offset0)
    return "".join(lp["tokens"])


@pytest.mark.parametrize("n", [0, 3])
def test_chat_logprobs(client, n):
    body = {"messages": CHAT, "max_tokens": 24, "temperature": 0, "logprobs": True, "top_logprobs": n, **EXT}
    d = client.post("/v1/chat/completions", json=body).get_json()
    choice = d["choices"][0]
    assert set(choice["logprobs"]) >= {"content"}
    _sdk_parses("chat.ChatCompletion", d)
    assert _check_chat(choice["logprobs"]["content"], n) == choice["message"]["content"]
    events = _sse(client.post("/v1/chat/completions", json={**body, "stream": True}))
    text, content = "", []
    for ev in events:
        c = ev["choices"][0]
        text += c["delta"].get("content") or ""
        if c["logprobs"] is not None:
            content += c["logprobs"]["content"]
    assert text == choice["message"]["content"] and content == choice["logprobs"]["content"]


@pytest.mark.parametrize("n", [0, 5])
def test_completion_logprobs(client, n):
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "logprobs": n, **EXT}
    d = client.post("/v1/completions", json=body).get_json()
    choice = d["choices"][0]
    _sdk_parses("Completion", d)
    assert _check_legacy(choice["logprobs"], n, len(PROMPT)) == choice["text"]
    events = _sse(client.post("/v1/completions", json={**body, "stream": True}))
    text, tokens, offsets = "", [], []
    for ev in events:
        c = ev["choices"][0]
        text += c["text"]
        if c["logprobs"] is not None:
            tokens += c["logprobs"]["tokens"]
            offsets += c["logprobs"]["text_offset"]
    assert text == choice["text"] and tokens == choice["logprobs"]["tokens"]
    assert offsets == choice["logprobs"]["text_offset"]


def test_stop_string_cuts_logprobs_consistently(client):
    body = {"prompt": PROMPT, "max_tokens": 48, "temperature": 0, "logprobs": 1, "stop": ["\n"], **EXT}
    choice = client.post("/v1/completions", json=body).get_json()["choices"][0]
    toks = choice["logprobs"]["tokens"]
    assert choice["finish_reason"] == "stop" and toks
    # every listed token starts inside the returned text; only the last may reach past the cut
    assert len("".join(toks[:-1])) < len(choice["text"]) <= len("".join(toks))


def test_logprobs_off_is_null(client):
    d = client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 2}).get_json()
    assert d["choices"][0]["logprobs"] is None
    events = _sse(client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, "stream": True}))
    assert all(ev["choices"][0]["logprobs"] is None for ev in events if ev["choices"])


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "logprobs": 3}, "logprobs"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": -1}, "logprobs"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 6}, "logprobs"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": True}, "logprobs"),
])
def test_out_of_range_is_400(client, path, body, param):
    r = client.post(path, json=body)
    assert r.status_code == 400 and r.get_json()["error"]["param"] == param
