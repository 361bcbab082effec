"""Summarise a GGUF file: architecture, size, quantization, tokenizer, hyper-parameters.

Reads only the header through ``gguf.GGUFReader`` (tensor data is memory-mapped,
never loaded) and checks that every tensor's data lies inside the file, so a
truncated download fails here with a clear message instead of inside llama.cpp.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import gguf

from omnidraft.engine import check_gguf_header
from omnidraft.errors import InvalidModelFile

# tokenizer.ggml.<name>_token_id keys reported as special ids (llama.cpp spells "separator" wrongly)
_SPECIAL_KEYS = ("bos", "eos", "eot", "eom", "unknown", "padding", "seperator", "mask",
                 "fim_pre", "fim_suf", "fim_mid")
# <arch>.<key> hyper-parameters, reported under the short name on the left
_HPARAMS = {
    "context_length": "context_length",
    "block_count": "block_count",
    "embedding_length": "embedding_length",
    "feed_forward_length": "feed_forward_length",
    "head_count": "attention.head_count",
    "head_count_kv": "attention.head_count_kv",
    "rope_freq_base": "rope.freq_base",
    "rope_dimension_count": "rope.dimension_count",
    "rms_eps": "attention.layer_norm_rms_epsilon",
}


def read(path: str | os.PathLike) -> gguf.GGUFReader:
    """Open a GGUF file with its header validated; raise InvalidModelFile for anything unreadable."""
    path = Path(path)
    check_gguf_header(path)
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError, TypeError, UnicodeDecodeError, MemoryError) as e:
        raise InvalidModelFile(f"{path}: corrupt or truncated GGUF file ({type(e).__name__}: {e})") from None
    size = path.stat().st_size
    for t in reader.tensors:
        end = t.data_offset + t.n_bytes
        if end > size:
            raise InvalidModelFile(
                f"{path}: truncated: tensor {t.name!r} ends at byte {end:,} but the file has {size:,} bytes")
    return reader


def field_value(reader: gguf.GGUFReader, key: str) -> Any:
    """A KV value as a Python object (None when absent); arrays come back as lists."""
    f = reader.get_field(key)
    if f is None:
        return None
    try:
        return f.contents()
    except UnicodeDecodeError:
        return None


def inspect(path: str | os.PathLike) -> dict:
    """Everything worth knowing about a GGUF file, as a JSON-ready dict."""
    path = Path(path)
    r = read(path)
    arch = field_value(r, "general.architecture") or "unknown"
    types = collections.Counter(t.tensor_type.name for t in r.tensors)
    ftype = field_value(r, "general.file_type")
    tokens = r.get_field("tokenizer.ggml.tokens")
    vocab_size = len(tokens.data) if tokens is not None else field_value(r, f"{arch}.vocab_size")
    template = field_value(r, "tokenizer.chat_template")
    special = {}
    for name in _SPECIAL_KEYS:
        tid = field_value(r, f"tokenizer.ggml.{name}_token_id")
        if tid is not None:
            text = tokens.contents(tid) if tokens is not None and 0 <= tid < len(tokens.data) else None
            special[name] = {"id": tid, "text": text}
    return {
        "path": str(path),
        "file_size": path.stat().st_size,
        "gguf_version": field_value(r, "GGUF.version"),
        "architecture": arch,
        "name": field_value(r, "general.name"),
        "file_type": _ftype_name(ftype),
        "parameters": int(sum(t.n_elements for t in r.tensors)),
        "tensor_count": len(r.tensors),
        "tensor_types": dict(types.most_common()),
        "vocab_size": vocab_size,
        "tokenizer_model": field_value(r, "tokenizer.ggml.model"),
        "tokenizer_pre": field_value(r, "tokenizer.ggml.pre"),
        "add_bos": field_value(r, "tokenizer.ggml.add_bos_token"),
        "add_eos": field_value(r, "tokenizer.ggml.add_eos_token"),
        "special_tokens": special,
        "chat_template": template is not None,
        "chat_template_chars": len(template) if template else 0,
        **{k: field_value(r, f"{arch}.{v}") for k, v in _HPARAMS.items()},
    }


def _ftype_name(ftype: int | None) -> str | None:
    if ftype is None:
        return None
    try:
        return gguf.LlamaFileType(ftype).name.removeprefix("MOSTLY_")
    except ValueError:
        return str(ftype)


def format_report(info: dict) -> str:
    """The dict from :func:`inspect` as an aligned, human-readable block."""
    def human(n: int) -> str:
        for unit in ("B", "KiB", "MiB", "GiB"):
            if n < 1024 or unit == "GiB":
                return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
            n /= 1024
        return str(n)

    p = info["parameters"]
    rows = [
        ("file", info["path"]),
        ("size", f"{human(info['file_size'])} ({info['file_size']:,} bytes), GGUF v{info['gguf_version']}"),
        ("architecture", f"{info['architecture']}  name={info['name']!r}"),
        ("parameters", f"{p:,} ({p / 1e6:.1f} M)"),
        ("file type", info["file_type"]),
        ("tensors", f"{info['tensor_count']}: " + ", ".join(f"{k}x{v}" for k, v in info["tensor_types"].items())),
        ("context length", info["context_length"]),
        ("layers", info["block_count"]),
        ("embedding", info["embedding_length"]),
        ("feed-forward", info["feed_forward_length"]),
        ("heads (q/kv)", f"{info['head_count']}/{info['head_count_kv']}"),
        ("rope base", info["rope_freq_base"]),
        ("vocab", f"{info['vocab_size']} tokens, model={info['tokenizer_model']} pre={info['tokenizer_pre']}"),
        ("add bos/eos", f"{info['add_bos']}/{info['add_eos']}"),
        ("special", ", ".join(f"{k}={v['id']} {v['text']!r}" for k, v in info["special_tokens"].items()) or "-"),
        ("chat template", f"yes ({info['chat_template_chars']} chars)" if info["chat_template"] else "no"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
