"""The speculative loop, one step at a time: plan -> draft -> one target pass -> verify -> commit.

The values passing between the phases (Draft, Verdict, StepRecord) live in ``step.py``.

The target's KV cache always holds exactly the target's own tokens: every
candidate is checked against the target's choice at its position, so greedy output
is token for token the target-alone output, and seeded sampling draws each output
position's token with that position's own uniform, as the target alone would.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from omnidraft.vocab import chat
from .drafters import Drafter, PromptInput
from omnidraft.llama.ctxcost import ContextCosts
from omnidraft.llama.engine import Engine
from omnidraft.cliutil import TEMPERATURE
from omnidraft.errors import BadRequest, ContextOverflow
from .policy import DraftPolicy, PolicyConfig
from .stats import GenerationStats
from .step import Draft, PhaseClock, StepOutcome, StepRecord, TokenLogprob, Verdict
from omnidraft.vocab.textstream import Chunk, TextStream
from .verifier import (SamplingParams, first_uncertain_row, sample_token, top_k_ids, verify_exact_sampling,
                       verify_greedy, verify_rejection_approx, weights)

log = logging.getLogger(__name__)

VERIFICATION_MODES = ("exact", "approx-rs")
MAX_LOGPROBS = 20  # alternatives per token, as OpenAI's top_logprobs
REPRICE_CELLS = 256  # the context grown this much since the policy's prices were set: set them again


@dataclass
class GenerationParams:
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    verification: str = "exact"  # "approx-rs" = the paper's rejection sampling: APPROXIMATE
    record_topk: int = 0  # > 0: keep the target's top-k probabilities per output token (training records)
    # keep the KV of the longest common prefix with the previous request (chat turns): only the new
    # tokens are prefilled.  Output is exactly the target alone's with the same reuse; with a cold
    # context it can differ at near-ties, since the reused entries were computed in other batches.
    reuse_prefix: bool = False
    # None: off.  n >= 0: per output token, the target's log-probability of it and of its n most likely
    # alternatives (log-softmax at temperature 1 of the row that chose it: the same with or without drafts)
    logprobs: int | None = None

    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.seed)

    def check(self) -> None:
        if self.max_tokens < 1:
            raise BadRequest("max_tokens must be >= 1")
        if not TEMPERATURE[0] <= self.temperature <= TEMPERATURE[1]:
            raise BadRequest(f"temperature must be within [{TEMPERATURE[0]:g}, {TEMPERATURE[1]:g}]")
        if not 0.0 < self.top_p <= 1.0:
            raise BadRequest("top_p must be within (0, 1]")
        if self.top_k < 0:
            raise BadRequest("top_k must be >= 0")
        if self.verification not in VERIFICATION_MODES:
            raise BadRequest(f"verification must be one of {VERIFICATION_MODES}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise BadRequest(f"logprobs must be within [0, {MAX_LOGPROBS}]")


@dataclass
class Final:
    """Last item of a stream."""

    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" | "length"
    stats: GenerationStats
    steps: list[StepRecord]
    logprobs: list[TokenLogprob] = field(default_factory=list)  # tokens of `text` (params.logprobs set)


class Generator:
    """Composes a target engine, an optional drafter and a draft-length policy."""

    def __init__(self, target: Engine, drafter: Drafter | None = None,
                 policy: DraftPolicy | PolicyConfig | None = None, method: str = "target", max_verify_batch: int = 7,
                 guard: float = 0.0, contexts: ContextCosts | None = None):
        """``contexts``: what target passes cost as the context grows (llama.ctxcost); None: start-up's prices."""
        self.target = target
        self.drafter = drafter
        self.method = method
        # a DraftPolicy passed in keeps what it learned (timings, acceptance) across requests
        self.policy = policy if isinstance(policy, DraftPolicy) else DraftPolicy(policy or PolicyConfig())
        # largest verification batch whose logits are bit-identical to one-token decoding
        self.max_verify_batch = max(1, max_verify_batch)
        # > 0: batched logits are only within a measured bound of one-token decoding (invariance.VerifyPlan)
        self.guard = guard
        # the running stream's statistics, counted every step: what a consumer that stops the stream
        # early (a server's timeout) reports as produced
        self.live_stats: GenerationStats | None = None
        self.contexts = contexts
        self._priced_at = 0  # the context length the policy's pass prices were last set for

    # ---------------------------------------------------------------- prompts
    def prompt_from_text(self, text: str) -> PromptInput:
        ids = self.target.tokenize(text, add_bos=self.target.add_bos, special=False)
        if not ids:
            raise BadRequest("empty prompt")
        return PromptInput(ids, text.encode("utf-8"), plain=[(0, len(text))])

    def prompt_from_messages(self, messages: list[dict]) -> PromptInput:
        msgs = chat.validate_messages(messages)
        t = self.target
        bos = t.special_text(t.bos_id).decode("utf-8", "replace") if t.bos_id >= 0 else ""
        eos = t.special_text(t.eos_id).decode("utf-8", "replace") if t.eos_id >= 0 else ""
        text, plain = chat.render_marked(t.chat_template, msgs, bos_token=bos, eos_token=eos)
        if plain is None and chat.content_has_control_text(t, msgs):
            raise BadRequest("a message holds control-token text and this model's chat template rewrites "
                             "message contents, so it cannot be kept as plain text")
        add_bos = t.add_bos and not (bos and text.startswith(bos))
        ids = chat.tokenize(t, text, plain, add_bos)  # contents as text: no injected control tokens
        return PromptInput(ids, text.encode("utf-8"), msgs, plain)

    def prompt_for(self, text: str, chat: bool) -> PromptInput:
        """A prompt set's item: one user message through the target's chat template, or raw text."""
        return self.prompt_from_messages([{"role": "user", "content": text}]) if chat else self.prompt_from_text(text)

    # ------------------------------------------------------------------ loop
    def generate(self, prompt: PromptInput, params: GenerationParams | None = None) -> Final:
        final = None
        for item in self.stream(prompt, params):
            if isinstance(item, Final):
                final = item
        assert final is not None
        return final

    def stream(self, prompt: PromptInput, params: GenerationParams | None = None) -> Iterator[Chunk | Final]:
        params = params or GenerationParams()
        params.check()
        t = self.target
        ids = prompt.target_ids
        if len(ids) + 1 > t.n_ctx:
            raise ContextOverflow(f"prompt of {len(ids)} tokens does not fit the context of {t.n_ctx}")
        max_new = min(params.max_tokens, t.n_ctx - len(ids))
        stats = self.live_stats = GenerationStats(self.method, prompt_tokens=len(ids))
        t0 = time.perf_counter()
        stats.reused_tokens = t.prefill(ids, params.reuse_prefix)
        self.policy.at_context(t.n_past)
        self._price_context(timing=True)
        if self.drafter is not None:  # the prompt's unread part: what the drafter would catch up on
            unread = len(ids) - stats.reused_tokens
            if self.drafter.window:  # of a long prompt it reads only the latest tokens (drafters.window_start)
                unread = min(unread, self.drafter.window)
            self.drafter.begin(prompt, self.policy.begin_request(unread, max_new))
        stats.prefill_s = time.perf_counter() - t0
        sp = params.sampling()
        uniforms = np.random.default_rng(params.seed).random(max_new + self.max_verify_batch + 1)
        rng = np.random.default_rng(params.seed)
        text = TextStream(params.stop)
        out: list[int] = []
        steps: list[StepRecord] = []
        t_prev = ids[-1]
        finish = "length"
        lap = time.perf_counter()  # each step's wall time runs from here to the next step's start
        while len(out) < max_new:
            step, verdict = self._step(t_prev, len(out), max_new, params, sp, uniforms, rng)
            new = list(verdict.tokens)
            steps.append(step)
            stats.add_step(step)
            eog_at = next((i for i, tok in enumerate(new) if tok in t.eog_ids), None)
            done = eog_at is not None  # an end-of-generation token ends the text before it
            if done:
                new = new[:eog_at]
                stats.stop_tokens = 1
            out.extend(new)
            stats.completion_tokens, stats.total_s = len(out), time.perf_counter() - t0
            stats.first_token_s = stats.first_token_s or stats.total_s
            n_acc_text = min(step.accepted, len(new))
            # each token's logprob entry rides on the chunk that completes its text (TextStream marks)
            marks = [(len(t.token_bytes[tok]), lp) for tok, lp in zip(new, step.logprobs)]
            yield from text.push(t.detokenize(new[:n_acc_text]), True, marks[:n_acc_text])
            yield from text.push(t.detokenize(new[n_acc_text:]), False, marks[n_acc_text:])
            sync_s = 0.0
            if done or text.stopped:
                finish = "stop"
                stats.close_step(step, time.perf_counter() - lap)
                break
            if self.drafter is not None:
                a0 = time.perf_counter()
                self.drafter.accept(replace(verdict, text=t.detokenize(new)))
                sync_s = time.perf_counter() - a0
            t_prev = new[-1]
            now = time.perf_counter()
            stats.close_step(step, now - lap, sync_s)
            # the drafter's catching up is the price of the steps it sat out, not of this one's drafting
            self.policy.observe_lap(step.drafted > 0 or step.proposed > 0, len(new), now - lap - step.catchup_s)
            if t.n_past >= self._priced_at + REPRICE_CELLS:
                self._price_context(timing=False)
            lap = time.perf_counter()
        yield from text.finish()
        stats.completion_tokens = len(out)
        stats.total_s = time.perf_counter() - t0
        stats.policy_note = self.policy.note(self.max_draft) if self.drafter is not None \
            else "no drafter, the target ran alone"
        yield Final(text.text, out, finish, stats, steps, [lp for _, lp in text.released])

    def _price_context(self, timing: bool) -> None:
        """Set the cost policy's pass prices for the context now (``DraftPolicy.follow_context``).  Only a request's
        start may time passes (``timing``): within the loop, the time would be charged to a step."""
        if self.contexts is None or self.drafter is None or not self.policy.rule.seeded_with_costs:
            return
        k = self.policy.cap(self.max_draft)
        # where no draft pays even at 100 % acceptance (the 0.5B on 2 cores), a longer context only makes passes
        # dearer: timing them would be paid for nothing
        timing = timing and self.policy.ceiling(k) > 1.0
        self._priced_at = self.target.n_past
        self.policy.follow_context(self.contexts.growth(self.target, k + 1, timing))

    @property
    def max_draft(self) -> int:
        """The draft-length cap: a target pass verifies the last token and the drafts, at most
        ``max_verify_batch`` rows (the policy caps again at its own k, ``DraftPolicy.cap``)."""
        return self.max_verify_batch - 1

    def _step(self, t_prev: int, n_out: int, max_new: int, params: GenerationParams, sp: SamplingParams,
              uniforms: np.ndarray, rng: np.random.Generator) -> tuple[StepRecord, Verdict]:
        """One speculative step: plan -> draft -> one target pass -> verify -> commit, each phase timed as a
        whole (stats.STEP_PARTS); the loop adds its own share (text out, the drafter's accept) after."""
        t, clock = self.target, PhaseClock()
        with clock("plan"):  # how long a draft may be (the output's, the context's, the batch's room)
            limit = min(max_new - n_out - 1, t.n_ctx - t.n_past - 2, self.max_draft)
            k = self.policy.choose_k(limit) if self.drafter is not None and limit > 0 else 0
        with clock("draft"):
            draft = (self.drafter.draft(k, self.policy.stop_rule()) if k > 0 else Draft()).cut(limit)
        with clock("target"):  # one pass: the last token and every candidate, logits for all of them
            base, fed = t.n_past, [t_prev] + draft.candidates.ids
            logits = t.decode(fed, "all")
        with clock("verify"):  # the accepted path and the next token; the KV keeps t_prev and the accepted
            u = uniforms[n_out:]  # output position n_out's uniform first
            verdict = self._guard(fed, base, logits, self._verify(draft, logits, params, sp, u, rng), params, sp, u)
            t.rollback(base + 1 + verdict.accepted)
        with clock("commit"):
            self.policy.observe(StepOutcome.of(draft, verdict, clock.s["target"] + clock.s["verify"]))
            rows = verdict.logits
            topk = [_topk(row, params.record_topk) for row in rows] if params.record_topk else []
            lps = [] if params.logprobs is None else [_logprob(t, row, tok, params.logprobs)
                                                      for row, tok in zip(rows, verdict.tokens)]
        return StepRecord.of(draft, verdict, clock.stop(), topk, lps), verdict

    @staticmethod
    def _verify(draft: Draft, logits: np.ndarray, params: GenerationParams, sp: SamplingParams,
                uniforms: np.ndarray, rng: np.random.Generator) -> Verdict:
        """The verdict on a chain of candidates, by the request's scheme (verifier's pure functions)."""
        assert draft.is_chain, "trees of candidates are not verified yet"
        ids = draft.candidates.ids
        if sp.greedy:
            n, nxt = verify_greedy(ids, logits)
        elif params.verification == "approx-rs" and ids:
            n, nxt = verify_rejection_approx(ids, draft.candidates.q, logits, sp, rng)
        else:
            n, nxt = verify_exact_sampling(ids, logits, sp, uniforms)
        return Verdict.chain(ids, n, nxt, logits[:n + 1])

    def _guard(self, fed: list[int], base: int, logits: np.ndarray, verdict: Verdict, params: GenerationParams,
               sp: SamplingParams, uniforms: np.ndarray) -> Verdict:
        """With a near-tie guard (kernels whose batched logits are only within a bound of one-token decoding):
        the first row such an error could decide otherwise is decoded again alone and decides the step.
        ``fed``: the tokens of the step's target pass, decoded from position ``base``."""
        if not (self.guard > 0 and len(fed) > 1 and params.verification == "exact"):
            return verdict
        j = first_uncertain_row(logits[:verdict.accepted + 1], sp, uniforms, self.guard)
        if j is None:
            return verdict
        # rows before j decide as the target alone would; row j is decided alone
        logits = logits[:j + 1].copy()  # the next decode reuses llama.cpp's buffer
        t = self.target
        t.rollback(base + j)
        logits[j] = t.decode(fed[j:j + 1], "last")[0]
        return Verdict.chain(fed[1:], j, sample_token(logits[j], sp, uniforms[j]), logits, redecoded=True)


def _topk(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k token ids and their softmax probabilities (temperature 1), most likely first, ties by id."""
    idx = top_k_ids(row, k)
    order = idx[np.argsort(-row[idx], kind="stable")][:k]
    return order.astype(np.int32), (np.exp(row[order] - row.max()) / _softmax_sum(row)).astype(np.float32)


def _softmax_sum(row: np.ndarray) -> float:
    """sum(exp(row - max)) in float64: the sampler's weights at temperature 1, summed."""
    return float(weights(row, SamplingParams(temperature=1.0))[1].sum())


def _logprob(target: Engine, row: np.ndarray, token: int, n: int) -> TokenLogprob:
    """The chosen token's log-probability and the n most likely tokens' (log-softmax at temperature 1)."""
    norm = float(row.max()) + np.log(_softmax_sum(row))
    lp = lambda i: float(np.float64(row[i]) - norm)  # noqa: E731
    idx = top_k_ids(row, n) if 0 < n < len(row) else np.arange(min(n, len(row)))
    idx = idx[np.lexsort((idx, -row[idx]))][:n]  # most likely first, ties by id
    piece = lambda i: target.detokenize([int(i)], special=True)  # noqa: E731
    return TokenLogprob(int(token), piece(token), lp(token), [(int(i), piece(i), lp(i)) for i in idx])
