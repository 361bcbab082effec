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

    def predicted_speedup(self, k: int, acceptance: float) -> float:
        """Speedup over the target alone at draft length k with i.i.d. per-token acceptance."""
        if k == 0 or 1 not in self.t_verify:
            return 1.0
        tokens = sum(acceptance ** i for i in range(k + 1))  # 1 + a + a^2 + ... + a^k
        cost = self.t_verify.get(k + 1, self.t_verify[max(self.t_verify)]) + k * self.t_draft
        return (tokens / cost) / (1.0 / self.t_verify[1])

    def as_dict(self) -> dict:
        return asdict(self)


def time_passes(engine: Engine, sizes: range, repeats: int = 3, prefix_len: int = 64) -> dict[int, float]:
    """Median seconds of one decode of n tokens after a prefix, for each n in ``sizes``."""
    ids = engine.tokenize(_PROBE)
    prefix = (ids * (prefix_len // len(ids) + 1))[:prefix_len]
    engine.reset()
    engine.decode(prefix, "none")
    out: dict[int, float] = {}
    for n in sizes:
        times = []
        for _ in range(repeats):
            engine.rollback(prefix_len)
            t0 = time.perf_counter()
            engine.decode((ids * 2)[:n], "all")
            times.append(time.perf_counter() - t0)
        out[n] = median(times)
    engine.reset()
    return out


def measure(target: Engine, draft: Engine | None, max_batch: int, repeats: int = 3) -> CostModel:
    t_verify = time_passes(target, range(1, max_batch + 1), repeats)
    t_draft = time_passes(draft, range(1, 2), repeats)[1] if draft is not None else 0.0
    return CostModel(t_verify, t_draft)
