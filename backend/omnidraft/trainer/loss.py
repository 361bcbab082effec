"""The hybrid distillation loss of OmniDraft, on records of schema ``omnidraft.record/1``.

For one output position t with drafter logits z_t (full drafter vocabulary V):

    q_t(v)   = softmax(z_t)(v)                                   the drafter
    S_t      = drafter ids of the target's top-k entries with a direct mapping (record ``topk_ids``)
    p_t(v)   = target probability of v, v in S_t                (record ``topk_probs``)
    r_t      = 1 - sum_{v in S_t} p_t(v)                         (record ``rest_mass``)

Both distributions are coarse-grained onto the |S_t| + 1 outcomes {v in S_t} U {rest}:

    q'_t(v)    = q_t(v)                       for v in S_t
    q'_t(rest) = 1 - sum_{v in S_t} q_t(v)    (= logsumexp of z_t outside S_t - logsumexp z_t, computed so)

    L_DM(t)  = KL(q'_t || p_t) = sum_{v in S_t} q_t(v) [log q_t(v) - log p_t(v)]
                                 + q'_t(rest) [log q'_t(rest) - log max(r_t, eps)]

a reverse KL (mode seeking, as in the paper) over directly mapped tokens that is exact on this
partition, never asks the drafter for a distribution over tokens the target did not report, and
still penalises drafter mass on tokens the target finds unlikely (through the rest bucket).
Target probabilities are floored at ``eps`` (1e-6) so a zero never makes the loss infinite.

    L_N-gram(t) = -log q_t(y_t)     at positions of sub-tokens of an unmapped (n-gram) target token

    L = mean_{t: dm} L_DM(t) + lambda * mean_{t: ngram} L_N-gram(t)       (lambda = 0.2)

(each mean is 0 when a batch has no such position).

Online (``record_loss``), a third term may weigh the request's own prompt, teacher-forced:

    L_prompt(t) = -log q_t(x_{t+1})   at every prompt position but the last    (``prompt_lam``; 0 = the paper's L)

The prompt is text the user brought (their code, their language), the drafter reads it anyway, and a record
carries more prompt than output tokens (188 against 80 drafter tokens in a JavaScript stream request): in a
domain distillation never saw, it is most of what an update can learn from (``scripts/lab/adapt_lab.py``: JavaScript
held-out top-1 69.2 % without it, 70.2 % with 0.5, from 68.1 %, after 64 prompts in one pass at interval 16).
Only the rows a term uses go through the head.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

EPS = 1e-6


@dataclass
class Batch:
    """One record as tensors; position i of the output is predicted by logits row ``pos[i]``."""

    input_ids: torch.Tensor  # [L] prompt + output[:-1]
    pos: torch.Tensor  # [n] logits row predicting output i
    labels: torch.Tensor  # [n] output drafter ids
    dm: torch.Tensor  # [n] bool
    ngram: torch.Tensor  # [n] bool
    topk_ids: torch.Tensor  # [n, K] drafter ids, -1 = padding
    topk_probs: torch.Tensor  # [n, K]
    rest: torch.Tensor  # [n]
    n_prompt: int = 0  # input_ids[:n_prompt] is the (cut) prompt
    # the positions of each term, found where the batch is built (the CPU): on a GPU, a boolean mask's count and
    # indexing would each wait for the device, several times a step
    dm_rows: torch.Tensor = field(default=None)  # [n_dm] long: indices of dm
    ngram_rows: torch.Tensor = field(default=None)  # [n_ngram] long: indices of ngram

    def __post_init__(self):
        if self.dm_rows is None:
            self.dm_rows = self.dm.nonzero()[:, 0]
        if self.ngram_rows is None:
            self.ngram_rows = self.ngram.nonzero()[:, 0]

    def to(self, device) -> "Batch":
        """The same batch with its tensors on ``device``."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)
                                if isinstance(getattr(self, f.name), torch.Tensor)})


def batch_from_record(rec: dict, max_len: int = 1024) -> Batch | None:
    """Tensors for one record; the prompt is cut from the left (then the output's tail) to fit ``max_len``."""
    prompt, out = list(rec["prompt_ids"]), list(rec["output_ids"])
    if not out:
        return None
    keep = max_len + 1 - len(out)  # prompt tokens that fit with the whole output
    if keep < 1:
        prompt, out = prompt[-1:] if prompt else [], out[: max_len]
        keep = len(prompt)
    prompt = prompt[-keep:] if keep < len(prompt) else prompt
    n = len(out)
    first = 0 if prompt else 1  # without any prompt token nothing predicts output 0
    ids = (prompt + out)[:-1]
    pos = torch.arange(len(prompt) - 1 + first, len(prompt) - 1 + n)
    sl = slice(first, n)
    k = max([len(x) for x in rec["topk_ids"][sl] if x] or [1])
    tid = torch.full((n - first, k), -1, dtype=torch.long)
    tp = torch.zeros((n - first, k))
    rest = torch.ones(n - first)
    for j, i in enumerate(range(first, n)):
        ids_i, ps_i = rec["topk_ids"][i], rec["topk_probs"][i]
        if ids_i:
            tid[j, : len(ids_i)] = torch.tensor(ids_i)
            tp[j, : len(ps_i)] = torch.tensor(ps_i)
        if rec["rest_mass"][i] is not None:
            rest[j] = float(rec["rest_mass"][i])
    return Batch(torch.tensor(ids, dtype=torch.long), pos, torch.tensor(out[first:], dtype=torch.long),
                 torch.tensor(rec["dm"][first:n], dtype=torch.bool),
                 torch.tensor(rec["ngram"][first:n], dtype=torch.bool),
                 tid, tp, rest, len(prompt))


def dm_reverse_kl(logits: torch.Tensor, topk_ids: torch.Tensor, topk_probs: torch.Tensor,
                  rest: torch.Tensor) -> torch.Tensor:
    """KL(q' || p) per row (see the module docstring); logits [n, V], topk_ids [n, K] (-1 = pad)."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    valid = topk_ids >= 0
    idx = topk_ids.clamp(min=0)
    logq_s = torch.gather(logq, 1, idx)  # [n, K]
    q_s = logq_s.exp() * valid
    kl_s = (q_s * (logq_s - torch.log(topk_probs.clamp(min=EPS)))).sum(-1)
    # scatter_add, not scatter: padding points at id 0 too and must not unset a real entry there
    in_s = torch.zeros_like(logq).scatter_add(1, idx, valid.to(logq.dtype)) > 0
    logq_rest = torch.logsumexp(logq.masked_fill(in_s, float("-inf")), dim=-1)  # log q'(rest)
    q_rest = logq_rest.exp()
    kl_rest = torch.where(q_rest > 0, q_rest * (logq_rest - torch.log(rest.clamp(min=EPS))), torch.zeros_like(q_rest))
    return kl_s + kl_rest


def ngram_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """-log q(label) per row."""
    return -torch.log_softmax(logits.float(), dim=-1).gather(1, labels[:, None])[:, 0]


def hybrid_loss(logits: torch.Tensor, b: Batch, lam: float = 0.2) -> tuple[torch.Tensor, dict]:
    """L = mean L_DM + lam * mean L_N-gram for one record; ``logits`` [L, V] over ``b.input_ids``."""
    return output_loss(logits[b.pos], b, lam)


def output_loss(rows: torch.Tensor, b: Batch, lam: float = 0.2) -> tuple[torch.Tensor, dict]:
    """The hybrid loss from the output rows only (``rows[i]`` predicts output ``i``: [n, V])."""
    l_dm, l_ng = _output_terms(rows, b)
    loss = l_dm + lam * l_ng
    return loss, _info(loss, l_dm, l_ng, b)


def _output_terms(rows: torch.Tensor, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean L_DM, mean L_N-gram) over the output rows; a term without positions is a zero still in the graph."""
    zero = rows.sum() * 0.0 if not (len(b.dm_rows) and len(b.ngram_rows)) else None
    dm, ng = b.dm_rows, b.ngram_rows
    l_dm = dm_reverse_kl(rows[dm], b.topk_ids[dm], b.topk_probs[dm], b.rest[dm]).mean() if len(dm) else zero
    l_ng = ngram_nll(rows[ng], b.labels[ng]).mean() if len(ng) else zero
    return l_dm, l_ng


def _info(loss: torch.Tensor, l_dm: torch.Tensor, l_ng: torch.Tensor, b: Batch, **prompt) -> dict:
    """The step's figures as floats, read in one wait for the device (not one per figure)."""
    names = ["loss", "l_dm", "l_ngram"] + (["l_prompt"] if prompt else [])
    terms = [loss, l_dm, l_ng] + ([prompt["l_prompt"]] if prompt else [])
    info = dict(zip(names, torch.stack([t.detach().float() for t in terms]).tolist()))
    info.update(n_dm=len(b.dm_rows), n_ngram=len(b.ngram_rows))
    if prompt:
        info["n_prompt"] = prompt["n_prompt"]
    return info


def record_loss(model, rec_or_batch, lam: float = 0.2, prompt_lam: float = 0.0, max_len: int = 1024):
    """Forward one record through a transformers causal LM and return (loss, info): the hybrid loss, plus
    ``prompt_lam`` times the prompt's teacher-forced NLL when it is > 0."""
    b = rec_or_batch if isinstance(rec_or_batch, Batch) else batch_from_record(rec_or_batch, max_len)
    if b is None:
        return None, {}
    n_p = _prompt_rows(b, prompt_lam)
    rows = model(input_ids=b.input_ids[None], logits_to_keep=_kept(b, n_p)).logits[0]
    loss, l_dm, l_ng, l_p = _terms(rows, b, n_p, lam, prompt_lam)
    return loss, _info(loss, l_dm, l_ng, b, **({"l_prompt": l_p, "n_prompt": n_p} if n_p else {}))


def group_loss(model, batches: list[Batch], lam: float = 0.2, prompt_lam: float = 0.0):
    """Several records in one forward: (the mean of their ``record_loss`` losses, each record's loss [B]).  Each
    record weighs as one, whatever its length.  The records are right-padded and masked, so each reads only its own
    tokens at its own positions, and only the rows their terms use go through the head; the head must be a plain
    projection (``plain_head``)."""
    base = _unwrapped(model)
    ids = torch.nn.utils.rnn.pad_sequence([b.input_ids for b in batches], batch_first=True)
    lens = torch.tensor([len(b.input_ids) for b in batches], device=ids.device)
    mask = (torch.arange(ids.shape[1], device=ids.device)[None] < lens[:, None]).long()
    hidden = base.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    n_ps = [_prompt_rows(b, prompt_lam) for b in batches]
    kept = [_kept(b, n_p) for b, n_p in zip(batches, n_ps)]
    rows = base.get_output_embeddings()(torch.cat([hidden[i, k] for i, k in enumerate(kept)]))
    each = torch.stack([_terms(r, b, n_p, lam, prompt_lam)[0]
                        for r, b, n_p in zip(rows.split([len(k) for k in kept]), batches, n_ps)])
    return each.mean(), each


def plain_head(model) -> bool:
    """Whether the model's logits are its head's projection of the last hidden state and nothing more (Llama,
    Qwen2: ``group_loss`` applies the head itself), not capped or scaled after it (Gemma's soft cap, Cohere's
    scale)."""
    cfg = getattr(_unwrapped(model), "config", None)
    return not any(getattr(cfg, a, None) not in (None, 1.0) for a in ("final_logit_softcapping", "logit_scale"))


def _unwrapped(model):
    """The transformers model itself: peft's wrapper (LoRA) holds it as its base model, its LoRA layers in place."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _prompt_rows(b: Batch, prompt_lam: float) -> int:
    """Prompt rows the prompt term reads: every prompt position with a prompt token next (0: no such term)."""
    return b.n_prompt - 1 if prompt_lam > 0 and b.n_prompt >= 2 else 0


def _kept(b: Batch, n_p: int) -> torch.Tensor:
    """The logits rows a record's terms use: its first ``n_p`` prompt rows, then the rows predicting its output."""
    return torch.cat([torch.arange(n_p, device=b.pos.device), b.pos]) if n_p else b.pos


def _terms(rows: torch.Tensor, b: Batch, n_p: int, lam: float, prompt_lam: float):
    """(loss, l_dm, l_ngram, l_prompt or None) of one record from its kept rows (``_kept``)."""
    l_dm, l_ng = _output_terms(rows[n_p:], b)
    loss = l_dm + lam * l_ng
    if not n_p:
        return loss, l_dm, l_ng, None
    l_p = ngram_nll(rows[:n_p], b.input_ids[1:n_p + 1]).mean()
    return loss + prompt_lam * l_p, l_dm, l_ng, l_p
