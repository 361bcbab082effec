"""Training records: what one generation contributes to the drafter's online training.

Schema ``omnidraft.record/1`` (a JSON object; see docs/RECORDS.md for the prose version)::

    schema          "omnidraft.record/1"
    id              32 hex chars, unique; the trainer dedups on it (upload is at-least-once)
    created         unix time (float, seconds)
    method          generation method ("omnidraft", "tli", ...)
    drafter_version drafter version that drafted ("base" or a registry version id)
    draft_fp        drafter vocabulary fingerprint (vocab_bridge.vocab_fingerprint)
    target_fp       target vocabulary fingerprint
    k               top-k size recorded per target position (GenerationParams.record_topk)
    prompt_ids      drafter ids of the rendered prompt (drafter's own BOS rule, special tokens parsed)
    output_ids      drafter ids of the output, per target token: [t2d[t]] if directly mapped, else
                    the drafter codec's spelling of the token's bytes (its "sub-tokens")
    dm              int per output position: 1 = directly mapped target token (L_DM applies)
    ngram           int per output position: 1 = sub-token of a multi-token target token (L_N-gram)
    topk_ids        per output position: drafter ids of the target's top-k that map directly
                    (most likely first), or null where dm == 0
    topk_probs      per output position: their target probabilities (temperature 1), or null
    rest_mass       per output position: 1 - sum(topk_probs) (target mass on unmapped tokens and
                    beyond the top k), or null
    target_ids      the target's output ids (target vocabulary)
    n_sub           per target token, how many output positions it spans (sum == len(output_ids))
    from_draft      per target token, 1 if it was a drafted candidate the target accepted
    stats           {completion_tokens, target_passes, proposed, accepted, ngram_proposed,
                     ngram_accepted, acceptance_rate, tau, finish_reason}

Alignment: the drafter is trained to predict ``output_ids[i]`` from ``prompt_ids + output_ids[:i]``.
A target token that is unmapped and whose bytes are empty (a control token) contributes no position.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from typing import Any

import numpy as np

from omnidraft.vocab.bridge import UNMAPPED

SCHEMA = "omnidraft.record/1"
_PER_POSITION = ("output_ids", "dm", "ngram", "topk_ids", "topk_probs", "rest_mass")


class RecordError(ValueError):
    """A record does not follow the schema; ``field`` names the top-level field at fault."""

    def __init__(self, message: str, field: str = "record"):
        super().__init__(message)
        self.field = field


def build_record(final, prompt, pair, method: str, drafter_version: str) -> dict:
    """A JSON-serialisable training record from a finished generation.

    ``final`` is the generator's ``Final`` (generated with ``record_topk > 0`` for L_DM targets;
    without it every dm position gets an empty top-k and rest_mass 1), ``prompt`` the ``PromptInput``,
    ``pair`` the ``PairContext`` whose drafter will be trained.
    """
    t2d = pair.bridge.t2d
    codec = pair.draft_codec
    target_bytes = pair.target_codec.token_bytes
    draft = pair.draft
    prompt_ids = [int(t) for t in prompt.tokenize(draft)]

    # per target output token: its top-k and whether it was an accepted draft
    tokens, topks, from_draft = [], [], []
    for st in final.steps:
        for j, tok in enumerate(st.new_tokens):
            tokens.append(int(tok))
            topks.append(st.topk[j] if j < len(st.topk) else None)
            from_draft.append(int(j < st.accepted))
    n = len(final.token_ids)
    if tokens[:n] != [int(t) for t in final.token_ids]:
        raise RecordError("steps do not spell the final token ids", "target_ids")
    tokens, topks, from_draft = tokens[:n], topks[:n], from_draft[:n]

    rec: dict[str, Any] = {k: [] for k in _PER_POSITION}
    n_sub = []
    for tok, tk in zip(tokens, topks):
        d = int(t2d[tok]) if 0 <= tok < len(t2d) else UNMAPPED
        if d != UNMAPPED:
            ids, probs, rest = _mapped_topk(tk, t2d)
            _append(rec, d, 1, 0, ids, probs, rest)
            n_sub.append(1)
        else:
            subs = codec.encode(target_bytes[tok]) if 0 <= tok < len(target_bytes) else []
            for s in subs:
                _append(rec, int(s), 0, 1, None, None, None)
            n_sub.append(len(subs))
    s = final.stats
    rec.update(
        schema=SCHEMA, id=uuid.uuid4().hex, created=time.time(), method=method,
        drafter_version=str(drafter_version), draft_fp=pair.bridge.draft_fp, target_fp=pair.bridge.target_fp,
        k=max((len(t[0]) for t in topks if t is not None), default=0),
        prompt_ids=prompt_ids, target_ids=tokens, n_sub=n_sub, from_draft=from_draft,
        stats=dict(completion_tokens=s.completion_tokens, target_passes=s.target_passes, proposed=s.proposed,
                   accepted=s.accepted, ngram_proposed=s.ngram_proposed, ngram_accepted=s.ngram_accepted,
                   acceptance_rate=round(s.acceptance_rate, 6), tau=round(s.tau, 6),
                   finish_reason=final.finish_reason),
    )
    return rec


def _append(rec: dict, d: int, dm: int, ng: int, ids, probs, rest) -> None:
    rec["output_ids"].append(d)
    rec["dm"].append(dm)
    rec["ngram"].append(ng)
    rec["topk_ids"].append(ids)
    rec["topk_probs"].append(probs)
    rec["rest_mass"].append(rest)


def _mapped_topk(tk, t2d: np.ndarray) -> tuple[list[int], list[float], float]:
    """Target top-k -> (drafter ids, probs) of the entries with a direct mapping, and the rest mass."""
    if tk is None:
        return [], [], 1.0
    tids, probs = tk
    d = t2d[np.asarray(tids, dtype=np.int64)]
    keep = d != UNMAPPED
    ids = [int(x) for x in d[keep]]
    ps = [round(float(p), 7) for p in np.asarray(probs, dtype=np.float64)[keep]]
    rest = max(0.0, 1.0 - math.fsum(ps))
    return ids, ps, round(rest, 7)


MAX_ID = (1 << 31) - 1  # token ids are int32 everywhere (llama.cpp, numpy tables)
MAX_TEXT = 256  # characters in a string field (method, fingerprints, stats values)
PROB_TOL = 1e-4  # a top-k may sum past 1 by float32 rounding, never by more
MASS_TOL = 1e-3  # |sum(topk_probs) + rest_mass - 1|
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{7,63}")


def validate(rec: Any, n_vocab: int | None = None, draft_fp: str | None = None) -> dict:
    """Check a record against the schema: every field's type, every value's range, every length.

    ``n_vocab``: drafter ids (prompt, output, top-k) must be below it; ``draft_fp``: the record must be of
    that drafter vocabulary.  Raises :class:`RecordError` naming the field (and position) at fault; a record
    that passes can be turned into tensors and gives a finite loss."""
    if not isinstance(rec, dict):
        raise RecordError(f"a record is a JSON object, not {_kind(rec)}")
    if rec.get("schema") != SCHEMA:
        raise RecordError(f"schema must be {SCHEMA!r}", "schema")
    if not isinstance(rec.get("id"), str) or not _ID.fullmatch(rec["id"]):
        raise RecordError("id must be 8-64 ASCII letters, digits or ._:- (build_record writes 32 hex)", "id")
    for key in ("method", "drafter_version", "draft_fp", "target_fp"):
        _text(rec.get(key), key)
    if draft_fp is not None and rec["draft_fp"] != draft_fp:
        raise RecordError(f"draft_fp {rec['draft_fp']!r} is another drafter vocabulary's; this trainer's drafter "
                          f"is {draft_fp}", "draft_fp")
    created = rec.get("created")
    if not (type(created) is float and math.isfinite(created) or type(created) is int and abs(created) < 1 << 53):
        raise RecordError("created must be a finite number (unix time)", "created")
    k = _count(rec.get("k"), "k")
    hi = MAX_ID if n_vocab is None else n_vocab - 1
    what = "" if n_vocab is None else f" of this drafter's {n_vocab}-token vocabulary"
    _ids(rec.get("prompt_ids"), "prompt_ids", hi, what)
    n = len(_ids(rec.get("output_ids"), "output_ids", hi, what))
    m = len(_ids(rec.get("target_ids"), "target_ids", MAX_ID, ""))
    dm, ngram = _mask(rec.get("dm"), "dm", n), _mask(rec.get("ngram"), "ngram", n)
    _mask(rec.get("from_draft"), "from_draft", m)
    n_sub = _list(rec.get("n_sub"), "n_sub", m)
    for j, x in enumerate(n_sub):
        _count(x, f"n_sub[{j}]", "n_sub")
    if sum(n_sub) != n:
        raise RecordError(f"n_sub sums to {sum(n_sub)}, output_ids has {n}", "n_sub")
    for key in ("topk_ids", "topk_probs", "rest_mass"):
        _list(rec.get(key), key, n)
    for i in range(n):
        if dm[i] and ngram[i]:
            raise RecordError(f"position {i} is both dm and ngram", "ngram")
        _check_topk(rec, i, bool(dm[i]), k, hi, what)
    stats = rec.get("stats", {})
    if not isinstance(stats, dict):
        raise RecordError(f"stats must be an object, not {_kind(stats)}", "stats")
    for key, v in stats.items():
        _text(key, "stats")
        if isinstance(v, str):
            _text(v, "stats")
        elif not (v is None or type(v) in (bool, int) or type(v) is float and math.isfinite(v)):
            raise RecordError(f"stats[{key!r}] must be a string, a finite number, a boolean or null", "stats")
    return rec


def _check_topk(rec: dict, i: int, dm: bool, k: int, hi: int, what: str) -> None:
    """Position ``i``'s top-k: ids in range, probabilities in [0, 1] summing to at most 1, the rest mass."""
    ids, ps, rest = rec["topk_ids"][i], rec["topk_probs"][i], rec["rest_mass"][i]
    if ids is None and ps is None and rest is None:
        if dm:
            raise RecordError(f"position {i} is dm without a top-k (topk_ids, topk_probs, rest_mass)", "topk_ids")
        return
    for key, v in (("topk_ids", ids), ("topk_probs", ps), ("rest_mass", rest)):
        if v is None:
            raise RecordError(f"{key}[{i}] is null where the other top-k fields are set", key)
    _ids(ids, f"topk_ids[{i}]", hi, what, "topk_ids")
    if len(ids) > k:
        raise RecordError(f"topk_ids[{i}] has {len(ids)} entries, more than k = {k}", "topk_ids")
    if len(_list(ps, f"topk_probs[{i}]", len(ids), "topk_probs")) != len(ids):
        raise RecordError(f"topk_probs[{i}] has {len(ps)} entries, topk_ids[{i}] {len(ids)}", "topk_probs")
    for j, p in enumerate(ps):
        _probability(p, f"topk_probs[{i}][{j}]", "topk_probs")
    total = math.fsum(ps)
    if total > 1.0 + PROB_TOL:
        raise RecordError(f"topk_probs[{i}] sums to {total:.6g}, more than 1", "topk_probs")
    _probability(rest, f"rest_mass[{i}]", "rest_mass", tol=1e-6)
    if abs(total + rest - 1.0) > MASS_TOL:
        raise RecordError(f"rest_mass[{i}] = {rest:.6g} is not 1 - sum(topk_probs[{i}]) = {1 - total:.6g}",
                          "rest_mass")


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


def _text(v: Any, field: str) -> str:
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        raise RecordError(f"{field} must be a string of at most {MAX_TEXT} characters", field)
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(f"{field} is not valid Unicode (a lone surrogate)", field) from None
    return v


def _list(v: Any, where: str, n: int | None = None, field: str | None = None) -> list:
    field = field or where
    if not isinstance(v, list):
        raise RecordError(f"{where} must be a list, not {_kind(v)}", field)
    if n is not None and len(v) != n:
        raise RecordError(f"{where} has {len(v)} entries, expected {n}", field)
    return v


def _count(v: Any, where: str, field: str | None = None) -> int:
    if type(v) is not int or not 0 <= v <= MAX_ID:
        raise RecordError(f"{where} must be a non-negative integer, not {_show(v)}", field or where)
    return v


def _ids(v: Any, where: str, hi: int, what: str, field: str | None = None) -> list:
    field = field or where
    for j, x in enumerate(_list(v, where, None, field)):
        if type(x) is not int or not 0 <= x <= hi:
            raise RecordError(f"{where}[{j}] = {_show(x)} is not a token id (an integer in 0..{hi}{what})", field)
    return v


def _mask(v: Any, field: str, n: int) -> list:
    for j, x in enumerate(_list(v, field, n)):
        if type(x) not in (int, bool) or x not in (0, 1):
            raise RecordError(f"{field}[{j}] = {_show(x)}: a mask entry is 0, 1, true or false", field)
    return v


def _probability(v: Any, where: str, field: str, tol: float = 0.0) -> float:
    ok = type(v) is int and v in (0, 1) or type(v) is float and -tol <= v <= 1.0 + tol  # NaN fails both sides
    if not ok:
        raise RecordError(f"{where} = {_show(v)} is not a probability (a finite number in [0, 1])", field)
    return v


def _show(v: Any) -> str:
    return ascii(v) if len(ascii(v)) <= 40 else ascii(v)[:37] + "..."
