"""Load a model pair once and hand out generators: the object a CLI or server process holds.

The one generator factory: it owns the draft-length policies (one cache, bounded), the acceptance
predictors they learn with (loaded from and saved to the state dir) and the cost model they start
from.  ``warm_up()`` loads models and times the cost model; ``generator()`` only composes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft import statefile
from omnidraft.llama import costmodel
from omnidraft.assets import models
from omnidraft.llama.costmodel import CostModel
from omnidraft.llama.engine import AUTO, KERNEL_CHOICES, Engine, EngineConfig
from omnidraft.errors import BadRequest
from omnidraft.spec.generator import Generator
from omnidraft.llama import invariance
from omnidraft.spec.methods import METHODS, NEEDS_DRAFT_MODEL, PairContext, make_drafter
from omnidraft.vocab.ngram_cache import NGramCache, cache_filename
from omnidraft.spec.policy import DraftPolicy, PolicyConfig, seeded_policy
from omnidraft.spec.predictor import AcceptancePredictor
from omnidraft.online.registry import VersionCorrupt
from omnidraft.vocab.bridge import build_bridge

from . import heads

log = logging.getLogger(__name__)


@dataclass
class Settings:
    """One typed settings object per process; the CLI flags are generated from it."""

    target: str = field(default=models.DEFAULT_TARGET, metadata={"help": "target model: short name or .gguf path"})
    draft: str = field(default=models.SERVED_DRAFT, metadata={"help": "draft model: short name, NAME:FORMAT or .gguf path"})
    # hybrid (prompt lookup first, the omnidraft drafter otherwise) beat omnidraft alone on all 8 sets x targets
    # measured (BENCHMARKS.md, "Default method"): free drafts cost no drafter pass
    method: str = field(default="hybrid", metadata={"help": "|".join(METHODS)})
    k: int = field(default=4, metadata={"help": "maximum draft length per step", "short": "-k"})
    policy: str = field(default="cost", metadata={"help": "draft-length policy: fixed|threshold|gamma|cost"})
    p_min: float = field(default=0.3, metadata={"help": "stop drafting below this drafter top-1 probability"})
    n_ctx: int = field(default=4096, metadata={"help": "context window of the target (tokens)"})
    draft_n_ctx: int = field(default=4096, metadata={"help": "context window of the drafter (tokens)"})
    threads: int = field(default=0, metadata={"help": "CPU threads (0 = all cores)"})
    draft_threads: int = field(default=0, metadata={
        "help": "drafter CPU threads (0 = auto: --threads and fewer timed once per machine, the fastest kept)"})
    gpu_layers: int = field(default=0, metadata={
        "help": "layers of the target and the drafter offloaded to a GPU build of llama.cpp (-1 = all)"})
    kernels: str = field(default=AUTO, metadata={
        "help": "target kernels: exact (batch-invariant) | fast (repacked weights, f16 KV: verified only where "
                "measured bit-identical, or with a near-tie guard) | auto (fast where allowed, else exact)"})
    ngram_budget_kb: int = field(default=4096, metadata={"help": "n-gram cache byte budget (KiB)"})
    ngram_policy: str = field(default="lru", metadata={"help": "n-gram cache eviction: lru|lfu"})
    state_dir: str = field(default="", metadata={"help": "where the n-gram cache etc. live (default: cache dir)"})

    def policy_config(self, k: int | None = None, name: str | None = None) -> PolicyConfig:
        """The settings' policy, or another draft length / policy for one request (0 or None: the settings')."""
        return PolicyConfig(name=name or self.policy, k=k or self.k, p_min=self.p_min)


MAX_POLICIES = 32  # (method, policy, k) combinations a long-running server keeps learning in


class Session:
    """A loaded target (+ drafter) and the per-pair state that outlives requests."""

    def __init__(self, settings: Settings):
        if settings.method not in METHODS:
            raise BadRequest(f"unknown method {settings.method!r}; choose from {', '.join(METHODS)}")
        self.settings = settings
        self.state_dir = Path(settings.state_dir) if settings.state_dir else models.cache_dir() / "state"
        statefile.check_dir(self.state_dir, "--state-dir")  # before loading and measuring, which write there
        if settings.kernels not in KERNEL_CHOICES:
            raise BadRequest(f"kernels must be auto, exact or fast, not {settings.kernels!r}")
        self.draft: Engine | None = None
        self.pair: PairContext | None = None
        self.drafter_version = "base"  # "base" = the drafter named in settings
        self.registry = None  # anything with current() -> (version, path) | None: see maybe_swap()
        self._bad_versions: set[str] = set()  # "<registry root>:<version>": a version is bad in its registry
        self.target, self.plan = invariance.load_target(models.resolve(settings.target), settings.n_ctx,
                                                        settings.threads, settings.kernels,
                                                        self.state_dir / "invariance.json", settings.gpu_layers)
        self.max_verify_batch = self.plan.max_batch
        self._policies: dict[tuple, DraftPolicy] = {}  # (method, policy, k, p_min) -> policy; least recent first
        self._predictors: dict[str, AcceptancePredictor] = {}  # method -> what its policies learn acceptance with
        self.cost_model: CostModel | None = None
        self.tuned_draft_threads: int | None = None  # auto drafter threads, once known (kept across swaps)
        self._saved_verdicts: dict[str, dict] = {}  # guard.json's entries as this process last wrote them
        if settings.method in NEEDS_DRAFT_MODEL:
            self.load_drafter(settings.draft)

    def load_drafter(self, name_or_path: str) -> None:
        """Load (or swap in) a drafter; the n-gram cache is kept: it is keyed by vocabulary pair.  A drafter
        swapped in for one served with a frequency-ranked head is served with the same head (runtime.heads)."""
        if self.draft is not None and self.draft.head_ids is not None:
            name_or_path = str(heads.with_head(models.resolve(name_or_path), self.draft.head_ids,
                                               self.state_dir / "drafters"))
        pair = self.open_pair(name_or_path)
        old = self.draft
        self.draft, self.pair = pair.draft, pair
        if old is not None:
            old.close()

    def open_pair(self, name_or_path: str, persistent: bool = True) -> PairContext:
        """A drafter loaded the way this session loads drafters, bridged to the target.  Its n-gram cache:
        the one in use for the same vocabulary pair, else the state dir's; ``persistent=False``: a new,
        empty one kept in memory (a second pair beside the session's, e.g. a benchmark's)."""
        s = self.settings
        draft = Engine(models.resolve(name_or_path),
                       EngineConfig(n_ctx=s.draft_n_ctx, n_threads=s.draft_threads or s.threads, batch_invariant=False,
                                    n_gpu_layers=s.gpu_layers))
        if persistent and self.tuned_draft_threads:  # a swapped-in version of the drafter: same shape, same count
            draft.set_threads(self.tuned_draft_threads)
        bridge = build_bridge(draft, self.target)
        if not persistent:
            cache = NGramCache(bridge.draft_fp, bridge.target_fp)
        elif self.pair and self.pair.bridge.draft_fp == bridge.draft_fp:
            cache = self.pair.cache
        else:
            cache = NGramCache.open(self.cache_path(bridge.draft_fp, bridge.target_fp), bridge.draft_fp,
                                    bridge.target_fp, s.ngram_budget_kb * 1024, s.ngram_policy)
        return PairContext(draft, self.target, bridge, cache)

    def maybe_swap(self) -> bool:
        """Between requests: load the registry's current drafter version if it changed.

        A failed load keeps the drafter in use (logged), so a bad publish never fails a request; so does a
        version whose file no longer matches the sha256 it was published with (the registry refuses it)."""
        if self.registry is None:
            return False
        try:
            cur = self.registry.current()
        except VersionCorrupt as e:
            self._refuse(e.version, e)
            return False
        if cur is None or cur[0] == self.drafter_version:
            if hasattr(self.registry, "refused"):
                self.registry.refused(None)  # a refused version rolled back: no longer a problem
            return False
        if self._bad_key(cur[0]) in self._bad_versions:
            return False
        version, path = cur
        try:
            self.load_drafter(str(path))  # a file that would abort llama.cpp is refused first (llama.loadcheck)
        except Exception as e:  # noqa: BLE001 - any failure to load must leave the old drafter serving
            self._refuse(version, e)
            return False
        if hasattr(self.registry, "refused"):
            self.registry.refused(None)
        log.info("drafter swapped: %s -> %s", self.drafter_version, version)
        self.save_state()
        self.drafter_version = version
        self._policies.clear()  # timings stay valid, but acceptance must be learned for the new drafter
        self._predictors.clear()
        return True

    def _refuse(self, version: str, error: Exception) -> None:
        """A version that cannot be swapped in: logged once and not retried; the registry shows it (the
        server's WatchedRegistry puts it in /v1/omnidraft/stats "problems")."""
        if self._bad_key(version) not in self._bad_versions:
            log.error("drafter %s not swapped in, keeping %s: %s", version, self.drafter_version, error)
            self._bad_versions.add(self._bad_key(version))
        if hasattr(self.registry, "refused"):
            self.registry.refused(f"drafter {version} refused, serving {self.drafter_version}: {error}")

    def _bad_key(self, version: str) -> str:
        """Version names restart in every registry (v0001 ...): a refusal holds for its own registry only."""
        return f"{getattr(self.registry, 'root', '')}:{version}"

    def cache_path(self, draft_fp: str, target_fp: str) -> Path:
        return self.state_dir / cache_filename(draft_fp, target_fp)

    def warm_up(self, method: str | None = None, policy: str | None = None) -> "Session":
        """Load what ``method`` (default: the settings') needs and the cost model ``policy`` starts from
        (read from the cost-model cache, else timed: a few seconds).  Call before ``generator()``; cheap
        once done, so a server calls it before every request."""
        method = method or self.settings.method
        if method in NEEDS_DRAFT_MODEL and self.pair is None:
            self.load_drafter(self.settings.draft)
        if method in NEEDS_DRAFT_MODEL:
            self.tune_drafter()
        if (policy or self.settings.policy) == "cost" and method != "target":
            self.measure_costs()
        return self

    def tune_drafter(self) -> int | None:
        """Auto drafter threads (``draft_threads`` 0, on the CPU): read from threads.json, else timed against
        fewer threads (under a second) and kept, per machine, build, models and threads.  Returns the count."""
        s, draft = self.settings, self.draft
        if draft is None or s.draft_threads or s.gpu_layers:
            return None
        if self.tuned_draft_threads is None:
            path, key = self.state_dir / "threads.json", self._cost_key()
            entry = statefile.read(path, key) or {}
            n = entry.get("draft_threads")
            if not isinstance(n, int) or n < 1:
                default = draft.config.threads()[0]
                times = costmodel.time_draft_threads(draft, self.target, costmodel.thread_candidates(default))
                n = costmodel.pick_threads(times, default)
                statefile.write(path, key, {"draft_threads": n, "step_ms": {c: round(t * 1e3, 3)
                                                                            for c, t in times.items()}})
                log.info("drafter threads: %d (a drafting step: %s ms by thread count)", n,
                         {c: round(t * 1e3, 2) for c, t in times.items()})
            self.tuned_draft_threads = n
            draft.set_threads(n)  # later drafters (swaps) get it in open_pair
        return self.tuned_draft_threads

    def generator(self, method: str | None = None, k: int | None = None, policy: str | None = None) -> Generator:
        """A generator for ``method`` (default: the settings'), drafting up to ``k`` with ``policy`` (default:
        the settings').  Its DraftPolicy is this session's for that combination: it keeps what it learned."""
        method = method or self.settings.method
        return self.compose(method, self.pair, self.policy(method, self.settings.policy_config(k, policy)))

    def compose(self, method: str, pair: PairContext | None, policy: DraftPolicy) -> Generator:
        """A generator on this session's target: ``method``'s drafter over ``pair``, drafting by ``policy``."""
        return Generator(self.target, make_drafter(method, pair), policy, method, self.max_verify_batch,
                         self.plan.guard)

    def policy(self, method: str, cfg: PolicyConfig) -> DraftPolicy:
        """The cached policy for (method, cfg), made on first use: the method's saved acceptance predictor,
        seeded with the cost model.  The least recently used go past MAX_POLICIES (their predictor stays)."""
        key = (method, cfg.name, cfg.k, cfg.p_min)
        pol = self._policies.pop(key, None)
        if pol is None:
            pol = seeded_policy(cfg, method, self._warm_costs, self._predictor(method))
            if self.pair is not None and method != "target":
                pol.guard.resume(statefile.read(self.state_dir / "guard.json", self._guard_key(method)))
        self._policies[key] = pol
        while len(self._policies) > MAX_POLICIES:
            self._policies.pop(next(iter(self._policies)))
        return pol

    def _predictor(self, method: str) -> AcceptancePredictor | None:
        """The acceptance predictor the policies of ``method`` share (None without a drafter model)."""
        if self.pair is None:
            return None
        if method not in self._predictors:
            self._predictors[method] = AcceptancePredictor.load(self.predictor_path(method))
        return self._predictors[method]

    def _warm_costs(self) -> CostModel:
        if self.cost_model is None:
            raise RuntimeError("the cost policy starts from the cost model: call Session.warm_up() first")
        return self.cost_model

    def measure_costs(self) -> CostModel:
        """Target passes of 1..max_verify_batch tokens and drafter passes of 1..4: read from the cost-model
        cache (per machine, build, model files, kernel mode and threads), else timed (a few seconds)
        and cached.  ``forget_costs`` drops the entry when live timings drift away from it."""
        if self.cost_model is None:
            self.cost_model = costmodel.cached(self._cost_key(), self.state_dir / "costmodel.json")
            if self.cost_model is None:
                self.cost_model = costmodel.measure(self.target, self.draft, self.max_verify_batch)
                costmodel.store(self._cost_key(), self.state_dir / "costmodel.json", self.cost_model)
            log.info("cost model: T_verify %s ms, T_draft %.1f ms",
                     {n: round(t * 1e3, 1) for n, t in self.cost_model.t_verify.items()},
                     self.cost_model.t_draft * 1e3)
        return self.cost_model

    def _check_drift(self, policy: DraftPolicy) -> None:
        """A cached cost model whose T(1) the live one-token passes no longer confirm is dropped."""
        cm = self.cost_model
        if cm is None or not cm.t_verify.get(1) or policy.n_verify[1] < 32:
            return
        ratio = policy.t_verify[1] / cm.t_verify[1]
        if not 0.7 < ratio < 1.4:
            log.info("live target passes take %.2fx the cached cost model's: it is measured again next start", ratio)
            self.forget_costs()

    def forget_costs(self) -> None:
        """Live timings drifted from the cached cost model: measure again at the next start."""
        costmodel.store(self._cost_key(), self.state_dir / "costmodel.json", None)

    def _cost_key(self) -> str:
        return costmodel.cache_key(self.target, self.draft, self.max_verify_batch)

    def _guard_key(self, method: str) -> str:
        """The rate guard's verdict holds for this machine, build, models, settings, drafter version and method."""
        return f"{self._cost_key()}|{self.drafter_version}|{method}"

    def predictor_path(self, method: str) -> Path:
        """The acceptance predictor lives with the drafter version it learned about."""
        b = self.pair.bridge
        return self.state_dir / f"predictor-{method}-{self.drafter_version}-{b.draft_fp}-{b.target_fp}.json"

    def save_state(self) -> None:
        """Persist what was learned online: the n-gram cache, the acceptance predictors and the rate guards'
        verdicts (a process that starts where drafting was measured losing does not pay to measure it again)."""
        if self.pair is not None:
            b = self.pair.bridge
            self.pair.cache.save(self.cache_path(b.draft_fp, b.target_fp))
            for method, predictor in self._predictors.items():
                if method != "target" and predictor.updates:
                    predictor.save(self.predictor_path(method))
            for (method, *_), policy in self._policies.items():
                self._check_drift(policy)
                verdict, key = policy.guard.verdict(), self._guard_key(method)
                if method != "target" and verdict is not None and self._saved_verdicts.get(key) != verdict:
                    statefile.write(self.state_dir / "guard.json", key, verdict)  # a server saves per request:
                    self._saved_verdicts[key] = verdict  # the file is rewritten only when a verdict changed

    def close(self) -> None:
        for e in (self.draft, self.target):
            if e is not None:
                e.close()
