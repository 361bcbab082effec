"""Summarise a GGUF file: architecture, size, quantization, tokenizer, hyper-parameters.

Reads only the header through ``gguf.GGUFReader`` (tensor data is memory-mapped, never loaded; the
header is parsed from a plain-array view, see :class:`_Reader`) and checks that every tensor's data lies
inside the file, so a truncated download fails here with a clear message instead of inside llama.cpp.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from .errors import InvalidFile
from .header import check_header

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


_ARRAY, _STRING = int(gguf.GGUFValueType.ARRAY), int(gguf.GGUFValueType.STRING)
MAX_NESTING = 8  # arrays of arrays deeper than this are refused (5,000 deep blew Python's recursion limit)


class _Reader(gguf.GGUFReader):
    """``gguf.GGUFReader`` parsing from a plain ndarray view of its memory map.

    The reader makes a few array views per metadata value, and a 152k-token vocabulary is 450k values
    (tokens, merges, token types).  On ``np.memmap`` every view runs memmap's Python-level ``__getitem__``
    and ``__array_finalize__``, and every array element is a recursive call with enum lookups: 12.5 s to
    open a tiny model with Qwen2.5's vocabulary on a 2-core Xeon (Gemma-3-270M: 16.9 s).  A plain view of
    the same mapping and one loop per array: 0.85 s (1.5 s), with identical fields, parts and tensors (the
    memmap stays alive as the views' base)."""

    _itemsize: dict = {}  # dtype -> bytes: a per-class memo of a constant

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:  # GGUFReader.__init__ assigns its np.memmap here
        self._data = value.view(np.ndarray)

    def _get(self, offset: int, dtype, count: int = 1, override_order=None) -> np.ndarray:
        count, offset = int(count), int(offset)
        size = self._itemsize.get(dtype)
        if size is None:
            size = self._itemsize[dtype] = np.dtype(dtype).itemsize
        if offset < 0 or offset + size * count > len(self._data):  # a length or offset claiming more than the file
            raise ValueError(f"a value at byte {offset:,} claims {size * count:,} bytes, past the end of the file "
                             f"({len(self._data):,} bytes)")
        arr = self._data[offset:offset + size * count].view(dtype)[:count]
        order = self.byte_order if override_order is None else override_order
        return arr if order == "I" else arr.view(arr.dtype.newbyteorder(order))  # 'I': host order, as is

    def _get_field_parts(self, orig_offs: int, raw_type: int):
        """Arrays of strings or scalars (tokens, merges, scores, token types) in one loop, without gguf-py's
        recursive call and enum lookups per element: the same parts, indices and types as its loop."""
        if raw_type != _ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        itype = int(raw_itype[0])
        nptype = None if itype == _STRING else self.gguf_scalar_to_np.get(gguf.GGUFValueType(itype))
        if itype != _STRING and nptype is None:  # arrays of arrays: gguf-py's own loop, which recurses
            depth = self._depth = getattr(self, "_depth", 0) + 1
            try:
                if depth > MAX_NESTING:
                    raise ValueError(f"arrays nested more than {MAX_NESTING} deep at byte {orig_offs:,}")
                return super()._get_field_parts(orig_offs, raw_type)
            finally:
                self._depth = depth - 1
        alen = self._get(orig_offs + 4, np.uint64)
        parts, idxs, data, offs = [raw_itype, alen], [], self._data, orig_offs + 12
        if itype == _STRING:
            raw = memoryview(data)
            for _ in range(int(alen[0])):
                if offs + 8 > len(data):  # a corrupt length must not loop over 2**64 elements
                    raise ValueError(f"string array at offset {orig_offs} runs past the end of the file")
                n = int.from_bytes(raw[offs:offs + 8], sys.byteorder)
                parts.append(data[offs:offs + 8].view(np.uint64))
                parts.append(data[offs + 8:offs + 8 + n])
                idxs.append(len(parts) - 1)
                offs += 8 + n
        else:
            size = np.dtype(nptype).itemsize
            if offs + size * int(alen[0]) > len(data):
                raise ValueError(f"array at offset {orig_offs} runs past the end of the file")
            for _ in range(int(alen[0])):
                parts.append(data[offs:offs + size].view(nptype))
                idxs.append(len(parts) - 1)
                offs += size
        if offs > len(data):
            raise ValueError(f"array at offset {orig_offs} runs past the end of the file")
        types = [gguf.GGUFValueType.ARRAY] + ([gguf.GGUFValueType(itype)] if idxs else [])
        return offs - orig_offs, parts, idxs, types


def read(path: str | os.PathLike) -> gguf.GGUFReader:
    """Open a GGUF file with its header validated; raise InvalidFile for anything unreadable."""
    path = Path(path)
    check_header(path)
    try:
        reader = _Reader(path)
    except (ValueError, IndexError, KeyError, OverflowError, TypeError, UnicodeDecodeError, MemoryError,
            RecursionError) as e:
        raise InvalidFile(f"{path}: corrupt or truncated GGUF file ({type(e).__name__}: {e})") from None
    size = path.stat().st_size
    for t in reader.tensors:
        start, end = _extent(reader, t)
        if start < reader.data_offset or end > size:
            raise InvalidFile(f"{path}: truncated or corrupt: tensor {t.name!r} claims bytes {start:,}..{end:,} "
                              f"but its data must lie within bytes {reader.data_offset:,}..{size:,} of the file")
    return reader


def _extent(reader: gguf.GGUFReader, t) -> tuple[int, int]:
    """Where tensor ``t``'s data lies, [start, end) in bytes, from its header fields in Python integers
    (gguf-py adds them in numpy's uint64: an offset of 2**64-16 wrapped round to a place inside the file)."""
    dims, offset = t.field.parts[3], t.field.parts[5]
    n = 1
    for d in dims.tolist():
        n *= int(d)
    block, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
    start = reader.data_offset + int(offset[0])
    return start, start + n * type_size // block


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
