"""Load a model pair once and hand out generators: the object a CLI or server process holds (the server's
``ServingSession``).  The one generator factory, composed of parts with one job each: the loaded pair and its
swaps (``pair``), the cost model store (``costs``), the policy cache (``policies``), persistence (``state``)."""

from __future__ import annotations

from omnidraft.online.records import build_record
from omnidraft.speculative.generator import Final, Generator
from omnidraft.speculative.methods import NEEDS_DRAFT_MODEL, PairContext, make_drafter
from omnidraft.speculative.policy import DraftPolicy

from .costs import CostStore
from .pair import LoadedPair, Registry, Swaps
from .policies import PolicyCache
from .settings import Settings
from .state import StateDir, guard_key

class Session:
    """A loaded target (+ drafter) and the per-pair state that outlives requests."""

    def __init__(self, settings: Settings, registry: Registry | None = None):
        """``registry``: where published drafter versions come from (``maybe_swap``); None: none."""
        settings.check()
        self.settings, self.state = settings, StateDir(settings.state_dir)
        self.models = LoadedPair(settings, self.state)
        self.swaps = Swaps(self.models.load_drafter, registry)
        self.costs = CostStore(self.models, self.state.root)
        self.policies = PolicyCache(self.costs.warm, self._predictor, self._verdict)
        if settings.method in NEEDS_DRAFT_MODEL:
            self.models.load_drafter(settings.draft)

    # what callers read of the parts
    target = property(lambda self: self.models.target, doc="the target engine")
    plan = property(lambda self: self.models.plan, doc="the target's kernel plan (llama.invariance)")
    draft = property(lambda self: self.models.draft, doc="the drafter engine, if loaded")
    pair = property(lambda self: self.models.pair, doc="the drafter bridged to the target, if loaded")
    n_ctx = property(lambda self: self.models.target.n_ctx, doc="the target's context window (tokens)")
    state_dir = property(lambda self: self.state.root, doc="where what the session learns is kept")
    drafter_version = property(lambda self: self.swaps.version, doc='the drafter in use ("base": the settings\')')
    max_verify_batch = property(lambda self: self.models.max_verify_batch,
                                lambda self, n: setattr(self.models, "max_verify_batch", n),
                                doc="largest verification batch (the plan's; a benchmark may force another)")
    registry = property(lambda self: self.swaps.registry, lambda self, r: setattr(self.swaps, "registry", r),
                        doc="where published drafter versions come from (None: no swaps)")

    def load_drafter(self, name_or_path: str) -> None:
        self.models.load_drafter(name_or_path)

    def maybe_swap(self) -> bool:
        """Between requests: the registry's current drafter version swapped in if it changed (runtime.pair); what
        the drafter in use learned is saved first, and the policies learn the new one afresh."""
        if not self.swaps.maybe_swap(before=self.save_state):
            return False
        self.policies.clear()  # timings stay valid, but acceptance must be learned for the new drafter
        return True

    def warm_up(self, method: str | None = None, policy: str | None = None) -> "Session":
        """Load what ``method`` (default: the settings') needs and the cost model ``policy`` starts from
        (read from the cost-model cache, else timed: a few seconds).  Call before ``generator()``; cheap
        once done, so a server calls it before every request."""
        method = method or self.settings.method
        if method in NEEDS_DRAFT_MODEL and self.pair is None:
            self.models.load_drafter(self.settings.draft)
        if method in NEEDS_DRAFT_MODEL:
            self.tune_drafter()
        if (policy or self.settings.policy) == "cost" and method != "target":
            self.costs.measure()
        return self

    def tune_drafter(self) -> int | None:
        """Auto drafter threads (runtime.costs), kept for the drafters swapped in later.  Returns the count."""
        if self.draft is None or not self.settings.auto_draft_threads():
            return None
        if self.models.draft_threads is None:
            self.models.set_draft_threads(self.costs.draft_threads())
        return self.models.draft_threads

    def generator(self, method: str | None = None, k: int | None = None, policy: str | None = None,
                  sampled: bool = False) -> Generator:
        """A generator for ``method`` (default: the settings'), drafting up to ``k`` with ``policy`` (default:
        the settings'), for greedy requests or ``sampled`` ones.  Its DraftPolicy is this session's for that
        combination: it keeps what it learned (greedy and sampled requests apart: runtime.policies.learner)."""
        method = method or self.settings.method
        policy_ = self.policies.get(method, self.settings.policy_config(k, policy), sampled)
        return self.compose(method, self.pair, policy_)

    def compose(self, method: str, pair: PairContext | None, policy: DraftPolicy) -> Generator:
        """A generator on this session's target: ``method``'s drafter over ``pair``, drafting by ``policy``."""
        contexts = self.costs.contexts() if self.settings.context_prices else None
        return Generator(self.target, make_drafter(method, pair), policy, method, self.max_verify_batch,
                         self.plan.guard, contexts)

    def _predictor(self, learner: str):
        return self.state.predictor(learner, self.drafter_version, self.pair.bridge) if self.pair else None

    def _verdict(self, learner: str) -> dict | None:
        return self.state.verdict(guard_key(self.costs.key(), self.drafter_version, learner)) if self.pair else None

    def ngram_stats(self) -> dict | None:
        """The n-gram cache's counts (None without a drafter)."""
        return self.pair.cache.stats() if self.pair is not None else None

    def training_record(self, final: Final, prompt, method: str) -> dict:
        """The training record of a finished generation (online.records), for the drafter in use."""
        return build_record(final, prompt, self.pair, method, self.drafter_version)

    def save_state(self) -> None:
        """Persist what was learned online (runtime.state); a cached cost model the live passes no longer
        confirm is dropped (runtime.costs)."""
        if self.pair is not None:
            self.costs.check_drift(pol for _, pol in self.policies.policies())
            self.state.save(self.pair, self.drafter_version, self.costs.key(), self.policies.predictors(),
                            self.policies.policies())

    def close(self) -> None:
        self.models.close()
