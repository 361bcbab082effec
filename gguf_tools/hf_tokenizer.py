"""HF tokenizer files -> GGUF ``tokenizer.*`` metadata, for the two families llama.cpp calls

* ``gpt2``: byte-level BPE (tokenizer.json: vocab + merges), e.g. Qwen2, SmolLM, Llama 3;
* ``llama``: SentencePiece BPE, from tokenizer.model (needs sentencepiece) or from a
  tokenizer.json with Metaspace + byte_fallback; merge priority becomes the token score.

The pre-tokenizer name (``tokenizer.ggml.pre``), which selects llama.cpp's split regex,
is recognised from the tokenizer.json pre-tokenizer for a few known families; anything
else falls back to 'default' with a warning (pass ``vocab_from`` to be exact).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import gguf

from .errors import BadArgument, InvalidFile

log = logging.getLogger(__name__)

T = gguf.GGUFValueType
TT = gguf.TokenType
K = gguf.Keys.Tokenizer

_QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_RE = _QWEN2_RE.replace(r"\p{N}|", r"\p{N}{1,3}|")
_KNOWN_SPLITS = {_QWEN2_RE: "qwen2", _LLAMA3_RE: "llama-bpe"}
_BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def tokenizer_kv(hf_dir: Path, arch: str, vocab_size: int) -> list[tuple[str, Any, T, T | None]]:
    """The ``tokenizer.*`` KVs for the tokenizer files in ``hf_dir``, padded to ``vocab_size`` tokens."""
    hf_dir = Path(hf_dir)
    cfg = _json(hf_dir / "tokenizer_config.json") or {}
    if (hf_dir / "tokenizer.json").is_file():
        tj = _json(hf_dir / "tokenizer.json")
        kv = _from_tokenizer_json(tj, cfg, arch, vocab_size)
    elif (hf_dir / "tokenizer.model").is_file():
        kv = _from_sentencepiece(hf_dir / "tokenizer.model", cfg, vocab_size)
    else:
        raise InvalidFile(f"{hf_dir}: no tokenizer.json or tokenizer.model; pass vocab_from=<a GGUF> instead")
    template = _chat_template(hf_dir, cfg)
    if template:
        kv.append((K.CHAT_TEMPLATE, template, T.STRING, None))
    return kv


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _chat_template(hf_dir: Path, cfg: dict) -> str | None:
    t = cfg.get("chat_template")
    if isinstance(t, list):  # [{"name": "default", "template": ...}, ...]
        t = next((x["template"] for x in t if x.get("name") == "default"), None)
    if not t and (hf_dir / "chat_template.jinja").is_file():
        t = (hf_dir / "chat_template.jinja").read_text(encoding="utf-8")
    return t or None


def _walk(node: Any) -> list[dict]:
    """Every dict inside a tokenizer.json component (Sequence nests them)."""
    if isinstance(node, dict):
        return [node] + [d for v in node.values() for d in _walk(v)]
    if isinstance(node, list):
        return [d for v in node for d in _walk(v)]
    return []


def _from_tokenizer_json(tj: dict, cfg: dict, arch: str, vocab_size: int) -> list:
    model = tj["model"]
    if model.get("type") != "BPE":
        raise BadArgument(f"tokenizer model {model.get('type')!r} is not supported (BPE only); use vocab_from")
    parts = _walk(tj.get("pre_tokenizer")) + _walk(tj.get("decoder")) + _walk(tj.get("normalizer"))
    kinds = {d.get("type") for d in parts}
    byte_level = "ByteLevel" in kinds
    if not byte_level and not ({"Metaspace", "Prepend"} & kinds or model.get("byte_fallback")):
        raise BadArgument("tokenizer.json is neither byte-level BPE nor SentencePiece-style BPE; use vocab_from")

    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    ids = dict(model["vocab"])
    ids.update({a["content"]: i for i, a in added.items()})
    n = max(ids.values()) + 1
    if n > vocab_size:
        raise BadArgument(f"tokenizer has {n} tokens but the model's embedding only {vocab_size} rows")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [int(TT.UNUSED)] * vocab_size
    for text, i in ids.items():
        tokens[i] = text
        if i in added:
            types[i] = int(TT.CONTROL if added[i].get("special") else TT.USER_DEFINED)
        elif not byte_level and text == model.get("unk_token"):
            types[i] = int(TT.UNKNOWN)
        elif not byte_level and _BYTE_TOKEN.match(text):
            types[i] = int(TT.BYTE)
        else:
            types[i] = int(TT.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    kv = [(K.LIST, tokens, T.ARRAY, T.STRING), (K.TOKEN_TYPE, types, T.ARRAY, T.INT32)]
    if byte_level:
        kv += [(K.MODEL, "gpt2", T.STRING, None), (K.PRE, _pre_name(tj, arch), T.STRING, None),
               (K.MERGES, merges, T.ARRAY, T.STRING)]
    else:
        # SentencePiece BPE merges the adjacent pair whose merged token scores highest:
        # score = -rank reproduces the HF merge order; tokens no merge produces rank below every merge.
        scores = [-float(len(merges) + 1)] * vocab_size
        for rank, m in enumerate(merges):
            i = ids.get(m.replace(" ", "", 1))
            if i is not None and scores[i] < -rank:
                scores[i] = -float(rank)
        prefix = any(d.get("type") == "Prepend" or d.get("prepend_scheme") in ("first", "always") or
                     d.get("add_prefix_space") for d in parts)
        kv += [(K.MODEL, "llama", T.STRING, None), (K.PRE, "default", T.STRING, None),
               (K.SCORES, scores, T.ARRAY, T.FLOAT32), (K.ADD_PREFIX, bool(prefix), T.BOOL, None)]
    kv += _special_ids(tj, cfg, ids, byte_level)
    return kv


def _pre_name(tj: dict, arch: str) -> str:
    pre = _walk(tj.get("pre_tokenizer"))
    for d in pre:
        regex = (d.get("pattern") or {}).get("Regex") if d.get("type") == "Split" else None
        if regex in _KNOWN_SPLITS:
            return _KNOWN_SPLITS[regex]
    kinds = [d.get("type") for d in pre]
    if any(d.get("type") == "Digits" and d.get("individual_digits") for d in pre) and "ByteLevel" in kinds:
        return "smollm"
    if kinds == ["ByteLevel"]:
        return "gpt2"
    guess = "qwen2" if arch == "qwen2" else "default"
    log.warning("unrecognised pre-tokenizer %s; using %r (pass vocab_from=<GGUF> for an exact copy)", kinds, guess)
    return guess


def _special_ids(tj: dict, cfg: dict, ids: dict[str, int], byte_level: bool) -> list:
    def text(v: Any) -> str | None:
        return v.get("content") if isinstance(v, dict) else v

    out = []
    found = {}
    for name, key in (("bos", K.BOS_ID), ("eos", K.EOS_ID), ("unk", K.UNK_ID), ("pad", K.PAD_ID)):
        t = text(cfg.get(f"{name}_token"))
        if t is not None and t in ids:
            found[name] = t
            out.append((key, ids[t], T.UINT32, None))
    single = next((d.get("single") for d in _walk(tj.get("post_processor")) if d.get("type") == "TemplateProcessing"),
                  None) or []
    specials = [s["SpecialToken"]["id"] for s in single if "SpecialToken" in s]
    add_bos = cfg.get("add_bos_token")
    if add_bos is None:
        add_bos = bool(single) and "SpecialToken" in single[0] and single[0]["SpecialToken"]["id"] == found.get("bos")
    add_eos = cfg.get("add_eos_token")
    if add_eos is None:
        add_eos = bool(single) and "SpecialToken" in single[-1] and single[-1]["SpecialToken"]["id"] == found.get("eos")
    if specials and not (add_bos or add_eos):
        log.warning("post-processor adds %s, which GGUF cannot express beyond bos/eos", specials)
    out += [(K.ADD_BOS, bool(add_bos), T.BOOL, None), (K.ADD_EOS, bool(add_eos), T.BOOL, None)]
    return out


def _from_sentencepiece(path: Path, cfg: dict, vocab_size: int) -> list:
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError:
        raise BadArgument("tokenizer.model needs the sentencepiece package (pip install sentencepiece)") from None
    sp = SentencePieceProcessor(model_file=str(path))
    n = sp.vocab_size()
    if n > vocab_size:
        raise BadArgument(f"tokenizer.model has {n} tokens but the model's embedding only {vocab_size} rows")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    scores = [-1000.0] * vocab_size
    types = [int(TT.UNUSED)] * vocab_size
    for i in range(n):
        tokens[i] = sp.id_to_piece(i)
        scores[i] = sp.get_score(i)
        types[i] = int(TT.UNKNOWN if sp.is_unknown(i) else TT.CONTROL if sp.is_control(i) else
                       TT.UNUSED if sp.is_unused(i) else TT.BYTE if sp.is_byte(i) else TT.NORMAL)
    kv = [(K.MODEL, "llama", T.STRING, None), (K.PRE, "default", T.STRING, None),
          (K.LIST, tokens, T.ARRAY, T.STRING), (K.SCORES, scores, T.ARRAY, T.FLOAT32),
          (K.TOKEN_TYPE, types, T.ARRAY, T.INT32), (K.ADD_PREFIX, True, T.BOOL, None)]
    for fn, key in ((sp.bos_id, K.BOS_ID), (sp.eos_id, K.EOS_ID), (sp.unk_id, K.UNK_ID), (sp.pad_id, K.PAD_ID)):
        if fn() >= 0:
            kv.append((key, fn(), T.UINT32, None))
    kv += [(K.ADD_BOS, bool(cfg.get("add_bos_token", True)), T.BOOL, None),
           (K.ADD_EOS, bool(cfg.get("add_eos_token", False)), T.BOOL, None)]
    return kv
