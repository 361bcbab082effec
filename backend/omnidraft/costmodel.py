"""Measured cost model: T_verify(n) of the target and T_draft of the drafter on this machine.

Speculation pays only when (1 + expected accepted) / (k * T_draft + T_verify(k + 1))
beats 1 / T_verify(1).  On a 2-core CPU a target pass of n tokens costs nearly n
times one token, so the policy needs real numbers, not the GPU folklore that
verification is free.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from statistics import median

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
        return (tokens / cost) / (1.0 / self.t_verify[1])

    def draft_table(self) -> dict[int, float]:
        return self.t_draft_n or ({1: self.t_draft} if self.t_draft else {})

    def as_dict(self) -> dict:
        return asdict(self)


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


def time_passes(engine: Engine, sizes: range, repeats: int = 5, prefix_len: int = 128) -> dict[int, float]:
    """Median seconds of one decode of n tokens after a prefix, for each n in ``sizes``.

    Sizes are interleaved round by round (after one warm-up pass each), so that drift in the
    machine's speed (turbo, another process) lands on every n alike instead of on the last ones."""
    ids = engine.tokenize(_PROBE)
    prefix = (ids * (prefix_len // len(ids) + 1))[:prefix_len]
    engine.reset()
    engine.decode(prefix, "none")
    sizes = list(sizes)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(repeats + 1):
        for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            engine.rollback(prefix_len)
            t0 = time.perf_counter()
            engine.decode((ids * (n // len(ids) + 1))[:n], "all")
            if r:  # round 0 warms up graphs and caches
                times[n].append(time.perf_counter() - t0)
    engine.reset()
    return {n: median(times[n]) for n in sizes}


def measure(target: Engine, draft: Engine | None, max_batch: int, repeats: int = 5) -> CostModel:
    t_verify = time_passes(target, range(1, max_batch + 1), repeats)
    t_draft_n = time_passes(draft, range(1, 5), repeats) if draft is not None else {}
    return CostModel(t_verify, t_draft_n.get(1, 0.0), t_draft_n)
