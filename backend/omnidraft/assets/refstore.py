"""Drafter versions kept in this repository outside its branches (models/README.md, "Drafter versions").

Each version is a commit holding that one file, at ``refs/drafters/NAME/SHA12`` (the first 12 hex digits of its
sha256).  ``git clone`` copies branches and tags only, so a version costs nothing to a clone that does not ask
for it; ``models.pull`` writes the pinned one into ``models/`` (ignored) on first use: from this repository when
it holds the ref, else fetched at depth 1 from its ``origin`` ($OMNIDRAFT_DRAFTER_REMOTE overrides) into a
temporary repository removed afterwards, so the clone's own ``.git`` does not grow either.

    python -m omnidraft.assets.refstore publish NAME FILE    # the maintainers' step: prints the ref to push
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from omnidraft.errors import ChecksumMismatch, ModelFetchError

REMOTE_ENV = "OMNIDRAFT_DRAFTER_REMOTE"


def ref_for(name: str, sha256: str) -> str:
    return f"refs/drafters/{name}/{sha256[:12]}"


def _git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, **kw)


def publish(repo: Path, name: str, path: Path) -> str:
    """Store ``path`` as a one-file commit at its ref in ``repo`` (no branch moves, no work-tree change)."""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    blob = _git(repo, "hash-object", "-w", str(path), check=True).stdout.strip()
    tree = _git(repo, "mktree", input=f"100644 blob {blob}\t{path.name}\n", check=True).stdout.strip()
    commit = _git(repo, "commit-tree", tree, "-m", f"{name} {path.name} sha256 {sha}", check=True).stdout.strip()
    ref = ref_for(name, sha)
    _git(repo, "update-ref", ref, commit, check=True)
    return ref


def _remote(repo: Path) -> str:
    url = os.environ.get(REMOTE_ENV) or _git(repo, "remote", "get-url", "origin").stdout.strip()
    if url and "://" not in url and (repo / url).exists():
        url = str((repo / url).resolve())  # a path relative to the clone
    return url


def fetch(repo: Path, name: str, sha256: str, member: str, dest: Path) -> Path:
    """Write ``member`` of the version at ``ref_for(name, sha256)`` to ``dest``, verified against ``sha256``."""
    ref = ref_for(name, sha256)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".refstore-") as tmp:
        src = repo
        if _git(repo, "rev-parse", "-q", "--verify", ref + "^{commit}").returncode != 0:
            url = _remote(repo)
            if not url:
                raise ModelFetchError(f"{name}: {repo} has no {ref} and no origin to fetch it from "
                                      f"(set ${REMOTE_ENV} to a clone that has it; models/README.md)")
            src = Path(tmp) / "git"
            _git(Path(tmp), "init", "-q", "--bare", str(src), check=True)
            got = _git(src, "fetch", "-q", "--depth", "1", "--no-tags", url, ref)
            if got.returncode != 0:
                raise ModelFetchError(f"{name}: could not fetch {ref} from {url}: {got.stderr.strip()[-500:]}")
            ref = "FETCH_HEAD"
        part, h = Path(tmp) / member, hashlib.sha256()
        with open(part, "wb") as out, subprocess.Popen(["git", "-C", str(src), "cat-file", "blob", f"{ref}:{member}"],
                                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
            while chunk := proc.stdout.read(1 << 22):
                h.update(chunk)
                out.write(chunk)
        if proc.returncode != 0:
            raise ModelFetchError(f"{name}: {ref} holds no {member}")
        if h.hexdigest() != sha256:
            raise ChecksumMismatch(f"{name}: {ref}:{member} has sha256 {h.hexdigest()}, not the pinned {sha256}")
        os.replace(part, dest)
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "publish":
        sys.exit(__doc__.split("\n\n")[-1])
    print(publish(Path.cwd(), sys.argv[2], Path(sys.argv[3])))
