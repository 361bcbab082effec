"""Keep a served drafter's frequency-ranked head across hot swaps.

The trainer adapts and publishes the full drafter (its head over all 49k tokens).  A session serving the
drafter with a head over its most frequent tokens (``SERVED_DRAFT``, ``gguf_tools.frhead``) would lose that
third of a cheaper pass at its first swap; so each published version is served through a copy with the same
head rows, written once into the session's state dir (half a second for the 8-layer drafter) and loaded like
any file: the load check runs on it, and a copy that fails leaves the old drafter serving.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np

from gguf_tools import frhead
from omnidraft.errors import from_gguf_tools

log = logging.getLogger(__name__)

KEEP = 2  # copies kept: the one serving and the one before it (a rollback is a swap too)


def with_head(path: Path, head_ids: np.ndarray | None, out_dir: Path) -> Path:
    """``path`` itself where no head is wanted or it has its own; else a copy of it with ``head_ids``."""
    path = Path(path)
    if head_ids is None or frhead.head_token_ids(path) is not None:
        return path
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode() + head_ids.tobytes())
    out = out_dir / f"{path.stem}-fr{len(head_ids)}-{key.hexdigest()[:12]}.gguf"
    if not out.is_file():
        with from_gguf_tools():
            frhead.write(path, out, head_ids)
        log.info("drafter %s served with a head over its %d most frequent tokens (%s)", path.name,
                 len(head_ids), out.name)
    for old in sorted(out_dir.glob("*-fr*.gguf"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
        if old != out:
            old.unlink(missing_ok=True)
    return out
