"""One user's own repository as a prompt set (assets.repo_sets, issue 26): split by file, never leaking a held-out
file into the stream, deterministic, reached through snapshot.load_set as ``omnidraft adapt --stream-set`` reaches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from omnidraft.assets import repo_sets
from omnidraft.assets.prompts import PromptSourceMissing
from omnidraft.assets.snapshot import load_set
from omnidraft.distill.sources import ADAPTATION_DOMAIN


def _file(i: int) -> str:
    """A JavaScript module of two definitions, each with more than 40 lines after its opening."""
    body = "".join(f"  const value{j} = items[{j}] + offset{i}\n" for j in range(30))
    return "".join(f"async function handler{i}x{d} (items, offset{i}) {{\n{body}  return value0\n}}\n\n"
                   for d in range(2)) + "module.exports = { handler }\n" * 45


@pytest.fixture
def tiny_repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    for i in range(120):
        p = root / "lib" / f"part{i % 3}" / f"mod{i}.js"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(_file(i))
    (root / "lib" / "node_modules").mkdir()
    (root / "lib" / "node_modules" / "dep.js").write_text(_file(999))  # a dependency, not the repository
    (root / "lib" / "test").mkdir()
    (root / "lib" / "test" / "mod.js").write_text(_file(998))
    monkeypatch.setitem(repo_sets.REPOS, "tiny", repo_sets.Repo(root, ("lib",), "test"))
    monkeypatch.setattr(repo_sets, "SETS", tuple(repo_sets.REPOS))
    monkeypatch.setattr(repo_sets, "LONG_SETS", tuple(n + repo_sets.LONG for n in repo_sets.REPOS))
    return root


def _files(items) -> set[str]:
    return {i.id.rsplit(":", 1)[0] for i in items}


def test_held_out_files_never_reach_the_stream(tiny_repo):
    ps = load_set("tiny")
    held, stream = ps.split("heldout"), ps.split("stream")
    assert len(held) == repo_sets._HELDOUT and len(stream) >= 64
    assert not _files(held) & _files(stream)
    assert all(not i.chat and "handler" in i.prompt for i in ps.items)
    files = repo_sets.repo_files(repo_sets.REPOS["tiny"])
    assert len(files) == 120  # its own node_modules and tests are not the repository's code
    held_files = {f"tiny:{p.relative_to(tiny_repo)}" for p in files
                  if repo_sets.file_split("tiny", p, tiny_repo) == "heldout"}
    assert _files(held) <= held_files and 0.15 < len(held_files) / len(files) < 0.35  # the seeded quarter


def test_the_set_is_the_same_every_time_and_a_seed_reorders_it(tiny_repo):
    a, b, c = load_set("tiny"), load_set("tiny"), load_set("tiny", seed=1)
    assert [(i.id, i.prompt) for i in a.items] == [(i.id, i.prompt) for i in b.items]
    assert [i.id for i in a.items] != [i.id for i in c.items]
    # the seed picks prompts, never the split: held-out files stay held out whatever the seed
    assert not _files(c.split("heldout")) & _files(a.split("stream"))


def test_a_file_gives_distinct_prompts_that_do_not_overlap(tiny_repo):
    items = load_set("tiny").split("stream")
    by_file: dict[str, list[int]] = {}
    for i in items:
        name, line = i.id.rsplit(":", 1)
        by_file.setdefault(name, []).append(int(line))
    assert max(len(v) for v in by_file.values()) == repo_sets.PER_FILE
    for i in items:
        others = [j for j in items if j.id.rsplit(":", 1)[0] == i.id.rsplit(":", 1)[0] and j is not i]
        assert all(i.prompt not in j.prompt and j.prompt not in i.prompt for j in others)


def test_too_small_a_repository_refuses_to_load(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.js").write_text(_file(0))
    monkeypatch.setitem(repo_sets.REPOS, "small", repo_sets.Repo(tmp_path, ("lib",), "test"))
    with pytest.raises(PromptSourceMissing):
        repo_sets.load("small")


@pytest.mark.parametrize("name", repo_sets.SETS)
def test_the_machines_repositories_are_javascript_the_drafter_never_saw(name):
    repo = repo_sets.REPOS[name]
    if not repo.root.is_dir():
        pytest.skip(f"{repo.root} absent on this machine")
    assert ADAPTATION_DOMAIN == "javascript"  # distillation keeps every .js file out
    assert all(Path(p).suffix == ".js" for p in repo_sets.repo_files(repo))
    ps = load_set(name)
    assert len(ps.split("heldout")) >= 30 and len(ps.split("stream")) >= 64
    assert not _files(ps.split("heldout")) & _files(ps.split("stream"))


def test_the_long_variant_keeps_the_held_out_prompts_and_streams_more_of_the_same_files(tiny_repo):
    base, long = load_set("tiny"), load_set("tiny" + repo_sets.LONG)
    assert [(i.id, i.prompt) for i in long.split("heldout")] == [(i.id, i.prompt) for i in base.split("heldout")]
    stream = long.split("stream")
    assert len(stream) > len(base.split("stream")) and len({i.prompt for i in stream}) == len(stream)
    assert _files(stream) == _files(base.split("stream"))  # more prompts a file, never another file
    assert not _files(long.split("heldout")) & _files(stream)
    assert long.name == "tiny-long"
