"""The trainer's inbox: received records, stored durably and deduplicated by record id (SQLite, WAL, FULL).

A record's ``trained`` column is its state: 0 pending, N > 0 trained in update N, ``QUARANTINED`` (a record
training cannot use: invalid, or its step went non-finite; never retried) or ``SKIPPED`` (valid, but no
position to learn from).  ``note`` says why, ``noted`` when; the record itself is kept for inspection."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import zlib
from pathlib import Path

from omnidraft import sqlitefile


PENDING, QUARANTINED, SKIPPED = 0, -1, -2


class Inbox:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlitefile.open_records(self.path, "inbox", self._prepare)

    @staticmethod
    def _prepare(db: sqlite3.Connection) -> None:
        """The schema (columns an inbox from before quarantine lacks added), and every row's header read."""
        db.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "rid TEXT UNIQUE NOT NULL, received REAL, trained INTEGER NOT NULL DEFAULT 0, body BLOB, "
                   "note TEXT, noted REAL)")
        have = {row[1] for row in db.execute("PRAGMA table_info(records)")}
        for col, kind in (("note", "TEXT"), ("noted", "REAL")):
            if col not in have:
                db.execute(f"ALTER TABLE records ADD COLUMN {col} {kind}")
        db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0), MAX(trained) FROM records").fetchone()

    def add(self, records: list[dict]) -> tuple[int, int]:
        """Store records in one transaction; return (new, duplicates)."""
        now, new = time.time(), 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for r in records:
                    body = zlib.compress(json.dumps(r, separators=(",", ":")).encode(), 6)
                    cur = self._db.execute("INSERT OR IGNORE INTO records (rid, received, body) VALUES (?, ?, ?)",
                                           (r["id"], now, body))
                    new += cur.rowcount
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return new, len(records) - new

    def untrained(self, limit: int = 1 << 30) -> list[tuple[int, dict]]:
        with self._lock:
            rows = self._db.execute("SELECT seq, body FROM records WHERE trained = 0 ORDER BY seq LIMIT ?",
                                    (limit,)).fetchall()
        return [(s, json.loads(zlib.decompress(b))) for s, b in rows]

    def recent_trained(self, limit: int) -> list[tuple[int, dict]]:
        """The ``limit`` most recently stored records already trained on, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT seq, body FROM records WHERE trained > 0 ORDER BY seq DESC LIMIT ?",
                                    (limit,)).fetchall()
        return [(s, json.loads(zlib.decompress(b))) for s, b in reversed(rows)]

    def mark_trained(self, seqs: list[int], update: int) -> None:
        with self._lock:
            self._db.executemany("UPDATE records SET trained = ? WHERE seq = ?", [(update, s) for s in seqs])

    def quarantine(self, items: list[tuple[int, str]]) -> None:
        """Set records aside for good: [(seq, reason)]."""
        self._set_state(QUARANTINED, items)

    def skip(self, items: list[tuple[int, str]]) -> None:
        """Records with nothing to learn from: [(seq, reason)]; not pending any more."""
        self._set_state(SKIPPED, items)

    def quarantined(self, limit: int = 5) -> list[dict]:
        """The most recently quarantined records: [{id, reason, at}], newest first."""
        with self._lock:
            rows = self._db.execute("SELECT rid, note, noted FROM records WHERE trained = ? "
                                    "ORDER BY noted DESC, seq DESC LIMIT ?", (QUARANTINED, limit)).fetchall()
        return [{"id": rid, "reason": note, "at": noted} for rid, note, noted in rows]

    def counts(self) -> dict:
        with self._lock:
            total, pending, quarantined, skipped = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(trained = 0), 0), COALESCE(SUM(trained = ?), 0), "
                "COALESCE(SUM(trained = ?), 0) FROM records", (QUARANTINED, SKIPPED)).fetchone()
        return {"records": int(total), "untrained": int(pending), "quarantined": int(quarantined),
                "skipped": int(skipped)}

    def _set_state(self, state: int, items: list[tuple[int, str]]) -> None:
        now = time.time()
        with self._lock:
            self._db.executemany("UPDATE records SET trained = ?, note = ?, noted = ? WHERE seq = ?",
                                 [(state, reason, now, seq) for seq, reason in items])

    def close(self) -> None:
        with self._lock:
            self._db.close()
