"""The loaded pair and its swaps: the target with its kernel plan, the drafter bridged to it, and the registry's
published drafter versions swapped in between requests."""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from omnidraft.assets import models
from omnidraft.llama import loadcheck
from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.online.registry import VersionCorrupt
from omnidraft.speculative.methods import PairContext
from omnidraft.vocab.bridge import build_bridge
from omnidraft.vocab.ngram_cache import NGramCache

from . import heads, memory, wideprobe
from .settings import Settings
from .state import StateDir

# The drafter's llama.cpp batch (and ubatch): its passes are one to a few dozen tokens (drafts, catching up), and
# only a prompt is longer.  llama.cpp sizes its compute buffers for a full ubatch: at 512 a 1,000-token prompt
# left the served drafter 115 MB resident, at 64 83 MB (peak 165 -> 145 MB), and that prompt read in 542 ms
# instead of 603 (2-core Zen 4, :q4_0_pure+fr, 2k context; scripts/lab/drafter_batch.py).
DRAFT_BATCH = 64

log = logging.getLogger(__name__)


class LoadedPair:
    """One target (+ drafter) per process; a drafter loaded or swapped in keeps the n-gram cache of its
    vocabulary pair, the tuned thread count and (``runtime.heads``) the served format: the quantization the
    session's drafter was named with (``NAME:q4_0_pure+fr``) and its frequency-ranked head."""

    def __init__(self, settings: Settings, state: StateDir):
        self.settings, self.state = settings, state
        memory.warn_if_short(settings)
        # a registry name may run from its exact wide copy (timed once per machine where no rule decides)
        self.target, self.plan = wideprobe.load(settings, state.root)
        self.max_verify_batch = self.plan.max_batch
        self.draft: Engine | None = None
        self.pair: PairContext | None = None
        self.draft_threads: int | None = None  # the tuned drafter thread count, once known (kept across swaps)
        self.served_quant = heads.served_quant(settings.draft)  # '' where the drafter keeps its own

    def load_drafter(self, name_or_path: str) -> None:
        """Load (or swap in) a drafter; the n-gram cache is kept: it is keyed by vocabulary pair.  A drafter
        swapped in is served in the session's format: requantized as it was named, with the serving drafter's
        frequency-ranked head (runtime.heads)."""
        if self.draft is not None:
            src = models.resolve(name_or_path)
            # requantizing reads the file in this process: a file that aborts llama.cpp must be refused first
            loadcheck.ensure_loadable(src, self._draft_config())
            name_or_path = str(heads.served_copy(src, self.served_quant, self.draft.head_ids,
                                                 self.state.root / "drafters"))
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
        draft = Engine(models.resolve(name_or_path), self._draft_config())
        if persistent and self.draft_threads:  # a swapped-in version of the drafter: same shape, same count
            draft.set_threads(self.draft_threads)
        bridge = build_bridge(draft, self.target)
        if not persistent:
            cache = NGramCache(bridge.draft_fp, bridge.target_fp)
        elif self.pair and self.pair.bridge.draft_fp == bridge.draft_fp:
            cache = self.pair.cache
        else:
            cache = NGramCache.open(self.state.ngram_path(bridge), bridge.draft_fp, bridge.target_fp,
                                    s.ngram_budget_kb * 1024, s.ngram_policy)
        return PairContext(draft, self.target, bridge, cache, s.draft_window)

    def _draft_config(self) -> EngineConfig:
        s = self.settings
        return EngineConfig(n_ctx=s.draft_n_ctx, n_threads=s.draft_threads or s.threads, n_batch=DRAFT_BATCH,
                            batch_invariant=False, n_gpu_layers=s.gpu_layers)

    def set_draft_threads(self, n: int) -> None:
        """The drafter's tuned thread count, for this drafter and those swapped in later."""
        self.draft_threads = n
        if self.draft is not None:
            self.draft.set_threads(n)

    def close(self) -> None:
        for e in (self.draft, self.target):
            if e is not None:
                e.close()


class Registry(Protocol):
    """Where published drafter versions come from (``online.registry.DrafterRegistry``, or the server's
    ``WatchedRegistry`` over one, which also shows refusals: ``refused``)."""

    def current(self) -> tuple[str, object] | None: ...


class Swaps:
    """Between requests: the registry's current drafter version loaded (``load``) if it changed.

    A failed load keeps the drafter in use (logged once, not retried), so a bad publish never fails a request;
    so does a version whose file no longer matches the sha256 it was published with (the registry refuses
    it).  A registry with ``refused(message | None)`` is told of each refusal, and of its end."""

    def __init__(self, load: Callable[[str], None], registry: Registry | None = None):
        self.load, self.registry = load, registry
        self.version = "base"  # "base" = the drafter named in the settings
        self._serving = "base"  # the same, keyed by its registry (``_key``): names restart in every registry
        self._bad: set[str] = set()  # "<registry root>:<version>": a version is bad in its registry

    def maybe_swap(self, before: Callable[[], None] = lambda: None) -> bool:
        """True when a new version was swapped in; ``before()`` runs just before it loads (the session saves
        what the drafter in use learned)."""
        if self.registry is None:
            return False
        try:
            cur = self.registry.current()
        except VersionCorrupt as e:
            self._refuse(e.version, e)
            return False
        if cur is None or self._key(cur[0]) == self._serving:
            self._tell(None)  # a refused version rolled back: no longer a problem
            return False
        version, path = cur
        if self._key(version) in self._bad:
            return False
        before()
        try:
            self.load(str(path))  # a file that would abort llama.cpp is refused first (llama.loadcheck)
        except Exception as e:  # noqa: BLE001 - any failure to load must leave the old drafter serving
            self._refuse(version, e)
            return False
        self._tell(None)
        log.info("drafter swapped: %s -> %s", self.version, version)
        self.version, self._serving = version, self._key(version)
        return True

    def forget_refusals(self) -> None:
        """Try refused versions again (a test's, or an operator's, fixed file)."""
        self._bad.clear()

    def _refuse(self, version: str, error: Exception) -> None:
        """A version that cannot be swapped in: logged once and not retried; the registry shows it (the
        server's WatchedRegistry puts it in /v1/omnidraft/stats "problems")."""
        if self._key(version) not in self._bad:
            log.error("drafter %s not swapped in, keeping %s: %s", version, self.version, error)
            self._bad.add(self._key(version))
        self._tell(f"drafter {version} refused, serving {self.version}: {error}")

    def _tell(self, message: str | None) -> None:
        refused = getattr(self.registry, "refused", None)
        if refused is not None:
            refused(message)

    def _key(self, version: str) -> str:
        """Version names restart in every registry (v0001 ...): a refusal holds for its own registry only."""
        return f"{getattr(self.registry, 'root', '')}:{version}"
