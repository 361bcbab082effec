"""Keep a served drafter's format across hot swaps: its quantization and its frequency-ranked head.

The trainer adapts and publishes the full drafter (its head over all 49k tokens, the base's Q8_0 layers).  A
session serving the drafter in a cheaper format (``SERVED_DRAFT``: Q4_0 layers, ``gguf_tools.frhead``'s head
over the 16k most frequent tokens) would lose that cheaper pass at its first swap; so each published version is
served through a copy in the same format, written once into the session's state dir (about a second for the
8-layer drafter) and loaded like any file: the load check runs on it, and a copy that fails leaves the old
drafter serving.  The copy is requantized from the published file, as the served format is made from the
shipped one (``assets.models``), so a version serves exactly as the shipped drafter would.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np

from gguf_tools import quantize
from gguf_tools.header import head_token_ids, read_kv
from omnidraft.assets import models
from omnidraft.errors import from_gguf_tools

log = logging.getLogger(__name__)

KEEP = 2  # copies kept: the one serving and the one before it (a rollback is a swap too)


def served_quant(draft: str) -> str:
    """The quantization a drafter named ``NAME:FORMAT`` is served in; '' where it keeps its own."""
    base, qtype = models.named_format(draft)
    return models.split_format(base, qtype)[0] if base else ""


def served_copy(path: Path, quant: str, head_ids: np.ndarray | None, out_dir: Path) -> Path:
    """``path`` in the served format: requantized to ``quant`` ('' keeps its own) where its file type differs,
    then given the serving head (``with_head``)."""
    path = Path(path)
    if quant and _file_type(path) != quantize.ftype_of(quant):
        path = _requantized(path, quant, out_dir)
    return with_head(path, head_ids, out_dir)


def _file_type(path: Path) -> int | None:
    with from_gguf_tools():
        return read_kv(path, "general.file_type")  # the header only: gguf-py parsed the whole vocabulary


def _requantized(path: Path, quant: str, out_dir: Path) -> Path:
    out_dir = out_dir / "requantized"  # apart from the head copies, so that each folder prunes its own
    out = out_dir / f"{path.stem}-{quant}-{_key(path, quant.encode())}.gguf"
    if not out.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        with from_gguf_tools():  # writes a temporary file and renames it: a crash leaves no half copy
            quantize.quantize(path, out, quant, progress=False)
        log.info("drafter %s served requantized to %s (%s)", path.name, quant, out.name)
    _prune(out_dir, "*.gguf", out)
    return out


def _key(path: Path, extra: bytes) -> str:
    """The same file (path, size, mtime) in the same format: the same copy."""
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode() + extra).hexdigest()[:12]


def _prune(out_dir: Path, pattern: str, keep: Path) -> None:
    for old in sorted(out_dir.glob(pattern), key=lambda p: p.stat().st_mtime)[:-KEEP]:
        if old != keep:
            old.unlink(missing_ok=True)


def with_head(path: Path, head_ids: np.ndarray | None, out_dir: Path) -> Path:
    """``path`` itself where no head is wanted or it has its own; else a copy of it with ``head_ids``."""
    path = Path(path)
    if head_ids is None or head_token_ids(path) is not None:
        return path
    out = out_dir / f"{path.stem}-fr{len(head_ids)}-{_key(path, head_ids.tobytes())}.gguf"
    if not out.is_file():
        from gguf_tools import frhead  # lazy: gguf-py, sentencepiece, yaml: 5 MB serving never loads (issue 41)

        with from_gguf_tools():
            frhead.write(path, out, head_ids)
        log.info("drafter %s served with a head over its %d most frequent tokens (%s)", path.name,
                 len(head_ids), out.name)
    _prune(out_dir, "*-fr*.gguf", out)
    return out
