"""A hostile probe's API and command-line findings, one test (or a few) per item; model-free but one.

a usage of an answer cut off by the timeout     e a corrupt registry CURRENT: logged once, reported
b --port outside 0..65535                        f secrets off the command line (env, files)
c every numeric flag checked before loading      g `trainer serve` beyond loopback
d Retry-After from the measured drain            h unsupported OpenAI fields are 400, by name
"""

from __future__ import annotations

import logging
import math
import signal
import time
from dataclasses import dataclass, field

import pytest

from hardening_helpers import FakePrompt, FakeSession, app_maker
from omnidraft.assets import models
from omnidraft.apps.cli import main as cli_main
from omnidraft.speculative.generator import Final, GenerationParams, GenerationStats
from omnidraft.server.app import state
from omnidraft.server.protocol import ApiError, parse_request
from omnidraft.server.worker import Job
from omnidraft.runtime.pair import Swaps
from omnidraft.vocab.textstream import Chunk

PROMPT = {"prompt": "hi there", "max_tokens": 4}
NO_MODEL = "/nonexistent/model.gguf"
PS = "(ps, /proc/PID/cmdline)"  # how a secret on the command line is warned about


@pytest.fixture
def make(tmp_path):
    with app_maker(tmp_path) as new_app:
        yield new_app


def _prometheus(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


# ------------------------------------------------------- a: a cut-off answer's usage
class TickingGen:
    """One "token" every ``tick_s``, counted in ``live_stats`` step by step as ``Generator`` counts them."""

    policy = None

    def __init__(self, tick_s: float):
        self.tick_s, self.live_stats, self.produced = tick_s, None, 0

    def prompt_from_text(self, text):
        return FakePrompt(text)

    def prompt_from_messages(self, msgs):
        return FakePrompt(msgs[-1]["content"])

    def stream(self, prompt, params):
        stats = self.live_stats = GenerationStats("omnidraft", prompt_tokens=len(prompt.target_ids))
        for i in range(params.max_tokens):
            time.sleep(self.tick_s)
            stats.completion_tokens = stats.target_passes = self.produced = i + 1
            yield Chunk(f"w{i} ", False)
        yield Final("", [], "length", stats, [])


@dataclass
class TickingSession(FakeSession):
    tick_s: float = 0.05
    gens: list = field(default_factory=list)

    def generator(self, method=None, k=None, policy=None, sampled=False):
        self.gens.append(TickingGen(self.tick_s))
        return self.gens[-1]


def test_timed_out_answer_reports_the_tokens_it_produced(make):
    session = TickingSession()
    app = make(session, request_timeout_s=0.6)
    c = app.test_client()
    d = c.post("/v1/completions", json={"prompt": "count", "max_tokens": 64}).get_json()
    assert d["omnidraft"]["timed_out"] is True and d["choices"][0]["finish_reason"] == "length"
    produced = session.gens[-1].produced
    assert 3 <= produced < 64 and d["choices"][0]["text"].count("w") == produced
    assert d["usage"]["completion_tokens"] == produced
    assert d["usage"]["total_tokens"] == d["usage"]["prompt_tokens"] + produced
    sse = c.post("/v1/completions", json={"prompt": "count", "max_tokens": 64, "stream": True,
                                          "stream_options": {"include_usage": True}}).get_data(as_text=True)
    streamed = session.gens[-1].produced
    assert f'"completion_tokens":{streamed},' in sse and streamed >= 3
    text = c.get("/metrics").get_data(as_text=True)
    assert _prometheus(text, "omnidraft_tokens_generated_total") == produced + streamed
    assert _prometheus(text, "omnidraft_generation_timeouts_total") == 2
    stats = c.get("/v1/omnidraft/stats").get_json()
    assert stats["totals"]["completion_tokens"] == produced + streamed
    assert [h["timed_out"] for h in stats["history"]] == [True, True]


@pytest.mark.slow
def test_generator_counts_the_tokens_of_a_stream_stopped_early():
    """What the worker reports on a timeout: the real Generator's count while it streams."""
    from omnidraft.llama.engine import Engine, EngineConfig
    from omnidraft.speculative.generator import Generator

    spec = models.get_spec(models.DEFAULT_DRAFT)  # the smallest model: any model can generate alone
    if not models.is_verified(spec):
        pytest.skip(f"{spec.name} not downloaded")
    engine = Engine(models.model_path(spec), EngineConfig(n_ctx=256, n_threads=2))
    try:
        gen = Generator(engine)
        it = gen.stream(gen.prompt_from_text("def add(a, b):"), GenerationParams(max_tokens=64))
        for item in it:  # stopped after a few tokens, as the server's timeout stops it
            assert not isinstance(item, Final), "the stream ended before it could be cut off"
            if gen.live_stats.completion_tokens >= 4:
                break
        it.close()
        live = gen.live_stats
        assert live.completion_tokens == live.target_passes >= 4 and live.total_s > 0  # target alone: 1 a pass
    finally:
        engine.close()


# --------------------------------------------- b, c: flags checked before loading
@pytest.fixture
def no_models(monkeypatch):
    """Any attempt to find or load a model fails the test: a bad flag must stop the command first."""
    import omnidraft.runtime.session

    def touched(*a, **k):
        raise AssertionError("a model was looked up before the flags were checked")

    monkeypatch.setattr(models, "resolve", touched)
    monkeypatch.setattr(omnidraft.runtime.session, "Session", touched)


def _usage_error(capsys, *argv: str) -> str:
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--target", NO_MODEL, "--draft", NO_MODEL, *argv])
    assert time.monotonic() - t0 < 2.0
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "not a file" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("port", ["70000", "65536", "-1", "http"])
def test_port_outside_the_tcp_range_is_refused(no_models, capsys, port):
    err = _usage_error(capsys, "--port", port)
    assert "argument --port" in err and "0..65535" in err


def test_port_0_asks_for_any_free_port():
    from omnidraft.apps.cli import build_parser

    assert build_parser().parse_args(["serve", "--port", "0"]).port == 0
    assert build_parser().parse_args(["serve", "--port", "65535"]).port == 65535


@pytest.mark.parametrize("flag,value", [
    ("--n-ctx", "0"), ("--draft-n-ctx", "0"), ("-k", "0"), ("--k", "100"), ("--threads", "-1"),
    ("--p-min", "1.5"), ("--ngram-budget-kb", "-1"), ("--queue-size", "0"), ("--http-threads", "-1"),
    ("--request-timeout-s", "0"), ("--request-timeout-s", "nan"), ("--max-body-kb", "0"), ("--history", "0"),
    ("--save-every", "-1"), ("--n-ctx", "4k"),
])
def test_numeric_flags_are_checked_before_any_model_loads(no_models, capsys, flag, value):
    err = _usage_error(capsys, flag, value)
    assert f"argument {flag}" in err or f"/{flag}" in err, err  # -k is listed as "--k/-k"
    assert "within" in err and value in err


# -------------------------------------------------------- d: Retry-After
def test_retry_after_is_the_measured_drain_of_the_jobs_ahead(make):
    app = make(FakeSession(delay_s=0.02), queue_size=64)
    c = app.test_client()
    for _ in range(4):  # the engine's measured pace: a few jobs of about 20 ms
        assert c.post("/v1/completions", json=PROMPT).status_code == 200
    worker = state(app).worker
    worker.stop()  # the engine takes no more jobs: the queue fills up
    req = parse_request(PROMPT, "completion", 64, ("fake-target",))
    with pytest.raises(ApiError) as busy:
        for _ in range(65):
            worker.submit(Job(req, "/v1/completions", time.monotonic() + 60))
    r = c.post("/v1/completions", json=PROMPT)
    assert busy.value.status == r.status_code == 429
    retry = int(r.headers["Retry-After"])
    # 64 jobs of ~20 ms drain in about 1.3 s (a slow machine: a few); not 64 x a guessed second
    assert 1 <= retry <= 15, retry
    assert f"retry in {retry} s" in r.get_json()["error"]["message"]


def test_retry_after_stays_within_bounds():
    from omnidraft.server.metrics import RETRY_AFTER_S, Metrics

    m = Metrics()
    assert m.retry_after(5) == 5  # nothing timed yet: a second a job
    for s in (300.0, 290.0, 280.0):  # jobs that ran into a long timeout
        m.job_done(s)
    assert m.retry_after(16) == RETRY_AFTER_S[1] == 60
    for _ in range(30):  # then a quick stream: the median follows it, the outliers do not hold it
        m.job_done(0.1)
    assert m.retry_after(16) == math.ceil(16 * 0.1) == 2
    assert m.retry_after(0) == RETRY_AFTER_S[0] == 1


# ------------------------------------------ serve, through the CLI, without models
@dataclass
class CliSession(FakeSession):
    """A FakeSession that reads a drafter registry the way Session does: through the real ``Swaps``, whose
    registry read is what the server must survive; "loading" a version records its path."""

    state_dir: object = None
    loaded: list = field(default_factory=list)
    swaps: Swaps = None

    def made(self, settings, registry=None):
        """What ``Session(settings, registry=...)`` returns in ``_serve``."""
        self.swaps = Swaps(self.loaded.append, registry)
        return self

    def maybe_swap(self):
        swapped = self.swaps.maybe_swap()
        self.drafter_version = self.swaps.version
        return swapped

    def close(self):
        pass


def _serve(monkeypatch, tmp_path, argv, script):
    """`omnidraft serve ARGV` through the CLI's main, a CliSession for the models, and ``script(client, app)``
    run where the server would serve; returns (exit code, what script returned, the session)."""
    import omnidraft.server.cli as server_cli
    import omnidraft.runtime.session

    session = CliSession(state_dir=tmp_path / "state")
    monkeypatch.setattr(omnidraft.runtime.session, "Session", session.made)
    out = {}

    class Server:
        effective_port = 0

        def __init__(self, app):
            self.app = app

        def run(self):
            out["result"] = script(self.app.test_client(), self.app)

        def close(self):
            pass

    monkeypatch.setattr(server_cli, "build_server", lambda app, cfg, *a, **kw: Server(app))
    old_term = signal.getsignal(signal.SIGTERM)
    try:
        rc = cli_main(["serve", *argv])
    finally:
        signal.signal(signal.SIGTERM, old_term)
    return rc, out.get("result"), session


# ------------------------------------------------- e: a corrupt registry CURRENT
def test_corrupt_current_is_logged_once_reported_and_the_drafter_kept(monkeypatch, tmp_path, caplog):
    from omnidraft.online.registry import DrafterRegistry

    reg_dir = tmp_path / "registry"
    DrafterRegistry(reg_dir)
    (reg_dir / "CURRENT").write_text("[1]")
    caplog.set_level(logging.INFO)

    def script(c, app):
        codes = [c.post("/v1/completions", json=PROMPT).status_code for _ in range(3)]
        broken = c.get("/v1/omnidraft/stats").get_json()
        prom = c.get("/metrics").get_data(as_text=True)
        gguf = tmp_path / "new.gguf"
        gguf.write_bytes(b"GGUF")
        DrafterRegistry(reg_dir).publish(gguf)  # the repair: a publish rewrites CURRENT
        codes.append(c.post("/v1/completions", json=PROMPT).status_code)
        return codes, broken, prom, c.get("/v1/omnidraft/stats").get_json()

    rc, (codes, broken, prom, fixed), session = _serve(monkeypatch, tmp_path, ["--registry", str(reg_dir)], script)
    assert rc == 0 and codes == [200] * 4
    assert "CURRENT" in broken["problems"]["drafter_registry"] and broken["drafter_version"] == "base"
    assert 'omnidraft_problem{source="drafter_registry"} 1.0' in prom
    registry_logs = [r for r in caplog.records if r.name == "omnidraft.server" and r.levelno >= logging.WARNING]
    assert len(registry_logs) == 1 and not any(r.exc_info for r in caplog.records), registry_logs
    assert fixed["problems"] == {} and fixed["drafter_version"] == "v0001" and len(session.loaded) == 1


# --------------------------------------------------- f: secrets off the command line
def _auth_check(c, app):
    return (c.post("/v1/completions", json=PROMPT).status_code,
            c.post("/v1/completions", json=PROMPT, headers={"Authorization": "Bearer k3y-from-elsewhere"}).status_code)


def test_api_key_from_the_environment(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("OMNIDRAFT_API_KEY", "k3y-from-elsewhere")
    rc, codes, _ = _serve(monkeypatch, tmp_path, ["--host", "0.0.0.0"], _auth_check)
    assert rc == 0 and codes == (401, 200)
    assert PS not in capsys.readouterr().err


def test_api_key_from_a_file(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("OMNIDRAFT_API_KEY", raising=False)
    key = tmp_path / "api-key"
    key.write_text("k3y-from-elsewhere\n")
    rc, codes, _ = _serve(monkeypatch, tmp_path, ["--host", "0.0.0.0", "--api-key-file", str(key)], _auth_check)
    assert rc == 0 and codes == (401, 200)
    assert cli_main(["serve", "--api-key-file", str(tmp_path / "missing")]) == 2
    assert "--api-key-file" in capsys.readouterr().err
    key.write_text("\n")
    assert cli_main(["serve", "--api-key-file", str(key)]) == 2
    assert "empty" in capsys.readouterr().err


def test_api_key_flag_still_works_but_warns_of_ps(monkeypatch, tmp_path, capsys, caplog):
    rc, codes, _ = _serve(monkeypatch, tmp_path, ["--host", "0.0.0.0", "--api-key", "k3y-from-elsewhere"],
                          _auth_check)
    assert rc == 0 and codes == (401, 200)
    said = capsys.readouterr().err + caplog.text
    assert "--api-key" in said and PS in said and "OMNIDRAFT_API_KEY" in said and "k3y" not in said


def test_trainer_token_for_uploads_from_the_environment_or_a_file(monkeypatch, tmp_path, caplog):
    def token(c, app):
        return state(app).uploader.token

    argv = ["--trainer-url", "http://127.0.0.1:9"]
    monkeypatch.setenv("OMNIDRAFT_TRAINER_TOKEN", "from-env")
    assert _serve(monkeypatch, tmp_path, argv, token)[:2] == (0, "from-env")
    path = tmp_path / "token"
    path.write_text("from-file\n")
    assert _serve(monkeypatch, tmp_path, [*argv, "--trainer-token-file", str(path)], token)[:2] == (0, "from-file")
    assert PS not in caplog.text
    assert _serve(monkeypatch, tmp_path, [*argv, "--trainer-token", "from-flag"], token)[:2] == (0, "from-flag")
    assert "--trainer-token" in caplog.text and PS in caplog.text


# ------------------------------------------------------ f, g: `trainer serve`
@pytest.fixture
def trainer_cfg(monkeypatch):
    """`trainer serve` up to the Trainer it would start: its config, caught (the command then ends, 130)."""
    import omnidraft.trainer.service as service

    seen = []

    def fake_trainer(cfg):
        seen.append(cfg)
        raise KeyboardInterrupt

    monkeypatch.setattr(service, "Trainer", fake_trainer)
    monkeypatch.delenv("OMNIDRAFT_TRAINER_TOKEN", raising=False)
    return seen


def test_trainer_token_from_the_environment_or_a_file(trainer_cfg, monkeypatch, tmp_path, capsys, caplog):
    state_dir = ["--state-dir", str(tmp_path / "trainer")]
    monkeypatch.setenv("OMNIDRAFT_TRAINER_TOKEN", "env-token-0123456789")
    assert cli_main(["trainer", "serve", *state_dir]) == 130 and trainer_cfg[-1].token == "env-token-0123456789"
    path = tmp_path / "token-file"
    path.write_text("file-token-0123456789\n")
    assert cli_main(["trainer", "serve", *state_dir, "--token-file", str(path)]) == 130
    assert trainer_cfg[-1].token == "file-token-0123456789"
    assert PS not in capsys.readouterr().err + caplog.text
    assert cli_main(["trainer", "serve", *state_dir, "--token", "flag-token-0123456789"]) == 130
    assert trainer_cfg[-1].token == "flag-token-0123456789"
    said = capsys.readouterr().err + caplog.text
    assert "--token" in said and PS in said and "flag-token" not in said


def test_trainer_beyond_loopback_is_said_loudly(trainer_cfg, tmp_path, capsys, caplog):
    state_dir = ["--state-dir", str(tmp_path / "trainer")]
    assert cli_main(["trainer", "serve", *state_dir]) == 130
    assert "reachable from the network" not in capsys.readouterr().err + caplog.text
    assert cli_main(["trainer", "serve", *state_dir, "--host", "0.0.0.0"]) == 130
    err = capsys.readouterr().err
    assert "WARNING" in err and "0.0.0.0" in err and "reachable from the network" in err
    assert any(r.levelno == logging.WARNING and "reachable" in r.getMessage() for r in caplog.records)
    # a guessable token on a network bind: refused before the trainer starts
    before = len(trainer_cfg)
    assert cli_main(["trainer", "serve", *state_dir, "--host", "0.0.0.0", "--token", "abc"]) == 2
    assert "refusing" in capsys.readouterr().err and len(trainer_cfg) == before


# ------------------------------------------------- h: unsupported OpenAI fields
UNSUPPORTED = [
    ("/v1/chat/completions", "tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ("/v1/chat/completions", "tool_choice", "auto"),
    ("/v1/chat/completions", "functions", [{"name": "f", "parameters": {}}]),
    ("/v1/chat/completions", "function_call", "auto"),
    ("/v1/chat/completions", "response_format", {"type": "json_object"}),
    ("/v1/chat/completions", "response_format", {"type": "json_schema", "json_schema": {"name": "x"}}),
    ("/v1/completions", "logit_bias", {"50256": -100}),
    ("/v1/chat/completions", "presence_penalty", 0.5),
    ("/v1/completions", "frequency_penalty", 1),
    ("/v1/chat/completions", "n", 2),
    ("/v1/completions", "best_of", 3),
    ("/v1/completions", "echo", True),
    ("/v1/completions", "suffix", "\n}"),
    ("/v1/chat/completions", "modalities", ["text", "audio"]),
]
HARMLESS = {"response_format": {"type": "text"}, "tools": [], "tool_choice": "none", "logit_bias": {},
            "presence_penalty": 0, "frequency_penalty": 0.0, "n": 1, "user": "u-1", "store": False,
            "metadata": {"k": "v"}, "service_tier": "auto"}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.mark.parametrize("path,name,value", UNSUPPORTED, ids=[f"{u[1]}-{i}" for i, u in enumerate(UNSUPPORTED)])
def test_unsupported_fields_are_refused_by_name(make, path, name, value):
    body = {**(CHAT if "chat" in path else PROMPT), name: value}
    r = make().test_client().post(path, json=body)
    assert r.status_code == 400, r.get_data(as_text=True)
    err = r.get_json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == name and err["code"] == "unsupported_parameter"
    assert f"'{name}'" in err["message"]


def test_fields_that_ask_for_nothing_are_accepted(make):
    c = make().test_client()
    assert c.post("/v1/chat/completions", json={**CHAT, **HARMLESS}).status_code == 200
    legacy = {**PROMPT, "echo": False, "best_of": 1, "suffix": "", "logprobs": 2}
    assert c.post("/v1/completions", json=legacy).status_code == 200
