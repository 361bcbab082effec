"""``distill train``: cut the drafter to the chosen layers and train them (the embedding too, by default)
with the project's hybrid loss on the teacher's data; saves the trained tensors and the history."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from omnidraft.assets import models
from . import dist
from .cut import load_cut, save_trained
from .data import PAD, batches, read_meta
from .dist import Dist

log = logging.getLogger(__name__)


def parse_layers(spec: str, n_layers: int = 30) -> list[int]:
    """'first4' -> [0, 1, 2, 3]; 'spread4' -> evenly spread, first and last kept; '0,10,20,29' -> as given."""
    if spec.startswith("first"):
        return list(range(int(spec[5:])))
    if spec.startswith("spread"):
        n = int(spec[6:])
        return sorted({round(i * (n_layers - 1) / (n - 1)) for i in range(n)})
    return [int(x) for x in spec.split(",")]


@dataclass
class TrainConfig:
    """Which layers to keep and how to train them."""

    data: str = field(default=".distill/data.npz", metadata={"help": "output of `distill teacher`"})
    draft_gguf: str = field(default=models.SMOLLM2, metadata={"help": "the drafter to cut (name or GGUF path)"})
    layers: str = field(default="first8", metadata={"help": "firstN, spreadN or a comma list of layer indices"})
    out: str = field(default=".distill/trained", metadata={"help": "directory for the trained tensors"})
    device: str = field(default="cpu", metadata={"help": "torch device (cpu, cuda)"})
    epochs: float = field(default=4.0, metadata={"help": "passes over the training positions"})
    batch_tokens: int = field(default=16384, metadata={"help": "padded drafter tokens per step"})
    lr: float = field(default=2e-3, metadata={"help": "peak AdamW learning rate (warm-up, then cosine)"})
    lam: float = field(default=0.2, metadata={"help": "lambda of L_N-gram in the hybrid loss"})
    train_embeddings: bool = field(default=True, metadata={"help": "also train the (tied) embedding/head"})
    eval_every: int = field(default=25, metadata={"help": "steps between validation points"})
    max_minutes: float = field(default=0.0, metadata={
        "help": "stop training after this long, the learning rate annealed to 0 by then (0 = no limit)"})
    max_steps: int = field(default=0, metadata={"help": "stop after this many steps, the schedule unchanged (0 = all)"})
    accum: int = field(default=1, metadata={"help": "batch groups per rank and optimizer step (gradient accumulation): "
                                                   "world x accum fixed keeps every step's data the same"})
    seed: int = field(default=0, metadata={"help": "seed of the batch order"})


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
        # lazy: torch, and trainer.loss which imports it: ~4.5 s at start-up, the optional 'train' extra
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
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
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
    # lazy: torch, and trainer.loss which imports it: ~4.5 s at start-up, the optional 'train' extra
    import torch

    from omnidraft.trainer.loss import hybrid_loss

    was = net.training
    net.eval()
    tot, n, agree, n_dm = 0.0, 0, 0, 0
    val_ex = data.examples(True)
    with torch.no_grad(), _autocast(device):
        for grp in dist.shard(list(batches(data.lens[val_ex], max_tokens)), d):
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
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    if torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def trainable_names(model, train_embeddings: bool) -> list[str]:
    return [n for n, _ in model.named_parameters()
            if n.startswith("model.layers.") or n == "model.norm.weight"
            or (train_embeddings and n in ("model.embed_tokens.weight", "lm_head.weight"))]


def _progress(cfg: TrainConfig, step: int, steps: int, t0: float, d: Dist) -> float:
    """The share of the run done after ``step``: of its steps or, under ``max_minutes``, of its time if that is
    more, so that the cosine ends at 0 when time runs out instead of cutting training at a high rate.  The
    ranks' mean clock decides: every rank sets the same rate and stops after the same step."""
    by_steps = step / steps
    if not cfg.max_minutes:
        return by_steps
    elapsed = dist.all_reduce_sum([time.perf_counter() - t0], d)[0] / d.world
    return min(1.0, max(by_steps, elapsed / (60 * cfg.max_minutes)))


def train(cfg: TrainConfig, progress: bool = True) -> dict:
    """Train the cut drafter; write ``<out>/<layers>/`` with its tensors (trained-NN.npz) and history.json.

    Under torchrun the model is in DDP and one global step takes one batch group per rank
    (:func:`dist.step_groups`), so the same epochs take 1/world of the optimizer steps; the LR schedule runs on
    global steps.  The ranks share the evaluation; rank 0 logs and writes."""
    with dist.group(cfg.device) as d:
        return _train(cfg, d, progress and d.is_main)


def _train(cfg: TrainConfig, d: Dist, progress: bool) -> dict:
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

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
    groups = list(batches(data.lens[train_ex], cfg.batch_tokens))
    accum = max(1, cfg.accum)
    steps = max(1, int(round(len(groups) * cfg.epochs / (d.world * accum))))
    order = dist.step_groups(len(groups), steps, d.world * accum, cfg.seed)
    group_pos = np.asarray([int(data.positions[train_ex[g]].sum()) for g in groups])
    warm = max(1, steps // 20)
    hist = {"config": asdict(cfg), "layers": layers, "world": d.world, "accum": accum, "steps": steps, "train": [], "val": [],
            "trainable_params": int(sum(p.numel() for p in params)),
            "train_positions": int(data.positions[train_ex].sum())}
    hist["val"].append({"step": 0, "wall": 0.0, **evaluate(rows, data, device, cfg.batch_tokens, d)})
    if d.is_main:
        log.info("layers %s, %d rank(s): %s", layers, d.world, hist["val"][-1])
    t0 = time.perf_counter()
    net.train()
    bar = tqdm(range(steps), desc=f"train {cfg.layers}", disable=not progress)
    done = 0.0  # share of the run behind us: of the steps, or of the time limit when that comes first
    for step in bar:
        t_step = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = cfg.lr * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * done))
        opt.zero_grad(set_to_none=True)
        info = _accumulate(net, data, [train_ex[groups[g]] for g in order[step, d.rank * accum:(d.rank + 1) * accum]],
                           device, cfg.lam, d)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        done = _progress(cfg, step + 1, steps, t0, d)
        # the mean over the ranks' groups: the loss of the global step, comparable across world sizes
        losses = [x / d.world for x in dist.all_reduce_sum([info["loss"], info["l_dm"], info["l_ngram"]], d)]
        hist["train"].append({"step": step + 1, **dict(zip(("loss", "l_dm", "l_ngram"), losses)),
                              "positions": int(group_pos[order[step]].sum()),
                              "seconds": round(time.perf_counter() - t_step, 4)})
        bar.set_postfix(loss=f"{losses[0]:.3f}")
        last = step + 1 == steps or step + 1 == cfg.max_steps or done >= 1.0
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
    # lazy: trainer.loss imports torch (~4.5 s at start-up, the optional 'train' extra)
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
