"""Side-by-side runs of speculative configurations on the same prompts, in one process.

Configurations are interleaved per prompt (A B C, then B C A, ...) so that machine
drift (thermal, other load) hits all of them alike, and every speedup is measured
against the `target` configuration of the same run.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass, field

from llama_cpp import Llama
from tqdm import tqdm

from omnidraft.llama.costmodel import CostModel, CostSampler, predicted_time, speedup
from omnidraft.speculative.generator import Final, GenerationParams, Generator
from omnidraft.speculative.stats import GenerationStats
from omnidraft.speculative.methods import PairContext
from omnidraft.speculative.policy import PolicyConfig, seeded_policy
from omnidraft.runtime.session import Session
from omnidraft.assets import models
from omnidraft.assets.prompts import Item

log = logging.getLogger(__name__)

PEER = "llama-cpp-python"  # the peer a user would pick: Llama.create_completion on the same GGUF


@dataclass(frozen=True)
class Config:
    method: str
    k: int = 0
    policy: str = "fixed"  # fixed | threshold | cost ("adaptive")

    @property
    def label(self) -> str:
        if self.method in ("target", PEER):
            return self.method
        if self.policy == "cost":
            return f"{self.method} adaptive"
        if self.policy == "gamma":
            return f"{self.method} gamma"
        return f"{self.method} k={self.k}"


@dataclass
class Tally:
    """One configuration's answers in a run: their statistics summed (``GenerationStats``: acceptance, tau
    and speed as each answer defines them), the pass histograms the cost model prices, and the outputs."""

    stats: GenerationStats = field(default_factory=lambda: GenerationStats("total"))
    prompts: int = 0
    drafted: int = 0
    batch_hist: dict[int, int] = field(default_factory=dict)  # target passes by tokens verified
    draft_pass_hist: dict[int, int] = field(default_factory=dict)  # drafter decodes by tokens fed
    outputs: list[list[int]] = field(default_factory=list)

    def add(self, final: Final) -> None:
        self.stats.add(final.stats)
        self.prompts += 1
        for s in final.steps:
            n = s.proposed + 1
            self.batch_hist[n] = self.batch_hist.get(n, 0) + 1
            self.drafted += s.drafted
        self.outputs.append(final.token_ids)

    def summary(self, baseline: "Tally | None", cost: CostModel) -> dict:
        """The JSON row of one configuration (its keys are the benchmark files' columns)."""
        st, gen_s = self.stats, self.stats.generation_s
        each = 1.0 / self.prompts if self.prompts else 0.0  # per-request means of the sums below
        steps = st.step_breakdown()
        d = dict(prompts=self.prompts, tokens=st.completion_tokens, gen_s=gen_s, steps=st.target_passes,
                 stop_tokens=st.stop_tokens, proposed=st.proposed, accepted=st.accepted, drafted=self.drafted,
                 ngram_accepted=st.ngram_accepted, draft_s=st.draft_s, translate_s=st.translate_s,
                 verify_s=st.verify_s, target_s=st.target_s, sample_s=st.sample_s, bookkeeping_s=st.bookkeeping_s,
                 step_s=st.step_s, step_ms=steps["ms"], step_share=steps["share"],
                 batch_hist=dict(self.batch_hist), draft_pass_hist=dict(self.draft_pass_hist),
                 acceptance_rate=st.acceptance_rate, tau=st.tau, tokens_per_s=st.tokens_per_s,
                 prompt_ms=st.prefill_s * 1e3 * each, first_token_ms=st.first_token_s * 1e3 * each,
                 prompt_tokens=st.prompt_tokens * each,
                 ngram_hits_per_step=st.ngram_accepted / st.target_passes if st.target_passes else 0.0,
                 share={k: (v / gen_s if gen_s else 0.0) for k, v in
                        (("draft", st.draft_s), ("translate", st.translate_s), ("verify", st.verify_s),
                         ("python", st.python_s))})
        if baseline is not None and baseline.stats.generation_s and gen_s:
            d["speedup"] = st.tokens_per_s / baseline.stats.tokens_per_s
            pred_s = predicted_time(self.batch_hist, cost.t_verify, self.draft_pass_hist, cost.draft_table(),
                                    self.drafted)
            d["predicted_s"] = pred_s
            d["predicted_speedup"] = speedup(st.completion_tokens, pred_s, cost.t_verify[1])
            d["measured_over_predicted"] = d["speedup"] / d["predicted_speedup"] if d["predicted_speedup"] else 0.0
            d["same_output_as_target"] = self.outputs == baseline.outputs
        return d


class BenchContext:
    """A loaded target with the cross-vocabulary pair, optionally a same-vocabulary drafter, and
    the cost-model samples taken through the run."""

    def __init__(self, session: Session, same_vocab_draft: str | None = None):
        self.session = session
        self.pair = session.pair
        self.same_pair: PairContext | None = None
        drafters = {"draft": self.pair.draft}
        if same_vocab_draft:
            self.same_pair = session.models.open_pair(same_vocab_draft, persistent=False)
            drafters["same"] = self.same_pair.draft
        # timed on first use, not here: `bench peer` builds a context and never prices anything
        self.costs = CostSampler(session.target, session.max_verify_batch, drafters)
        self._peer: PeerLlama | None = None

    def generator(self, cfg: Config) -> Generator:
        """A fresh policy per configuration (nothing learned in another run), seeded with this run's costs."""
        pair = self.same_pair if cfg.method == "same-vocab" else self.pair
        policy = PolicyConfig(name=cfg.policy, k=max(cfg.k, 1) if cfg.method != "target" else 0)
        return self.session.compose(cfg.method, pair, seeded_policy(policy, cfg.method, lambda: self.cost_for(cfg)))

    def start_costs(self) -> None:
        """The drafter's threads (as generate and serve pick them) and the 5 timing rounds a product takes at
        start-up; `run` adds 2 before every prompt."""
        if not self.costs.samples():
            self.session.tune_drafter()
            self.costs.sample(5)

    def cost_for(self, cfg: Config | None = None) -> CostModel:
        """The cost model so far, with the pass costs of the drafter this configuration uses."""
        self.start_costs()
        if cfg is None or cfg.method == "target":
            return self.costs.model("draft")
        if cfg.method == "prompt-lookup":
            return self.costs.model(None)
        return self.costs.model("same" if cfg.method == "same-vocab" and self.same_pair is not None else "draft")

    def peer(self) -> "PeerLlama":
        if self._peer is None:
            s = self.session.settings
            # the file the user named (for a registry name, the pinned one they download), not the wide copy
            # the session may run from: plain llama-cpp-python has no such copy unless its user makes one
            self._peer = PeerLlama(models.resolve(s.target), s.threads, s.gpu_layers)
        return self._peer

    def close(self) -> None:
        if self.same_pair is not None:
            self.same_pair.draft.close()
        if self._peer is not None:
            self._peer.close()


def run(ctx: BenchContext, configs: list[Config], items: list[Item], params: GenerationParams,
        progress: bool = True) -> dict[str, dict]:
    """Every config on every item, interleaved; returns per-config summaries keyed by label.

    Predictions use the cost model sampled through the run (``ctx.costs``), one short timing
    round set before each prompt."""
    ctx.start_costs()
    gens = {c.label: ctx.generator(c) for c in configs if c.method != PEER}
    tallies = {c.label: Tally() for c in configs}
    bar = tqdm(total=len(items) * len(configs), desc="bench", disable=not progress, leave=False)
    for i, item in enumerate(items):
        ctx.costs.sample(2)
        order = configs[i % len(configs):] + configs[: i % len(configs)]
        for c in order:
            if c.method == PEER:
                tallies[c.label].add(ctx.peer().generate(item, params))
                bar.update(1)
                continue
            gen = gens[c.label]
            tallies[c.label].add(gen.generate(gen.prompt_for(item.prompt, item.chat), params))
            bar.update(1)
    bar.close()
    for c in configs:
        if c.label in gens and gens[c.label].drafter is not None:
            tallies[c.label].draft_pass_hist = gens[c.label].drafter.stats()["pass_hist"]
    base = tallies.get("target")
    out = {c.label: tallies[c.label].summary(base, ctx.cost_for(c)) for c in configs}
    for c in configs:
        out[c.label].update(method=c.method, k=c.k, policy=c.policy)
        if c.method == PEER:  # its own kernels and sampler: same text is not promised, and tokens are not kept
            out[c.label]["same_output_as_target"] = None
        if c.policy != "fixed" and c.method not in ("target", PEER):
            out[c.label]["policy_stats"] = gens[c.label].policy.stats()
    return out


class PeerLlama:
    """Plain llama-cpp-python on the same GGUF with its default settings (repacked weights, f16 KV),
    greedy or sampled like the run; timed from its first streamed token to its last, the way the
    runner times generation after the prompt.

    Threads: all cores unless told otherwise, like the product.  llama-cpp-python's own default is half
    of them (``cpu_count // 2``), one thread on a 2-core machine: a peer that slow flattered every
    "x plain llama-cpp-python" figure measured with it before 2026-11-28."""

    def __init__(self, path, threads: int = 0, gpu_layers: int = 0):
        n = threads or os.cpu_count() or 1
        self.llm = Llama(model_path=str(path), n_ctx=4096, n_threads=n, n_threads_batch=n, n_gpu_layers=gpu_layers,
                         verbose=False)

    def generate(self, item: Item, params: GenerationParams) -> Final:
        kw = dict(max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p,
                  top_k=params.top_k, seed=params.seed if params.seed is not None else 0, stream=True)
        self.llm.reset()
        t_start = time.perf_counter()
        stream = self.llm.create_chat_completion([{"role": "user", "content": item.prompt}], **kw) if item.chat \
            else self.llm.create_completion(item.prompt, **kw)
        t_first = t_end = None
        n, text = 0, []
        for chunk in stream:
            choice = chunk["choices"][0]
            piece = choice.get("text") if "text" in choice else choice.get("delta", {}).get("content")
            if piece is None:
                continue
            t_end = time.perf_counter()
            t_first = t_first or t_end
            n += 1
            text.append(piece)
        gen_s = (t_end - t_first) * n / (n - 1) if n > 1 else 0.0
        st = GenerationStats(PEER, completion_tokens=n, target_passes=n, total_s=gen_s,
                             first_token_s=t_first - t_start if t_first else 0.0)
        return Final("".join(text), [], "length", st, [])

    def close(self) -> None:
        self.llm.close()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def now_tag() -> str:
    return time.strftime("%Y%m%d-%H%M%S")
