"""One user's own repository as a prompt set (issue 26): the requests a user working in one codebase sends.

| set     | items | source (licence)                                                                  | split           |
|---------|-------|-----------------------------------------------------------------------------------|-----------------|
| npm-cli | 199   | the npm/cli monorepo as npm ships it here: ``lib/``, ``bin/`` and its workspaces  | seeded, by file |
|         |       | (``@npmcli/arborist``, ``@npmcli/config``, ``libnpm*``) (Artistic-2.0, ISC)       |                 |
| undici  | 113   | undici, the HTTP client npm bundles: its ``lib/`` (MIT)                           | seeded, by file |

A user works in one codebase: its identifiers, idioms and layout come back from file to file (npm's code is
written in one style, no semicolons and a space before every parameter list).  JavaScript stays out of
distillation (``distill.sources.ADAPTATION_DOMAIN``), so the drafter never saw this code.  The split is by file
(``HELDOUT_EVERY``, a seeded hash of the path relative to the repository): held-out prompts come from files the
stream never reads, so what the curve measures is what carries over to the rest of the repository, not memory of
the streamed text.  (Measured: the repository's style is learnt in minutes, its identifiers are not, and end to
end a repository gains no more than the language at large: BENCHMARKS.md, Adaptation.)

Prompts are the ``javascript`` set's: a definition's opening of 600-900 characters, plain text (no chat
template), the target continuing it.  A file gives up to ``PER_FILE`` prompts (distinct definitions, seeded), as a
user writing in a file asks more than once; files are taken round-robin so the first n prompts span n files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from omnidraft.assets.corpora import one_in

from .prompts import VERSION, Item, PromptSet, PromptSourceMissing, _code_prompt, _interleave


@dataclass(frozen=True)
class Repo:
    root: Path
    parts: tuple[str, ...]  # globs under root: the repository's packages as installed
    licence: str


NPM = Path("/usr/lib/node_modules/npm")
REPOS = {
    "npm-cli": Repo(NPM, ("lib", "bin", "node_modules/@npmcli/arborist", "node_modules/@npmcli/config",
                          "node_modules/libnpm*"), "Artistic-2.0 (npm), ISC (its workspaces)"),
    "undici": Repo(NPM / "node_modules/undici", ("lib",), "MIT"),
}
HELDOUT_EVERY = 4  # one file in four is held out
PER_FILE = 2
# a long stream (issue 43: 512 requests of one repository): ``NAME-long`` keeps NAME's held-out prompts and streams
# up to LONG_PER_FILE prompts a file of the same stream files, as a user who keeps working in them asks again
LONG, LONG_STREAM, LONG_PER_FILE = "-long", 1000, 8
SETS = tuple(REPOS)
LONG_SETS = tuple(name + LONG for name in REPOS)
_STREAM, _HELDOUT = 160, 48


def repo_files(repo: Repo) -> list[Path]:
    """The repository's .js files (its own nested node_modules and tests excluded), sorted."""
    out = set()
    for part in repo.parts:
        for top in sorted(repo.root.glob(part)):
            for p in [top] if top.suffix == ".js" else top.rglob("*.js"):
                rel = p.relative_to(top).parts
                if p.is_file() and "node_modules" not in rel and not any(x.startswith("test") for x in rel):
                    out.add(p)
    return sorted(out)


def file_split(name: str, path: Path, root: Path) -> str:
    """'heldout' for a seeded quarter of the files (by path relative to the repository), else 'train'."""
    return "heldout" if one_in(f"{name}:{path.relative_to(root)}", HELDOUT_EVERY) else "train"


def file_prompts(path: Path, rng: random.Random, most: int) -> list[tuple[int, str]]:
    """Up to ``most`` (first line, prompt) of one file, at distinct definitions that do not overlap."""
    text = path.read_text(errors="replace")
    out: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for _ in range(4 * most):
        got = _code_prompt("javascript", text, rng)
        if got is None:
            break
        start, end = got[0], got[0] + got[1].count("\n")
        if all(end < a or start > b for a, b in taken):
            out.append(got)
            taken.append((start, end))
            if len(out) == most:
                break
    return out


def _split_items(name: str, files: list[Path], root: Path, split: str, seed: int, most: int,
                 per_file: int = PER_FILE) -> list[Item]:
    rng = random.Random(f"{name}:{seed}:{split}")
    groups = []
    for p in rng.sample(files, len(files)):
        groups.append([Item(f"{name}:{p.relative_to(root)}:{line + 1}", prompt, False, split)
                       for line, prompt in file_prompts(p, rng, per_file)])
    return _interleave(groups)[:most]


def load(name: str, seed: int = 0) -> PromptSet:
    """A repository's set: stream prompts from its 'train' files, held-out prompts from its held-out files."""
    long, base = name.endswith(LONG), name.removesuffix(LONG)
    if base not in REPOS:
        raise ValueError(f"unknown repository set {name!r}; choose from {', '.join(SETS + LONG_SETS)}")
    repo = REPOS[base]
    files = repo_files(repo)
    items = []
    for split, side, most in (("heldout", "heldout", _HELDOUT), ("stream", "train", LONG_STREAM if long else _STREAM)):
        part = [p for p in files if file_split(base, p, repo.root) == side]
        per_file = LONG_PER_FILE if long and split == "stream" else PER_FILE
        got = _split_items(base, part, repo.root, split, seed, most, per_file)
        need = min(most, _STREAM) // 2
        if len(got) < need:
            raise PromptSourceMissing(f"{name}: {len(got)} {split} prompts (need {need}); source: the "
                                      f"repository's code under {repo.root} ({', '.join(repo.parts)})")
        items += got
    return PromptSet(name, VERSION, f"{name} as installed here ({repo.root}: {', '.join(repo.parts)})",
                     f"{repo.licence}; local use only", items)
