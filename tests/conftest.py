"""Shared fixtures.  Real models come from the omnidraft cache (`make test` pulls them first)."""

from __future__ import annotations

import logging
import os

import pytest

from omnidraft import models
from omnidraft.engine import Engine, EngineConfig


@pytest.fixture(autouse=True, scope="session")
def _quiet_llama():
    logging.getLogger("omnidraft.llama_cpp").setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def vocab_engine():
    """Vocab-only engines by short name, loaded once per session."""
    cache: dict[str, Engine] = {}

    def get(name: str) -> Engine:
        if name not in cache:
            cache[name] = Engine(models.vocab_path(name), EngineConfig(vocab_only=True))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def default_session(tmp_path_factory):
    """The real default pair (SmolLM2-135M -> Qwen2.5-Coder-0.5B), 2 threads, private state dir.

    OMNIDRAFT_TEST_DRAFT=<name or .gguf> runs the same tests with another drafter (e.g. each distilled
    depth: ``OMNIDRAFT_TEST_DRAFT=smollm2-135m-d4-qwen pytest tests/test_lossless.py``)."""
    from omnidraft.session import Session, Settings

    from tests.serve_helpers import seed_state

    state = seed_state(tmp_path_factory.mktemp("state"))
    draft = os.environ.get("OMNIDRAFT_TEST_DRAFT", models.DEFAULT_DRAFT)
    s = Session(Settings(draft=draft, threads=2, n_ctx=2048, draft_n_ctx=2048, state_dir=str(state))).warm_up()
    yield s
    s.close()
