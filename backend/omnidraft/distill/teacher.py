"""The target's part of distillation (``distill teacher``): its continuations of every prompt and its top-k
at every directly mapped drafter position, in torch (no llama.cpp: it runs on a GPU machine)."""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from omnidraft.assets import models
from omnidraft.trainer.model import load_gguf_model

from . import dist
from .cut import local_gguf
from .data import PAD, batches, read_meta
from .dist import Dist

log = logging.getLogger(__name__)


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
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    g = torch.Generator(device=device)
    outs: list[np.ndarray] = [None] * len(prompts)
    lens = np.asarray([len(p) for p in prompts])
    groups = dist.shard(list(enumerate(batches(lens, batch * int(lens.max() if len(lens) else 1)))), d)
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


def _head_topk(head, h, k: int, chunk: int):
    """Top-k probabilities of the head over rows ``h``, ``chunk`` rows at a time: a float32 log-softmax of all
    of a group's rows at once is rows x 152k x 4 bytes, tens of gigabytes for a 32k-token group."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    vals, idxs = [], []
    with torch.no_grad():
        for s in range(0, len(h), chunk):
            v, i = torch.log_softmax(head(h[s: s + chunk]).float(), -1).topk(k, -1)
            vals.append(v.exp().cpu().numpy())
            idxs.append(i.to(torch.int32).cpu().numpy())
    if not vals:
        return np.zeros((0, k), np.float32), np.zeros((0, k), np.int32)
    return np.concatenate(vals), np.concatenate(idxs)


def topk_at(model, seqs: list[np.ndarray], rows: list[np.ndarray], k: int, device, max_tokens: int = 16384,
            progress: bool = True, d: Dist = Dist(), head_rows: int = 4096):
    """For each sequence, the target's top-k ids and probabilities at logits rows ``rows[i]`` (under torchrun:
    for the sequences of this rank's batch groups, None elsewhere)."""
    res = [None] * len(seqs)
    groups = dist.shard(list(batches(np.asarray([len(s) for s in seqs]), max_tokens)), d)
    for grp in tqdm(groups, desc="teacher: top-k", disable=not progress):
        for part in _fitting(grp, lambda g: _group_topk(model, seqs, rows, g, k, device, head_rows)):
            for i, r in part.items():
                res[i] = r
    return res


def _fitting(grp: list[int], run) -> list[dict]:
    """``run(grp)``, or on a GPU out-of-memory error ``run`` on each half of ``grp``, recursively: one group of
    a length-sorted batching can hold far more rows than its neighbours, and a lost group must not cost a
    device session (a 4-GPU run once stopped at one)."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    try:
        return [run(grp)]
    except torch.OutOfMemoryError:
        if len(grp) == 1:
            raise
    torch.cuda.empty_cache()
    log.warning("top-k: a group of %d sequences ran out of GPU memory; halving it", len(grp))
    half = len(grp) // 2
    return _fitting(grp[:half], run) + _fitting(grp[half:], run)


def _group_topk(model, seqs, rows, grp: list[int], k: int, device, head_rows: int) -> dict:
    """{sequence: (top-k ids, probabilities) at its rows} for one batch group."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    L = max(len(seqs[i]) for i in grp)
    ids = torch.zeros((len(grp), L), dtype=torch.long)
    for r, i in enumerate(grp):  # right padding: causal attention never looks at it
        ids[r, : len(seqs[i])] = torch.as_tensor(seqs[i].astype(np.int64))
    with torch.no_grad():
        hidden = model.model(input_ids=ids.to(device), use_cache=False).last_hidden_state
        sel_b = torch.cat([torch.full((len(rows[i]),), r, dtype=torch.long) for r, i in enumerate(grp)])
        sel_t = torch.cat([torch.as_tensor(rows[i].astype(np.int64)) for i in grp])
        h = hidden[sel_b.to(device), sel_t.to(device)]
        del hidden
        val, idx = _head_topk(model.lm_head, h, k, head_rows)
    out, start = {}, 0
    for i in grp:
        n = len(rows[i])
        out[i] = (idx[start: start + n], val[start: start + n])
        start += n
    return out


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
    target_gguf: str = field(default=models.QWEN_05B, metadata={"help": "teacher model (name or GGUF path)"})
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
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
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
    path = local_gguf(name)
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


def _lap(laps: dict, phase: str, t0: float, d: Dist) -> None:
    """Seconds since the start at the end of each phase, logged at once: a run cut short by its machine's time
    still shows where the time went (twice the CPU-side phases, not the GPU, took most of a device run)."""
    laps[phase] = time.perf_counter() - t0
    if d.is_main:
        log.info("teacher: %s done at %.0f s", phase, laps[phase])


def run_teacher(cfg: TeacherConfig, progress: bool = True) -> dict:
    """Write the training data (see :func:`_position_arrays`).  Under torchrun each rank runs the target on its
    share of the batch groups (on cuda:LOCAL_RANK) and rank 0 merges the shards into ``cfg.out``, in the order
    and format of a single process."""
    with dist.group(cfg.device) as d:
        return _teacher(cfg, d, progress and d.is_main)


def _teacher(cfg: TeacherConfig, d: Dist, progress: bool) -> dict:
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    t0 = time.perf_counter()
    # read every array once: an NpzFile decompresses an array again at each z[key], and the loops below
    # index some of them per continuation (224,000 reads took 4 minutes a rank, most of a teacher run)
    with np.load(cfg.texts) as npz:
        z = {k: npz[k] for k in npz.files}
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
    g_s = _ragged(z["g_slot"], z["g_d_len"]) if "g_slot" in z else [None] * len(g_t)
    rng = random.Random(cfg.seed)
    temps = [0.0 if rng.random() < 0.5 else cfg.temperature for _ in g_t]
    t1 = time.perf_counter()
    with torch.no_grad():
        outs = (generate(model, g_t, cfg.gen_tokens, temps, eog, device, cfg.seed, cfg.gen_batch, progress, d)
                if g_t else [])
    # every rank needs all continuations: the top-k batch groups mix them with the texts by length
    outs = dist.gather_filled(outs, d)
    t_gen = time.perf_counter() - t1
    laps = {"continuations": time.perf_counter() - t0}
    for i, out in enumerate(outs):
        ids, s = continuation_alignment(g_d[i], out, len(g_t[i]), z["enc_ids"], z["enc_off"], z["direct"],
                                        g_s[i])
        t_seqs.append(np.concatenate([g_t[i], out]).astype(np.int32))
        d_seqs.append(ids)
        slot_l.append(s)
        src.append(int(z["g_src"][i]))
        val.append(bool(z["g_val"][i]))
    rows = [np.unique(s[s >= 0]) for s in slot_l]
    _lap(laps, "alignment", t0, d)
    tk = topk_at(model, t_seqs, rows, cfg.topk, device, cfg.batch_tokens, progress, d)
    _lap(laps, "top-k", t0, d)
    mine = [i for i, r in enumerate(tk) if r is not None]
    arrays = _position_arrays(mine, slot_l, rows, tk, d_seqs, t2d, cfg.topk)
    _lap(laps, "positions", t0, d)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    arrays = dist.merge_on_main(arrays, mine, out, d)
    _lap(laps, "merge", t0, d)
    info = dict(texts_meta=meta, teacher=path.name, config=asdict(cfg), world=d.world, examples=len(d_seqs),
                continuations=len(outs), continuation_tokens=int(sum(len(o) for o in outs)),
                gen_seconds=round(t_gen, 1), laps={k: round(v, 1) for k, v in laps.items()})
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
    _lap(laps, "saved", t0, d)
    log.info("teacher data: %s", {k: v for k, v in info.items() if k != "texts_meta"})
    return info
