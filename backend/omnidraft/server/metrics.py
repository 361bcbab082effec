"""Counters, a rolling per-request history, and the Prometheus text rendering.

Acceptance rates are reported with their counts (``proposed``, ``accepted``), per answer and in the
totals, and ``totals.acceptance`` says it in words ("42.0 % (84/200 drafted)"), or "not measured"
below ``rates.MIN_DRAFTED`` drafted tokens.

A generation cut off by the request timeout is counted like a finished one (its tokens were produced),
and flagged ``timed_out`` in the history.  ``problems`` holds what keeps the server from working as
configured without stopping it (a corrupt drafter registry), until it clears.

Every method takes the one lock: HTTP threads count requests, the engine worker counts generations.
"""

from __future__ import annotations

import copy
import math
import statistics
import threading
import time
from collections import Counter, deque

from omnidraft.online.rates import MIN_DRAFTED, acceptance_text
from omnidraft.speculative.stats import GenerationStats

RETRY_AFTER_S = (1, 60)  # the bounds of the Retry-After a 429 answer suggests
DRAIN_WINDOW = 32  # engine jobs whose times estimate how fast the queue drains
DRAIN_DEFAULT_S = 1.0  # seconds per job assumed before any was timed


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self, history: int = 500):
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (endpoint, status) -> n
        self.totals = Counter()  # events: generations, cancelled, timeouts, outbox failures
        self.generated = GenerationStats("all")  # every generation's statistics summed (acceptance, tau)
        self.history: deque = deque(maxlen=history)
        self.ngram: dict = {}
        self.drafter_version = "base"
        self.started = time.time()
        self.problems: dict[str, str] = {}  # source -> what is wrong, while it is
        self._job_s: deque = deque(maxlen=DRAIN_WINDOW)  # engine seconds of the last jobs

    def count_request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, int(status))] += 1

    def bump(self, name: str, n: float = 1) -> None:
        with self._lock:
            self.totals[name] += n

    def set_problem(self, source: str, message: str | None) -> None:
        """Report (a message) or clear (None) a problem shown in the stats and /metrics."""
        with self._lock:
            if message is None:
                self.problems.pop(source, None)
            else:
                self.problems[source] = message

    # --------------------------------------------------------- queue drain
    def job_done(self, seconds: float) -> None:
        """The engine spent ``seconds`` on one queued job (served, timed out or dropped)."""
        with self._lock:
            self._job_s.append(max(0.0, seconds))

    def seconds_per_job(self) -> float:
        """How long the engine takes per queued job: the median of the last DRAIN_WINDOW jobs.

        A median, not a mean: one long generation must not make every 429 say "come back in four
        minutes" while the requests queued behind it clear in seconds."""
        with self._lock:
            times = list(self._job_s)
        return statistics.median(times) if times else DRAIN_DEFAULT_S

    def retry_after(self, ahead: int) -> int:
        """Seconds until the ``ahead`` jobs in front have likely drained, within RETRY_AFTER_S."""
        lo, hi = RETRY_AFTER_S
        return int(min(hi, max(lo, math.ceil(ahead * self.seconds_per_job()))))

    def record_generation(self, stats: GenerationStats, method: str, drafter_version: str, finish_reason: str, endpoint: str,
                          ngram: dict | None, timed_out: bool = False) -> None:
        """After each generation (called by the engine worker), finished or cut off by the timeout
        (``timed_out``: ``stats`` counts the tokens produced until then)."""
        with self._lock:
            self.totals["generations"] += 1
            self.generated.add(stats)
            self.history.append({
                "t": time.time(), "endpoint": endpoint, "method": method, "drafter_version": drafter_version,
                "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.completion_tokens,
                "proposed": stats.proposed, "accepted": stats.accepted,  # a rate comes with its counts
                "tokens_per_s": round(stats.tokens_per_s, 3), "acceptance_rate": round(stats.acceptance_rate, 4),
                "tau": round(stats.tau, 4), "total_s": round(stats.total_s, 4), "finish_reason": finish_reason,
                "timed_out": timed_out})
            self.drafter_version = drafter_version
            if ngram is not None:
                self.ngram = dict(ngram)

    def set_state(self, drafter_version: str, ngram: dict | None) -> None:
        with self._lock:
            self.drafter_version = drafter_version
            if ngram is not None:
                self.ngram = dict(ngram)

    # ------------------------------------------------------------------ views
    def stats_view(self, limit: int | None = None) -> dict:
        with self._lock:
            hist = list(self.history)[-limit:] if limit else list(self.history)
            t = Counter(self.totals)
            g = copy.copy(self.generated)
            ngram, ver = dict(self.ngram), self.drafter_version
            problems = dict(self.problems)
        return {
            "history": hist,
            "totals": {
                "requests": sum(self.requests.values()), "generations": t["generations"],
                "prompt_tokens": g.prompt_tokens, "completion_tokens": g.completion_tokens,
                "proposed": g.proposed, "accepted": g.accepted, "acceptance_rate": g.acceptance_rate,
                "acceptance": acceptance_text(g.accepted, g.proposed),
                "min_drafted": MIN_DRAFTED,  # below this many drafted tokens a rate is not shown
                "tau": g.tau, "tokens_per_s": _throughput(g),
                "draft_s": g.draft_s + g.translate_s, "verify_s": g.verify_s,
                "cancelled": t["cancelled"], "timeouts": t["timeouts"],
                "outbox_failures": t["outbox_failures"], "uptime_s": time.time() - self.started,
            },
            "drafter_version": ver,
            "ngram_cache": ngram,
            "queue_seconds_per_job": round(self.seconds_per_job(), 4),
            "problems": problems,
        }

    def prometheus(self, queue_depth: int) -> str:
        with self._lock:
            reqs = dict(self.requests)
            t = Counter(self.totals)
            g = copy.copy(self.generated)
            ngram, ver = dict(self.ngram), self.drafter_version
            problems = dict(self.problems)
        out: list[str] = []

        def metric(name: str, kind: str, helptext: str, samples: list[tuple[dict, float]]) -> None:
            out.append(f"# HELP {name} {helptext}")
            out.append(f"# TYPE {name} {kind}")
            for labels, v in samples:
                lab = ",".join(f'{k}="{_esc(x)}"' for k, x in labels.items())
                out.append(f"{name}{{{lab}}} {float(v)!r}" if lab else f"{name} {float(v)!r}")

        metric("omnidraft_requests_total", "counter", "HTTP requests by endpoint and status",
               [({"endpoint": e, "status": str(s)}, n) for (e, s), n in sorted(reqs.items())])
        metric("omnidraft_generations_total", "counter", "generations, finished or cut off by the timeout",
               [({}, t["generations"])])
        metric("omnidraft_prompt_tokens_total", "counter", "prompt tokens processed", [({}, g.prompt_tokens)])
        metric("omnidraft_tokens_generated_total", "counter", "completion tokens generated",
               [({}, g.completion_tokens)])
        metric("omnidraft_draft_tokens_proposed_total", "counter", "draft tokens proposed to the target",
               [({}, g.proposed)])
        metric("omnidraft_draft_tokens_accepted_total", "counter", "draft tokens accepted by the target",
               [({}, g.accepted)])
        metric("omnidraft_acceptance_rate", "gauge", "accepted / proposed draft tokens since start",
               [({}, g.acceptance_rate)])
        metric("omnidraft_target_passes_total", "counter", "target forward passes", [({}, g.target_passes)])
        metric("omnidraft_tokens_per_target_pass", "gauge", "tau: generated tokens per target pass since start",
               [({}, g.tau)])
        metric("omnidraft_draft_seconds_total", "counter", "seconds spent drafting and translating",
               [({}, g.draft_s + g.translate_s)])
        metric("omnidraft_verify_seconds_total", "counter", "seconds spent in target verification passes",
               [({}, g.verify_s)])
        metric("omnidraft_generation_seconds_total", "counter", "seconds of generation wall time",
               [({}, g.total_s)])
        metric("omnidraft_ngram_cache_entries", "gauge", "n-gram cache entries", [({}, ngram.get("entries", 0))])
        metric("omnidraft_ngram_cache_bytes", "gauge", "n-gram cache bytes", [({}, ngram.get("bytes", 0))])
        metric("omnidraft_drafter_version", "gauge", "drafter version in use (value 1)", [({"version": ver}, 1)])
        metric("omnidraft_queue_depth", "gauge", "requests waiting for or using the engine", [({}, queue_depth)])
        metric("omnidraft_generations_cancelled_total", "counter", "generations stopped by a client disconnect",
               [({}, t["cancelled"])])
        metric("omnidraft_generation_timeouts_total", "counter", "requests that ran past the request timeout",
               [({}, t["timeouts"])])
        metric("omnidraft_outbox_failures_total", "counter", "training records that could not be queued",
               [({}, t["outbox_failures"])])
        metric("omnidraft_problem", "gauge", "a problem the server works around (value 1), e.g. a corrupt "
               "drafter registry; details in /v1/omnidraft/stats", [({"source": src}, 1) for src in sorted(problems)])
        return "\n".join(out) + "\n"


def _throughput(g: GenerationStats) -> float:
    """Completion tokens per second of generation wall time, prompts included (the engine's throughput, where
    ``GenerationStats.tokens_per_s`` times the loop after the prompt)."""
    return g.completion_tokens / g.total_s if g.total_s else 0.0
