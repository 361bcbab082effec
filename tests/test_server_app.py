"""The Flask app with a fake Session (no model): static files, outbox hook, worker error paths."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from omnidraft.errors import ContextOverflow
from omnidraft.speculative.generator import Final, GenerationStats
from omnidraft.server import ServerConfig, create_app
from omnidraft.server.app import shutdown
from omnidraft.vocab.textstream import Chunk


@dataclass
class _Settings:
    target: str = "fake-target"
    draft: str = "fake-draft"
    method: str = "omnidraft"
    policy: str = "cost"
    k: int = 4
    p_min: float = 0.3
    n_ctx: int = 64


class _Prompt:
    def __init__(self, text):
        self.text, self.target_ids = text, list(range(len(text.split())))


class _Gen:
    policy = None
    live_stats = None

    def prompt_from_text(self, text):
        if "overflow" in text:
            raise ContextOverflow("prompt too long")
        return _Prompt(text)

    def prompt_from_messages(self, msgs):
        return _Prompt(msgs[-1]["content"])

    def stream(self, prompt, params):
        parts = [Chunk("Hello", True), Chunk(", ", False), Chunk("world", True)]
        yield from parts
        st = GenerationStats("omnidraft", prompt_tokens=len(prompt.target_ids), completion_tokens=3, target_passes=2)
        yield Final("Hello, world", [1, 2, 3], "stop", st, [])


@dataclass
class _Session:
    settings: _Settings = field(default_factory=_Settings)
    drafter_version: str = "v7"
    n_ctx: int = 64
    saved: int = 0
    sampled: list = field(default_factory=list)  # each request's kind, as the worker asked for its generator

    def warm_up(self, method=None, policy=None):
        return self

    def generator(self, method=None, k=None, policy=None, sampled=False):
        self.sampled.append(sampled)
        return _Gen()

    def maybe_swap(self):
        return False

    def ngram_stats(self):
        return None

    def training_record(self, final, prompt, method):
        return {"text": final.text, "v": self.drafter_version}

    def save_state(self):
        self.saved += 1


class _Outbox:
    def __init__(self, fail=False):
        self.fail, self.items = fail, []

    def put(self, rec):
        if self.fail:
            raise OSError("disk full")
        self.items.append(rec)

    def close(self):
        pass


@pytest.fixture
def make(tmp_path):
    apps = []

    def _make(**kw):
        outbox = kw.pop("outbox", None)
        registry = kw.pop("registry", None)
        app = create_app(kw.pop("session", None) or _Session(), ServerConfig(app_dir=str(tmp_path / "app"), **kw), outbox=outbox,
                         registry=registry)
        apps.append(app)
        return app.test_client()

    yield _make
    for a in apps:
        shutdown(a)


def test_spans_and_extension(make):
    c = make()
    d = c.post("/v1/completions", json={"prompt": "hi there"}).get_json()
    assert d["choices"][0]["text"] == "Hello, world"
    assert d["omnidraft"]["draft_spans"] == [[0, 5], [7, 12]] and d["omnidraft"]["drafter_version"] == "v7"
    assert d["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5,
                          "prompt_tokens_details": {"cached_tokens": 0}}


def test_greedy_and_sampled_requests_get_generators_that_learn_apart(make):
    """A request that names no temperature is sampled (the API's default is 1), temperature 0 is greedy: the
    worker asks the session for a generator of that kind (runtime.policies.learner)."""
    session = _Session()
    c = make(session=session)
    for body in ({"prompt": "a"}, {"prompt": "a", "temperature": 0}, {"prompt": "a", "temperature": 0.7}):
        assert c.post("/v1/completions", json=body).status_code == 200
    assert session.sampled == [True, False, True]


def test_typed_error_from_worker_maps_by_type(make):
    r = make().post("/v1/completions", json={"prompt": "overflow please"})
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "ContextOverflow"


def test_outbox_gets_records_and_its_failures_never_reach_the_client(make):
    good = _Outbox()
    c = make(outbox=good)
    assert c.post("/v1/completions", json={"prompt": "a"}).status_code == 200
    c.get("/health")  # the record is written after the answer: give the worker a moment
    import time
    time.sleep(0.2)
    assert good.items == [{"text": "Hello, world", "v": "v7"}]
    c2 = make(outbox=_Outbox(fail=True))
    assert c2.post("/v1/completions", json={"prompt": "a"}).status_code == 200
    time.sleep(0.2)
    assert "omnidraft_outbox_failures_total 1.0" in c2.get("/metrics").get_data(as_text=True)


def test_static_files_safe(make, tmp_path):
    c = make()
    assert c.get("/app/").status_code == 404  # not installed
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "index.html").write_text("<h1>omnidraft</h1>")
    (tmp_path / "secret.txt").write_text("no")
    assert c.get("/app/").get_data(as_text=True) == "<h1>omnidraft</h1>"
    assert c.get("/app/../secret.txt").status_code == 404
    assert c.get("/app/%2e%2e/secret.txt").status_code == 404
    assert c.get("/").headers["Location"].endswith("/app/")


def test_stats_show_the_registrys_heldout_curve(make, tmp_path):
    """What ``omnidraft adapt`` measured into the registry the server swaps from reaches the app's Learning tab;
    a server without a registry shows none."""
    from omnidraft.online.registry import DrafterRegistry
    from omnidraft.server.cli import WatchedRegistry

    assert make().get("/v1/omnidraft/stats").get_json()["heldout"] == []
    reg = DrafterRegistry(tmp_path / "registry")
    point = {"kind": "curve", "set": "javascript", "prompts": 16, "version": "v0002", "accepted": 80,
             "proposed": 240, "tau": 2.02}
    reg.add_evaluation(point)
    assert make(registry=reg).get("/v1/omnidraft/stats").get_json()["heldout"] == [point]
    # as `omnidraft serve --registry` holds it
    assert make(registry=WatchedRegistry(reg)).get("/v1/omnidraft/stats").get_json()["heldout"] == [point]
