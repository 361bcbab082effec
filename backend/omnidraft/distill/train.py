"""A shallow drafter distilled offline from the target: SmolLM2's vocabulary, tied embedding/head and final
norm with a few of its layers, trained (the embedding too, by default) with the project's hybrid loss
(:mod:`omnidraft.trainer.loss`).

    omnidraft distill data     texts -> token ids of both vocabularies + alignment   (CPU, llama.cpp tokenizers)
    omnidraft distill teacher  + the target's continuations and top-k at every aligned position  (torch)
    omnidraft distill train    cut the drafter, train the chosen layers, save the trained tensors  (torch)
    omnidraft distill export   rebuild the model, write the quantized GGUF, check it in llama.cpp  (CPU)
    omnidraft distill all      the four in a row (``--device cuda`` where there is a GPU)

``teacher`` and ``train`` import neither llama.cpp nor the server: they run on a GPU machine with torch,
transformers and gguf (docs/DISTILL.md gives the commands used on the lent GPU).  The teacher is the target's
own GGUF dequantized into transformers (:func:`omnidraft.trainer.model.load_gguf_model`).  Under torchrun
both run on every rank, one GPU each (:mod:`omnidraft.distill.dist`; docs/DISTILL.md, "Many GPUs").
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import dist
from .dist import Dist
from .data import PAD, read_meta

log = logging.getLogger(__name__)


def parse_layers(spec: str, n_layers: int = 30) -> list[int]:
    """'first4' -> [0, 1, 2, 3]; 'spread4' -> evenly spread, first and last kept; '0,10,20,29' -> as given."""
    if spec.startswith("first"):
        return list(range(int(spec[5:])))
    if spec.startswith("spread"):
        n = int(spec[6:])
        return sorted({round(i * (n_layers - 1) / (n - 1)) for i in range(n)})
    return [int(x) for x in spec.split(",")]


# ------------------------------------------------------------------ teacher
def _batches(lengths, max_tokens: int):
    """Indices grouped by similar length, each group at most ``max_tokens`` padded tokens."""
    order = np.argsort(lengths, kind="stable")
    group, longest = [], 0
    for i in order:
        longest2 = max(longest, int(lengths[i]))
        if group and longest2 * (len(group) + 1) > max_tokens:
            yield group
            group, longest2 = [], int(lengths[i])
        group.append(int(i))
        longest = longest2
    if group:
        yield group


def _ragged(ids, lens):
    off = np.concatenate([[0], np.cumsum(lens)])
    return [ids[off[i]: off[i + 1]] for i in range(len(lens))]


def _group_seed(seed: int, group: int) -> int:
    """The sampling seed of one batch group of continuations: the same whichever rank continues it."""
    return int(np.random.SeedSequence([seed, group]).generate_state(1)[0])


def generate(model, prompts: list[np.ndarray], n_new: int, temps: list[float], eog: set[int], device,
             seed: int, batch: int = 64, progress: bool = True, d: Dist = Dist()) -> list[np.ndarray]:
    """The target's continuations (greedy where temp = 0, else sampled), cut before the first EOG token.

    Under torchrun each rank continues every world-th batch group (None for the others' prompts).  A group's
    rows, padding and sampling seed do not depend on the ranks, so the shards together equal one process's
    output."""
    import torch
    from tqdm import tqdm

    g = torch.Generator(device=device)
    outs: list[np.ndarray] = [None] * len(prompts)
    lens = np.asarray([len(p) for p in prompts])
    groups = dist.shard(list(enumerate(_batches(lens, batch * int(lens.max() if len(lens) else 1)))), d)
    for gi, grp in tqdm(groups, desc="teacher: continuations", disable=not progress):
        g.manual_seed(_group_seed(seed, gi))
        L = max(len(prompts[i]) for i in grp)
        ids = torch.zeros((len(grp), L), dtype=torch.long)
        mask = torch.zeros((len(grp), L), dtype=torch.long)
        for r, i in enumerate(grp):  # left padding
            ids[r, L - len(prompts[i]):] = torch.as_tensor(prompts[i].astype(np.int64))
            mask[r, L - len(prompts[i]):] = 1
        ids, mask = ids.to(device), mask.to(device)
        temp = torch.tensor([temps[i] for i in grp], device=device, dtype=torch.float32)[:, None]
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        # only the last row's logits: a full (rows x length x 152k) tensor would not fit for long prompts
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        past, new = out.past_key_values, []
        for _ in range(n_new):
            logits = out.logits[:, -1].float()
            greedy = logits.argmax(-1)
            probs = torch.softmax(logits / temp.clamp(min=1e-4), -1)
            sampled = torch.multinomial(probs, 1, generator=g)[:, 0]
            tok = torch.where(temp[:, 0] > 0, sampled, greedy)
            new.append(tok)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            pos = pos[:, -1:] + 1
            out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos, past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
        new_ids = torch.stack(new, 1).cpu().numpy()
        for r, i in enumerate(grp):
            row = new_ids[r]
            stop = next((j for j, t in enumerate(row) if int(t) in eog), len(row))
            outs[i] = row[:stop].astype(np.int32)
    return outs


def topk_at(model, seqs: list[np.ndarray], rows: list[np.ndarray], k: int, device, max_tokens: int = 16384,
            progress: bool = True, d: Dist = Dist()):
    """For each sequence, the target's top-k ids and probabilities at logits rows ``rows[i]`` (under torchrun:
    for the sequences of this rank's batch groups, None elsewhere)."""
    import torch
    from tqdm import tqdm

    res = [None] * len(seqs)
    groups = dist.shard(list(_batches(np.asarray([len(s) for s in seqs]), max_tokens)), d)
    for grp in tqdm(groups, desc="teacher: top-k", disable=not progress):
        L = max(len(seqs[i]) for i in grp)
        ids = torch.zeros((len(grp), L), dtype=torch.long)
        for r, i in enumerate(grp):  # right padding: causal attention never looks at it
            ids[r, : len(seqs[i])] = torch.as_tensor(seqs[i].astype(np.int64))
        with torch.no_grad():
            hidden = model.model(input_ids=ids.to(device)).last_hidden_state
            sel_b = torch.cat([torch.full((len(rows[i]),), r, dtype=torch.long) for r, i in enumerate(grp)])
            sel_t = torch.cat([torch.as_tensor(rows[i].astype(np.int64)) for i in grp])
            h = hidden[sel_b.to(device), sel_t.to(device)]
            logp = torch.log_softmax(model.lm_head(h).float(), -1)
            val, idx = logp.topk(k, -1)
        val, idx = val.exp().cpu().numpy(), idx.cpu().numpy()
        start = 0
        for i in grp:
            n = len(rows[i])
            res[i] = (idx[start: start + n], val[start: start + n])
            start += n
    return res


def map_topk(slot, rows, idx, p, t2d, k: int):
    """Per drafter position: the target's top-k at its row mapped to drafter ids (unmapped entries dropped,
    the mapped ones kept in rank order, PAD after them), their probabilities, the rest mass, and whether
    the target's top-1 itself maps."""
    n = len(slot)
    top = np.full((n, k), PAD, dtype=np.uint16)
    prob = np.zeros((n, k), dtype=np.float16)
    rest = np.ones(n, dtype=np.float16)
    t1m = np.zeros(n, dtype=bool)
    dm = np.nonzero(slot >= 0)[0]
    if len(dm):
        m = np.searchsorted(rows, slot[dm])
        mapped = t2d[idx[m]]
        ok = mapped >= 0
        order = np.argsort(~ok, axis=1, kind="stable")  # mapped entries first, in rank order
        top[dm] = np.take_along_axis(np.where(ok, mapped, PAD), order, 1).astype(np.uint16)
        pk = np.take_along_axis(np.where(ok, p[m], 0.0), order, 1)
        prob[dm] = pk.astype(np.float16)
        rest[dm] = np.maximum(0.0, 1.0 - pk.sum(1)).astype(np.float16)
        t1m[dm] = ok[:, 0]
    return top, prob, rest, t1m


@dataclass
class TeacherConfig:
    """The target's part: its continuations and its top-k at every directly mapped drafter position."""

    texts: str = field(default=".distill/texts.npz", metadata={"help": "output of `distill data`"})
    target_gguf: str = field(default="qwen2.5-coder-0.5b", metadata={"help": "teacher model (name or GGUF path)"})
    out: str = field(default=".distill/data.npz", metadata={"help": "training data npz"})
    device: str = field(default="cpu", metadata={"help": "torch device (cpu, cuda)"})
    topk: int = field(default=16, metadata={"help": "target probabilities kept per position"})
    gen_tokens: int = field(default=128, metadata={"help": "tokens the target writes per prompt"})
    gen_batch: int = field(default=128, metadata={"help": "prompts of the longest length continued together"})
    temperature: float = field(default=0.7, metadata={"help": "temperature of the sampled half of the prompts"})
    batch_tokens: int = field(default=16384, metadata={"help": "padded tokens per teacher forward"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})


def continuation_alignment(d_prompt, out_ids, n_prompt, enc_ids, enc_off, direct, prompt_slots=None):
    """Drafter ids of prompt + the target's output read token by token, and their target rows (-1: N-gram)."""
    d = list(int(x) for x in d_prompt)
    slot = list(prompt_slots) if prompt_slots is not None else [-2] + [-1] * (len(d) - 1)
    for j, t in enumerate(out_ids):
        piece = enc_ids[enc_off[t]: enc_off[t + 1]]
        for m, x in enumerate(piece):
            d.append(int(x))
            slot.append(n_prompt + j - 1 if direct[t] and m == 0 else -1)
    return np.asarray(d, dtype=np.uint16), np.asarray(slot, dtype=np.int32)


def teacher_precision(model, bf16: bool):
    """On a GPU the teacher runs in bfloat16 for speed.  Two parts stay float32: the head, whose logits become
    the top-k probabilities the drafter learns (a bf16 logit of 20 is off by up to 0.08), and the rotary
    frequencies (in bf16 a position's angle drifts by tenths of a radian at a few hundred tokens).  ``bf16``
    False (the CPU) leaves the float32 model as it is."""
    if not bf16:
        return model
    import torch

    head = torch.nn.Parameter(model.lm_head.weight.detach().clone(), requires_grad=False)  # untied, float32
    rotary = {n: b for n, b in model.named_buffers() if n.endswith("inv_freq")}
    model.model.to(torch.bfloat16)
    for n, b in rotary.items():
        mod, _, attr = n.rpartition(".")
        setattr(model.get_submodule(mod), attr, b)
    model.lm_head.weight = head
    model.lm_head.register_forward_pre_hook(lambda _mod, args: (args[0].float(), *args[1:]))
    return model


def _load_teacher(name: str, device):
    from omnidraft.trainer.model import load_gguf_model

    path = name
    if not Path(path).exists():
        from omnidraft.assets import models

        path = models.resolve(path)
    return teacher_precision(load_gguf_model(path), device.type == "cuda").to(device), Path(path)


def _position_arrays(seqs, slot_l, rows, tk, d_seqs, t2d, k: int) -> dict[str, np.ndarray]:
    """The training rows of sequences ``seqs`` (in that order): per drafter position its kind (1 DM, 2 N-gram),
    top-k drafter ids/probs, rest mass, target-top-1-mapped flag; and ``ex_len``."""
    cols = [(np.zeros(0, np.uint16), np.zeros(0, np.uint8), np.zeros((0, k), np.uint16),
             np.zeros((0, k), np.float16), np.zeros(0, np.float16), np.zeros(0, bool))]  # no sequence: empty
    for i in seqs:
        s = slot_l[i]
        kind = np.where(s >= 0, 1, 2).astype(np.uint8)
        kind[s == -2] = 0
        cols.append((d_seqs[i].astype(np.uint16), kind, *map_topk(s, rows[i], *tk[i], t2d, k)))
    arrays = {key: np.concatenate(c) for key, c in zip(("ids", "kind", "top", "prob", "rest", "t1m"), zip(*cols))}
    arrays["ex_len"] = np.asarray([len(d_seqs[i]) for i in seqs], dtype=np.int32)
    return arrays


def run_teacher(cfg: TeacherConfig, progress: bool = True) -> dict:
    """Write the training data (see :func:`_position_arrays`).  Under torchrun each rank runs the target on its
    share of the batch groups (on cuda:LOCAL_RANK) and rank 0 merges the shards into ``cfg.out``, in the order
    and format of a single process."""
    with dist.group(cfg.device) as d:
        return _teacher(cfg, d, progress and d.is_main)


def _teacher(cfg: TeacherConfig, d: Dist, progress: bool) -> dict:
    import torch

    t0 = time.perf_counter()
    z = np.load(cfg.texts)
    meta = read_meta(z)
    device = dist.device(cfg.device, d)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    model, path = _load_teacher(cfg.target_gguf, device)
    log.info("teacher loaded in %.0f s", time.perf_counter() - t0)
    eog = set(meta["target_eog"])
    t2d = z["t2d"].astype(np.int64)
    t_seqs, d_seqs = _ragged(z["t_ids"], z["t_len"]), _ragged(z["d_ids"], z["d_len"])
    slot_l = _ragged(z["slot"], z["d_len"])
    src, val = list(z["src"]), list(z["val"])
    # continuations: half greedy, half sampled
    g_t, g_d = _ragged(z["g_t_ids"], z["g_t_len"]), _ragged(z["g_d_ids"], z["g_d_len"])
    g_s = _ragged(z["g_slot"], z["g_d_len"]) if "g_slot" in z.files else [None] * len(g_t)
    rng = random.Random(cfg.seed)
    temps = [0.0 if rng.random() < 0.5 else cfg.temperature for _ in g_t]
    t1 = time.perf_counter()
    with torch.no_grad():
        outs = (generate(model, g_t, cfg.gen_tokens, temps, eog, device, cfg.seed, cfg.gen_batch, progress, d)
                if g_t else [])
    # every rank needs all continuations: the top-k batch groups mix them with the texts by length
    outs = dist.gather_filled(outs, d)
    t_gen = time.perf_counter() - t1
    for i, out in enumerate(outs):
        ids, s = continuation_alignment(g_d[i], out, len(g_t[i]), z["enc_ids"], z["enc_off"], z["direct"],
                                        g_s[i])
        t_seqs.append(np.concatenate([g_t[i], out]).astype(np.int32))
        d_seqs.append(ids)
        slot_l.append(s)
        src.append(int(z["g_src"][i]))
        val.append(bool(z["g_val"][i]))
    rows = [np.unique(s[s >= 0]) for s in slot_l]
    tk = topk_at(model, t_seqs, rows, cfg.topk, device, cfg.batch_tokens, progress, d)
    mine = [i for i, r in enumerate(tk) if r is not None]
    arrays = _position_arrays(mine, slot_l, rows, tk, d_seqs, t2d, cfg.topk)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = dist.merge_on_main(arrays, mine, out, d)
    info = dict(texts_meta=meta, teacher=path.name, config=asdict(cfg), world=d.world, examples=len(d_seqs),
                continuations=len(outs), continuation_tokens=int(sum(len(o) for o in outs)),
                gen_seconds=round(t_gen, 1))
    if not d.is_main:
        return info
    kinds = arrays["kind"]
    info.update(positions=int((kinds > 0).sum()), dm=int((kinds == 1).sum()), ngram=int((kinds == 2).sum()),
                seconds=round(time.perf_counter() - t0, 1))
    arrays.update(val=np.asarray(val, dtype=bool), ex_src=np.asarray(src, dtype=np.uint8),
                  meta=np.frombuffer(json.dumps(info).encode(), dtype=np.uint8))
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(out)
    log.info("teacher data: %s", {k: v for k, v in info.items() if k != "texts_meta"})
    return info


# -------------------------------------------------------------------- train
@dataclass
class TrainConfig:
    """Which layers to keep and how to train them."""

    data: str = field(default=".distill/data.npz", metadata={"help": "output of `distill teacher`"})
    draft_gguf: str = field(default="smollm2-135m", metadata={"help": "the drafter to cut (name or GGUF path)"})
    layers: str = field(default="first8", metadata={"help": "firstN, spreadN or a comma list of layer indices"})
    out: str = field(default=".distill/trained", metadata={"help": "directory for the trained tensors"})
    device: str = field(default="cpu", metadata={"help": "torch device (cpu, cuda)"})
    epochs: float = field(default=4.0, metadata={"help": "passes over the training positions"})
    batch_tokens: int = field(default=16384, metadata={"help": "padded drafter tokens per step"})
    lr: float = field(default=2e-3, metadata={"help": "peak AdamW learning rate (warm-up, then cosine)"})
    lam: float = field(default=0.2, metadata={"help": "lambda of L_N-gram in the hybrid loss"})
    train_embeddings: bool = field(default=True, metadata={"help": "also train the (tied) embedding/head"})
    eval_every: int = field(default=25, metadata={"help": "steps between validation points"})
    max_minutes: float = field(default=0.0, metadata={"help": "stop training after this long (0 = no limit)"})
    max_steps: int = field(default=0, metadata={"help": "stop after this many steps, the schedule unchanged (0 = all)"})
    accum: int = field(default=1, metadata={"help": "batch groups per rank and optimizer step (gradient accumulation): "
                                                   "world x accum fixed keeps every step's data the same"})
    seed: int = field(default=0, metadata={"help": "seed of the batch order"})


def cut_model(model, layers: list[int]):
    """Keep ``layers`` (in order) of a transformers Llama/Qwen2 model, renumbered 0..n-1."""
    import torch

    kept = [model.model.layers[i] for i in layers]
    for n, layer in enumerate(kept):
        layer.self_attn.layer_idx = n
    model.model.layers = torch.nn.ModuleList(kept)
    model.config.num_hidden_layers = len(kept)
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[i] for i in layers]
    return model


def load_cut(draft_gguf: str, layers: list[int]):
    from omnidraft.trainer.model import load_gguf_model

    path = draft_gguf
    if not Path(path).exists():
        from omnidraft.assets import models

        path = models.resolve(path)
    return cut_model(load_gguf_model(path), layers)


class Data:
    """Training rows, grouped by example; ``batch`` pads a group and builds a loss.Batch for it."""

    def __init__(self, path: str):
        z = np.load(path)
        self.meta = read_meta(z)
        lens = z["ex_len"]
        self.off = np.concatenate([[0], np.cumsum(lens)])
        self.z = {k: z[k] for k in ("ids", "kind", "top", "prob", "rest", "t1m")}
        self.val = z["val"]
        self.lens = lens
        kept = np.concatenate([[0], np.cumsum(self.z["kind"] > 0)])
        self.positions = kept[self.off[1:]] - kept[self.off[:-1]]  # loss positions per example

    def examples(self, val: bool) -> np.ndarray:
        return np.nonzero(self.val == val)[0]

    def batch(self, exs, device):
        import torch

        from omnidraft.trainer.loss import Batch

        L = max(int(self.lens[i]) for i in exs)
        ids = np.zeros((len(exs), L), dtype=np.int64)
        b_idx, t_idx, sl = [], [], []
        for r, i in enumerate(exs):
            a, b = self.off[i], self.off[i + 1]
            ids[r, : b - a] = self.z["ids"][a:b]
            ks = np.nonzero(self.z["kind"][a:b] > 0)[0]
            b_idx.append(np.full(len(ks), r))
            t_idx.append(ks - 1)  # the hidden state before token j predicts it
            sl.append(a + ks)
        b_idx, t_idx, sl = np.concatenate(b_idx), np.concatenate(t_idx), np.concatenate(sl)
        kind = self.z["kind"][sl]
        top = self.z["top"][sl].astype(np.int64)
        top[top == PAD] = -1
        t = lambda x, dt=None: torch.as_tensor(x, dtype=dt).to(device)  # noqa: E731
        batch = Batch(input_ids=t(ids), pos=torch.arange(len(sl), device=device),
                      labels=t(self.z["ids"][sl].astype(np.int64)), dm=t(kind == 1), ngram=t(kind == 2),
                      topk_ids=t(top), topk_probs=t(self.z["prob"][sl].astype(np.float32)),
                      rest=t(self.z["rest"][sl].astype(np.float32)))
        return batch, t(b_idx), t(t_idx), t(self.z["t1m"][sl])


def _loss_rows(model):
    """``model`` as a module whose forward returns the logits rows of the loss positions only.
    DistributedDataParallel must run the whole forward itself (it reduces the gradients of what its own
    forward ran); evaluation calls this module directly, outside DDP."""
    import torch

    class LossRows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = model

        def forward(self, input_ids, b_idx, t_idx):
            hidden = self.lm.model(input_ids=input_ids).last_hidden_state
            return self.lm.lm_head(hidden[b_idx, t_idx])

    return LossRows()


def _forward(net, data: Data, exs, device):
    """Logits rows at the loss positions of ``exs``; with the Batch and the teacher-top-1-mapped mask."""
    batch, b_idx, t_idx, t1m = data.batch(exs, device)
    return net(batch.input_ids, b_idx, t_idx), batch, t1m


def evaluate(net, data: Data, device, max_tokens: int, d: Dist = Dist()) -> dict:
    """Validation loss and top-1 agreement with the target on directly mapped positions.  Under torchrun each
    rank evaluates every world-th batch group and the sums are added up: the same groups, so the same numbers
    as one process (to float64 rounding of the sum)."""
    import torch

    from omnidraft.trainer.loss import hybrid_loss

    was = net.training
    net.eval()
    tot, n, agree, n_dm = 0.0, 0, 0, 0
    val_ex = data.examples(True)
    with torch.no_grad(), _autocast(device):
        for grp in dist.shard(list(_batches(data.lens[val_ex], max_tokens)), d):
            exs = val_ex[grp]
            logits, b, t1m = _forward(net, data, exs, device)
            loss, info = hybrid_loss(logits, b)
            tot += float(loss) * len(exs)
            n += len(exs)
            hit = (logits.argmax(-1) == b.topk_ids[:, 0]) & t1m & b.dm
            agree += int(hit.sum())
            n_dm += int(b.dm.sum())
    net.train(was)
    tot, n, agree, n_dm = dist.all_reduce_sum([tot, n, agree, n_dm], d)
    return {"val_loss": tot / max(n, 1), "val_top1_dm": agree / max(n_dm, 1), "val_dm_positions": int(n_dm)}


def _autocast(device):
    import contextlib

    import torch

    if torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def trainable_names(model, train_embeddings: bool) -> list[str]:
    return [n for n, _ in model.named_parameters()
            if n.startswith("model.layers.") or n == "model.norm.weight"
            or (train_embeddings and n in ("model.embed_tokens.weight", "lm_head.weight"))]


def _out_of_time(cfg: TrainConfig, t0: float, d: Dist) -> bool:
    """Rank 0's clock decides, so that every rank stops after the same step."""
    return bool(cfg.max_minutes) and dist.broadcast_flag(time.perf_counter() - t0 > 60 * cfg.max_minutes, d)


def train(cfg: TrainConfig, progress: bool = True) -> dict:
    """Train the cut drafter; write ``<out>/<layers>/`` with its tensors (trained-NN.npz) and history.json.

    Under torchrun the model is in DDP and one global step takes one batch group per rank
    (:func:`dist.step_groups`), so the same epochs take 1/world of the optimizer steps; the LR schedule runs on
    global steps.  The ranks share the evaluation; rank 0 logs and writes."""
    with dist.group(cfg.device) as d:
        return _train(cfg, d, progress and d.is_main)


def _train(cfg: TrainConfig, d: Dist, progress: bool) -> dict:
    import torch
    from tqdm import tqdm


    torch.manual_seed(cfg.seed)
    device = dist.device(cfg.device, d)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    layers = parse_layers(cfg.layers)
    model = load_cut(cfg.draft_gguf, layers).to(device)
    data = Data(cfg.data)
    names = set(trainable_names(model, cfg.train_embeddings))
    params = []
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
        if n in names:
            params.append(p)
    rows = _loss_rows(model)
    net = dist.ddp(rows, d)  # after requires_grad_: DDP reduces the trainable tensors only
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.98))
    train_ex = data.examples(False)
    groups = list(_batches(data.lens[train_ex], cfg.batch_tokens))
    accum = max(1, cfg.accum)
    steps = max(1, int(round(len(groups) * cfg.epochs / (d.world * accum))))
    order = dist.step_groups(len(groups), steps, d.world * accum, cfg.seed)
    group_pos = np.asarray([int(data.positions[train_ex[g]].sum()) for g in groups])
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    hist = {"config": asdict(cfg), "layers": layers, "world": d.world, "accum": accum, "steps": steps, "train": [], "val": [],
            "trainable_params": int(sum(p.numel() for p in params)),
            "train_positions": int(data.positions[train_ex].sum())}
    hist["val"].append({"step": 0, "wall": 0.0, **evaluate(rows, data, device, cfg.batch_tokens, d)})
    if d.is_main:
        log.info("layers %s, %d rank(s): %s", layers, d.world, hist["val"][-1])
    t0 = time.perf_counter()
    net.train()
    bar = tqdm(range(steps), desc=f"train {cfg.layers}", disable=not progress)
    for step in bar:
        t_step = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        info = _accumulate(net, data, [train_ex[groups[g]] for g in order[step, d.rank * accum:(d.rank + 1) * accum]],
                           device, cfg.lam, d)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        # the mean over the ranks' groups: the loss of the global step, comparable across world sizes
        losses = [x / d.world for x in dist.all_reduce_sum([info["loss"], info["l_dm"], info["l_ngram"]], d)]
        hist["train"].append({"step": step + 1, **dict(zip(("loss", "l_dm", "l_ngram"), losses)),
                              "positions": int(group_pos[order[step]].sum()),
                              "seconds": round(time.perf_counter() - t_step, 4)})
        bar.set_postfix(loss=f"{losses[0]:.3f}")
        last = step + 1 == steps or step + 1 == cfg.max_steps or _out_of_time(cfg, t0, d)
        if (step + 1) % cfg.eval_every == 0 or last:
            ev = evaluate(rows, data, device, cfg.batch_tokens, d)
            hist["val"].append({"step": step + 1, "wall": round(time.perf_counter() - t0, 2), **ev})
            if d.is_main:
                log.info("step %d: %s", step + 1, hist["val"][-1])
        if last:
            break
    hist["seconds"] = round(time.perf_counter() - t0, 1)
    step_s = sum(r["seconds"] for r in hist["train"])
    hist["positions_per_s"] = round(sum(r["positions"] for r in hist["train"]) / max(step_s, 1e-9), 1)
    if d.is_main:
        out = Path(cfg.out) / cfg.layers
        out.mkdir(parents=True, exist_ok=True)
        save_trained(model, names, out)
        (out / "history.json").write_text(json.dumps(hist))
    return hist


def _accumulate(net, data: Data, micro: list, device, lam: float, d: Dist) -> dict:
    """Forward + backward of a rank's batch groups for one optimizer step, gradients summed (each loss / n);
    DDP reduces once, after the last group.  The mean loss terms."""
    import contextlib

    from omnidraft.trainer.loss import hybrid_loss

    tot: dict = {}
    for j, exs in enumerate(micro):
        sync = not d.active or j == len(micro) - 1
        with (contextlib.nullcontext() if sync else net.no_sync()):
            with _autocast(device):
                logits, b, _ = _forward(net, data, exs, device)
                loss, info = hybrid_loss(logits, b, lam)
            (loss / len(micro)).backward()
        for k in ("loss", "l_dm", "l_ngram"):
            tot[k] = tot.get(k, 0.0) + info[k] / len(micro)
    return tot


# ------------------------------------------------------- transport + export
def save_trained(model, names, out: Path, max_bytes: int = 15 << 20) -> list[Path]:
    """The trained tensors as npz files of at most ``max_bytes``: matrices as int8 with one scale per row
    (the GGUF they become is 4-8 bit), vectors as float32."""
    state = {n: p.detach().float().cpu().numpy() for n, p in model.named_parameters() if n in names}
    files, cur, size = [], {}, 0

    def flush():
        nonlocal cur, size
        if cur:
            p = out / f"trained-{len(files):02d}.npz"
            np.savez(p, **cur)
            files.append(p)
            cur, size = {}, 0

    chunks = []
    for n, w in sorted(state.items()):
        if w.ndim == 2:  # a matrix larger than a file (a trained embedding) is cut into row blocks n@0, n@1, ...
            scale = np.maximum(np.abs(w).max(1, keepdims=True), 1e-12) / 127.0
            q, scale = np.round(w / scale).astype(np.int8), scale.astype(np.float32)
            rows = max(1, (max_bytes // 2) // (w.shape[1] + 4))
            blocks = range(0, len(w), rows)
            for b in blocks:
                key = n if len(blocks) == 1 else f"{n}@{b // rows}"
                chunks.append({key + ".q": q[b: b + rows], key + ".s": scale[b: b + rows]})
        else:
            chunks.append({n: w.astype(np.float32)})
    for parts in chunks:
        nb = sum(v.nbytes for v in parts.values())
        if size + nb > max_bytes:
            flush()
        cur.update(parts)
        size += nb
    flush()
    return files


def load_trained(draft_gguf: str, layers: list[int], trained_dir: Path):
    """The cut drafter with the tensors of ``trained_dir`` (see :func:`save_trained`) put in."""
    import torch

    model = load_cut(draft_gguf, layers)
    state, blocks = {}, {}
    for f in sorted(Path(trained_dir).glob("trained-*.npz")):
        z = np.load(f)
        for k in z.files:
            if k.endswith(".s"):
                continue
            if k.endswith(".q"):
                name, w = k[:-2], z[k].astype(np.float32) * z[k[:-2] + ".s"]
            else:
                name, w = k, z[k]
            if "@" in name:
                base, j = name.rsplit("@", 1)
                blocks.setdefault(base, {})[int(j)] = w
            else:
                state[name] = torch.from_numpy(w)
    for base, parts in blocks.items():
        state[base] = torch.from_numpy(np.concatenate([parts[j] for j in sorted(parts)]))
    missing = [k for k in state if k not in dict(model.named_parameters())]
    if missing:
        raise ValueError(f"{trained_dir}: tensors not in the model: {missing[:4]}")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in state:
                p.copy_(state[n])
    return model.eval()


def quantize_mixed(src: Path, dst: Path, qtype: str, embed_type: str, threads: int = 0) -> Path:
    """``src`` quantized to ``qtype`` with the token embedding (= the tied head) as ``embed_type``: the frozen
    embedding keeps the base file's own Q4_1 values exactly, the trained layers get 8 bits."""
    import ctypes
    import os

    import llama_cpp

    from gguf_tools.quantize import ftype_of

    from omnidraft.errors import from_gguf_tools

    params = llama_cpp.llama_model_quantize_default_params()
    with from_gguf_tools():
        params.ftype = ftype_of(qtype)
    params.nthread = threads
    params.allow_requantize = True
    params.token_embedding_type = getattr(llama_cpp, "GGML_TYPE_" + embed_type.upper())
    tmp = dst.with_name(dst.name + ".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"{src}: quantize to {qtype}/{embed_type} failed (rc={rc})")
    os.replace(tmp, dst)
    return dst


def export(draft_gguf: str, layers: list[int], trained_dir: Path | None, out: Path, qtype: str = "q8_0",
           embed_type: str | None = "q4_1", threads: int = 0) -> dict:
    """Write the GGUF of a (trained or untrained) cut drafter and check it against torch in llama.cpp."""
    import tempfile

    from omnidraft.assets import models

    from omnidraft.trainer.export import check_gguf, export_gguf

    src = draft_gguf if Path(draft_gguf).exists() else models.resolve(draft_gguf)
    model = load_trained(src, layers, trained_dir) if trained_dir else load_cut(src, layers).eval()
    out = Path(out)
    if embed_type and qtype not in ("f32", "f16", "bf16"):
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as tmp:
            f32 = export_gguf(model, Path(tmp) / "f32.gguf", vocab_from=src, qtype="f32")
            path = quantize_mixed(f32, out, qtype, embed_type, threads)
        # the Q4_1 head adds the base file's own quantization error (0.055 for SmolLM2) to the 8-bit layers'
        res = check_gguf(path, model, qtype, threads=threads, tolerance=0.2)
    else:
        path = export_gguf(model, out, vocab_from=src, qtype=qtype, threads=threads)
        res = check_gguf(path, model, qtype, threads=threads)
    if not res.ok:
        raise RuntimeError(f"{path}: export check failed {res.as_dict()}")
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": models.sha256_file(path),
            "qtype": qtype, "embed_type": embed_type, "check": res.as_dict()}


def plot(histories: dict[str, dict], out: Path) -> Path:
    """Training loss and held-out top-1 agreement per layer choice."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, h in histories.items():
        tr = h["train"]
        w = min(9, len(tr))
        ys = np.convolve([r["loss"] for r in tr], np.ones(w) / w, mode="valid")
        xs = [r["step"] for r in tr][w // 2: w // 2 + len(ys)]
        a.plot(xs, ys, label=name)
        b.plot([r["step"] for r in h["val"]], [r["val_top1_dm"] for r in h["val"]], marker="o", label=name)
    a.set(xlabel="step", ylabel="hybrid loss (train, smoothed)", yscale="log")
    b.set(xlabel="step", ylabel="held-out top-1 agreement with the target\n(directly mapped positions)")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ---------------------------------------------------------------------- CLI
def register(sub) -> None:
    from omnidraft.cliutil import add_dataclass_args

    from .data import PrepConfig

    p = sub.add_parser("distill", help="distil a shallow drafter offline from the target (issue 14)",
                       description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    ps = p.add_subparsers(dest="distill_cmd", required=True, metavar="STEP")
    for name, cls, helptext in (("data", PrepConfig, "tokenise and align the local corpora"),
                                ("teacher", TeacherConfig, "the target's continuations and top-k"),
                                ("train", TrainConfig, "train one layer choice")):
        s = ps.add_parser(name, help=helptext)
        add_dataclass_args(s, cls)
        s.set_defaults(func=_cmd_step, distill_cls=cls)
    e = ps.add_parser("export", help="GGUF + llama.cpp check of trained layer choices, and the plot")
    e.add_argument("--trained", default=".distill/trained", help="directory of `distill train` outputs")
    e.add_argument("--draft-gguf", default="smollm2-135m", help="the drafter that was cut")
    e.add_argument("--choices", default="first8", help="comma-separated layer choices to export")
    e.add_argument("--qtype", default="q8_0", help="quantization of the trained layers")
    e.add_argument("--embed-type", default="q4_1", help="quantization of the embedding/head ('' = qtype)")
    e.add_argument("--out", default="models", help="directory for the GGUFs")
    e.add_argument("--results", default="results", help="directory for the plot and JSON")
    e.set_defaults(func=_cmd_export)
    a = ps.add_parser("all", help="data, teacher, train and export in a row",
                      epilog="Example: omnidraft distill all --device cuda --choices first4,first8")
    a.add_argument("--device", default="cpu", help="torch device for teacher and training")
    a.add_argument("--choices", default="first8", help="comma-separated layer choices")
    a.add_argument("--seed", type=int, default=0, help="seed of every step")
    a.add_argument("--small", action="store_true", help="a CPU-sized run (fewer examples, one epoch)")
    a.add_argument("--out", default="models", help="directory for the GGUFs")
    a.set_defaults(func=_cmd_all)


def _cmd_step(args) -> int:
    from omnidraft.cliutil import dataclass_from_args

    cfg = dataclass_from_args(args.distill_cls, args)
    fn = {"PrepConfig": "prepare", "TeacherConfig": "run_teacher", "TrainConfig": "train"}[args.distill_cls.__name__]
    if fn == "prepare":
        from .data import prepare

        res = prepare(cfg)
    else:
        res = globals()[fn](cfg)
    print(json.dumps({k: v for k, v in res.items() if k not in ("train", "val", "texts_meta")}, indent=1))
    return 0


def _cmd_export(args) -> int:
    hists, rows = {}, {}
    for choice in [c for c in args.choices.split(",") if c]:
        d = Path(args.trained) / choice
        hists[choice] = json.loads((d / "history.json").read_text())
        out = Path(args.out) / f"smollm2-135m-{choice}-qwen.gguf"
        rows[choice] = export(args.draft_gguf, hists[choice]["layers"], d, out, args.qtype, args.embed_type or None)
        print(choice, json.dumps(rows[choice]))
    res = Path(args.results)
    plot(hists, res / "distill.png")
    (res / "distill.json").write_text(json.dumps({"exports": rows, "histories": hists}, indent=1))
    print(f"wrote {res / 'distill.png'} and {res / 'distill.json'}")
    return 0


def _cmd_all(args) -> int:
    from .data import PrepConfig, prepare

    small = dict(code=300, code_other=150, nl=60, chat=150, gen_code=60, gen_code_other=30, gen_nl=10,
                 gen_chat=30) if args.small else {}
    prepare(PrepConfig(seed=args.seed, **small))
    run_teacher(TeacherConfig(device=args.device, seed=args.seed))
    for c in args.choices.split(","):
        train(TrainConfig(layers=c, device=args.device, seed=args.seed, **({"epochs": 1.0} if args.small else {})))
    ns = type("A", (), dict(trained=".distill/trained", draft_gguf="smollm2-135m", choices=args.choices,
                            qtype="q8_0", embed_type="q4_1", out=args.out, results="results"))
    return _cmd_export(ns)


if __name__ == "__main__":  # the GPU machine runs steps without the omnidraft CLI (no llama.cpp there)
    import argparse
    import sys

    main = dist.from_env().is_main  # under torchrun, rank 0 speaks for all
    logging.basicConfig(level=logging.INFO if main else logging.WARNING, format="%(asctime)s %(message)s")
    ap = argparse.ArgumentParser(description="distill teacher|train on a machine without llama.cpp; "
                                 "under torchrun on all its ranks")
    ap.add_argument("step", choices=["teacher", "train"])
    ap.add_argument("--set", nargs="*", default=[], help="KEY=VALUE fields of the step's config")
    a = ap.parse_args()
    cls = TeacherConfig if a.step == "teacher" else TrainConfig
    kw = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        typ = type(getattr(cls(), k))
        kw[k] = (v.lower() in ("1", "true", "yes")) if typ is bool else typ(v)
    res = (run_teacher if a.step == "teacher" else train)(cls(**kw))
    if main:
        print(json.dumps({k: v for k, v in res.items() if k not in ("train", "texts_meta")}, indent=1))
    sys.exit(0)
