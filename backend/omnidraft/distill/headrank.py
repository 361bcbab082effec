"""The drafter's tokens ranked by how often they occur in the training texts (FR-Spec's frequency ranking).

A drafter head over only its K most frequent tokens (``gguf_tools.frhead``) costs K/n_vocab of the full
head, and output stays exact: the target verifies whatever the drafter proposes; a token outside the head
can no longer be proposed, which costs acceptance only where the target writes a rare token.

The ranking counts the drafter's tokens over the training side of every local source distillation reads
(Python, other languages, natural-language catalogs, ShareGPT conversations), in equal character budgets,
never the held-out sets the benchmarks measure on.  It is computed once (``omnidraft distill head-rank``)
and kept in the tree (``models/smollm2.head-rank.npy``, shared by every SmolLM2 drafter's tokenizer) so
that every machine derives the same head: the local corpora differ between machines.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from omnidraft.assets import models
from omnidraft.assets.corpora import sharegpt_conversations, sharegpt_heldout
from omnidraft.llama.engine import Engine, EngineConfig

from gguf_tools.frhead import rank

from . import sources

log = logging.getLogger(__name__)

BUDGET_CHARS = 4_000_000  # per source: 16 M characters in all, about 5 M drafter tokens


def _chat_texts() -> Iterator[str]:
    for conv in sharegpt_conversations():
        if sharegpt_heldout(str(conv.get("id"))):
            continue
        for turn in conv.get("conversations", []):
            if isinstance(turn.get("value"), str):
                yield turn["value"]


def training_texts(seed: int = 0) -> dict[str, Iterator[str]]:
    """Per source, its training texts (the held-out splits left out, as distillation leaves them out)."""
    return {"python": sources.code_cuts(seed), "code-other": sources.other_code_cuts(seed),
            "nl": sources.nl_cuts(seed), "chat": _chat_texts()}


def _take(texts: Iterable[str], budget: int) -> Iterator[str]:
    used = 0
    for t in texts:
        if used >= budget:
            return
        yield t[: budget - used]
        used += len(t)


def count(tokenize: Callable[[str], list[int]], n_vocab: int, texts: dict[str, Iterable[str]],
          budget: int = BUDGET_CHARS) -> np.ndarray:
    """Token counts over each source's first ``budget`` characters; every source weighs the same."""
    total = np.zeros(n_vocab, dtype=np.float64)
    for name, src in texts.items():
        c = np.zeros(n_vocab, dtype=np.int64)
        for text in _take(src, budget):
            np.add.at(c, np.asarray(tokenize(text), dtype=np.int64), 1)
        log.info("%s: %d tokens", name, int(c.sum()))
        if c.sum():
            total += c / c.sum()  # shares, so that a source of short tokens does not outvote the others
    return total


@dataclass
class HeadRankConfig:
    """``omnidraft distill head-rank``: rank the drafter's tokens by frequency in the training texts."""

    drafter: str = field(default=models.DEFAULT_DRAFT, metadata={"help": "drafter (name) whose tokenizer counts"})
    out: str = field(default="", metadata={
        "help": "where to write the ranking (.npy; default: the file the drafter's ':fr' formats read)"})
    budget: int = field(default=BUDGET_CHARS, metadata={"help": "characters read per source"})
    seed: int = field(default=0, metadata={"help": "the training windows' seed (distill data's)"})


def build(cfg: HeadRankConfig) -> dict:
    """Count, rank and save; returns what it counted."""
    with Engine(models.resolve(cfg.drafter), EngineConfig(vocab_only=True)) as e:
        counts = count(lambda s: e.tokenize(s), e.n_vocab, training_texts(cfg.seed), cfg.budget)
    ranking = rank(counts)
    out = Path(cfg.out) if cfg.out else models.head_rank_path(cfg.drafter)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, ranking.astype(np.int32))
    return {"out": str(out), "tokens_seen": int((counts > 0).sum()), "n_vocab": len(counts)}
