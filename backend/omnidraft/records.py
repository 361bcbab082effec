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
import time
import uuid
from typing import Any

import numpy as np

from .vocab_bridge import UNMAPPED

SCHEMA = "omnidraft.record/1"
_PER_POSITION = ("output_ids", "dm", "ngram", "topk_ids", "topk_probs", "rest_mass")


class RecordError(ValueError):
    """A record does not follow the schema."""


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
        raise RecordError("steps do not spell the final token ids")
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


def validate(rec: dict) -> dict:
    """Check a record against the schema (used by the trainer on every received record)."""
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        raise RecordError(f"not an {SCHEMA} record")
    rid = rec.get("id")
    if not isinstance(rid, str) or not 8 <= len(rid) <= 64:
        raise RecordError("record id missing")
    for key in ("prompt_ids", "target_ids", "n_sub", *_PER_POSITION):
        if not isinstance(rec.get(key), list):
            raise RecordError(f"{rid}: {key} must be a list")
    n = len(rec["output_ids"])
    for key in _PER_POSITION:
        if len(rec[key]) != n:
            raise RecordError(f"{rid}: {key} has {len(rec[key])} entries, output_ids {n}")
    if sum(rec["n_sub"]) != n or len(rec["n_sub"]) != len(rec["target_ids"]):
        raise RecordError(f"{rid}: n_sub does not cover output_ids")
    for i in range(n):
        if rec["dm"][i]:
            ids, ps, rest = rec["topk_ids"][i], rec["topk_probs"][i], rec["rest_mass"][i]
            if ids is None or ps is None or rest is None or len(ids) != len(ps):
                raise RecordError(f"{rid}: position {i} is dm without a top-k")
            if any(p < 0 for p in ps) or sum(ps) > 1.0 + 1e-4 or not -1e-6 <= rest <= 1.0 + 1e-6:
                raise RecordError(f"{rid}: position {i} has invalid probabilities")
        if rec["dm"][i] and rec["ngram"][i]:
            raise RecordError(f"{rid}: position {i} is both dm and ngram")
    return rec
