"""Sidecar stamps: a file checked once against its sha256 pin is recorded beside it (``NAME.verified.json``: sha,
size and mtime), so later checks cost one stat() instead of a rehash (the model registry's pinned files)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def sha256_file(path: Path, progress: bool = False) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f, bar(path.stat().st_size, f"sha256 {path.name}", progress) as b:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            b.update(len(chunk))
    return h.hexdigest()


def bar(total: int, desc: str, enabled: bool):
    """A byte progress bar (a no-op unless ``enabled``)."""
    from tqdm import tqdm  # lazy: 2 MB a serving process that pulls nothing never needs (issue 41)
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=not enabled, leave=False)


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def stamp_ok(path: Path, sha: str) -> bool:
    """Whether ``path`` is stamped as hashing to ``sha`` and kept its size and mtime since."""
    try:
        st = path.stat()
        stamp = json.loads(_stamp_path(path).read_text())
    except (OSError, ValueError):
        return False
    return stamp == {"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def write_stamp(path: Path, sha: str) -> None:
    st = path.stat()
    _stamp_path(path).write_text(json.dumps({"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
