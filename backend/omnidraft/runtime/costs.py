"""The cost model store: timings measured once per machine and kept in the state dir.

The cost model the policies start from (T_verify(n), T_draft: read from ``costmodel.json``, else timed and
kept; dropped when live one-token passes drift away from it), the target's pass ratios at the long contexts
requests reached (``ctxcost.json``, llama.ctxcost) and the drafter's automatic thread count (``threads.json``).
All are keyed by the machine, build, model files, kernel modes and threads (``costmodel.cache_key``), so a
swapped-in drafter file, or a tuned thread count, gets its own entry."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from omnidraft import statefile
from omnidraft.llama import costmodel
from omnidraft.llama.costmodel import CostModel
from omnidraft.llama.ctxcost import ContextCosts, ContextRatios
from omnidraft.speculative.policy import DraftPolicy

if TYPE_CHECKING:
    from .pair import LoadedPair

log = logging.getLogger(__name__)

DRIFT = (0.7, 1.4)  # live T(1) over the cached one, outside which the cached model is measured again
DRIFT_SAMPLES = 32  # one-token passes timed live before the drift is judged


class CostStore:
    """The cost model of the loaded pair, and its drafter's thread count, cached under ``root``."""

    def __init__(self, models: LoadedPair, root: Path):
        self.models, self.root = models, root
        self.model: CostModel | None = None
        self._contexts: ContextCosts | None = None

    def key(self) -> str:
        m = self.models
        return costmodel.cache_key(m.target, m.draft, m.max_verify_batch)

    def measure(self) -> CostModel:
        """Target passes of 1..max_verify_batch tokens and drafter passes of 1..4: read from the cache, else
        timed (a few seconds) and cached.  Kept for the process once known."""
        if self.model is None:
            m, key, path = self.models, self.key(), self.root / "costmodel.json"
            self.model = costmodel.cached(key, path)
            if self.model is None:
                self.model = costmodel.measure(m.target, m.draft, m.max_verify_batch)
                costmodel.store(key, path, self.model)
            log.info("cost model: T_verify %s ms, T_draft %.1f ms",
                     {n: round(t * 1e3, 1) for n, t in self.model.t_verify.items()}, self.model.t_draft * 1e3)
        return self.model

    def warm(self) -> CostModel:
        """The cost model a cost policy starts from; measured first (``Session.warm_up``)."""
        if self.model is None:
            raise RuntimeError("the cost policy starts from the cost model: call Session.warm_up() first")
        return self.model

    def check_drift(self, policies: Iterable[DraftPolicy]) -> None:
        """A cached cost model whose T(1) the live one-token passes no longer confirm is dropped from the cache
        (measured again at the next start).  Only passes at contexts like start-up's count (``t1_short``): judged
        on every one-token pass, a request on a 1,196-token prompt read 1.47x the cached T(1) on a 2-core Zen 4,
        so each process after a long prompt measured the cost model again, and dropped the context prices."""
        cm = self.model
        if cm is None or not cm.t_verify.get(1):
            return
        for policy in policies:
            if policy.n_t1_short < DRIFT_SAMPLES:
                continue
            ratio = policy.t1_short / cm.t_verify[1]
            if not DRIFT[0] < ratio < DRIFT[1]:
                log.info("live target passes take %.2fx the cached cost model's: it is measured again next start",
                         ratio)
                self.forget()

    def forget(self) -> None:
        """Live timings drifted from the cached cost model: measure again at the next start (the context ratios
        too: they were timed at the same pace)."""
        costmodel.store(self.key(), self.root / "costmodel.json", None)
        statefile.write(self.root / "ctxcost.json", self.key(), None)

    def contexts(self) -> ContextCosts | None:
        """The target's pass ratios by context, for the cost policy's generators: the start-up model's, then those
        timed at longer contexts (kept in ``ctxcost.json``, one entry a cost-model key).  None before the cost
        model is known (``measure``)."""
        if self.model is None:
            return None
        if self._contexts is None:
            path, key = self.root / "ctxcost.json", self.key()
            ratios = ContextRatios.from_dict(statefile.read(path, key)) or ContextRatios.from_startup(
                self.model.t_verify)
            self._contexts = ContextCosts(ratios, lambda r: statefile.write(path, key, r.as_dict()))
        return self._contexts

    def draft_threads(self) -> int:
        """The drafter's thread count: read from threads.json, else timed against fewer threads (under a
        second) and kept, per machine, build, models and threads."""
        target, draft = self.models.target, self.models.draft
        path, key = self.root / "threads.json", self.key()
        n = (statefile.read(path, key) or {}).get("draft_threads")
        if not isinstance(n, int) or n < 1:
            default = draft.config.threads()[0]
            times = costmodel.time_draft_threads(draft, target, costmodel.thread_candidates(default))
            n = costmodel.pick_threads(times, default)
            step_ms = {c: round(t * 1e3, 3) for c, t in times.items()}
            statefile.write(path, key, {"draft_threads": n, "step_ms": step_ms})
            log.info("drafter threads: %d (a drafting step: %s ms by thread count)", n,
                     {c: round(t * 1e3, 2) for c, t in times.items()})
        return n
