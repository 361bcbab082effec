"""Drafter versions at refs/drafters/ (models/README.md): a clone does not carry them, a pull fetches the pinned
one from the origin, verified, without growing the clone's .git."""

import dataclasses
import hashlib
import subprocess

import pytest

from omnidraft.assets import models, refstore


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def origin(tmp_path):
    """A repository with one commit on main and one drafter version published beside it."""
    repo = tmp_path / "origin"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("code\n")
    git(repo, "add", "README.md")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "code")
    drafter = tmp_path / "tiny.gguf"
    drafter.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    sha = hashlib.sha256(drafter.read_bytes()).hexdigest()
    ref = refstore.publish(repo, "tiny", drafter)
    assert ref == f"refs/drafters/tiny/{sha[:12]}" and git(repo, "status", "--porcelain") == ""
    return repo, sha


def objects(repo):
    return git(repo, "count-objects", "-v")


def test_a_clone_does_not_carry_versions_and_a_fetch_leaves_its_git_alone(origin, tmp_path):
    repo, sha = origin
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-local", str(repo), str(clone)], check=True)
    assert git(clone, "for-each-ref", "refs/drafters") == ""
    before = objects(clone)
    dest = clone / "models" / "tiny.gguf"
    assert refstore.fetch(clone, "tiny", sha, "tiny.gguf", dest) == dest
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
    assert objects(clone) == before  # fetched into a temporary repository, removed
    assert sorted(p.name for p in dest.parent.iterdir()) == ["tiny.gguf"]


def test_the_repository_holding_the_ref_reads_it_without_a_remote(origin, tmp_path):
    repo, sha = origin
    dest = tmp_path / "out" / "tiny.gguf"
    refstore.fetch(repo, "tiny", sha, "tiny.gguf", dest)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha


def test_failures_are_one_clear_error_and_leave_no_file(origin, tmp_path, monkeypatch):
    repo, sha = origin
    dest = tmp_path / "out" / "tiny.gguf"
    monkeypatch.setenv(refstore.REMOTE_ENV, str(repo))
    with pytest.raises(models.ModelFetchError, match="could not fetch"):
        refstore.fetch(tmp_path, "tiny", "f" * 64, "tiny.gguf", dest)  # no such version
    lone = tmp_path / "lone"
    lone.mkdir()
    git(lone, "init", "-q")
    monkeypatch.delenv(refstore.REMOTE_ENV)
    with pytest.raises(models.ModelFetchError, match="no origin"):
        refstore.fetch(lone, "tiny", sha, "tiny.gguf", dest)
    with pytest.raises(models.ModelFetchError, match="holds no"):
        refstore.fetch(repo, "tiny", sha, "other.gguf", dest)
    assert list(dest.parent.iterdir()) == []


def test_a_published_file_that_does_not_match_its_pin_is_refused(origin, tmp_path):
    repo, sha = origin
    drafter = tmp_path / "tiny.gguf"
    drafter.write_bytes(b"GGUF other bytes")
    git(repo, "update-ref", refstore.ref_for("tiny", sha), refstore.publish(repo, "tiny", drafter))
    dest = tmp_path / "out" / "tiny.gguf"
    with pytest.raises(models.ChecksumMismatch, match="pinned"):
        refstore.fetch(repo, "tiny", sha, "tiny.gguf", dest)
    assert not dest.exists()


def test_pull_fetches_a_missing_bundled_drafter_and_keeps_a_present_one(origin, tmp_path, monkeypatch):
    repo, sha = origin
    dest = tmp_path / "models" / "tiny.gguf"
    spec = dataclasses.replace(models.get_spec(models.SMOLLM2_D8), name="tiny", filename="tiny.gguf",
                               size=4 + 256 * 64, sha256=sha, bundled=str(dest))  # an absolute path joins as itself
    monkeypatch.setitem(models.REGISTRY, "tiny", spec)
    monkeypatch.setenv(refstore.REMOTE_ENV, str(repo))
    assert models.pull("tiny", progress=False) == dest and models.is_verified(spec)
    dest.write_bytes(b"GGUF a drafter being rebuilt")  # never overwritten by a fetch
    with pytest.raises(models.ChecksumMismatch, match="does not match"):
        models.pull("tiny", progress=False)
    assert dest.read_bytes() == b"GGUF a drafter being rebuilt"
