"""The SQLite files that hold records (the server's outbox, the trainer's inbox): private, and set aside when
unreadable.

Both hold prompts and outputs (as token ids), so the database and its ``-wal`` / ``-shm`` are mode 0600 like the
token and n-gram files: the database is created 0600 before SQLite opens it (SQLite gives its WAL and shared-memory
files the database's mode), and a file an older build left 0644 is narrowed.  A file SQLite cannot read (not a
database, damaged pages) is renamed ``<name>.corrupt-<time>`` with its companions, kept for inspection, and the
caller starts an empty one: the process keeps running, and nothing is deleted."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

MODE = 0o600
SUFFIXES = ("", "-wal", "-shm")


def connect(path: str | Path, **kw) -> sqlite3.Connection:
    """``sqlite3.connect`` to ``path`` with the file and its companions mode 0600 (the directory is made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, MODE))
    for suffix in SUFFIXES:
        try:
            os.chmod(str(path) + suffix, MODE)
        except FileNotFoundError:
            pass
    return sqlite3.connect(str(path), **kw)


def set_aside(path: str | Path, error: Exception, what: str) -> Path:
    """Rename an unreadable database and its companions to ``<name>.corrupt-<time>``; return the new name."""
    path = Path(path)
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in SUFFIXES:
        p = Path(str(path) + suffix)
        if p.exists():
            p.replace(str(aside) + suffix)
    log.warning("%s %s is unreadable (%s): set aside as %s; starting an empty %s", what, path, error, aside.name, what)
    return aside



def open_records(path: str | Path, what: str, prepare: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
    """A record database: mode 0600, WAL, every commit synced (FULL), usable from any thread, autocommit, then
    ``prepare(db)`` (its schema, and a read of every row, where most damage shows).  A file SQLite cannot read
    is set aside (``set_aside``) and an empty one prepared instead."""
    try:
        return _prepared(path, prepare)
    except sqlite3.DatabaseError as e:  # not a database, or a damaged one: keep it aside, start fresh
        set_aside(path, e, what)
        return _prepared(path, prepare)


def _prepared(path: str | Path, prepare: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
    db = connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        prepare(db)
    except BaseException:
        db.close()
        raise
    return db
