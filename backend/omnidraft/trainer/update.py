"""One update's training: the new records, ``epochs`` passes, with replayed old-domain records between them.

    steps = epochs x (the new records, shuffled) + per epoch round(replay_ratio x new records) replay steps and
            round(recent_ratio x new records) steps on records of earlier updates, spread evenly among them;
            one AdamW step per record, L = L_DM + lam L_N-gram + prompt_lam L_prompt; with ``micro_batch`` B > 1,
            one step per B consecutive steps of that order, on the mean of their records' L (one padded forward)

LoRA (``lora_rank`` 16 at lr 1e-3 by default) adapts the transformer layers through low-rank deltas; full
fine-tuning (``lora_rank`` 0) trains the layers and norms themselves.  Over long streams full fine-tuning at lr 1e-4
forgot the domains it did not stream, where LoRA kept them for the same gain (issue 43); a LoRA of rank 32 at lr
2e-4 had hardly moved a drafter in 64 requests (issue 26): LoRA needs the higher rate.  The token embedding (tied to
the head in SmolLM2) stays frozen unless ``train_embeddings``: it holds the 49k-token vocabulary the old
domains need too, and half the model's weights.  Replay keeps the old domains: records of them (the target's
top-k on Python code and chat, ``replay`` file) are trained on again in every update, never marked trained.

A step whose loss or gradient is non-finite is not taken; a step that leaves non-finite weights ends the pass
(``discard``).  Either way the record is reported in ``bad`` (new records, by inbox seq) or ``bad_replay``
(by index in the replay pool), and the caller sets it aside.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft.online.records import RecordError, validate

from .casts import autocasts_bf16, step_casts
from .model import add_lora

log = logging.getLogger(__name__)


@dataclass
class Pass:
    """What one update's training did."""

    losses: list[float] = field(default_factory=list)  # every step taken (new and replayed records)
    new_losses: list[float] = field(default_factory=list)  # the steps on new records
    bad: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, record id, reason): to quarantine
    bad_replay: list[int] = field(default_factory=list)  # replay (then recent) pool indices that failed a step
    discard: bool = False  # a step left non-finite weights: the whole pass is thrown away
    model: object = None  # the model trained (with its LoRA adapter, not merged)
    replayed: int = 0  # replay steps taken


Step = tuple[int, dict]  # (inbox seq, or -1 - pool index for a replayed record; the record)


def load_replay(path: str | Path, n_vocab: int, fp: str) -> list[dict]:
    """Replay records (JSON lines, or one JSON list) valid for this drafter's vocabulary; invalid ones are
    skipped with a warning, not fatal: replay only guards the old domains."""
    text = Path(path).read_text()
    raw = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    good = []
    for i, rec in enumerate(raw):
        try:
            good.append(validate(rec, n_vocab, fp))
        except RecordError as e:
            log.warning("replay record %d of %s skipped: %s", i, path, e)
    log.info("replay: %d of %d records from %s", len(good), len(raw), path)
    return good


Pool = tuple[list[dict], float]  # (records, steps drawn from them per new record and pass)


def schedule(rows: list[tuple[int, dict]], pools: list[Pool], epochs: int, seed: int) -> list[Step]:
    """The update's steps in order: each pass the new records shuffled, every pool's steps spread evenly among
    them (drawn in a seeded order, each record once before any repeats).  A pool record's step carries
    ``-1 - i``, ``i`` its index in the pools laid end to end."""
    rng = random.Random(seed)
    offsets = [sum(len(r) for r, _ in pools[:p]) for p in range(len(pools))]
    orders = [rng.sample(range(len(r)), len(r)) for r, _ in pools]
    drawn = [0] * len(pools)
    steps: list[Step] = []
    for _ in range(max(1, epochs)):
        new = list(rows)
        rng.shuffle(new)
        due = [round(ratio * len(new)) if recs else 0 for recs, ratio in pools]
        taken = [0] * len(pools)
        for i, row in enumerate(new):
            steps.append(row)
            for p, (recs, _) in enumerate(pools):
                while taken[p] < (i + 1) * due[p] // len(new):  # pool p's steps due after new record i
                    j = orders[p][drawn[p] % len(recs)]
                    steps.append((-1 - offsets[p] - j, recs[j]))
                    drawn[p], taken[p] = drawn[p] + 1, taken[p] + 1
    return steps


def trainable(model, lora_rank: int, train_embeddings: bool):
    """(the model to train, its trainable parameters): a fresh LoRA adapter, or the model itself with the
    embedding frozen unless ``train_embeddings``."""
    if lora_rank > 0:
        model = add_lora(model, lora_rank)
    else:
        for name, p in model.named_parameters():
            p.requires_grad_(train_embeddings or not _is_embedding(name))
    return model, [p for p in model.parameters() if p.requires_grad]


def _is_embedding(name: str) -> bool:
    return "embed_tokens" in name or "lm_head" in name


def train_pass(model, rows: list[tuple[int, dict]], replay: list[dict], cfg, seed: int,
               recent: list[dict] = ()) -> Pass:
    """One update's steps (``schedule``) on ``model`` with the settings of a ``TrainerConfig``: the new records,
    the old domains' ``replay`` records and the ``recent`` records of earlier updates (the new domain's own
    history, so that an update does not trade what the last ones learned for its own few records)."""
    # lazy: torch, and trainer.loss which imports it: ~4.5 s at start-up, the optional 'train' extra
    import torch

    from . import loss as L

    model, params = trainable(model, cfg.lora_rank, cfg.train_embeddings)
    model.train()
    # foreach: the arithmetic of the per-tensor loop torch runs on a CPU by default (its default on a GPU), as one
    # call per operation for all the tensors, not one per tensor (a rank-16 LoRA of 30 layers has 420)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
    done = Pass(model=model)
    steps = schedule(rows, [(list(replay), cfg.replay_ratio), (list(recent), cfg.recent_ratio)], cfg.epochs, seed)
    failed: set[int] = set()  # a record that failed a step is not tried again in a later epoch
    batches: dict[int, object] = {}  # seq -> its Batch (or None): built once, however often it is stepped on
    size = micro_batch(model, cfg, L)
    with step_casts(model, cfg.precision, getattr(cfg, "device", "cpu")):
        for at in range(0, len(steps), size):
            group = [(seq, rec, _batch(batches, seq, rec, cfg, L)) for seq, rec in steps[at:at + size]
                     if seq not in failed]
            whys = _group_step(model, opt, params, group, cfg, L)
            if not all([_count(done, seq, rec, why, failed) for (seq, rec, _), why in zip(group, whys)]):
                return done  # a step left non-finite weights: the pass is discarded
    model.eval()
    log.info("update: %d steps (%d replayed), mean loss %.4f", len(done.losses), done.replayed,
             sum(done.losses) / max(len(done.losses), 1))
    return done


def _count(done: Pass, seq: int, rec: dict, why, failed: set[int]) -> bool:
    """Put one step's outcome (``_step``'s answer) into ``done``; False where the pass must end."""
    if why is None:  # nothing to learn from (a generation that stopped at once)
        return True
    if isinstance(why, float):
        done.losses.append(why)
        if seq >= 0:
            done.new_losses.append(why)
        else:
            done.replayed += 1
        return True
    reason, fatal = why
    failed.add(seq)
    if seq >= 0:
        done.bad.append((seq, rec["id"], reason))
    else:
        done.bad_replay.append(-1 - seq)
        log.warning("replay record %s: %s", rec.get("id"), reason)
    done.discard = fatal
    return not fatal


def _batch(batches: dict, seq: int, rec: dict, cfg, L):
    """The record's tensors on the training device (None: no position to train on), or the error building them
    raised (past validation: never fatal); kept in ``batches`` for the record's later steps."""
    if seq not in batches:
        try:
            b = L.batch_from_record(rec, cfg.max_len)
            device = getattr(cfg, "device", "cpu")
            batches[seq] = b.to(device) if b is not None and device != "cpu" else b
        except (ValueError, TypeError, IndexError, KeyError) as e:
            batches[seq] = e
    return batches[seq]


def micro_batch(model, cfg, L) -> int:
    """Records a step takes (``cfg.micro_batch``): 1 where the model's head is not a plain projection."""
    size = max(1, int(getattr(cfg, "micro_batch", 1)))
    if size > 1 and not L.plain_head(model):
        log.warning("micro_batch %d: this drafter's logits are capped or scaled after its head; one record a step",
                    size)
        return 1
    return size


def _group_step(model, opt, params, group: list, cfg, L) -> list:
    """One AdamW step on the mean loss of the group's records (``(seq, record, batch)``; ``loss.group_loss``):
    each record's outcome as ``_step`` gives it.  A record with nothing to train on or whose tensors failed is
    answered alone; where the group's loss or gradient is not finite, each record takes a step of its own, which
    tells the bad one from the rest; weights left non-finite end the pass, reported on all the group's records."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    ready = [i for i, (_, _, b) in enumerate(group) if b is not None and not isinstance(b, Exception)]
    if len(ready) < 2:
        return [_step(model, opt, params, b, cfg, L) for _, _, b in group]
    out = [_step(model, opt, params, b, cfg, L) if i not in ready else None for i, (_, _, b) in enumerate(group)]
    try:
        with precision(cfg.precision, getattr(cfg, "device", "cpu")):
            loss, each = L.group_loss(model, [group[i][2] for i in ready], cfg.lam, cfg.prompt_lam)
    except (ValueError, TypeError, IndexError, KeyError):  # past validation: find the record step by step
        loss = None
    if loss is None or not bool(torch.isfinite(loss)) or not _backward(loss, opt, params)[1]:
        for i in ready:
            out[i] = _step(model, opt, params, group[i][2], cfg, L)
        return out
    opt.step()
    fine = finite(params)
    for i, v in zip(ready, each.detach().float().tolist()):
        out[i] = v if fine else (f"non-finite weights after a step on {len(ready)} records with it: update "
                                 "discarded", True)
    return out


def _step(model, opt, params, b, cfg, L) -> float | tuple[str, bool] | None:
    """One AdamW step on one record's batch: its loss, or (why it was not taken, whether the pass must end)."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    if b is None:
        return None
    if isinstance(b, Exception):  # building its tensors failed (``_batch``)
        return f"the record could not be trained on: {type(b).__name__}: {b}", False
    try:
        with precision(cfg.precision, getattr(cfg, "device", "cpu")):
            loss, info = L.record_loss(model, b, cfg.lam, cfg.prompt_lam)
    except (ValueError, TypeError, IndexError, KeyError) as e:  # past validation: still never fatal
        return f"the record could not be trained on: {type(e).__name__}: {e}", False
    if not bool(torch.isfinite(loss)):
        return f"non-finite loss ({loss.item()}): step not taken", False
    norm, ok = _backward(loss, opt, params)
    if not ok:
        return f"non-finite gradient (norm {norm.item()}): step not taken", False
    opt.step()
    if not finite(params):
        return "non-finite weights after its step: update discarded", True
    return info["loss"]


def _backward(loss, opt, params):
    """(the gradient norm before clipping, whether it is finite): ``loss``'s gradients, the last step's cleared first,
    clipped to norm 1; where they are not finite they are cleared again, so that no step takes them."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    ok = bool(torch.isfinite(norm))
    if not ok:
        opt.zero_grad(set_to_none=True)
    return norm, ok


def precision(name: str, device: str = "cpu"):
    """The autocast context of a training step: bf16 products (float32 weights, optimizer and loss) where the CPU
    computes bf16 natively (AVX512-BF16, AMX; 1.9x faster steps on this 2-core EPYC) or on a GPU, else float32."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    if autocasts_bf16(name, device):
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def finite(params) -> bool:
    """Whether no tensor of ``params`` holds an inf or a NaN, in one wait for the device: each tensor's largest
    |x| (inf or NaN exactly when the tensor holds one), all compared at once, not one ``bool`` per tensor."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    tensors = [p.detach() for p in params]
    if not tensors:
        return True
    by_device: dict = {}
    for t in tensors:
        by_device.setdefault(t.device, []).append(t)
    peaks = [torch.stack([n.float() for n in torch._foreach_norm(ts, float("inf"))]).cpu()
             for ts in by_device.values()]
    return bool(torch.isfinite(torch.cat(peaks)).all())
