"""The online n-gram cache: a run of drafter tokens -> the one target token that spells it.

('f', 'la', 'ke') -> 'flake'.  It grows online from verified output and is bounded by
a byte budget with LRU or LFU eviction.  Memory is accounted per entry as its packed
size (4 bytes per key token + target id + hit count + last-use tick = 4n + 16 bytes),
which is also its exact size on disk; ``python_heap_bytes()`` measures the live
Python objects for comparison.

File format (little-endian), written to a temp file and renamed:
    b"ODNG" | u16 version | u32 header_len | JSON header | records | 32-byte sha256 of all before it
    record: u8 n | n x i32 key | i32 target | u32 hits | u64 tick
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import sys
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

MAGIC = b"ODNG"
VERSION = 1
MAX_N = 8  # longest drafter run considered for one target token
_REC_TAIL = struct.Struct("<iIQ")


class CacheFileError(Exception):
    """A cache file that is corrupt, truncated, of another version or of another vocabulary pair."""


def entry_bytes(n: int) -> int:
    return 4 * n + 16


@dataclass
class _Entry:
    target: int
    hits: int
    tick: int


class NGramCache:
    def __init__(self, draft_fp: str, target_fp: str, budget_bytes: int = 4 << 20, policy: str = "lru"):
        if policy not in ("lru", "lfu"):
            raise ValueError(f"eviction policy must be 'lru' or 'lfu', not {policy!r}")
        self.draft_fp, self.target_fp = draft_fp, target_fp
        self.budget_bytes = budget_bytes
        self.policy = policy
        self._map: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._bytes = 0
        self._tick = 0
        self.lookups = self.hits = self.added = self.evicted = 0

    # ------------------------------------------------------------------ use
    def __len__(self) -> int:
        return len(self._map)

    @property
    def nbytes(self) -> int:
        """Accounted bytes: exactly the sum of 4n + 16 over entries (== the records' size on disk)."""
        return self._bytes

    def longest_match(self, draft: Sequence[int], start: int) -> tuple[int, int] | None:
        """(target id, run length) of the longest cached run starting at ``start``, or None."""
        self.lookups += 1
        top = min(MAX_N, len(draft) - start)
        for n in range(top, 1, -1):
            e = self._map.get(tuple(draft[start: start + n]))
            if e is not None:
                self._touch(tuple(draft[start: start + n]), e)
                self.hits += 1
                return e.target, n
        return None

    def get(self, key: Sequence[int]) -> int | None:
        e = self._map.get(tuple(key))
        return None if e is None else e.target

    def add(self, key: Sequence[int], target: int) -> bool:
        """Record that drafter run ``key`` spells target token ``target``; True if new."""
        key = tuple(int(k) for k in key)
        if not 2 <= len(key) <= MAX_N:
            return False
        e = self._map.get(key)
        if e is not None:
            e.target = int(target)
            self._touch(key, e)
            return False
        self._tick += 1
        self._map[key] = _Entry(int(target), 0, self._tick)
        self._bytes += entry_bytes(len(key))
        self.added += 1
        self._evict()
        return key in self._map

    def _touch(self, key: tuple[int, ...], e: _Entry) -> None:
        self._tick += 1
        e.hits += 1
        e.tick = self._tick
        self._map.move_to_end(key)  # keeps the OrderedDict in LRU order

    def _evict(self) -> None:
        if self._bytes <= self.budget_bytes:
            return
        if self.policy == "lru":
            while self._bytes > self.budget_bytes and self._map:
                key, _ = self._map.popitem(last=False)
                self._drop(key)
            return
        # LFU: drop the least-hit (oldest first among equals) until 10 % under budget,
        # so the sort is paid once per many inserts, not on every one.
        target = int(self.budget_bytes * 0.9)
        for key, _ in sorted(self._map.items(), key=lambda kv: (kv[1].hits, kv[1].tick)):
            if self._bytes <= target:
                break
            del self._map[key]
            self._drop(key)

    def _drop(self, key: tuple[int, ...]) -> None:
        self._bytes -= entry_bytes(len(key))
        self.evicted += 1

    def python_heap_bytes(self) -> int:
        """Measured size of the live Python objects (dict, keys, entries), for comparison."""
        total = sys.getsizeof(self._map)
        for k, e in self._map.items():
            total += sys.getsizeof(k) + sys.getsizeof(e) + sys.getsizeof(e.__dict__)
        return total

    def stats(self) -> dict:
        n = len(self._map)
        return {
            "entries": n, "bytes": self._bytes, "budget_bytes": self.budget_bytes, "policy": self.policy,
            "bytes_per_entry": round(self._bytes / n, 2) if n else 0.0,
            "lookups": self.lookups, "hits": self.hits, "added": self.added, "evicted": self.evicted,
        }

    # ---------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = json.dumps({"draft_fp": self.draft_fp, "target_fp": self.target_fp, "policy": self.policy,
                             "entries": len(self._map), "tick": self._tick}).encode()
        body = bytearray(MAGIC + struct.pack("<HI", VERSION, len(header)) + header)
        for key, e in self._map.items():  # LRU order is kept by writing in order
            body += struct.pack(f"<B{len(key)}i", len(key), *key) + _REC_TAIL.pack(e.target, e.hits, e.tick)
        body += hashlib.sha256(body).digest()
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, draft_fp: str, target_fp: str, budget_bytes: int = 4 << 20,
             policy: str = "lru") -> "NGramCache":
        """Strict load: raises CacheFileError on any problem."""
        cache = cls(draft_fp, target_fp, budget_bytes, policy)
        data = Path(path).read_bytes()
        if len(data) < 4 + 6 + 32 or data[:4] != MAGIC:
            raise CacheFileError(f"{path}: not an omnidraft n-gram cache file")
        body, digest = data[:-32], data[-32:]
        if hashlib.sha256(body).digest() != digest:
            raise CacheFileError(f"{path}: checksum mismatch (corrupt or truncated)")
        version, hlen = struct.unpack_from("<HI", body, 4)
        if version != VERSION:
            raise CacheFileError(f"{path}: format version {version}, this build reads {VERSION}")
        header = json.loads(body[10: 10 + hlen])
        if not isinstance(header, dict):
            raise CacheFileError(f"{path}: header is not a JSON object")
        if (header.get("draft_fp"), header.get("target_fp")) != (draft_fp, target_fp):
            raise CacheFileError(f"{path}: belongs to another vocabulary pair")
        off = 10 + hlen
        while off < len(body):
            n = body[off]
            key = struct.unpack_from(f"<{n}i", body, off + 1)
            target, hits, tick = _REC_TAIL.unpack_from(body, off + 1 + 4 * n)
            off += 1 + 4 * n + _REC_TAIL.size
            cache._map[tuple(key)] = _Entry(target, hits, tick)
            cache._bytes += entry_bytes(n)
        tick = header.get("tick", 0)
        if isinstance(tick, bool) or not isinstance(tick, int):
            raise CacheFileError(f"{path}: header 'tick' is not an integer")
        cache._tick = tick
        cache._evict()
        return cache

    @classmethod
    def open(cls, path: str | os.PathLike, draft_fp: str, target_fp: str, budget_bytes: int = 4 << 20,
             policy: str = "lru") -> "NGramCache":
        """Load if possible; a missing file gives an empty cache, a bad one is reported and set aside."""
        p = Path(path)
        if not p.exists():
            return cls(draft_fp, target_fp, budget_bytes, policy)
        try:
            return cls.load(p, draft_fp, target_fp, budget_bytes, policy)
        except (CacheFileError, OSError, ValueError, struct.error, IndexError, UnicodeDecodeError) as e:
            # OSError: e.g. the path is a directory.  Moved aside so that the next save can write there.
            log.warning("n-gram cache not loaded, starting fresh: %s", e)
            aside = p.with_name(p.name + ".bad")
            if aside.exists():
                aside = p.with_name(f"{p.name}.bad-{time.time_ns()}")
            try:
                os.replace(p, aside)  # kept for inspection, not re-read
            except OSError as e2:
                log.warning("could not move %s aside (%s): the n-gram cache will not be saved there", p, e2)
            return cls(draft_fp, target_fp, budget_bytes, policy)


def cache_filename(draft_fp: str, target_fp: str) -> str:
    return f"ngram-{draft_fp}-{target_fp}.odng"
