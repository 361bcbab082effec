"""A model-free Session for the hardening tests, and a child process serving it with a real outbox.

The fake generator spells its answer through ``TextStream`` like the real one, so what the server
shows (chunks, final text) comes out of the same code path.

Child: ``python tests/hardening_helpers.py OUTBOX_PATH RECORD_DELAY_S`` prints its port, then serves
until killed.  A training record takes RECORD_DELAY_S to build, as a slow record build (or a slow disk) would.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field

from omnidraft.speculative.generator import Final, GenerationStats
from omnidraft.vocab.textstream import TextStream


@dataclass
class FakeSettings:
    target: str = "fake-target"
    draft: str = "fake-draft"
    method: str = "omnidraft"
    policy: str = "cost"
    k: int = 4
    p_min: float = 0.3
    n_ctx: int = 64


class FakePrompt:
    def __init__(self, text: str):
        self.text, self.target_ids = text, list(range(len(text.split()) or 1))


class FakeGen:
    """Answers with ``answer`` (bytes, cut anywhere) after ``delay_s`` of "generation"."""

    policy = None
    live_stats = None  # never stopped early by a test: the worker's own count stands in

    def __init__(self, answer: bytes, delay_s: float):
        self.answer, self.delay_s = answer, delay_s

    def prompt_from_text(self, text):
        return FakePrompt(text)

    def prompt_from_messages(self, msgs):
        return FakePrompt(msgs[-1]["content"])

    def stream(self, prompt, params):
        if self.delay_s:
            time.sleep(self.delay_s)
        ts = TextStream(params.stop)
        for i in range(0, len(self.answer), 2):  # two bytes per "token": characters arrive split
            yield from ts.push(self.answer[i:i + 2], i % 4 == 0)
        yield from ts.finish()
        n = (len(self.answer) + 1) // 2
        st = GenerationStats("omnidraft", prompt_tokens=len(prompt.target_ids), completion_tokens=n, target_passes=n)
        yield Final(ts.text, list(range(n)), "length", st, [])


@dataclass
class FakeSession:
    """A ``server.serving.ServingSession`` without models (tests/test_serving_protocol.py checks it is one)."""

    answer: bytes = b"Hello, world"
    delay_s: float = 0.0
    settings: FakeSettings = field(default_factory=FakeSettings)
    drafter_version: str = "base"
    n_ctx: int = 64
    record_delay_s: float = 0.0

    def warm_up(self, method=None, policy=None):
        return self

    def generator(self, method=None, k=None, policy=None, sampled=False):
        return FakeGen(self.answer, self.delay_s)

    def maybe_swap(self):
        return False

    def ngram_stats(self):
        return None

    def training_record(self, final, prompt, method):
        time.sleep(self.record_delay_s)
        return {"id": f"rec-{time.time_ns()}", "text": final.text}

    def save_state(self):
        pass


@contextlib.contextmanager
def app_maker(tmp_path):
    """Yields ``make(session=None, **ServerConfig fields)`` -> a server app on ``FakeSession`` by default;
    every app made is shut down on exit."""
    from omnidraft.server import ServerConfig, create_app
    from omnidraft.server.app import shutdown

    apps = []

    def make(session=None, **kw):
        app = create_app(session or FakeSession(), ServerConfig(app_dir=str(tmp_path / "app"), **kw))
        apps.append(app)
        return app

    try:
        yield make
    finally:
        for a in apps:
            shutdown(a)


@contextlib.contextmanager
def serving(app, cfg, **kw):
    """``app`` behind ``omnidraft.server.cli.build_server`` (the real waitress set-up) on a free loopback
    port, in a thread; yields the port.  ``kw`` goes to build_server."""
    from omnidraft.server.app import shutdown
    from omnidraft.server.cli import build_server

    server = build_server(app, cfg, **kw)
    threading.Thread(target=server.run, daemon=True).start()
    try:
        yield server.effective_port
    finally:
        server.close()
        server.task_dispatcher.shutdown(timeout=5)
        shutdown(app)


def _child(outbox_path: str, record_delay_s: float) -> None:
    import waitress

    from omnidraft.online.outbox import Outbox
    from omnidraft.server import ServerConfig, create_app

    app = create_app(FakeSession(record_delay_s=record_delay_s), ServerConfig(), outbox=Outbox(outbox_path))
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=4)
    print(server.effective_port, flush=True)
    server.run()


if __name__ == "__main__":
    _child(sys.argv[1], float(sys.argv[2]))
