"""Offline distillation data: the target's top-k distribution at every position of local text, aligned
to the drafter's tokenisation (the hybrid loss's L_DM / L_N-gram targets), saved as one compact npz.

The texts and what is held out of them: :mod:`omnidraft.distill.sources`.

Alignment, per drafter token d_j starting at byte b_j: when the target also has a token boundary at b_j
and its token there spells the same bytes as d_j and the bridge maps them (a *directly mapped* position),
the record holds the target's top-k at that boundary mapped to drafter ids (unmapped entries fall into
``rest``); otherwise it is an L_N-gram position with label d_j.  The target's logits come from teacher
forcing in torch (``distill teacher``); here only both tokenisations and the alignment are computed,
by one process per core.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from tqdm import tqdm

from omnidraft.assets import models
from omnidraft.assets.corpora import first_user_turns
from omnidraft.assets.prompts import Item
from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.vocab import chat
from omnidraft.vocab.bridge import build_bridge

from .sources import SOURCES, source_texts

log = logging.getLogger(__name__)

PAD = 65535  # uint16 padding of topk ids (drafter vocabularies here are < 65,535)


# ------------------------------------------------------------------ sources
def chat_items(seed: int, n: int, split: str = "heldout") -> list:
    """Held-out ShareGPT first user turns as bench prompt items (never trained on)."""
    return [Item(cid, text, True, split) for cid, text in first_user_turns(seed, n, split)]


# --------------------------------------------------------------- alignment
def pieces(engine, ids) -> list[bytes]:
    return [engine.special_text(t) if engine.is_special[t] else engine.token_bytes[t] for t in ids]


def slots(d_ids, d_pieces, t_ids, t_pieces, d2t) -> np.ndarray:
    """Per drafter position j: the target logits row that holds the target's distribution for a directly
    mapped d_j (same start byte, same bytes, mapped by the bridge), else -1 (N-gram); -2 at j = 0."""
    t_start = np.cumsum([0] + [len(p) for p in t_pieces])
    tok_at = {int(t_start[i]): i for i in range(1, len(t_ids))}
    out = np.full(len(d_ids), -1, dtype=np.int32)
    out[0] = -2
    b = len(d_pieces[0])
    for j in range(1, len(d_ids)):
        i = tok_at.get(b)
        if i is not None and t_pieces[i] == d_pieces[j] and d2t[d_ids[j]] == t_ids[i]:
            out[j] = i - 1  # row i-1 of the target's logits predicts its token i
        b += len(d_pieces[j])
    return out


def target_encoding(target, draft, bridge) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every target token: the drafter ids of its bytes (the mapped id where the bridge maps it), as
    (ids, offsets); and whether it is directly mapped.  How a drafter reads the target's output."""
    ids, off = [], [0]
    direct = bridge.t2d >= 0
    for t in range(target.n_vocab):
        if direct[t]:
            ids.append(int(bridge.t2d[t]))
        elif not target.is_special[t] and target.token_bytes[t]:
            ids += draft.tokenize(target.token_bytes[t], add_bos=False, special=False)
        off.append(len(ids))
    return np.asarray(ids, dtype=np.uint16), np.asarray(off, dtype=np.int64), direct


@dataclass
class PrepConfig:
    """What ``omnidraft distill data`` writes: token ids of both sides and the alignment, no teacher yet."""

    target: str = field(default=models.QWEN_05B, metadata={"help": "teacher (its tokenizer is used here)"})
    draft: str = field(default=models.SMOLLM2, metadata={"help": "drafter whose vocabulary the data is aligned to"})
    out: str = field(default=".distill/texts.npz", metadata={"help": "output npz"})
    seed: int = field(default=0, metadata={"help": "seed of every choice (files, cuts, split)"})
    code: int = field(default=95000, metadata={"help": "teacher-forced Python windows"})
    code_other: int = field(default=95000, metadata={"help": "teacher-forced windows of code in other languages"})
    nl: int = field(default=34000, metadata={"help": "teacher-forced windows of other natural languages"})
    chat: int = field(default=45000, metadata={"help": "teacher-forced ShareGPT exchanges"})
    gen_code: int = field(default=16000, metadata={"help": "Python prompts the target continues"})
    gen_code_other: int = field(default=16000, metadata={"help": "other-language code prompts the target continues"})
    gen_nl: int = field(default=6000, metadata={"help": "natural-language prompts the target continues"})
    gen_chat: int = field(default=12000, metadata={"help": "chat prompts the target continues"})
    man: int = field(default=0, metadata={"help": "teacher-forced windows of translated man pages (streaming pages)"})
    gen_man: int = field(default=0, metadata={"help": "man-page prompts the target continues"})
    javascript: bool = field(default=False, metadata={"help": "JavaScript in code-other (repository sets' held-out "
                                                              "files excepted)"})
    windows_per_file: int = field(default=64, metadata={"help": "most Python windows cut from one source file"})
    max_tokens: int = field(default=256, metadata={"help": "target tokens per teacher-forced example"})
    val_share: float = field(default=0.03, metadata={"help": "share of examples kept for the validation curve"})
    workers: int = field(default=0, metadata={"help": "tokenising processes (0 = one per core)"})


class _Aligner:
    """Both tokenizers and their bridge: turns a Text into the arrays of one example or one prompt."""

    def __init__(self, target: str, draft: str, max_tokens: int):
        self.target = Engine(models.resolve(target), EngineConfig(vocab_only=True))
        self.draft = Engine(models.resolve(draft), EngineConfig(vocab_only=True))
        self.bridge = build_bridge(self.draft, self.target)
        self.max_tokens = max_tokens

    def close(self):
        self.target.close()
        self.draft.close()

    def example(self, x) -> tuple | None:
        """(t_ids, d_ids, slots) of a teacher-forced text: the drafter's tokens cover the same bytes as the
        target's first ``max_tokens``; None when too short or the two byte strings disagree."""
        t_ids = chat.tokenize(self.target, x.text, x.plain, False)[: self.max_tokens]
        t_p = pieces(self.target, t_ids)
        n_bytes = sum(len(p) for p in t_p)
        d_ids, d_p, used = [], [], 0
        for t in chat.tokenize(self.draft, x.text, x.plain, False):
            p = pieces(self.draft, [t])[0]
            if used + len(p) > n_bytes:
                break
            d_ids.append(t)
            d_p.append(p)
            used += len(p)
        if len(t_ids) < 16 or len(d_ids) < 16 or b"".join(d_p) != b"".join(t_p)[:used]:
            return None
        return (np.asarray(t_ids, dtype=np.int32), np.asarray(d_ids, dtype=np.uint16),
                slots(d_ids, d_p, t_ids, t_p, self.bridge.d2t))

    def prompt(self, x) -> tuple | None:
        t_ids = chat.tokenize(self.target, x.text, x.plain, False)
        d_ids = chat.tokenize(self.draft, x.text, x.plain, False)
        if not 8 <= len(t_ids) <= 2 * self.max_tokens:
            return None
        s = slots(d_ids, pieces(self.draft, d_ids), t_ids, pieces(self.target, t_ids), self.bridge.d2t)
        return np.asarray(t_ids, dtype=np.int32), np.asarray(d_ids, dtype=np.uint16), s


_WORKER: dict = {}  # one Aligner per worker process (set by its initializer; never used in the parent)


def _init_worker(target, draft, max_tokens):
    _WORKER["a"] = _Aligner(target, draft, max_tokens)


def _align(x):
    a = _WORKER["a"]
    got = a.prompt(x) if x.prompt else a.example(x)
    return None if got is None else (x.prompt, SOURCES.index(x.src), got)


def _aligned(cfg: PrepConfig, template, progress: bool) -> Iterator[tuple]:
    """(is_prompt, source index, arrays) of every text that aligns, tokenised by ``workers`` processes."""
    total = cfg.code + cfg.code_other + cfg.nl + cfg.chat + cfg.gen_code + cfg.gen_code_other + cfg.gen_nl \
        + cfg.gen_chat + cfg.man + cfg.gen_man
    workers = cfg.workers or os.cpu_count() or 1
    ctx = mp.get_context("fork" if sys.platform != "win32" else "spawn")
    with ctx.Pool(workers, _init_worker, (cfg.target, cfg.draft, cfg.max_tokens)) as pool:
        it = pool.imap(_align, source_texts(cfg, template), chunksize=64)
        yield from tqdm(it, total=total, desc="distill data: tokenise + align", disable=not progress)


def prepare(cfg: PrepConfig, progress: bool = True) -> dict:
    """Tokenise the sources with both vocabularies and align them; write ``cfg.out``."""
    t0 = time.perf_counter()
    al = _Aligner(cfg.target, cfg.draft, cfg.max_tokens)
    ex = {k: [] for k in ("t", "d", "slot", "src")}
    gen = {k: [] for k in ("t", "d", "slot", "src")}
    skipped = 0
    for got in _aligned(cfg, al.target.chat_template, progress):
        if got is None:
            skipped += 1
            continue
        is_prompt, src, (t, d, s) = got
        for k, v in zip(("t", "d", "slot", "src"), (t, d, s, src)):
            (gen if is_prompt else ex)[k].append(v)
    enc_ids, enc_off, direct = target_encoding(al.target, al.draft, al.bridge)
    rng = random.Random(cfg.seed)
    n_ex, n_gen = len(ex["t"]), len(gen["t"])
    meta = {"config": asdict(cfg), "sources": list(SOURCES), "examples": n_ex, "prompts": n_gen,
            "skipped": skipped, "draft_positions": int(sum(len(d) - 1 for d in ex["d"])),
            "dm_positions": int(sum((s >= 0).sum() for s in ex["slot"])),
            "per_source": {s: int(sum(1 for x in ex["src"] + gen["src"] if x == i)) for i, s in enumerate(SOURCES)},
            "target": models.resolve(cfg.target).name, "draft": models.resolve(cfg.draft).name,
            "target_eog": sorted(int(t) for t in al.target.eog_ids), "seconds": round(time.perf_counter() - t0, 1)}
    arrays = dict(_ragged_arrays(ex, ""), **_ragged_arrays(gen, "g_"),
                  val=np.asarray([rng.random() < cfg.val_share for _ in range(n_ex)]),
                  g_val=np.asarray([rng.random() < cfg.val_share for _ in range(n_gen)]),
                  enc_ids=enc_ids, enc_off=enc_off, direct=direct, t2d=al.bridge.t2d.astype(np.int32),
                  meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    al.close()
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(out)
    log.info("distill data: %s", {k: v for k, v in meta.items() if k != "config"})
    return meta


def _ragged_arrays(part: dict, prefix: str) -> dict:
    """Concatenated ids/slots with their lengths (``t_ids``, ``t_len``, ...; ``slot`` has d's lengths)."""
    def cat(xs, dt):
        return np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)

    return {prefix + "t_ids": cat(part["t"], np.int32), prefix + "t_len": np.asarray([len(x) for x in part["t"]], np.int32),
            prefix + "d_ids": cat(part["d"], np.uint16), prefix + "d_len": np.asarray([len(x) for x in part["d"]], np.int32),
            prefix + "slot": cat(part["slot"], np.int32), prefix + "src": np.asarray(part["src"], dtype=np.uint8)}


def read_meta(z) -> dict:
    return json.loads(bytes(z["meta"]).decode())


def batches(lengths, max_tokens: int):
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
