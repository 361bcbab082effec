"""torch.distributed for the offline trainer: the few collectives ``distill teacher`` and ``distill train`` need
when torchrun starts them, and none at all when a plain process does.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; :func:`group` joins the process group they describe (NCCL with
one GPU per LOCAL_RANK, gloo on CPU) for the length of a ``with`` block.  Every helper takes the :class:`Dist`
it returned and is a no-op for a lone process, so the single-process code path is the same code.  torch is
imported inside the functions: the omnidraft CLI imports this module without needing torch.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dist:
    """Where this process stands among the ranks; ``backend`` is empty when there is no process group."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str = ""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return bool(self.backend)


def from_env(env: Mapping[str, str] = os.environ) -> Dist:
    """The ranks torchrun announced (no process group joined); a plain process is rank 0 of 1."""
    return Dist(rank=int(env.get("RANK", 0)), world=int(env.get("WORLD_SIZE", 1)),
                local_rank=int(env.get("LOCAL_RANK", 0)))


@contextlib.contextmanager
def group(device: str, timeout_minutes: float = 60.0) -> Iterator[Dist]:
    """Join torchrun's process group for the block (nothing to join without WORLD_SIZE).  The timeout is long
    because ranks wait in a collective for the slowest one's share of the teacher, and for rank 0 to merge and
    write its files."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch
    import torch.distributed as td

    d = from_env()
    if "WORLD_SIZE" not in os.environ:
        yield d
        return
    if td.is_initialized():  # a caller's group: use it, and leave it to the caller
        yield replace(d, backend=td.get_backend())
        return
    cuda = torch.device(device).type == "cuda"
    kw = {}
    if cuda:
        torch.cuda.set_device(d.local_rank)
        if "device_id" in inspect.signature(td.init_process_group).parameters:  # torch >= 2.3
            kw["device_id"] = torch.device("cuda", d.local_rank)  # binds NCCL to this GPU up front
    backend = "nccl" if cuda else "gloo"
    td.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes), **kw)
    log.info("rank %d of %d (%s)", d.rank, d.world, backend)
    try:
        yield replace(d, backend=backend)
    except BaseException:
        _die(d)
    td.barrier()  # leave together
    td.destroy_process_group()


def _die(d: Dist) -> None:
    """A rank that failed ends its process at once, traceback first.  Its peers may be waiting in a collective
    that never completes, and tearing down an NCCL group under them can block for good: a 4-GPU teacher run
    hung 19 minutes after an error on rank 0 without printing it.  torchrun sees the exit and stops the rest."""
    log.exception("rank %d of %d failed; ending the job", d.rank, d.world)
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def device(spec: str, d: Dist):
    """The torch device of this rank: ``cuda`` means ``cuda:LOCAL_RANK``."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    dev = torch.device(spec)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", d.local_rank)
    return dev


def _comm_device(d: Dist):
    """NCCL reduces tensors on the GPU, gloo on the CPU."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    return torch.device("cuda", d.local_rank) if d.backend == "nccl" else torch.device("cpu")


def barrier(d: Dist) -> None:
    if d.active:
        import torch.distributed as td  # lazy: torch costs ~4.5 s at start-up, the optional 'train' extra

        td.barrier()


def all_reduce_sum(values: Sequence[float], d: Dist) -> list[float]:
    """Element-wise sums over the ranks, in float64 so that sums of counts stay exact."""
    if not d.active:
        return [float(v) for v in values]
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch
    import torch.distributed as td

    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_comm_device(d))
    td.all_reduce(t)
    return t.cpu().tolist()


def broadcast_flag(flag: bool, d: Dist) -> bool:
    """Rank 0's ``flag`` on every rank: decisions taken from a clock (stop now?) must agree everywhere."""
    if not d.active:
        return flag
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch
    import torch.distributed as td

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_comm_device(d))
    td.broadcast(t, src=0)
    return bool(t.item())


def shard(items: Sequence, d: Dist) -> list:
    """This rank's share of ``items``: every world-th one from its rank on.  Items sorted by cost (length-sorted
    batch groups) thus spread evenly."""
    return list(items[d.rank::d.world])


def gather_filled(items: list, d: Dist) -> list:
    """Each rank filled its own entries of ``items`` (others None); every rank gets all of them."""
    if not d.active:
        return items
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch.distributed as td

    parts: list = [None] * d.world
    td.all_gather_object(parts, items)
    return [next((p[i] for p in parts if p[i] is not None), None) for i in range(len(items))]


def ddp(module, d: Dist):
    """``module`` in DistributedDataParallel when there is a process group.  Frozen parameters
    (requires_grad False) are left out by DDP; every trainable one is used in each forward, so no search for
    unused ones; buffers (rotary tables) are equal everywhere, so not re-broadcast each step."""
    if not d.active:
        return module
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    from torch.nn.parallel import DistributedDataParallel

    ids = [d.local_rank] if d.backend == "nccl" else None
    return DistributedDataParallel(module, device_ids=ids, broadcast_buffers=False, find_unused_parameters=False)


def step_groups(n_groups: int, steps: int, world: int, seed: int) -> np.ndarray:
    """Which batch group every rank trains on at every global step, shape (steps, world).

    One stream of group indices, the same on every rank: each epoch a fresh permutation from ``seed``, read from
    its end (the order single-process runs always used); global step s, rank r takes stream entry s * world + r,
    so one global step covers ``world`` distinct groups and the ranks never share a group within an epoch."""
    if n_groups < 1:
        raise ValueError("no batch groups to train on")
    rng = np.random.default_rng(seed)
    need, parts = steps * world, []
    for _ in range(-(-need // n_groups)):
        parts.append(rng.permutation(n_groups)[::-1])
    return np.concatenate(parts)[:need].reshape(steps, world)


def shard_path(out, rank: int):
    """Where rank ``rank`` writes its part of ``out`` (data.npz -> data.rank1.npz)."""
    return out.with_suffix(f".rank{rank}.npz")


def merge_ragged(shards: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-sequence rows written by several ranks, back in sequence order.

    Each shard has ``seq`` (which sequences it holds, in its order), ``ex_len`` (their lengths) and arrays with
    one row per position of those sequences, concatenated; the result has ``ex_len`` and those arrays in
    ascending ``seq`` order."""
    seq = np.concatenate([s["seq"] for s in shards])
    lens = np.concatenate([s["ex_len"] for s in shards]).astype(np.int64)
    if len(np.unique(seq)) != len(seq):
        raise ValueError("shards hold a sequence twice")
    off = np.concatenate([[0], np.cumsum(lens)])
    order = np.argsort(seq, kind="stable")
    take = np.concatenate([np.arange(off[i], off[i + 1]) for i in order]) if len(order) else np.zeros(0, int)
    keys = [k for k in shards[0] if k not in ("seq", "ex_len")]
    out = {k: np.concatenate([s[k] for s in shards])[take] for k in keys}
    out["ex_len"] = np.concatenate([s["ex_len"] for s in shards])[order]
    return out


def merge_on_main(arrays: dict[str, np.ndarray], seqs: Sequence[int], out, d: Dist) -> dict | None:
    """A lone process: ``arrays`` unchanged.  Under torchrun every rank writes its rows (of sequences ``seqs``)
    to a shard file beside ``out``; rank 0 gets all shards merged in sequence order (see :func:`merge_ragged`),
    the others None.  Files, not a gather: the rows of a full teacher run are about a gigabyte."""
    if not d.active:
        return arrays
    np.savez(shard_path(out, d.rank), seq=np.asarray(seqs, dtype=np.int64), **arrays)
    barrier(d)
    if not d.is_main:
        return None
    paths = [shard_path(out, r) for r in range(d.world)]
    merged = merge_ragged([dict(np.load(p)) for p in paths])
    for p in paths:
        p.unlink()
    return merged
