"""A cheap pre-flight check of a GGUF file's header: obvious non-GGUFs fail with a clear message."""

from __future__ import annotations

from pathlib import Path

from .errors import InvalidFile

GGUF_MAGIC = b"GGUF"


def check_header(path: Path) -> None:
    """Raise InvalidFile unless ``path`` is a regular file starting with a GGUF v2/v3 header."""
    if not path.exists():
        raise InvalidFile(f"{path}: no such file")
    if not path.is_file():
        raise InvalidFile(f"{path}: not a regular file")
    size = path.stat().st_size
    if size < 24:
        raise InvalidFile(f"{path}: {size} bytes is too small to be a GGUF file")
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] != GGUF_MAGIC:
        raise InvalidFile(f"{path}: not a GGUF file (magic {head[:4]!r}, expected b'GGUF')")
    version = int.from_bytes(head[4:8], "little")
    if version not in (2, 3):
        raise InvalidFile(f"{path}: unsupported GGUF version {version}")
