"""How many tokens to draft.

* ``fixed``     - always k (stopping early only at an end-of-generation token).
* ``threshold`` - up to k, stopping when the drafter's top-1 probability falls below p_min.
* ``cost``      - (default) the threshold rule, plus a draft length chosen each step to
  maximise expected tokens per second from timings measured online (T_verify(n),
  T_draft) and the acceptance observed per draft position.  When no length beats
  the target alone it drafts nothing, probing now and then so that it notices
  when speculation starts paying again: never slower than the target alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

POLICIES = ("fixed", "threshold", "cost")


@dataclass
class PolicyConfig:
    name: str = field(default="cost", metadata={"help": "fixed | threshold | cost"})
    k: int = field(default=4, metadata={"help": "maximum draft length"})
    p_min: float = field(default=0.3, metadata={"help": "stop drafting below this drafter top-1 probability"})
    probe_every: int = field(default=16, metadata={"help": "cost policy: steps between probes when not drafting"})


class DraftPolicy:
    def __init__(self, cfg: PolicyConfig):
        if cfg.name not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, not {cfg.name!r}")
        if cfg.k < 0:
            raise ValueError("k must be >= 0")
        self.cfg = cfg
        n = cfg.k + 2
        self.t_verify = [0.0] * (n + 1)  # EMA seconds of a target pass of n tokens
        self.n_verify = [0] * (n + 1)
        self.t_draft = 0.0  # EMA seconds per drafter token
        self.n_draft = 0
        self.acc = [0.7] * n  # EMA P(candidate i accepted | i-1 accepted), optimistic start
        self.steps = 0
        self._last_probe = 0
        self._gap = cfg.probe_every
        self.chosen: list[int] = []

    # ------------------------------------------------------------- decisions
    def choose_k(self, limit: int) -> int:
        self.steps += 1
        k = min(self.cfg.k, limit)
        if self.cfg.name != "cost" or k <= 0 or not self._calibrated():
            return max(k, 0)
        best = self._best_k(k)
        if best > 0:
            self._gap = self.cfg.probe_every
        elif self.steps - self._last_probe >= self._gap:
            # probe: keep the acceptance estimate alive; back off while speculation keeps losing,
            # since each probe makes the drafter catch up on everything written meanwhile
            best, self._last_probe, self._gap = 1, self.steps, min(self._gap * 2, 1024)
        return best

    def keep_going(self, depth: int, p_top1: float) -> bool:
        return self.cfg.name == "fixed" or p_top1 >= self.cfg.p_min

    def expected_speed(self, k: int) -> float:
        """Predicted target tokens per second at draft length k (0 = target alone)."""
        tokens, reach = 1.0, 1.0
        for i in range(k):
            reach *= self.acc[i]
            tokens += reach
        cost = self.t_verify[k + 1] + k * self.t_draft
        return tokens / cost if cost > 0 else 0.0

    def _best_k(self, k_max: int) -> int:
        speeds = [self.expected_speed(k) if self.n_verify[k + 1] or k == 0 else 0.0 for k in range(k_max + 1)]
        # lengths never measured yet are tried once, so the cost model fills in
        for k in range(1, k_max + 1):
            if self.n_verify[k + 1] == 0:
                return k
        return max(range(k_max + 1), key=lambda k: speeds[k])

    def _calibrated(self) -> bool:
        return self.n_verify[1] > 0 and self.n_draft > 0

    # ----------------------------------------------------------- observations
    def observe(self, proposed: int, accepted: int, verify_s: float, draft_s: float, drafted: int) -> None:
        n = proposed + 1
        if n < len(self.t_verify):
            self.t_verify[n] = _ema(self.t_verify[n], verify_s, self.n_verify[n])
            self.n_verify[n] += 1
        if drafted:
            self.t_draft = _ema(self.t_draft, draft_s / drafted, self.n_draft)
            self.n_draft += 1
        for i in range(min(proposed, len(self.acc))):
            hit = 1.0 if i < accepted else 0.0
            self.acc[i] = 0.9 * self.acc[i] + 0.1 * hit
            if not hit:
                break
        self.chosen.append(proposed)

    def seed_costs(self, t_verify: dict[int, float], t_draft: float) -> None:
        """Start from a measured cost model instead of learning it from scratch."""
        for n, t in t_verify.items():
            if n < len(self.t_verify):
                self.t_verify[n], self.n_verify[n] = t, max(self.n_verify[n], 1)
        self.t_draft, self.n_draft = t_draft, max(self.n_draft, 1)


def _ema(old: float, new: float, count: int, alpha: float = 0.2) -> float:
    return new if count == 0 else (1 - alpha) * old + alpha * new
