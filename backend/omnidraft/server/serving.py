"""What the server needs of the session it serves, and of the generators it hands out: nothing more.

``runtime.session.Session`` is the one implementation; the tests' model-free sessions are others
(``tests/hardening_helpers.FakeSession``, ``tests/test_server_app``), checked against these protocols
(``tests/test_serving_protocol.py``).  The server reads no one's internals: a session's pair, engines and
registry stay its own; what the server shows of them comes out as values (``ngram_stats``,
``training_record``, ``n_ctx``)."""

from __future__ import annotations

from typing import Iterator, Protocol, runtime_checkable

from omnidraft.speculative.generator import Final, GenerationParams
from omnidraft.speculative.stats import GenerationStats
from omnidraft.vocab.textstream import Chunk


class Prompt(Protocol):
    """A tokenised prompt, as a generator reads it back."""

    target_ids: list[int]


class ServedSettings(Protocol):
    """The settings the server shows (/health, /v1/omnidraft/stats) and defaults a request's method to."""

    target: str
    draft: str
    method: str


@runtime_checkable
class ServingGenerator(Protocol):
    """One request's generator: the prompt tokenised, then streamed as chunks and one ``Final``."""

    # The running stream's counts, published by the generator every step: what the server reports when it
    # stops a stream early (a timeout).  None before the first stream.
    live_stats: GenerationStats | None

    def prompt_from_text(self, text: str) -> Prompt: ...

    def prompt_from_messages(self, messages: list[dict]) -> Prompt: ...

    def stream(self, prompt: Prompt, params: GenerationParams) -> Iterator[Chunk | Final]: ...


@runtime_checkable
class ServingSession(Protocol):
    """The session the engine worker owns (``server.worker``): every call is made on the worker's thread."""

    settings: ServedSettings

    @property
    def drafter_version(self) -> str:
        """The drafter in use ("base": the one named in the settings)."""

    @property
    def n_ctx(self) -> int:
        """The target's context window (tokens): the longest prompt plus answer a request may ask for."""

    def warm_up(self, method: str | None = None, policy: str | None = None) -> ServingSession:
        """Load what ``method`` needs (cheap once done: called before every request)."""

    def generator(self, method: str | None = None, k: int | None = None, policy: str | None = None,
                  sampled: bool = False) -> ServingGenerator:
        """A generator for one request; greedy and ``sampled`` requests learn their draft lengths apart."""

    def maybe_swap(self) -> bool:
        """Between requests: swap in a newly published drafter version; True if one was."""

    def ngram_stats(self) -> dict | None:
        """The n-gram cache's counts for /metrics (None: no drafter, no cache)."""

    def training_record(self, final: Final, prompt: Prompt, method: str) -> dict:
        """The training record of a finished answer, for the drafter in use (``online.records``)."""

    def save_state(self) -> None:
        """Persist what was learned online (every few requests, and at shutdown)."""
