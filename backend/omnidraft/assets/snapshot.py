"""Prompt sets as files: what a machine without the sets' sources runs (the lent GPU machine has no package
registry, no HumanEval and no ShareGPT): :func:`load_set` takes a set's name or such a file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import lang_sets, repo_sets
from .prompts import Item, PromptSet, load


def export(name: str, n: int, out_dir: Path, seed: int = 0) -> Path:
    """The first ``n`` held-out items of a set (what ``bench run --n n`` takes) as ``out_dir/NAME.json``."""
    ps = load(name, seed)
    items = ps.split("heldout")[:n]
    path = Path(out_dir) / f"{ps.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": ps.name, "version": ps.version, "source": ps.source, "licence": ps.licence,
                                "seed": seed, "described": ps.describe(),
                                "items": [[i.id, i.prompt, i.chat, i.split] for i in items]}))
    return path


def load_set(name: str, seed: int = 0) -> PromptSet:
    """A set by name (``assets.prompts``', a repository's, ``assets.repo_sets``, or a language's,
    ``assets.lang_sets``), or a snapshot written by
    :func:`export` (a path ending in .json)."""
    if name.endswith(".json"):
        return load_snapshot(Path(name))
    for extra in (repo_sets, lang_sets):
        if name in extra.SETS + extra.LONG_SETS:
            return extra.load(name, seed)
    return load(name, seed)


def load_snapshot(path: Path) -> PromptSet:
    d = json.loads(Path(path).read_text())
    return PromptSet(d["name"], d["version"], f"{d['source']} (snapshot {Path(path).name}, seed {d['seed']})",
                     d["licence"], [Item(*row) for row in d["items"]])


if __name__ == "__main__":  # python -m omnidraft.assets.snapshot export SET[,SET...] N OUT_DIR
    if len(sys.argv) != 5 or sys.argv[1] != "export":
        sys.exit("usage: python -m omnidraft.assets.snapshot export SET[,SET...] N OUT_DIR")
    for set_name in sys.argv[2].split(","):
        print(export(set_name, int(sys.argv[3]), Path(sys.argv[4])))
