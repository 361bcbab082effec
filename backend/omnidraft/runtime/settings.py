"""A session's settings: one typed object per process, from which the CLI flags are generated."""

from __future__ import annotations

from dataclasses import dataclass, field

from omnidraft.assets import models
from omnidraft.errors import BadRequest
from omnidraft.llama.engine import AUTO, KERNEL_CHOICES
from omnidraft.runtime.formats import check_wide
from omnidraft.speculative.methods import METHODS
from omnidraft.speculative.policy import PolicyConfig

DRAFT_WINDOW = 512  # the prompt tokens the drafter reads at most (drafters.window_start; BENCHMARKS.md "Long prompts")


@dataclass
class Settings:
    """One typed settings object per process; the CLI flags are generated from it."""

    target: str = field(default=models.DEFAULT_TARGET, metadata={"help": "target model: short name or .gguf path"})
    wide: str = field(default="auto", metadata={
        "help": "auto|on|off: run a registry target from its exact ':wide' copy (Q5_0 blocks as Q8_0, no weight "
                "changed); auto: for the mostly-Q5_0 0.5B on x86 CPUs without VNNI, where it decodes faster"})
    draft: str = field(default=models.SERVED_DRAFT, metadata={"help": "draft model: short name, NAME:FORMAT or .gguf path"})
    # hybrid (prompt lookup first, the omnidraft drafter otherwise) beat omnidraft alone on all 8 sets x targets
    # measured (BENCHMARKS.md, "Default method"): free drafts cost no drafter pass
    method: str = field(default="hybrid", metadata={"help": "|".join(METHODS)})
    k: int = field(default=4, metadata={"help": "maximum draft length per step", "short": "-k"})
    policy: str = field(default="cost", metadata={"help": "draft-length policy: fixed|threshold|gamma|cost"})
    p_min: float = field(default=0.3, metadata={"help": "stop drafting below this drafter top-1 probability"})
    context_prices: bool = field(default=True, metadata={
        "help": "cost policy: time the target's passes once at each longer context a prompt reaches, and price "
                "drafts by the context (off: start-up's prices at every length)"})
    n_ctx: int = field(default=4096, metadata={"help": "context window of the target (tokens)"})
    draft_n_ctx: int = field(default=4096, metadata={"help": "context window of the drafter (tokens)"})
    draft_window: int = field(default=DRAFT_WINDOW, metadata={
        "help": "the most prompt tokens the drafter reads, the latest ones (0 = all): each of its passes attends "
                "over what it read, and reading a long prompt delays the first token"})
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

    def check(self) -> None:
        """Refuse, before anything loads, a method or kernel mode that does not exist."""
        if self.method not in METHODS:
            raise BadRequest(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        check_wide(self.wide)
        if self.kernels not in KERNEL_CHOICES:
            raise BadRequest(f"kernels must be auto, exact or fast, not {self.kernels!r}")

    def policy_config(self, k: int | None = None, name: str | None = None) -> PolicyConfig:
        """The settings' policy, or another draft length / policy for one request (0 or None: the settings')."""
        return PolicyConfig(name=name or self.policy, k=k or self.k, p_min=self.p_min)

    def auto_draft_threads(self) -> bool:
        """The drafter's thread count is timed (``draft_threads`` 0, on the CPU), not given."""
        return not self.draft_threads and not self.gpu_layers
