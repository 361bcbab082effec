"""What a target pass costs as the context grows: T(n) / T(1) by KV-cache length, timed where requests go.

The start-up cost model times passes after a 128-token prefix.  Each row of a pass also attends over the whole
cache, so a pass of n rows grows dearer with the context faster than a decode does: the 1.5B Q4_K_M on a 2-core
Zen 4 (fast mode, fa_rows.cpp), T(5) / T(1) 1.53 at 128 cells, 2.19 at 1,536 (results/issue41/zen4-41) and
2.06-2.10 at 2,048-3,072 (zen4-40).  Priced at start-up's ratios, a policy weighs drafts at the wrong price past
1,000 tokens.  (What it bought end to end was within the runs' noise on three held-out long prompts: BENCHMARKS.md
"Long prompts, continued".)

So a request whose context is well past every one timed so far times T(1..k+1) there once, each pass rolled
back (``time_at_context``), and the ratios at any other context follow linearly from the points timed
(``ContextRatios.growth``).  The points are kept per machine, build and models beside the cost model
(runtime.costs), so a machine pays for each band of context lengths once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from omnidraft.errors import EngineError

from .costmodel import timed_pass
from .engine import Engine

log = logging.getLogger(__name__)

MIN_CONTEXT = 512  # shorter contexts keep start-up's ratios: the growth below it is within a 2-core VM's noise
SPAN = 1.5  # a context this many times the longest timed is timed too (extrapolated prices err more with distance)
ROUNDS = 3  # passes of each size at a new context; the fastest counts (a VM's stalls only ever add time)
BASE_CONTEXT = 128  # the start-up cost model's prefix (costmodel.sample_passes)


@dataclass
class ContextRatios:
    """T(n) / T(1) by context length (cells in the KV cache), the start-up model's at BASE_CONTEXT."""

    points: dict[int, dict[int, float]] = field(default_factory=dict)  # cells -> {n: T(n) / T(1)}, n >= 2

    @classmethod
    def from_startup(cls, t_verify: dict[int, float]) -> "ContextRatios":
        t1 = t_verify.get(1)
        return cls({BASE_CONTEXT: {n: t / t1 for n, t in t_verify.items() if n > 1}} if t1 else {})

    def needs(self, cells: int) -> bool:
        """Is ``cells`` long enough, and far enough past every context timed, to be timed itself?"""
        return cells >= MIN_CONTEXT and cells > SPAN * max(self.points, default=0)

    def add(self, cells: int, ratios: dict[int, float]) -> None:
        self.points[cells] = dict(ratios)

    def growth(self, cells: int) -> dict[int, float]:
        """By n: T(n) / T(1) at ``cells`` over the same at start-up's context, never below 1.  Linear in the context
        between the points timed (the attention's cost is); past the longest, along the last two points' slope.
        Empty while only the start-up point is known."""
        if len(self.points) < 2:
            return {}
        base = min(self.points)
        out = {}
        for n, r0 in self.points[base].items():
            xs = sorted(c for c in self.points if n in self.points[c])
            if len(xs) > 1:
                out[n] = max(1.0, _along([(c, self.points[c][n]) for c in xs], cells) / r0)
        return out

    def as_dict(self) -> dict:
        return {"points": {str(c): {str(n): round(r, 4) for n, r in rs.items()} for c, rs in self.points.items()}}

    @classmethod
    def from_dict(cls, entry: dict | None) -> "ContextRatios | None":
        """Parsed from ``as_dict``'s form; None for anything else (measured again, never half-trusted)."""
        try:
            pts = {int(c): {int(n): float(r) for n, r in rs.items()} for c, rs in entry["points"].items()}
        except (TypeError, KeyError, ValueError, AttributeError):
            return None
        ok = all(c > 0 and all(n > 1 and r > 0 for n, r in rs.items()) for c, rs in pts.items())
        return cls(pts) if ok else None


def _along(xy: list[tuple[int, float]], x: int) -> float:
    """The piecewise-linear function through ``xy`` (sorted by x) at ``x``: flat before the first point, extended
    past the last along the last segment's slope, never falling."""
    if x <= xy[0][0]:
        return xy[0][1]
    for (x0, y0), (x1, y1) in zip(xy, xy[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = xy[-2], xy[-1]
    return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (x - x1)


def time_at_context(engine: Engine, sizes: Sequence[int], rounds: int = ROUNDS) -> dict[int, float]:
    """The fastest of ``rounds`` passes of n tokens, logits for every row as in verification, at the engine's
    context, for each n in ``sizes``; each pass rolled back, so the cache is left as found.  The tokens fed are
    the context's last ones: what is computed does not change what a pass costs."""
    base = engine.n_past
    fill = list(engine.tokens[-max(sizes):])
    if len(fill) < max(sizes):
        raise ValueError(f"a context of {base} tokens is too short to time passes of {max(sizes)}")
    best: dict[int, float] = {n: float("inf") for n in sizes}
    try:
        for _ in range(rounds):
            for n in sizes:
                best[n] = min(best[n], timed_pass(engine, fill[:n], base))
    finally:
        engine.rollback(base)
    return best


class ContextCosts:
    """The context's pass prices for a generator: ``growth`` times a context when ``ratios`` needs it, then
    hands ``save`` the points (kept by the cost store)."""

    def __init__(self, ratios: ContextRatios, save: Callable[[ContextRatios], None] | None = None,
                 rounds: int = ROUNDS):
        self.ratios, self.save, self.rounds = ratios, save, rounds
        self.timed_s = 0.0  # seconds spent timing, this process

    def growth(self, engine: Engine, max_rows: int, timing: bool = True) -> dict[int, float]:
        """T(n) / T(1) at the engine's context over start-up's (``ContextRatios.growth``), the passes of 1..max_rows
        timed there first if it needs them and ``timing`` allows (a request's start, not its steps)."""
        cells = engine.n_past
        room = cells + max_rows <= engine.n_ctx  # a prompt that nearly fills the context leaves no room to time in
        if timing and room and max_rows > 1 and self.ratios.needs(cells) and self.ratios.points:
            self._time(engine, cells, max_rows)
        return self.ratios.growth(cells)

    def _time(self, engine: Engine, cells: int, max_rows: int) -> None:
        """Time the passes at ``cells`` and keep the point; a failure costs the request nothing but the point."""
        t0 = time.perf_counter()
        try:
            times = time_at_context(engine, range(1, max_rows + 1), self.rounds)
        except EngineError as e:
            log.warning("target passes at %d cells of context could not be timed (%s): priced from the points known",
                        cells, e)
            return
        finally:
            self.timed_s += time.perf_counter() - t0
        self.ratios.add(cells, {n: t / times[1] for n, t in times.items() if n > 1})
        log.info("target passes at %d cells of context: T(1) %.1f ms, T(n) / T(1) %s (timed in %.2f s)", cells,
                 times[1] * 1e3, {n: round(t / times[1], 2) for n, t in times.items() if n > 1},
                 time.perf_counter() - t0)
        if self.save is not None:
            try:
                self.save(self.ratios)
            except OSError as e:  # the state dir was checked at start; kept for this process at least
                log.warning("could not keep the context point: %s", e)
