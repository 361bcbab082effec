"""Where omnidraft keeps its files: one cache root for models, state and verdicts (a base module, so that every
layer, llama.cpp's included, finds it without importing the layer that downloads models)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "OMNIDRAFT_CACHE"


def cache_dir() -> Path:
    """Root of the user cache ($OMNIDRAFT_CACHE, else ~/.cache/omnidraft)."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "omnidraft")
    return Path(root)
