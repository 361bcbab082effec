"""Drafter versions on disk: publish atomically, list, roll back, keep the last N.

Layout under ``root``::

    versions/<id>/model.gguf      the drafter
    versions/<id>/meta.json       parent, steps, records seen, checks, held-out acceptance, ...
    CURRENT                       {"version": "<id>"}: the version generators should use
    registry.json                 {"base_path": "..."}: the drafter "base" stands for

Publishing writes ``versions/.tmp-<id>-<rand>/`` (files fsynced), renames it to ``versions/<id>``, then
replaces ``CURRENT`` through a temp file + ``os.replace``.  A crash at any point leaves ``CURRENT``
naming the previous, complete version; half-written temp directories are removed at the next open.
Readers (``Session.maybe_swap`` via :meth:`DrafterRegistry.current`) only ever read ``CURRENT`` and a
directory that is complete before it is named there.  Publish and rollback take an exclusive
``flock`` on ``.lock`` so a CLI rollback and the trainer never interleave.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path

from .errors import BadRequest, RegistryCorrupt

log = logging.getLogger(__name__)

BASE = "base"
_ID = re.compile(r"^v(\d{4,})$")


class DrafterRegistry:
    def __init__(self, root: str | Path, keep: int = 5, base_path: str | Path | None = None):
        self.root = Path(root)
        self.keep = max(1, keep)
        self.versions = self.root / "versions"
        self.versions.mkdir(parents=True, exist_ok=True)
        for stale in self.versions.glob(".tmp-*"):  # a publish that crashed half-way
            shutil.rmtree(stale, ignore_errors=True)
        if base_path is not None:
            _atomic_write(self.root / "registry.json", {"base_path": str(Path(base_path).resolve())})

    # ------------------------------------------------------------------ read
    def current(self) -> tuple[str, Path] | None:
        """(version id, GGUF path) generators should use, or None if nothing was published.

        Raises RegistryCorrupt if CURRENT is not what publish writes (``rollback`` repairs it)."""
        try:
            raw = (self.root / "CURRENT").read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise RegistryCorrupt(f"registry {self.root}: CURRENT is unreadable ({e}); "
                                  f"repair it with 'omnidraft drafter rollback VERSION'") from None
        try:
            version = json.loads(raw)["version"]
            if not isinstance(version, str):
                raise TypeError("version is not a string")
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise RegistryCorrupt(f"registry {self.root}: CURRENT does not name a version ({type(e).__name__}: "
                                  f"{e}); repair it with 'omnidraft drafter rollback VERSION'") from None
        path = self.path_of(version)
        if path is None or not path.is_file():
            log.error("registry %s: CURRENT names %s, which is missing", self.root, version)
            return None
        return version, path

    def path_of(self, version: str) -> Path | None:
        if version == BASE:
            base = self.base_path
            return base
        if not _ID.match(version):
            return None
        return self.versions / version / "model.gguf"

    @property
    def base_path(self) -> Path | None:
        try:
            return Path(json.loads((self.root / "registry.json").read_text())["base_path"])
        except (FileNotFoundError, ValueError, KeyError):
            return None

    def meta(self, version: str) -> dict:
        if version == BASE:
            return {"version": BASE, "path": str(self.base_path)}
        return json.loads((self.versions / version / "meta.json").read_text())

    def list(self) -> list[dict]:
        """Published versions, oldest first, each meta.json plus ``current`` (bool)."""
        cur = self.current()
        out = []
        for d in sorted(self._ids(), key=_num):
            try:
                m = self.meta(d)
            except (FileNotFoundError, ValueError):
                continue
            m["current"] = cur is not None and cur[0] == d
            out.append(m)
        return out

    def latest(self) -> str | None:
        ids = self._ids()
        return max(ids, key=_num) if ids else None

    # ----------------------------------------------------------------- write
    def publish(self, gguf: str | Path, meta: dict | None = None, move: bool = False) -> str:
        """Publish a drafter GGUF as a new version and make it current; return its id."""
        gguf = Path(gguf)
        with self._locked():
            version = f"v{max((_num(i) for i in self._ids()), default=0) + 1:04d}"
            tmp = self.versions / f".tmp-{version}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            dst = tmp / "model.gguf"
            if move:
                os.replace(gguf, dst)
            else:
                shutil.copyfile(gguf, dst)
            _fsync(dst)
            try:
                cur = self.current()
            except RegistryCorrupt as e:  # this publish repairs CURRENT
                log.warning("%s", e)
                cur = None
            m = dict(meta or {})
            m.setdefault("parent", cur[0] if cur else BASE)
            m.update(version=version, published=time.time(), size=dst.stat().st_size)
            _atomic_write(tmp / "meta.json", m)
            os.rename(tmp, self.versions / version)
            _fsync(self.versions)
            self._set_current(version)
            self._prune(version)
        log.info("published drafter %s (%s)", version, ", ".join(f"{k}={m[k]}" for k in ("parent", "steps")
                                                                   if k in m))
        return version

    def annotate(self, version: str, extra: dict) -> None:
        """Add fields to a published version's meta.json (atomically), e.g. held-out acceptance."""
        with self._locked():
            d = self.versions / version
            if not d.is_dir():
                return
            m = json.loads((d / "meta.json").read_text())
            m.update(extra)
            _atomic_write(d / "meta.json", m)

    def rollback(self, version: str) -> None:
        """Make an existing version (or ``base``) current."""
        with self._locked():
            path = self.path_of(version)
            if path is None or not path.is_file():
                raise BadRequest(f"no drafter version {version!r} in {self.root}; "
                                 f"have: {', '.join([BASE] + sorted(self._ids(), key=_num))}")
            self._set_current(version)
        log.info("drafter rolled back to %s", version)

    # -------------------------------------------------------------- internals
    def _ids(self) -> list[str]:
        return [d.name for d in self.versions.iterdir() if _ID.match(d.name) and d.is_dir()]

    def _set_current(self, version: str) -> None:
        _atomic_write(self.root / "CURRENT", {"version": version, "since": time.time()})

    def _prune(self, current: str) -> None:
        ids = sorted(self._ids(), key=_num)
        for old in ids[: max(0, len(ids) - self.keep)]:
            if old != current:
                shutil.rmtree(self.versions / old, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self):
        with open(self.root / ".lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def _num(version: str) -> int:
    m = _ID.match(version)
    return int(m.group(1)) if m else -1


def _fsync(path: Path) -> None:
    """Flush a file's data, or a directory's entries (so a rename survives a crash), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, obj: dict) -> None:
    """Write JSON to ``path`` via a temp file + fsync + rename: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync(path.parent)
