"""The policy cache: the draft-length policies a long-running process keeps learning in.

One policy per (learner, policy, k, p_min), the least recently used dropped past ``MAX_POLICIES``; the policies
of one learner share its acceptance predictor, which outlives them.  A learner is a method under one kind of
request, greedy or sampled (``learner``).  How a new one starts (the cost model, the saved predictor, the rate
guard's kept verdict) is handed in by the session, which knows the pair in use."""

from __future__ import annotations

from typing import Callable, Iterator

from omnidraft.llama.costmodel import CostModel
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig, seeded_policy
from omnidraft.speculative.predictor import AcceptancePredictor

MAX_POLICIES = 32  # (learner, policy, k) combinations a long-running server keeps learning in
SAMPLED = "@sampled"


def learner(method: str, sampled: bool) -> str:
    """Whose estimates a request learns and reads.  A sampled request keeps a draft only where the target's draw
    lands on it, which happens less often than its argmax doing so, and not by the same features of the
    drafter's row (the 1.5B at k = 4, BENCHMARKS.md: 41 % of drafts kept greedy on HumanEval, 29 % at
    temperature 1; chat 18 % and 11 %).  So greedy and sampled requests of one method keep apart predictors,
    policies and rate-guard verdicts: a server with both kinds of client mixes neither's estimates, and a
    verdict that drafting loses at temperature 1.5 does not stop greedy requests from drafting in the next
    process.  Greedy keeps the method's bare name, so the files saved before the split stay greedy's."""
    return method + SAMPLED if sampled else method


def method_of(learner_key: str) -> str:
    return learner_key.removesuffix(SAMPLED)


class PolicyCache:
    """Policies by (learner, config), least recent first, and the acceptance predictor of each learner.

    ``costs()``: the cost model a cost policy is seeded with; ``predictor(learner)``: the saved predictor of a
    learner (None: no drafter model to predict for); ``verdict(learner)``: the rate guard's kept verdict."""

    def __init__(self, costs: Callable[[], CostModel], predictor: Callable[[str], AcceptancePredictor | None],
                 verdict: Callable[[str], dict | None]):
        self._costs, self._load, self._verdict = costs, predictor, verdict
        self._policies: dict[tuple, DraftPolicy] = {}  # (learner, policy, k, p_min) -> policy; least recent first
        self._predictors: dict[str, AcceptancePredictor] = {}  # learner -> what its policies learn acceptance with

    def get(self, method: str, cfg: PolicyConfig, sampled: bool = False) -> DraftPolicy:
        """The cached policy for ``method``'s greedy or ``sampled`` requests under ``cfg``, made on first use
        from that learner's predictor, seeded with the cost model and resumed from the guard's verdict.  Past
        MAX_POLICIES the least recent go (their predictor stays)."""
        who = learner(method, sampled)
        key = (who, cfg.name, cfg.k, cfg.p_min)
        pol = self._policies.pop(key, None)
        if pol is None:
            pol = seeded_policy(cfg, method, self._costs, self._predictor(who))
            if method != "target":
                pol.guard.resume(self._verdict(who))
        self._policies[key] = pol
        while len(self._policies) > MAX_POLICIES:
            self._policies.pop(next(iter(self._policies)))
        return pol

    def _predictor(self, who: str) -> AcceptancePredictor | None:
        if who not in self._predictors:
            predictor = self._load(who)
            if predictor is None:
                return None
            self._predictors[who] = predictor
        return self._predictors[who]

    def policies(self) -> Iterator[tuple[str, DraftPolicy]]:
        """(learner, policy) of every cached policy, least recent first."""
        return ((key[0], pol) for key, pol in self._policies.items())

    def predictors(self) -> dict[str, AcceptancePredictor]:
        return dict(self._predictors)

    def clear(self) -> None:
        """A new drafter: the timings stay valid, but acceptance must be learned again."""
        self._policies.clear()
        self._predictors.clear()
