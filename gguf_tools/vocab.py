"""How much two vocabularies overlap, compared as raw byte strings (what the translator maps on).

Both tables come from llama.cpp (the caller's ``open_vocab``, omnidraft's vocab-only ``Engine``), so SentencePiece
'▁', byte-level 'Ġ'/'Ċ' and <0xNN> byte tokens are already decoded to the bytes they
stand for; control/unknown/unused tokens are left out of every count.
"""

from __future__ import annotations

import os
from pathlib import Path

from typing import Any, Callable


def _table(engine) -> dict[bytes, int]:
    """Raw bytes -> lowest token id, over non-special, non-empty tokens."""
    out: dict[bytes, int] = {}
    for t, b in enumerate(engine.token_bytes):
        if b and not engine.is_special[t]:
            out.setdefault(b, t)
    return out


def vocab_overlap(a_path: str | os.PathLike, b_path: str | os.PathLike, open_vocab: Callable[[Any], Any],
                  n_examples: int = 8) -> dict:
    """Shared tokens of A and B, each side's coverage, and how B's tokens split under A's tokenizer.

    ``b_multi_in_a`` counts B tokens that A's tokenizer needs more than one token for (B tokens
    that are not valid UTF-8 on their own are tokenized as raw bytes).  ``open_vocab(path)`` opens a
    model's vocabulary as a context manager with ``token_bytes``, ``is_special``, ``tokenize``, ``n_vocab``
    and ``vocab_type`` (omnidraft's ``Engine`` with ``vocab_only=True``).
    """
    with open_vocab(a_path) as a, open_vocab(b_path) as b:
        ta, tb = _table(a), _table(b)
        shared = ta.keys() & tb.keys()
        multi, examples_multi = 0, []
        for piece, tid in tb.items():
            if piece in ta:
                continue
            ids = a.tokenize(piece, add_bos=False, special=False)
            if len(ids) > 1:
                multi += 1
                if len(examples_multi) < n_examples and len(piece) > 4:
                    examples_multi.append({"b_token": tid, "text": _show(piece),
                                           "a_tokens": [_show(a.token_bytes[i]) for i in ids]})
        ex_shared = sorted((p for p in shared if len(p) > 3), key=lambda p: ta[p])[:n_examples]
        ex_a_only = sorted((p for p in ta.keys() - shared if len(p) > 3), key=lambda p: ta[p])[:n_examples]
        ex_b_only = sorted((p for p in tb.keys() - shared if len(p) > 3), key=lambda p: tb[p])[:n_examples]
        return {
            "a": {"path": str(Path(a_path)), "n_vocab": a.n_vocab, "n_regular": len(ta), "vocab_type": a.vocab_type},
            "b": {"path": str(Path(b_path)), "n_vocab": b.n_vocab, "n_regular": len(tb), "vocab_type": b.vocab_type},
            "shared": len(shared),
            "coverage_a": len(shared) / len(ta) if ta else 0.0,
            "coverage_b": len(shared) / len(tb) if tb else 0.0,
            "b_multi_in_a": multi,
            "b_multi_in_a_frac": multi / len(tb) if tb else 0.0,
            "examples": {"shared": [_show(p) for p in ex_shared], "a_only": [_show(p) for p in ex_a_only],
                         "b_only": [_show(p) for p in ex_b_only], "b_split_by_a": examples_multi},
        }


def _show(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def format_overlap(r: dict) -> str:
    """The dict from :func:`vocab_overlap` as a readable table."""
    a, b = r["a"], r["b"]
    rows = [
        ("", "A", "B"),
        ("file", Path(a["path"]).name, Path(b["path"]).name),
        ("tokens (all)", f"{a['n_vocab']:,}", f"{b['n_vocab']:,}"),
        ("regular tokens", f"{a['n_regular']:,}", f"{b['n_regular']:,}"),
        ("shared", f"{r['shared']:,}", f"{r['shared']:,}"),
        ("coverage", f"{r['coverage_a']:.1%}", f"{r['coverage_b']:.1%}"),
    ]
    w0 = max(len(x[0]) for x in rows)
    w1 = max(len(x[1]) for x in rows)
    lines = [f"{k:<{w0}}  {x:<{w1}}  {y}" for k, x, y in rows]
    lines.append(f"B tokens needing >1 A token: {r['b_multi_in_a']:,} ({r['b_multi_in_a_frac']:.1%} of B)")
    ex = r["examples"]
    lines.append("shared e.g.:  " + ", ".join(repr(s) for s in ex["shared"]))
    lines.append("A only e.g.:  " + ", ".join(repr(s) for s in ex["a_only"]))
    lines.append("B only e.g.:  " + ", ".join(repr(s) for s in ex["b_only"]))
    for e in ex["b_split_by_a"][:4]:
        lines.append(f"B {e['text']!r} -> A " + " + ".join(repr(t) for t in e["a_tokens"]))
    return "\n".join(lines)
