"""A JSON table of entries by key in one file of the state directory, each write atomic.

What the product learns about a machine (the cost model, the rate guard's verdict) is kept per machine, build,
model files and settings: one key each, many keys a file.  A missing, unreadable or foreign file reads as empty:
what it held is measured again, never trusted half-read."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from omnidraft.errors import BadRequest


def check_dir(path: Path, flag: str) -> None:
    """Raise BadRequest (one line naming ``flag``) unless ``path`` is a directory this process can write to
    (made if missing): checked at start-up, so a bad one stops a command before it loads or measures."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-check.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise BadRequest(f"{flag} {path}: not a directory this process can write to "
                         f"({e.strerror or type(e).__name__})") from None


def read(path: Path, key: str) -> dict | None:
    """The entry under ``key``, or None (no file, no entry, or not a JSON table)."""
    try:
        entry = json.loads(Path(path).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None


def write(path: Path, key: str, entry: dict | None, keep: Callable[[str], bool] | None = None) -> None:
    """Write (or, with None, drop) one entry; the other entries are kept, those whose key ``keep`` refuses
    excepted (a table keyed by files that come and go).  A crash mid-write leaves the old file."""
    path = Path(path)
    try:
        table = json.loads(path.read_text())
        table = table if isinstance(table, dict) else {}
    except (OSError, ValueError):
        table = {}
    if keep is not None:
        table = {k: v for k, v in table.items() if keep(k)}
    if entry is None:
        table.pop(key, None)
    else:
        table[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table, indent=1))
    os.replace(tmp, path)
