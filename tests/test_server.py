"""The OpenAI-compatible server, end to end: a real `omnidraft serve` process on the default pair,
driven by the official `openai` client and by raw HTTP for the exact SSE format and the errors."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from omnidraft.assets import models
from serve_helpers import N_CTX, serve_process

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_process(tmp_path_factory.mktemp("serve")) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)


MODEL = models.QWEN_05B
CHAT = [{"role": "user", "content": "Write a Python function that reverses a string."}]
PROMPT = "def is_prime(n):\n"


def sse_events(resp: requests.Response) -> list:
    """Parse an SSE body strictly: every event is `data: ...` followed by a blank line."""
    out = []
    for block in resp.text.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


# ------------------------------------------------------------------ equality
def _completion(client, stream: bool, **kw):
    if not stream:
        r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, **kw)
        return r.choices[0].text, r.choices[0].finish_reason
    text, finish = "", None
    for c in client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, stream=True, **kw):
        text += c.choices[0].text
        finish = c.choices[0].finish_reason or finish
    return text, finish


def _chat(client, stream: bool, **kw):
    if not stream:
        r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=16, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason
    text, finish = "", None
    for c in client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=16, stream=True, **kw):
        if c.choices:
            text += c.choices[0].delta.content or ""
            finish = c.choices[0].finish_reason or finish
    return text, finish


@pytest.mark.parametrize("call", [_completion, _chat], ids=["completions", "chat"])
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 1234, "top_p": 0.95}],
                         ids=["greedy", "seeded"])
def test_stream_nonstream_and_target_alone_agree(client, call, sampling):
    plain = call(client, False, **sampling)
    streamed = call(client, True, **sampling)
    target = call(client, True, extra_body={"omnidraft": {"method": "target"}}, **sampling)
    assert plain[0], "empty output"
    fixed = call(client, True, extra_body={"omnidraft": {"method": "omnidraft", "k": 3, "policy": "fixed"}},
                 **sampling)
    assert plain == streamed == target == fixed  # overrides change speed, never text


def test_stop_and_usage(client):
    full = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0)
    text = full.choices[0].text
    stop = text.strip().split()[1]  # a word that occurs inside the output
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == text[:text.index(stop)]
    assert full.usage.completion_tokens == 24 and full.choices[0].finish_reason == "length"
    assert full.usage.total_tokens == full.usage.prompt_tokens + 24


# ------------------------------------------------------------ exact formats
def test_sse_format_and_extension_fields(server):
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 16, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    r = requests.post(server + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    ev = sse_events(r)
    assert ev[-1] == "[DONE]"
    chunks, usage_chunk = ev[:-2], ev[-2]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert content and all(isinstance(c["omnidraft"]["from_draft"], bool) for c in content)
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["delta"] == {}
    assert last["omnidraft"]["drafter_version"] == "base"
    assert last["omnidraft"]["stats"]["completion_tokens"] == 16
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 16

    body.pop("stream_options")
    body["stream"] = False
    full = requests.post(server + "/v1/chat/completions", json=body, timeout=60).json()
    text = full["choices"][0]["message"]["content"]
    assert text == "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    ext = full["omnidraft"]
    assert set(ext) == {"stats", "drafter_version", "draft_spans"}
    # which text came from drafts depends on what the policy and n-gram cache learned meanwhile: check shape
    spans = ext["draft_spans"]
    assert all(0 <= a < b <= len(text) for a, b in spans)
    assert all(spans[i][1] < spans[i + 1][0] for i in range(len(spans) - 1))  # sorted, merged
    assert ext["stats"]["accepted"] > 0 or not spans


def test_models_health_metrics_stats(server, client):
    assert MODEL in [m.id for m in client.models.list().data]
    h = requests.get(server + "/health", timeout=5).json()
    assert h["status"] == "ok" and h["n_ctx"] == N_CTX
    client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0)
    m = requests.get(server + "/metrics", timeout=5)
    assert m.headers["Content-Type"].startswith("text/plain")
    for name in ("omnidraft_requests_total{endpoint=\"/v1/completions\",status=\"200\"}",
                 "omnidraft_tokens_generated_total", "omnidraft_acceptance_rate", "omnidraft_tokens_per_target_pass",
                 "omnidraft_draft_seconds_total", "omnidraft_verify_seconds_total", "omnidraft_ngram_cache_entries",
                 "omnidraft_ngram_cache_bytes", "omnidraft_drafter_version{version=\"base\"} 1.0",
                 "omnidraft_queue_depth"):
        assert name in m.text, name
    s = requests.get(server + "/v1/omnidraft/stats?limit=3", timeout=5).json()
    assert 1 <= len(s["history"]) <= 3 and s["totals"]["generations"] >= 1
    assert {"t", "completion_tokens", "tokens_per_s", "acceptance_rate", "tau", "method",
            "drafter_version"} <= set(s["history"][-1])


def test_static_app_and_root_redirect(server):
    r = requests.get(server + "/", allow_redirects=False, timeout=5)
    assert r.status_code in (301, 302) and r.headers["Location"].endswith("/app/")
    assert requests.get(server + "/app/../../pyproject.toml", timeout=5).status_code == 404
    assert requests.get(server + "/app/%2e%2e/%2e%2e/pyproject.toml", timeout=5).status_code == 404


# --------------------------------------------------------------- concurrency
def test_eight_clients_at_once(client):
    prompts = [f"def function_{i}(x):\n    # returns x times {i}\n" for i in range(4)] * 2

    def run(p):
        return client.completions.create(model=MODEL, prompt=p, max_tokens=12, temperature=0).choices[0].text

    expected = {p: run(p) for p in prompts[:4]}
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(run, prompts))
    assert got == [expected[p] for p in prompts]


def test_disconnect_mid_stream_frees_engine(server):
    before = _metric(server, "omnidraft_generations_cancelled_total")
    body = json.dumps({"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 1500, "temperature": 0,
                       "stream": True}).encode()
    host, port = server.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:  # a client that hangs up mid-stream
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port.encode(), len(body), body))
        got = b""
        while got.count(b"data: ") < 3:
            chunk = sock.recv(4096)
            assert chunk, got  # the server closed before streaming: the answer says why
            got += chunk
        assert got.startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    r2 = requests.post(server + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0},
                       timeout=60)
    took = time.monotonic() - t0
    assert r2.status_code == 200
    assert took < 15.0, f"next request waited {took:.1f}s: the abandoned generation kept the engine"
    assert _metric(server, "omnidraft_generations_cancelled_total") == before + 1


def _metric(server: str, name: str) -> float:
    for line in requests.get(server + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


# ---------------------------------------------------------------- validation
LONG = "hello " * (N_CTX * 3)
MSG = [{"role": "user", "content": "hi"}]
BAD = [  # (what, path, body (dict, or str = raw bytes), status, param)
    ("malformed JSON", "/v1/completions", '{"prompt": "x",', 400, None),
    ("body not an object", "/v1/completions", "[1, 2]", 400, None),
    ("missing prompt", "/v1/completions", {"max_tokens": 4}, 400, "prompt"),
    ("prompt wrong type", "/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("empty prompt", "/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("prompt longer than context", "/v1/completions", {"prompt": LONG, "max_tokens": 4}, 400, None),
    ("messages empty", "/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("unknown role", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400,
     "messages[0].role"),
    ("content wrong type", "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, 400,
     "messages[0].content"),
    ("max_tokens < 1", "/v1/chat/completions", {"messages": MSG, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens > context", "/v1/chat/completions", {"messages": MSG, "max_tokens": 10 ** 6}, 400, "max_tokens"),
    ("max_tokens wrong type", "/v1/completions", {"prompt": "x", "max_tokens": "8"}, 400, "max_tokens"),
    ("temperature out of range", "/v1/completions", {"prompt": "x", "temperature": 7}, 400, "temperature"),
    ("top_p out of range", "/v1/completions", {"prompt": "x", "top_p": 1.5}, 400, "top_p"),
    ("n != 1", "/v1/chat/completions", {"messages": MSG, "n": 2}, 400, "n"),
    ("stop wrong type", "/v1/completions", {"prompt": "x", "stop": 3}, 400, "stop"),
    ("too many stop strings", "/v1/completions", {"prompt": "x", "stop": list("abcde")}, 400, "stop"),
    ("stream not a boolean", "/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("seed wrong type", "/v1/completions", {"prompt": "x", "seed": "abc"}, 400, "seed"),
    ("stream_options without stream", "/v1/completions", {"prompt": "x", "stream_options": {}}, 400,
     "stream_options"),
    ("unknown method", "/v1/completions", {"prompt": "x", "omnidraft": {"method": "magic"}}, 400,
     "omnidraft.method"),
    ("k out of range", "/v1/completions", {"prompt": "x", "omnidraft": {"k": 9}}, 400, "omnidraft.k"),
    ("unknown policy", "/v1/completions", {"prompt": "x", "omnidraft": {"policy": "yolo"}}, 400,
     "omnidraft.policy"),
    ("unknown model", "/v1/completions", {"prompt": "x", "model": "gpt-4o"}, 404, "model"),
    ("oversized body", "/v1/completions", "x" * (2 * 1024 * 1024), 413, None),
]


@pytest.mark.parametrize("what,path,body,status,param", BAD, ids=[b[0] for b in BAD])
def test_malformed_requests_get_clear_4xx(server, what, path, body, status, param):
    data = body if isinstance(body, str) else json.dumps(body)
    r = requests.post(server + path, data=data.encode(), headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param


def test_wrong_http_method_and_path(server):
    assert requests.get(server + "/v1/completions", timeout=5).status_code == 405
    r = requests.get(server + "/v1/nope", timeout=5)
    assert r.status_code == 404 and "error" in r.json()


def test_openai_client_raises_typed_errors_and_server_keeps_serving(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, n=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MSG, max_tokens=4)
    r = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, temperature=0)
    assert r.choices[0].message.content
