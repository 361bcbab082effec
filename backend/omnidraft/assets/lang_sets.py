"""Single-language prompt sets, ``nl-de``, ``nl-fr``, ``nl-nl`` (``SETS``): issue 26's natural language as
``omnidraft adapt``'s new domain.

One language's translated man pages (kept out of distillation, like ``nl``'s).  A language has too few usable
page openings for adapt's 64 streamed and 32 held-out prompts, so each page gives up to _NL1_PER_PAGE windows: its
opening and later paragraphs, each one followed by _NL_CHARS_AFTER characters that no other window of the page
covers.  Split by page name as ``nl`` is (``prompts._man_split``: no translation of a held-out page streams, in
any language); pages in rotation, so the first n items span n pages.
"""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

from omnidraft.assets import corpora

from .prompts import (_NL_CHARS, _NL_CHARS_AFTER, VERSION, Item, PromptSet, PromptSourceMissing, _cut_end,
                      _interleave, _man_split, _usable_translation)

LANGS = ("de", "fr", "nl")  # those with 64 + 32 usable windows here (uk, sv, pt_BR, ja, ru, pl: too few pages)
_NL1_STREAM, _NL1_HELDOUT, _NL1_PER_PAGE = 64, 32, 4
# a long stream (issue 43: 512 requests of one language): ``nl-LANG-long`` keeps ``nl-LANG``'s held-out prompts and
# streams every usable window of its stream pages (French here: 184), which 512 requests still cycle
LONG, _LONG_PER_PAGE = "-long", 1000
SETS = tuple(f"nl-{lang}" for lang in LANGS)
LONG_SETS = tuple(name + LONG for name in SETS)
# groff's glyph names that corpora.man_page_text leaves (German pages write every umlaut this way, so ``nl``'s
# filter drops most of their paragraphs): decoded here, for these sets only (``nl`` is pinned by VERSION)
_GLYPHS = {":a": "ä", ":o": "ö", ":u": "ü", ":A": "Ä", ":O": "Ö", ":U": "Ü", ":e": "ë", ":i": "ï", "ss": "ß",
           "'a": "á", "'e": "é", "'i": "í", "'o": "ó", "'u": "ú", "`a": "à", "`e": "è", "`u": "ù", "^a": "â",
           "^e": "ê", "^i": "î", "^o": "ô", "^u": "û", ",c": "ç", "~n": "ñ", "~a": "ã", "~o": "õ", "Bq": "„",
           "bq": "‚", "lq": "“", "rq": "”", "oq": "‘", "cq": "’", "aq": "'", "dq": '"', "Fo": "«", "Fc": "»",
           "fo": "‹", "fc": "›", "bu": "•", "en": "–", "em": "—", "hy": "‐", "mu": "×", "co": "©", "rg": "®"}
_GLYPH = re.compile(r"\\(?:\((..)|\[([^]\s]{1,8})\])")
_BREAK = re.compile(r"^'(?:br|sp)\b.*\n?", re.M)


def _decode_glyphs(text: str) -> str:
    """Known glyph escapes as their characters, troff breaks dropped; unknown escapes stay (and the filter
    drops their windows)."""
    text = _GLYPH.sub(lambda m: _GLYPHS.get(m[1] or m[2], m[0]), text)
    return _BREAK.sub("", text)


def _page_windows(path: Path, most: int) -> list[tuple[int, str]]:
    """Up to ``most`` (first line, text) windows of a page, each starting a paragraph, holding _NL_CHARS
    characters of whole lines, passing ``_usable_translation`` and followed by at least _NL_CHARS_AFTER
    characters, which the next window does not overlap."""
    lines = _decode_glyphs(corpora.man_page_text(path)).splitlines(keepends=True)
    at = list(itertools.accumulate((len(x) for x in lines), initial=0))  # character offset of each line
    out, start = [], 0
    while start < len(lines) and len(out) < most:
        end = _cut_end(lines, start, *_NL_CHARS) if lines[start].strip() and (
            start == 0 or not lines[start - 1].strip()) else None
        if end is not None and at[-1] - at[end] < _NL_CHARS_AFTER:
            break
        prompt = "".join(lines[start:end]) if end else ""
        if prompt and _usable_translation(prompt):
            out.append((start, prompt))
            start = next((i for i in range(end, len(lines)) if at[i] >= at[end] + _NL_CHARS_AFTER), len(lines))
        else:
            start += 1
    return out


def load(name: str, seed: int = 0) -> PromptSet:
    """One language's translated man pages (kept out of distillation): windows of its pages, split by page."""
    if name not in SETS + LONG_SETS:
        raise ValueError(f"unknown language set {name!r}; choose from {', '.join(SETS + LONG_SETS)}")
    long = name.endswith(LONG)
    lang = name[3:].removesuffix(LONG)

    pages = [p for _, p in corpora.man_pages((lang,)) if not p.is_symlink()]
    items = []
    for split, most in (("heldout", _NL1_HELDOUT), ("stream", _NL1_STREAM)):
        part = [p for p in pages if _man_split(p) == split]
        part = random.Random(f"nl-{lang}:{seed}:{split}").sample(part, len(part))
        per_page, need = _NL1_PER_PAGE, most
        if long and split == "stream":  # every window of the stream pages, at least as many as the short set's
            per_page, most = _LONG_PER_PAGE, None
        got = _interleave([Item(f"{lang}:{p.parent.name}/{p.name}:{line + 1}", text, False, split)
                           for line, text in _page_windows(p, per_page)] for p in part)[:most]
        if len(got) < need:
            raise PromptSourceMissing(
                f"{name}: {len(got)} usable {split} windows of translated man pages (need {need}) under "
                f"/usr/share/man/{lang} (Debian/Ubuntu: manpages-{lang.split('_')[0]}, manpages-l10n, ...)")
        items += got
    return PromptSet(name, VERSION, f"this machine's man pages translated to {lang} (/usr/share/man/{lang})",
                     "those of the man-page packages (local use only)", items)
