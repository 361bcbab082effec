"""The trainer's inbox: received records, stored durably and deduplicated by record id (SQLite, WAL, FULL)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import zlib
from pathlib import Path


class Inbox:
    def __init__(self, path: str | Path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                         "rid TEXT UNIQUE NOT NULL, received REAL, trained INTEGER NOT NULL DEFAULT 0, body BLOB)")

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

    def mark_trained(self, seqs: list[int], update: int) -> None:
        with self._lock:
            self._db.executemany("UPDATE records SET trained = ? WHERE seq = ?", [(update, s) for s in seqs])

    def counts(self) -> dict:
        with self._lock:
            total, pending = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(trained = 0), 0) FROM records").fetchone()
        return {"records": int(total), "untrained": int(pending)}

    def close(self) -> None:
        with self._lock:
            self._db.close()
