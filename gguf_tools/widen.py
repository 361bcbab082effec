"""A lossless "wide" copy of a GGUF: its Q5_0 and Q4_0 tensors re-encoded as Q8_0, value for value (issue 41).

A Q5_0 block is an fp16 scale ``d`` and 32 five-bit values: ``qs`` (16 bytes) holds their low four bits
(``qs[j] & 0xF`` is value j, ``qs[j] >> 4`` value j+16) and ``qh`` (a little-endian uint32) the fifth (bit i of
value i); weight i is ``d * (q_i - 16)``.  A Q4_0 block is ``d`` and the same nibbles; weight i is
``d * (q_i - 8)``.  Both integer ranges fit in int8, so each block becomes a Q8_0 block (the same ``d``, 32 int8
values) holding exactly the same weights: no requantization.  On CPUs whose Q5_0 dot product is bound by
instructions (AVX2 without VNNI: unpacking the fifth bit) the wider blocks decode faster; Qwen2.5-Coder-0.5B
Q4_K_M (55 % Q5_0 by bytes) went from 48.1 to 39.8 ms a token on 2 threads, for a file 1.3x larger.

Every KV field is copied as it is (``general.file_type`` still names the type the file was quantized to; the
tensors say what they hold), every other tensor byte for byte.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import BinaryIO, Sequence

import gguf
import numpy as np

from .convert import reader_kvs
from .errors import BadArgument
from .inspect import read

log = logging.getLogger(__name__)

Q = gguf.GGMLQuantizationType
WIDENABLE = ("Q5_0", "Q4_0")  # the types whose blocks re-encode exactly as Q8_0
# What is widened unless asked otherwise: Q5_0 only.  A Q4_0 matrix already runs through the repacked small-batch
# kernel on x86 (sbq4.cpp), which a Q8_0 copy would leave for the plain one at 1.9x the bytes.
DEFAULT_TYPES = ("Q5_0",)
CHUNK_BLOCKS = 1 << 20  # blocks converted at a time: ~22 MB in, 34 MB out, a few times that in temporaries
_Q8_BLOCK, _Q8_BYTES = gguf.GGML_QUANT_SIZES[Q.Q8_0]  # 32 values in 34 bytes: fp16 d + 32 int8


def q5_0_to_q8_0(blocks: np.ndarray) -> np.ndarray:
    """(n, 22) uint8 Q5_0 blocks -> (n, 34) uint8 Q8_0 blocks of the same values."""
    out = np.empty((len(blocks), _Q8_BYTES), np.uint8)
    out[:, :2] = blocks[:, :2]  # d
    fifth = np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little") << 4  # bit i of qh (little-endian) -> value i
    qs = blocks[:, 6:22]
    out[:, 2:18] = ((qs & 0x0F) | fifth[:, :16]) - np.uint8(16)  # uint8 wrap-around: q - 16 as int8 bytes
    out[:, 18:34] = ((qs >> 4) | fifth[:, 16:]) - np.uint8(16)
    return out


def q4_0_to_q8_0(blocks: np.ndarray) -> np.ndarray:
    """(n, 18) uint8 Q4_0 blocks -> (n, 34) uint8 Q8_0 blocks of the same values."""
    out = np.empty((len(blocks), _Q8_BYTES), np.uint8)
    out[:, :2] = blocks[:, :2]
    qs = blocks[:, 2:18]
    out[:, 2:18] = (qs & 0x0F) - np.uint8(8)
    out[:, 18:34] = (qs >> 4) - np.uint8(8)
    return out


_CONVERT = {Q.Q5_0: q5_0_to_q8_0, Q.Q4_0: q4_0_to_q8_0}


def parse_types(types: str | Sequence[str]) -> tuple[str, ...]:
    """``"q5_0,q4_0"`` or a sequence of names -> ("Q5_0", "Q4_0"); BadArgument for a type that cannot widen."""
    names = [t.strip().upper() for t in (types.split(",") if isinstance(types, str) else types) if t.strip()]
    bad = [t for t in names if t not in WIDENABLE]
    if not names or bad:
        raise BadArgument(f"types to widen must be among {', '.join(t.lower() for t in WIDENABLE)}; "
                          f"got {', '.join(t.lower() for t in bad) or 'none'}")
    return tuple(dict.fromkeys(names))


def widen(src: str | os.PathLike, dst: str | os.PathLike, types: str | Sequence[str] = DEFAULT_TYPES) -> Path:
    """Copy ``src`` to ``dst`` (atomically) with its tensors of ``types`` re-encoded as Q8_0; return ``dst``.

    BadArgument when ``src`` holds no tensor of those types (the copy would gain nothing); InvalidFile when it
    is not a readable GGUF.  Nothing is left at ``dst`` (or beside it) on error."""
    src, dst = Path(src), Path(dst)
    wanted = {Q[t] for t in parse_types(types)}
    r = read(src)
    wide = [t for t in r.tensors if t.tensor_type in wanted]
    if not wide:
        have = sorted({t.tensor_type.name for t in r.tensors})
        raise BadArgument(f"{src}: no {'/'.join(sorted(q.name for q in wanted))} tensor to widen (it holds "
                          f"{', '.join(have)}): a wide copy would gain nothing")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    tmp.open("xb").close()  # a fresh name, with the umask's permissions (mkstemp's would be 0600)
    w = None
    try:
        w = gguf.GGUFWriter(tmp, bytes(r.get_field("general.architecture").parts[-1]).decode())
        if r.alignment != gguf.GGUF_DEFAULT_ALIGNMENT:
            w.add_custom_alignment(int(r.alignment))
        for kv in reader_kvs(r):
            w.add_key_value(*kv)
        for t in r.tensors:
            shape = np.asarray(t.data).shape  # quantized: bytes per row in the last dimension
            if t.tensor_type in wanted:
                shape = (*shape[:-1], shape[-1] * _Q8_BYTES // gguf.GGML_QUANT_SIZES[t.tensor_type][1])
                w.add_tensor_info(t.name, shape, np.dtype(np.uint8), _wide_bytes(t), raw_dtype=Q.Q8_0)
            else:
                w.add_tensor_info(t.name, shape, np.asarray(t.data).dtype, t.n_bytes, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        fout = w.fout[0]
        for t in r.tensors:
            w.write_padding(fout, fout.tell())  # each tensor starts aligned, as the offsets above assume
            if t.tensor_type in wanted:
                _write_widened(fout, t)
            else:
                np.asarray(t.data).tofile(fout)
        w.write_padding(fout, fout.tell())
        w.close()
        os.replace(tmp, dst)
    finally:
        if w is not None:
            w.close()  # a no-op once closed
        tmp.unlink(missing_ok=True)
    log.info("%s: re-encoded %d of %d tensors (%s) as Q8_0, value for value: %.1f MB -> %.1f MB; %s (%s bytes)",
             src.name, len(wide), len(r.tensors), "/".join(sorted({t.tensor_type.name for t in wide})),
             sum(int(t.n_bytes) for t in wide) / 1e6, sum(_wide_bytes(t) for t in wide) / 1e6, dst,
             f"{dst.stat().st_size:,}")
    return dst


def _wide_bytes(tensor) -> int:
    return int(tensor.n_elements) // _Q8_BLOCK * _Q8_BYTES


def _write_widened(fout: BinaryIO, tensor) -> None:
    """One tensor's blocks, CHUNK_BLOCKS at a time (the source stays memory-mapped), as Q8_0 blocks."""
    block_bytes = gguf.GGML_QUANT_SIZES[tensor.tensor_type][1]
    blocks = np.asarray(tensor.data).reshape(-1, block_bytes)  # rows hold whole blocks
    convert = _CONVERT[tensor.tensor_type]
    for i in range(0, len(blocks), CHUNK_BLOCKS):
        convert(blocks[i:i + CHUNK_BLOCKS]).tofile(fout)
