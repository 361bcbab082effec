"""The one thread that owns the Session: requests are served in order from a bounded queue.

llama.cpp contexts are not thread-safe and generation is CPU-bound, so every use of the
Session (prompt tokenisation, generation, hot swap, saving state) happens on this thread.
HTTP threads submit a ``Job`` and read its events: ``Chunk``s, then one ``Done``,
``TimedOut``, ``ApiError`` or ``ClientGone``.  A job whose client went away (``Job.gone()``) is
dropped between chunks, freeing the engine for the next request, and its HTTP thread is told
(``ClientGone``) so that it serves the next request too instead of waiting out the deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import OmniDraftError
from omnidraft.speculative.generator import Final
from omnidraft.speculative.stats import GenerationStats
from .metrics import Metrics
from .protocol import ApiError, Request
from .serving import ServingGenerator, ServingSession

log = logging.getLogger(__name__)

RECORD_TOPK = 32
# How often a waiting HTTP thread checks that its client is still there: a job queued behind a long
# generation produces no event until the worker reaches it, and its thread must not wait that long.
POLL_S = 0.25


@dataclass
class Done:
    final: Final
    method: str
    drafter_version: str

    def ext(self) -> dict:
        return {"stats": self.final.stats.as_dict(), "drafter_version": self.drafter_version}


@dataclass
class TimedOut:
    """The request ran past its deadline; ``text`` is what was generated before (maybe "")."""

    text: str
    method: str
    drafter_version: str
    stats: GenerationStats

    def ext(self) -> dict:
        return {"stats": self.stats.as_dict(), "drafter_version": self.drafter_version, "timed_out": True}


@dataclass
class ClientGone:
    """The client hung up (or the HTTP side cancelled the job): no more events will come."""


@dataclass
class Job:
    req: Request
    endpoint: str
    deadline: float  # time.monotonic()
    disconnected: Callable[[], bool] | None = None  # waitress' client_disconnected, if any
    client: int | None = None  # which API key sent it (None: no keys, every client is one)
    events: queue.Queue = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()

    def gone(self) -> bool:
        if self.cancelled.is_set():
            return True
        try:
            return bool(self.disconnected and self.disconnected())
        except Exception:  # noqa: BLE001 - a broken probe must not kill the worker
            return False

    def next_event(self, slack_s: float = 30.0, poll_s: float = POLL_S):
        """Block for the next event, or ``ClientGone`` within ``poll_s`` of a hang-up.  The worker
        enforces the deadline; ``slack_s`` past it guards against a stuck worker."""
        give_up = max(time.monotonic() + 1.0, self.deadline + slack_s)
        while True:
            try:
                return self.events.get(timeout=poll_s)
            except queue.Empty:
                pass
            if self.gone():
                self.cancel()  # still queued: the worker skips it
                return ClientGone()
            if time.monotonic() > give_up:
                self.cancel()
                return ApiError(504, "the engine did not answer in time", code="timeout")


class EngineWorker:
    def __init__(self, session: ServingSession, metrics: Metrics, queue_size: int = 16, save_every: int = 50,
                 outbox=None):
        """``outbox``: where each answer's training record goes (``online.outbox.Outbox``; None: nowhere)."""
        self.session = session
        self.metrics = metrics
        self.queue: queue.Queue[Job] = queue.Queue(maxsize=max(1, queue_size))
        self.save_every = save_every
        self.outbox = outbox
        self.current: Job | None = None
        self._stop = threading.Event()
        self._served = 0
        self._cache_client: int | None = None  # who left the engine's cached prompt (Job.client)
        self._shared = True  # the running job's client left that prompt: its usage may say how much it reused
        self.thread = threading.Thread(target=self._run, name="omnidraft-engine", daemon=True)

    # ------------------------------------------------------------- HTTP side
    def start(self) -> None:
        self._publish_state()
        self.thread.start()

    def submit(self, job: Job) -> Job:
        try:
            self.queue.put_nowait(job)
        except queue.Full:
            retry = self.metrics.retry_after(self.depth())  # the measured drain time of the jobs ahead
            raise ApiError(429, f"the server is busy ({self.depth()} requests queued); retry in {retry} s",
                           code="queue_full", type_="rate_limit_error", headers={"Retry-After": str(retry)})
        return job

    def depth(self) -> int:
        return self.queue.qsize() + (1 if self.current is not None else 0)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self.current is not None:
            self.current.cancel()
        if self.thread.is_alive():
            self.thread.join(timeout)

    # ----------------------------------------------------------- worker side
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                job = self.queue.get(timeout=0.25)
            except queue.Empty:
                continue
            self.current = job
            t0 = time.monotonic()
            try:
                self._serve(job)
            except Exception as e:  # noqa: BLE001 - one bad request must not stop the server
                log.exception("request failed")
                job.events.put(ApiError(500, f"internal error: {type(e).__name__}", code="internal_error"))
            finally:
                self.current = None
                self.metrics.job_done(time.monotonic() - t0)
        while True:  # answer what is still queued
            try:
                self.queue.get_nowait().events.put(ApiError(503, "the server is shutting down", code="shutdown"))
            except queue.Empty:
                break

    def _serve(self, job: Job) -> None:
        s, req = self.session, job.req
        if job.gone():
            self.metrics.bump("cancelled")
            job.events.put(ClientGone())  # wakes its HTTP thread now rather than at its next poll
            return
        method = req.method or s.settings.method
        if time.monotonic() > job.deadline:
            self.metrics.bump("timeouts")
            job.events.put(TimedOut("", method, s.drafter_version, GenerationStats(method)))
            return
        try:
            if s.maybe_swap():
                self._publish_state()
        except Exception:  # noqa: BLE001 - maybe_swap already keeps the old drafter; never fail the request
            log.exception("drafter hot swap check failed")
        try:
            sampled = not req.params.sampling().greedy  # greedy and sampled requests learn apart
            gen = s.warm_up(method, req.policy).generator(method, req.k, req.policy, sampled)
            prompt = gen.prompt_from_messages(req.messages) if req.kind == "chat" else gen.prompt_from_text(req.prompt)
            params = dataclasses.replace(req.params, stop=list(req.params.stop),
                                         record_topk=RECORD_TOPK if self.outbox is not None else 0)
            self._shared, self._cache_client = self._cache_client == job.client, job.client
            final = self._generate(job, gen, prompt, params, method)
            if final is not None and not self._shared:
                final.stats.reused_tokens = 0  # another key's prefix: its size is not this client's to learn
        except OmniDraftError as e:
            job.events.put(ApiError.from_exception(e))
            return
        if final is None:
            return
        version = s.drafter_version
        # The training record is committed before the client sees the end of its answer: a server
        # killed right after a 200 must not lose it (one SQLite commit, about a millisecond).
        self._to_outbox(final, prompt, method)
        job.events.put(Done(final, method, version))
        self.metrics.record_generation(final.stats, method, version, final.finish_reason, job.endpoint,
                                       s.ngram_stats())
        self._served += 1
        if self.save_every and self._served % self.save_every == 0:
            self._save()

    def _generate(self, job: Job, gen: ServingGenerator, prompt, params, method: str) -> Final | None:
        it = gen.stream(prompt, params)
        text: list[str] = []
        try:
            for item in it:
                if isinstance(item, Final):
                    return item
                job.events.put(item)
                text.append(item.text)
                if job.gone():
                    self.metrics.bump("cancelled")
                    log.info("client went away: generation stopped after %d chunks", len(text))
                    job.events.put(ClientGone())
                    return None
                if time.monotonic() > job.deadline:
                    self._timed_out(job, gen, prompt, method, "".join(text))
                    return None
        finally:
            it.close()  # abandoning the stream is safe: the next request resets the target context
        return None

    def _timed_out(self, job: Job, gen: ServingGenerator, prompt, method: str, text: str) -> None:
        """Answer with the text so far; its usage and /metrics count the tokens produced until now."""
        self.metrics.bump("timeouts")
        live = gen.live_stats  # the counts the generator publishes every step, copied as they stand
        stats = dataclasses.replace(live) if live is not None else \
            GenerationStats(method, prompt_tokens=len(prompt.target_ids))
        if not self._shared:
            stats.reused_tokens = 0
        version = self.session.drafter_version
        job.events.put(TimedOut(text, method, version, stats))
        self.metrics.record_generation(stats, method, version, "length", job.endpoint, None, timed_out=True)

    def _to_outbox(self, final: Final, prompt, method: str) -> None:
        if self.outbox is None:
            return
        try:
            self.outbox.put(self.session.training_record(final, prompt, method))
        except Exception:  # noqa: BLE001 - a training record must never fail a response
            self.metrics.bump("outbox_failures")
            log.exception("training record not queued")

    def _publish_state(self) -> None:
        self.metrics.set_state(self.session.drafter_version, self.session.ngram_stats())

    def _save(self) -> None:
        try:
            self.session.save_state()
        except Exception:  # noqa: BLE001
            log.exception("saving the n-gram cache failed")

    def save_now(self) -> None:
        """Only when the worker thread has stopped (shutdown)."""
        self._save()
