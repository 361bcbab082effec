"""What loading a model costs in memory, weighed against what this host has available now.

On a phone beside its other apps, llama.cpp's load of a model that does not fit is not refused: the OS pages the
mapped weights in from storage at every token, or Android's low-memory killer ends the process without a message
(repacked weights are anonymous memory). So a start short of memory says so first, and what the product would load
on its own initiative (``runtime.wideprobe``'s second file) is skipped there."""

from __future__ import annotations

import logging
from pathlib import Path

from gguf_tools.errors import InvalidFile
from gguf_tools.header import kv_values_per_token
from omnidraft.assets import models
from omnidraft.errors import ModelNotFound
from omnidraft.llama import hostmem

from .settings import Settings

log = logging.getLogger(__name__)

# One loaded engine's memory beside its weights and KV cache (compute buffers, logits): two 0.5B engines peaked at
# 1,337-1,398 MB for 1,128 MB of files and 2 x 50 MB of cache at 2k context, 46 MB of it the process before
# (results/issue41/zen5-38/probe-memory).
ENGINE_BYTES = 96 << 20
KV_VALUE_BYTES = 4  # a target's cache is f32 where its rows must be bit-identical (llama.engine), f16 elsewhere


def engine_bytes(path: Path, n_ctx: int, file_bytes: int | None = None) -> int:
    """What one engine of ``path`` holds at ``n_ctx`` tokens of context: its file (``file_bytes`` where the file is
    not made yet), ``ENGINE_BYTES`` and its KV cache counted as f32 (none where the header does not say)."""
    try:
        values = (kv_values_per_token(path) or 0) if path.is_file() else 0
    except InvalidFile:  # the load refuses it with its own message
        values = 0
    size = path.stat().st_size if file_bytes is None else file_bytes
    return size + ENGINE_BYTES + n_ctx * values * KV_VALUE_BYTES


def shortfall(need: int) -> str:
    """'' where this host has ``need`` bytes available now (or cannot say); else the free and needed megabytes."""
    free = hostmem.available_bytes()
    return "" if free is None or free >= need else f"{free / 1e6:,.0f} MB free, {need / 1e6:,.0f} MB needed"


def pair_bytes(settings: Settings) -> int | None:
    """What the session's target and drafter need at their contexts, as far as their files are on disk (None:
    neither is, or a name is unknown, which the load reports itself)."""
    try:
        target, draft = models.resolve(settings.target, fetch=False), models.resolve(settings.draft, fetch=False)
    except ModelNotFound:
        return None
    parts = [engine_bytes(f, n) for f, n in ((target, settings.n_ctx), (draft, settings.draft_n_ctx)) if f.is_file()]
    return sum(parts) if parts else None


def warn_if_short(settings: Settings) -> None:
    """A warning, before anything loads, where the session's pair does not fit the memory available now."""
    need = pair_bytes(settings)
    if need is None or not (short := shortfall(need)):
        return
    smaller = f", or run a smaller target ({models.QWEN_05B})" if str(settings.target).lower() != models.QWEN_05B \
        else ""
    log.warning("this host has less memory available than the model pair needs (%s): expect a slow start and "
                "slow tokens as weights are read from storage again, or the system ending the process; close other "
                "apps or lower --n-ctx%s", short, smaller)
