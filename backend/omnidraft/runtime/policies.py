"""The policy cache: the draft-length policies a long-running process keeps learning in.

One policy per (method, policy, k, p_min), the least recently used dropped past ``MAX_POLICIES``; the policies
of one method share its acceptance predictor, which outlives them.  How a new one starts (the cost model, the
saved predictor, the rate guard's kept verdict) is handed in by the session, which knows the pair in use."""

from __future__ import annotations

from typing import Callable, Iterator

from omnidraft.llama.costmodel import CostModel
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig, seeded_policy
from omnidraft.speculative.predictor import AcceptancePredictor

MAX_POLICIES = 32  # (method, policy, k) combinations a long-running server keeps learning in


class PolicyCache:
    """Policies by (method, config), least recent first, and the acceptance predictor of each method.

    ``costs()``: the cost model a cost policy is seeded with; ``predictor(method)``: the saved predictor of a
    method (None: no drafter model to predict for); ``verdict(method)``: the rate guard's kept verdict."""

    def __init__(self, costs: Callable[[], CostModel], predictor: Callable[[str], AcceptancePredictor | None],
                 verdict: Callable[[str], dict | None]):
        self._costs, self._load, self._verdict = costs, predictor, verdict
        self._policies: dict[tuple, DraftPolicy] = {}  # (method, policy, k, p_min) -> policy; least recent first
        self._predictors: dict[str, AcceptancePredictor] = {}  # method -> what its policies learn acceptance with

    def get(self, method: str, cfg: PolicyConfig) -> DraftPolicy:
        """The cached policy for (method, cfg), made on first use from the method's predictor, seeded with the
        cost model and resumed from the guard's verdict.  Past MAX_POLICIES the least recent go (their
        predictor stays)."""
        key = (method, cfg.name, cfg.k, cfg.p_min)
        pol = self._policies.pop(key, None)
        if pol is None:
            pol = seeded_policy(cfg, method, self._costs, self._predictor(method))
            if method != "target":
                pol.guard.resume(self._verdict(method))
        self._policies[key] = pol
        while len(self._policies) > MAX_POLICIES:
            self._policies.pop(next(iter(self._policies)))
        return pol

    def _predictor(self, method: str) -> AcceptancePredictor | None:
        if method not in self._predictors:
            predictor = self._load(method)
            if predictor is None:
                return None
            self._predictors[method] = predictor
        return self._predictors[method]

    def policies(self) -> Iterator[tuple[str, DraftPolicy]]:
        """(method, policy) of every cached policy, least recent first."""
        return ((key[0], pol) for key, pol in self._policies.items())

    def predictors(self) -> dict[str, AcceptancePredictor]:
        return dict(self._predictors)

    def clear(self) -> None:
        """A new drafter: the timings stay valid, but acceptance must be learned again."""
        self._policies.clear()
        self._predictors.clear()
