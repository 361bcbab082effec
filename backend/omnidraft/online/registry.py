"""Drafter versions on disk: publish atomically, list, roll back, keep the last N.

Layout under ``root``::

    versions/<id>/model.gguf      the drafter
    versions/<id>/meta.json       sha256 of model.gguf, parent, steps, records seen, checks, held-out acceptance, ...
    CURRENT                       {"version": "<id>"}: the version generators should use
    registry.json                 {"base_path": "..."}: the drafter "base" stands for
    heldout.json                  [{version, prompts, acceptance, ...}]: held-out measurements of versions, in
                                  the order taken (``omnidraft adapt`` writes them; the server shows them)

Publishing writes ``versions/.tmp-<id>-<rand>/`` (files fsynced), renames it to ``versions/<id>``, then
replaces ``CURRENT`` through a temp file + ``os.replace``.  A crash at any point leaves ``CURRENT``
naming the previous, complete version; half-written temp directories are removed at the next open.
Readers (``Session.maybe_swap`` via :meth:`DrafterRegistry.current`) only ever read ``CURRENT`` and a
directory that is complete before it is named there.  Publish and rollback take an exclusive
``flock`` on ``.lock`` so a CLI rollback and the trainer never interleave.

Every published GGUF carries its sha256 in meta.json, and :meth:`DrafterRegistry.current` (so every reader:
the server's hot swap, the trainer's reload) and :meth:`rollback` check it before naming the file: a file
changed after publishing (a flipped weight byte loads fine and only drafts worse) raises
:class:`VersionCorrupt` instead.  Each file is hashed once per process while its size, mtime and inode
stay the same, so asking before every request costs a ``stat`` (a reader loads a version right after
its first check, which reads the file itself).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path

from omnidraft.errors import BadRequest, RegistryCorrupt

log = logging.getLogger(__name__)

BASE = "base"
HELDOUT = "heldout.json"
_ID = re.compile(r"^v(\d{4,})$")


class VersionCorrupt(RegistryCorrupt):
    """A published version's GGUF does not match the sha256 recorded when it was published."""

    def __init__(self, message: str, version: str):
        super().__init__(message)
        self.version = version


class DrafterRegistry:
    def __init__(self, root: str | Path, keep: int = 5, base_path: str | Path | None = None):
        self.root = Path(root)
        self.keep = max(1, keep)
        self.versions = self.root / "versions"
        try:
            self.versions.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a file, /proc, no permission: one line, not a traceback
            raise BadRequest(f"drafter registry {self.root}: cannot use it as a directory "
                             f"({e.strerror or type(e).__name__})") from None
        self._checked: dict[str, tuple[tuple, str | None]] = {}  # version -> (file signature, error or None)
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
        if version != BASE:
            self.verify(version)
        return version, path

    def verify(self, version: str) -> None:
        """Check a published version's GGUF against the sha256 in its meta.json; raise VersionCorrupt if not.

        The verdict is kept while the file's and the meta's size, mtime and inode stay the same."""
        try:
            sig = self._signature(version)
        except OSError as e:
            raise VersionCorrupt(f"registry {self.root}: drafter {version} cannot be checked ({e})", version) from None
        seen = self._checked.get(version)
        if seen is None or seen[0] != sig:
            seen = (sig, self._mismatch(version))
            self._checked[version] = seen
        if seen[1] is not None:
            raise VersionCorrupt(seen[1], version)

    def _signature(self, version: str) -> tuple:
        d = self.versions / version
        return tuple((st.st_size, st.st_mtime_ns, st.st_ino) for st in (os.stat(d / "model.gguf"),
                                                                        os.stat(d / "meta.json")))

    def _mismatch(self, version: str) -> str | None:
        """Why ``version``'s file cannot be trusted, or None."""
        d = self.versions / version
        fix = "roll back with 'omnidraft drafter rollback VERSION' (or publish again)"
        try:
            want = json.loads((d / "meta.json").read_text()).get("sha256")
        except (OSError, ValueError, AttributeError) as e:
            return f"registry {self.root}: drafter {version} has an unreadable meta.json ({e}), so no sha256; {fix}"
        if want is None:
            # published before checksums existed (or its sha256 removed): nothing says the file is the one
            # published, so it is refused like a mismatch (docs/RECORDS.md); the drafter in use keeps serving
            return (f"registry {self.root}: drafter {version} has no sha256 in its meta.json (published by an "
                    f"older build, or edited), so its file cannot be checked; publish it again, or {fix}")
        if not isinstance(want, str):
            return f"registry {self.root}: drafter {version} has an unusable sha256 in its meta.json; {fix}"
        got = _sha256(d / "model.gguf")
        if got != want:
            return (f"registry {self.root}: drafter {version}'s model.gguf does not match the sha256 it was "
                    f"published with ({got[:12]}... != {want[:12]}...): changed or corrupted since; {fix}")
        return None

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
            sha = _sha256(dst)
            try:
                cur = self.current()
            except RegistryCorrupt as e:  # this publish repairs CURRENT
                log.warning("%s", e)
                cur = None
            m = dict(meta or {})
            m.setdefault("parent", cur[0] if cur else BASE)
            m.update(version=version, published=time.time(), size=dst.stat().st_size, sha256=sha)
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
            m.update({k: v for k, v in extra.items() if k not in ("sha256", "version")})  # never the identity
            _atomic_write(d / "meta.json", m)

    def add_evaluation(self, point: dict) -> None:
        """Append one held-out measurement (of a version, ``base`` or a control) to heldout.json, atomically."""
        with self._locked():
            _atomic_write(self.root / HELDOUT, self.evaluations() + [dict(point)])

    def evaluations(self) -> list[dict]:
        """Every held-out measurement so far, oldest first ([] if none or unreadable: they are only shown)."""
        try:
            points = json.loads((self.root / HELDOUT).read_text())
        except (OSError, ValueError):
            return []
        return [p for p in points if isinstance(p, dict)] if isinstance(points, list) else []

    def rollback(self, version: str) -> None:
        """Make an existing version (or ``base``) current."""
        with self._locked():
            path = self.path_of(version)
            if path is None or not path.is_file():
                raise BadRequest(f"no drafter version {version!r} in {self.root}; "
                                 f"have: {', '.join([BASE] + sorted(self._ids(), key=_num))}")
            if version != BASE:
                try:
                    self.verify(version)
                except VersionCorrupt as e:
                    raise BadRequest(f"not rolled back: {e}") from None
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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    """Flush a file's data, or a directory's entries (so a rename survives a crash), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, obj: dict | list) -> None:
    """Write JSON to ``path`` via a temp file + fsync + rename: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync(path.parent)
