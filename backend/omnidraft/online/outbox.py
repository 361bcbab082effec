"""Durable local queue of training records, and the background uploader that empties it.

Outbox (SQLite, one file):

* ``put(record)`` commits one row per record and returns its row id; after it returns the record
  survives a crash.  WAL journal with ``synchronous=FULL``: each commit fsyncs the WAL, so a put
  survives power loss as well as a killed process.  ``NORMAL`` would survive a killed process
  only; a record is written once per generation (seconds of compute), so the one fsync (about a
  millisecond on flash) is not worth trading away.
* A file SQLite cannot read (not a database, damaged pages) is renamed ``<name>.corrupt-<time>``
  (kept for inspection), with a warning, and an empty outbox starts in its place.
* Delivery is at-least-once: ``peek_batch`` does not remove rows, ``ack`` deletes them after the
  trainer answered 200.  A crash between the two re-sends the batch; the trainer dedups by record id.
  ``put`` of a record whose ``id`` is already queued is ignored (returns the existing row id).
* Disk bound: the payload (zlib-compressed JSON) is kept under ``max_bytes``.  When a put goes over,
  the OLDEST unsent records are deleted until it fits again (fresh data is worth more to online
  adaptation than old data); each one is counted in ``dropped`` (persisted in the file).  A record
  larger than ``max_bytes`` on its own is dropped at once.  SQLite reuses freed pages, so the file
  stays near ``max_bytes`` plus page overhead; the WAL is checkpointed by SQLite's autocheckpoint.

Uploader: a daemon thread that posts batches as ``{"records": [...]}`` (gzip body, the trainer's
shared token as a Bearer token) to ``<url>/v1/records``, acks on HTTP 200 and backs off
exponentially (``interval_s`` doubling up to ``max_backoff_s``) while the trainer is unreachable.  It never blocks ``put`` beyond one short SQLite
transaction and never raises into its caller.
"""

from __future__ import annotations

import gzip
import json
import logging
import sqlite3
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from omnidraft import sqlitefile

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rid TEXT UNIQUE,
    created REAL NOT NULL,
    nbytes INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class Outbox:
    """SQLite-backed FIFO of records waiting for upload (thread-safe; one writer process)."""

    def __init__(self, path: str | Path, max_bytes: int = 64 << 20):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._db = sqlitefile.open_records(self.path, "outbox", self._prepare)

    def _prepare(self, db: sqlite3.Connection) -> None:
        db.executescript(_SCHEMA)
        # reads every row's size: most damage to the file shows here rather than in a later put
        self._bytes = int(db.execute("SELECT COALESCE(SUM(nbytes), 0) FROM records").fetchone()[0])

    # ---------------------------------------------------------------- writes
    def put(self, record: dict) -> int:
        """Queue one record durably; return its row id (0 if it alone exceeds max_bytes and was dropped)."""
        body = zlib.compress(json.dumps(record, separators=(",", ":")).encode("utf-8"), 6)
        rid = record.get("id")
        with self._lock:
            if len(body) > self.max_bytes:
                self._bump("dropped", 1)
                log.warning("record of %d bytes exceeds the outbox bound of %d: dropped", len(body), self.max_bytes)
                return 0
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if rid is not None:
                    row = db.execute("SELECT seq FROM records WHERE rid = ?", (rid,)).fetchone()
                    if row is not None:
                        db.execute("COMMIT")
                        return int(row[0])
                cur = db.execute("INSERT INTO records (rid, created, nbytes, body) VALUES (?, ?, ?, ?)",
                                 (rid, time.time(), len(body), body))
                seq = int(cur.lastrowid)
                total = self._bytes + len(body)
                dropped = 0
                while total > self.max_bytes:
                    old = db.execute("SELECT seq, nbytes FROM records ORDER BY seq LIMIT 1").fetchone()
                    db.execute("DELETE FROM records WHERE seq = ?", (old[0],))
                    total -= old[1]
                    dropped += 1
                if dropped:
                    self._add_meta("dropped", dropped)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._bytes = total
        if dropped:
            log.warning("outbox over %d bytes: dropped the %d oldest unsent records", self.max_bytes, dropped)
        return seq

    def ack(self, ids) -> None:
        """Delete delivered rows (unknown ids are ignored)."""
        ids = [int(i) for i in ids]
        if not ids:
            return
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                marks = ",".join("?" * len(ids))
                freed = db.execute(f"SELECT COALESCE(SUM(nbytes), 0) FROM records WHERE seq IN ({marks})",
                                   ids).fetchone()[0]
                db.execute(f"DELETE FROM records WHERE seq IN ({marks})", ids)
                self._add_meta("sent", len(ids))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._bytes -= int(freed)

    # ----------------------------------------------------------------- reads
    def peek_batch(self, n: int) -> list[tuple[int, dict]]:
        """The oldest ``n`` queued records as (row id, record), without removing them."""
        with self._lock:
            rows = self._db.execute("SELECT seq, body FROM records ORDER BY seq LIMIT ?", (int(n),)).fetchall()
        return [(int(seq), json.loads(zlib.decompress(body))) for seq, body in rows]

    def size_bytes(self) -> int:
        """Payload bytes queued (compressed), the quantity kept under max_bytes."""
        return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0])

    @property
    def dropped(self) -> int:
        return self._meta("dropped")

    def stats(self) -> dict:
        return {"queued": len(self), "bytes": self.size_bytes(), "max_bytes": self.max_bytes,
                "dropped": self.dropped, "sent": self._meta("sent")}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ meta
    def _meta(self, key: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def _add_meta(self, key: str, n: int) -> None:  # inside a transaction, lock held
        self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                         "ON CONFLICT(key) DO UPDATE SET value = value + excluded.value", (key, n))

    def _bump(self, key: str, n: int) -> None:  # lock held, outside a transaction
        self._add_meta(key, n)


class Uploader:
    """Background thread: outbox -> POST <url>/v1/records, ack on 200, exponential backoff on failure."""

    def __init__(self, outbox: Outbox, url: str, batch_size: int = 32, interval_s: float = 2.0,
                 timeout_s: float = 5.0, max_backoff_s: float = 60.0, gzip_body: bool = True, token: str = ""):
        self.outbox, self.url = outbox, url.rstrip("/") + "/v1/records"
        self.token = token  # the trainer's shared token (sent as a Bearer token)
        self.batch_size, self.interval_s, self.timeout_s = batch_size, interval_s, timeout_s
        self.max_backoff_s, self.gzip_body = max_backoff_s, gzip_body
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.delivered = 0
        self.refused = 0  # records the trainer refused by name (never retried)
        self.failures = 0
        self.last_error: str | None = None

    def start(self) -> "Uploader":
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="omnidraft-uploader", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def kick(self) -> None:
        """Try now instead of at the next interval (e.g. right after a put)."""
        self._wake.set()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until the outbox is empty (True) or ``timeout`` passed (False)."""
        end = time.monotonic() + timeout
        self.kick()
        while time.monotonic() < end:
            if len(self.outbox) == 0:
                return True
            time.sleep(0.05)
        return len(self.outbox) == 0

    def send_once(self) -> int:
        """Post one batch; return how many records were acked (raises on failure)."""
        batch = self.outbox.peek_batch(self.batch_size)
        if not batch:
            return 0
        body = json.dumps({"records": [r for _, r in batch]}, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.gzip_body:
            body = gzip.compress(body, 6)
            headers["Content-Encoding"] = "gzip"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                if resp.status != 200:
                    raise OSError(f"trainer answered HTTP {resp.status}")
                resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 400 and self._drop_refused(batch, e):
                return 0  # the rest goes again with the next send
            raise
        self.outbox.ack([seq for seq, _ in batch])
        self.delivered += len(batch)
        return len(batch)

    def _drop_refused(self, batch, err) -> bool:
        """A 400 that names the records it refused (invalid, or another vocabulary's): they would be refused
        forever, so they leave the outbox (counted in ``refused``) and the others are sent again.  False when
        the answer names none: then the whole batch is retried like any failure."""
        try:
            body = json.loads(err.read().decode("utf-8"))
            bad = {int(x["index"]) for x in body.get("errors", [])}
        except (ValueError, TypeError, KeyError, AttributeError, OSError):
            return False
        if body.get("code") not in ("invalid_record", "foreign_vocabulary") or not bad:
            return False
        drop = [seq for i, (seq, _) in enumerate(batch) if i in bad]
        if not drop:
            return False
        self.outbox.ack(drop)
        self.refused += len(drop)
        log.warning("trainer refused %d record(s) (%s: %s); dropped from the outbox", len(drop), body.get("code"),
                    body.get("error"))
        return True

    def _run(self) -> None:
        delay = self.interval_s
        while not self._stop.is_set():
            try:
                n = self.send_once()
                delay = self.interval_s
                if n == self.batch_size:
                    continue  # more may be waiting
            except Exception as e:  # noqa: BLE001 - never raise into the caller; retry later
                self.failures += 1
                msg = f"{type(e).__name__}: {e}"
                if msg != self.last_error:
                    log.info("upload to %s failed (%s); retrying with backoff", self.url, msg)
                self.last_error = msg
                delay = min(self.max_backoff_s, max(delay, self.interval_s) * 2)
                self._wait(delay)
                continue
            self._wait(delay)

    def _wait(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()
