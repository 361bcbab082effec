"""What an ``omnidraft adapt`` run streams and measures: the stream (with a set drift's second half), the held-out
prompts, the drift set's, the old domains' held-out and replay prompts; from prompt sets or a prompt file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from omnidraft.assets.snapshot import load_set
from omnidraft.errors import BadRequest

from .adapt_config import AdaptConfig

Prompt = tuple[str, bool]  # (text, send through the chat template?)


@dataclass
class Items:
    """Every prompt a run uses."""

    stream: list[Prompt]
    heldout: list[Prompt]
    old: dict[str, list[Prompt]]  # old domain -> its held-out prompts
    replay: list[Prompt]  # the old domains' stream prompts, whose records are replayed
    drift: list[Prompt] = field(default_factory=list)  # the held-out prompts of the set the stream drifts to


def load_items(cfg: AdaptConfig) -> tuple[list[Prompt], list[Prompt]]:
    """(training stream, held-out) prompts, from --prompts (chat messages) or from a prompt set."""
    if cfg.prompts:
        if cfg.drift_set:
            raise BadRequest("--drift-set drifts from one prompt set to another: give --stream-set, not --prompts")
        prompts = load_prompts(cfg.prompts)
        if len(prompts) <= cfg.n_heldout:
            raise ValueError(f"need more than {cfg.n_heldout} prompts, have {len(prompts)}")
        heldout, pool = prompts[-cfg.n_heldout:], prompts[: -cfg.n_heldout]
        return [(pool[i % len(pool)], True) for i in range(cfg.n_train)], [(p, True) for p in heldout]
    stream = [(i.prompt, i.chat) for i in load_set(cfg.stream_set).split("stream")]
    held = [(i.prompt, i.chat) for i in load_set(cfg.eval_set or cfg.stream_set).split("heldout")]
    at = cfg.drift_point()
    items = [stream[i % len(stream)] for i in range(at)]
    if at < cfg.n_train and cfg.drift_set:  # the drift: the rest of the stream from the other set
        other = [(i.prompt, i.chat) for i in load_set(cfg.drift_set).split("stream")]
        items += [other[i % len(other)] for i in range(cfg.n_train - at)]
    else:  # no drift, or a target drift: the same set goes on
        items += [stream[i % len(stream)] for i in range(at, cfg.n_train)]
    return items, held[: cfg.n_heldout]


def load_drift(cfg: AdaptConfig) -> list[Prompt]:
    """The held-out prompts of the set the stream drifts to ([] without a drift)."""
    if not cfg.drift_set:
        return []
    return [(i.prompt, i.chat) for i in load_set(cfg.drift_set).split("heldout")][: cfg.n_heldout]


def load_prompts(path: str) -> list[str]:
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        return [str(p) for p in json.loads(text)]
    return [line.strip() for line in text.splitlines() if line.strip()]


def load_old(cfg: AdaptConfig) -> tuple[dict[str, list[Prompt]], list[Prompt]]:
    """(old domain -> its held-out prompts, the replay prompts: each old domain's first stream prompts)."""
    old, replay = {}, []
    for name in filter(None, cfg.old_sets.split(",")):
        ps = load_set(name)
        old[name] = [(i.prompt, i.chat) for i in ps.split("heldout")[: cfg.n_old]]
        replay += [(i.prompt, i.chat) for i in ps.split("stream")[: cfg.n_replay]]
    return old, replay
