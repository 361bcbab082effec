"""Measured cost model: T_verify(n) of the target and T_draft of the drafter on this machine.

Speculation pays only when (1 + expected accepted) / (k * T_draft + T_verify(k + 1))
beats 1 / T_verify(1).  On a 2-core CPU a target pass of n tokens costs nearly n
times one token, so the policy needs real numbers, not the GPU folklore that
verification is free.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Callable

from omnidraft import statefile

from . import build as llama_build
from .engine import Engine

_PROBE = "def add(a, b):\n    return a + b\n\nclass Point:\n    def __init__(self, x, y):\n"


@dataclass
class CostModel:
    t_verify: dict[int, float] = field(default_factory=dict)  # n tokens -> seconds per target pass
    t_draft: float = 0.0  # seconds per drafter token (one-token decode)
    # drafter pass of n tokens: the first pass of a step also ingests the target's last tokens
    t_draft_n: dict[int, float] = field(default_factory=dict)

    def predicted_speedup(self, k: int, acceptance: float) -> float:
        """Speedup over the target alone at draft length k with i.i.d. per-token acceptance."""
        if k == 0 or 1 not in self.t_verify:
            return 1.0
        tokens = sum(acceptance ** i for i in range(k + 1))  # 1 + a + a^2 + ... + a^k
        cost = self.t_verify.get(k + 1, self.t_verify[max(self.t_verify)]) + k * self.t_draft
        return speedup(tokens, cost, self.t_verify[1])

    def draft_table(self) -> dict[int, float]:
        return self.t_draft_n or ({1: self.t_draft} if self.t_draft else {})

    def as_dict(self) -> dict:
        return asdict(self)


def speedup(tokens: float, seconds: float, t1: float) -> float:
    """Speedup of producing ``tokens`` in ``seconds`` over the target alone, one token per ``t1`` seconds
    (the one formula the policy, the benchmark runner and the projection share); 0 for no time."""
    return tokens * t1 / seconds if seconds else 0.0


def t_of(table: dict[int, float], n: int) -> float:
    """T(n) from a measured table, extrapolated linearly past its largest n."""
    if n in table:
        return table[n]
    top = max(table)
    slope = table[top] - table.get(top - 1, table[top])
    return table[top] + slope * (n - top)


def predicted_time(batch_hist: dict[int, int], t_verify: dict[int, float], draft_hist: dict[int, int] | None = None,
                   t_draft: dict[int, float] | None = None, drafted: int = 0) -> float:
    """Seconds a run should take: its target passes by size, plus its drafter passes by size.

    ``draft_hist`` counts drafter decodes by the number of tokens fed; without it (older results)
    every drafted token is priced as a one-token pass."""
    cost = sum(c * t_of(t_verify, int(n)) for n, c in batch_hist.items())
    if t_draft:
        if draft_hist:
            cost += sum(c * t_of(t_draft, int(n)) for n, c in draft_hist.items())
        else:
            cost += drafted * t_draft[1]
    return cost


def sample_passes(engine: Engine, sizes: range, rounds: int = 5, prefix_len: int = 128,
                  after: Engine | None = None) -> dict[int, list[float]]:
    """Seconds of single decodes of n tokens after a prefix, ``rounds`` samples for each n in ``sizes``.

    Sizes are interleaved round by round (after one warm-up pass each), so that drift in the
    machine's speed (turbo, another process) lands on every n alike instead of on the last ones.
    On a GPU each timed pass follows an untimed one of the same size: on an H100 start-up timed the 1.5B's
    one-token pass, between batched ones, at 4.85 ms, while the target alone ran at 2.15 ms a pass (issue
    28), which made the target alone look slow; a change of batch size likely costs llama.cpp's CUDA
    backend a rebuild of its graph (scripts/lab/gpu_divergence.py measures both orders).

    ``after``: each timed pass follows a one-token pass of this engine, as a drafter's passes follow the
    target's in the loop.  Back to back, the drafter ran 1.0 ms a pass on the 2-core EPYC and 1.1 ms at 8
    threads on the device Xeon; after a target pass 1.2 and 1.2-1.6 ms, which is what the loop paid."""
    ids = engine.tokenize(_PROBE)
    prefix = (ids * (prefix_len // len(ids) + 1))[:prefix_len]
    engine.reset()
    engine.decode(prefix, "none")
    sizes = list(sizes)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    before = None
    if after is not None:
        other = after.tokenize(_PROBE)[:17]
        after.reset()
        after.decode(other[:-1], "none")

        def before() -> None:
            after.rollback(len(other) - 1)
            after.decode(other[-1:], "last")
    for r in range(rounds + 1):
        for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            t = timed_pass(engine, (ids * (n // len(ids) + 1))[:n], prefix_len, before)
            if r:  # round 0 warms up graphs and caches
                times[n].append(t)
    engine.reset()
    if after is not None:
        after.reset()
    return times


def timed_pass(engine: Engine, batch: list[int], base: int, before: Callable[[], None] | None = None) -> float:
    """Seconds of one pass of ``batch`` after the engine's first ``base`` tokens, logits for every row (the pass is
    left in the cache).  On a GPU an untimed pass of the same size comes first (``sample_passes`` says why);
    ``before``: called just before the timed pass (another engine's, as in the loop)."""
    if engine.config.n_gpu_layers:
        engine.rollback(base)
        engine.decode(batch, "all")
    if before is not None:
        before()
    engine.rollback(base)
    t0 = time.perf_counter()
    engine.decode(batch, "all")
    return time.perf_counter() - t0


def time_passes(engine: Engine, sizes: range, repeats: int = 5, prefix_len: int = 128) -> dict[int, float]:
    """Median seconds of one decode of n tokens after a prefix, for each n in ``sizes``."""
    return {n: median(v) for n, v in sample_passes(engine, sizes, repeats, prefix_len).items()}


DRAFT_SIZES = range(1, 5)  # a drafter pass ingests at most a few tokens of the target's text


def measure(target: Engine, draft: Engine | None, max_batch: int, repeats: int = 5) -> CostModel:
    """One start-up cost model: ``repeats`` timing rounds of the target and, if given, the drafter."""
    sampler = CostSampler(target, max_batch, {"draft": draft} if draft is not None else None)
    sampler.sample(repeats)
    return sampler.model("draft" if draft is not None else None)


def thread_candidates(n: int) -> list[int]:
    """Thread counts worth trying for a drafter on ``n``: all of them, then halves down to an eighth."""
    out = [n]
    while out[-1] > 1 and out[-1] // 2 >= max(1, n // 8):
        out.append(out[-1] // 2)
    return out


def time_draft_threads(draft: Engine, target: Engine, candidates: list[int], rounds: int = 5) -> dict[int, float]:
    """Median seconds of one drafting step (a 3-token catch-up pass, then 3 one-token passes) at each thread
    count, each step timed right after a one-token pass of the target, as in the loop.

    Back to back, a drafter pass cost 1.1 ms at 8 threads on the device Xeon while the loop paid 1.5-1.65 ms
    (issue 28); timed this way it costs what the loop pays.  Counts are interleaved round by round.  On the
    machines measured (2-core EPYC; the Xeon at 4, 8, 16 threads) all threads stayed the fastest."""
    ids, tids = draft.tokenize(_PROBE), target.tokenize(_PROBE)
    prefix, tprefix = ids[:16], tids[:16]
    draft.reset(), target.reset()
    draft.decode(prefix, "none"), target.decode(tprefix, "none")
    times: dict[int, list[float]] = {n: [] for n in candidates}
    try:
        for r in range(rounds + 1):
            for n in candidates[r % len(candidates):] + candidates[:r % len(candidates)]:
                draft.set_threads(n)
                target.rollback(len(tprefix))
                target.decode(tids[16:17], "last")
                draft.rollback(len(prefix))
                t0 = time.perf_counter()
                draft.decode(ids[16:19], "last")
                for t in ids[19:22]:
                    draft.decode([t], "last")
                if r:  # round 0 warms up
                    times[n].append(time.perf_counter() - t0)
    finally:
        draft.reset(), target.reset()
    return {n: median(v) for n, v in times.items()}


def pick_threads(times: dict[int, float], default: int, margin: float = 0.05) -> int:
    """The fastest count, if it beats ``default``'s time by more than ``margin`` (noise must not move it)."""
    best = min(times, key=times.get)
    return best if times[best] < times[default] * (1 - margin) else default


KEY_VERSION = "draft-after-target"  # how the entries were measured: older ones are measured again


def cache_key(target: Engine, draft: Engine | None, max_batch: int) -> str:
    """What a cost model depends on: the machine, the build, both model files, kernel modes, threads."""
    def one(e: Engine | None) -> str:
        if e is None:
            return "-"
        st = e.path.stat()
        gpu = f":gpu{e.config.n_gpu_layers}" if e.config.n_gpu_layers else ""  # CPU-only keys as before
        threads = e.config.threads()  # as before, unless set_threads changed them (a tuned drafter)
        threads = threads if e.live_threads == threads[0] else (e.live_threads, e.live_threads)
        return f"{e.path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{e.mode}:{threads}{gpu}"

    return "|".join((platform.node(), platform.machine(), str(os.cpu_count()), llama_build.build_id(),
                     one(target), one(draft), str(max_batch), KEY_VERSION))


def cached(key: str, path: Path) -> CostModel | None:
    entry = statefile.read(path, key)
    try:
        return CostModel({int(n): float(t) for n, t in entry["t_verify"].items()}, float(entry["t_draft"]),
                         {int(n): float(t) for n, t in entry.get("t_draft_n", {}).items()})
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def store(key: str, path: Path, model: CostModel | None) -> None:
    """Write (or, with None, drop) one entry, atomically."""
    statefile.write(path, key, None if model is None else model.as_dict())


class CostSampler:
    """Cost-model samples gathered all through a benchmark run, not only at its start.

    A 2-core VM's speed drifts by 5-10 % over minutes; timing a few rounds between prompts and
    taking medians over the whole run prices the run's passes at the speed the machine had
    while it ran them. The timings themselves are still isolated passes, never the run's steps."""

    def __init__(self, target: Engine, max_batch: int, drafters: dict[str, Engine] | None = None):
        self.target, self.max_batch, self.drafters = target, max_batch, drafters or {}
        self.t_verify: dict[int, list[float]] = {}
        self.t_draft: dict[str, dict[int, list[float]]] = {name: {} for name in self.drafters}

    def sample(self, rounds: int = 2) -> None:
        _extend(self.t_verify, sample_passes(self.target, range(1, self.max_batch + 1), rounds))
        for name, eng in self.drafters.items():
            _extend(self.t_draft[name], sample_passes(eng, DRAFT_SIZES, rounds, after=self.target))

    def model(self, drafter: str | None = None) -> CostModel:
        """Medians so far; ``drafter`` names the drafter whose pass costs to include (None: none)."""
        tv = {n: median(v) for n, v in sorted(self.t_verify.items())}
        td = {n: median(v) for n, v in sorted(self.t_draft[drafter].items())} if drafter else {}
        return CostModel(tv, td.get(1, 0.0), td)

    def samples(self) -> int:
        return min((len(v) for v in self.t_verify.values()), default=0)


def _extend(into: dict[int, list[float]], new: dict[int, list[float]]) -> None:
    for n, v in new.items():
        into.setdefault(n, []).extend(v)
