"""Shared fixtures.  Real models come from the omnidraft cache (`make test` pulls them first)."""

from __future__ import annotations

import logging
import os

import pytest

# The suite runs the 0.5B wherever a command or server is started without --target (the product's default is
# the 1.5B, a 1.1 GB download and 2-3x slower a token): set before omnidraft is imported, and inherited by the
# commands and servers the tests start.  A target named in the environment already is kept.
os.environ.setdefault("OMNIDRAFT_TARGET", "qwen2.5-coder-0.5b")

from omnidraft.assets import models  # noqa: E402 - after the default target is set
from omnidraft.llama.engine import Engine, EngineConfig  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _quiet_llama():
    logging.getLogger("omnidraft.llama_cpp").setLevel(logging.ERROR)


@pytest.fixture(autouse=True, scope="session")
def _shared_state(tmp_path_factory):
    """Where tests/serve_helpers.seed_state pools start-up measurements across this session's tests."""
    from tests.serve_helpers import SHARED_ENV

    with pytest.MonkeyPatch.context() as mp:  # restores the variable afterwards
        mp.setenv(SHARED_ENV, str(tmp_path_factory.mktemp("shared-state")))
        yield


@pytest.fixture(scope="session")
def vocab_engine():
    """Vocab-only engines by short name, loaded once per session."""
    cache: dict[str, Engine] = {}

    def get(name: str) -> Engine:
        if name not in cache:
            cache[name] = Engine(models.vocab_path(name), EngineConfig(vocab_only=True))
        return cache[name]

    return get


# The real pair most tests drive: the default drafter with the default target re-quantized to Q4_0 in every
# matrix (`q4_0_pure`, the speed format README recommends: `fast` kernels, whose batches of up to 8 rows are
# bit-identical to one-token decoding).  On the 2-core Xeon VM a 5-row pass costs 32 ms against 45 for `q4_0`
# (its Q8_0 output matrix: 137 of 408 MiB) and 74 for the shipped Q4_K_M, a decode 18.5 ms against 24 and 34.
# The shipped Q4_K_M pair stays covered end to end by the server tests (tests/test_server.py, fixed k = 3,
# greedy and seeded) and by OMNIDRAFT_TEST_TARGET=qwen2.5-coder-0.5b pytest.
TEST_TARGET = f"{models.QWEN_05B}:q4_0_pure"


@pytest.fixture(scope="session")
def default_session(tmp_path_factory):
    """The real pair (the served drafter, its 16k head -> Qwen2.5-Coder-0.5B, Q4_0 copy), 2 threads, private state dir.

    OMNIDRAFT_TEST_DRAFT=<name or .gguf> runs the same tests with another drafter (e.g. the full
    SmolLM2: ``OMNIDRAFT_TEST_DRAFT=smollm2-135m pytest tests/test_lossless.py``), and
    OMNIDRAFT_TEST_TARGET with another target (``qwen2.5-coder-0.5b``: the shipped Q4_K_M)."""
    from omnidraft.runtime.session import Session, Settings

    from tests.serve_helpers import seed_state

    state = seed_state(tmp_path_factory.mktemp("state"))
    draft = os.environ.get("OMNIDRAFT_TEST_DRAFT", models.SERVED_DRAFT)
    target = os.environ.get("OMNIDRAFT_TEST_TARGET", TEST_TARGET)
    # fast kernels named, not auto: auto would time both modes twice at the first start (18 of this fixture's
    # 30 s on the 2-core Xeon VM); its choice is tests/test_kernel_modes.py's subject.  A target whose fast rows
    # may not verify still loads exact (runtime.invariance.load_target).
    s = Session(Settings(target=target, draft=draft, threads=2, n_ctx=2048, draft_n_ctx=2048, kernels="fast",
                         state_dir=str(state))).warm_up()
    yield s
    s.close()


@pytest.fixture(scope="session")
def target_reference():
    """``reference_target_tokens`` memoised per (target engine, prompt tokens, sampling): the target alone's
    output is a pure function of these (it starts from a reset context), so tests that compare several
    methods or guards against the same prompt share one reference run instead of repeating it."""
    from tests.reference import reference_target_tokens

    memo: dict = {}

    def get(target: Engine, prompt, params) -> list[int]:
        assert not params.reuse_prefix, "a reused prefix depends on the context left behind: not memoised"
        sp = params.sampling()
        # a greedy reference is the argmax per step whatever the seed (verifier.sample_token)
        key = (target, tuple(prompt.target_ids), params.max_tokens, sp.temperature, sp.top_k, sp.top_p,
               None if sp.greedy else sp.seed)
        if key not in memo:
            memo[key] = reference_target_tokens(target, prompt, params)
        return list(memo[key])

    return get
