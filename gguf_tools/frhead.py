"""A drafter GGUF whose output head covers only chosen tokens (FR-Spec: a frequency-ranked head).

The head is the largest product of a small drafter's pass: SmolLM2's 49,152 x 576 head holds as many weights as
its 8 layers.  ``write`` copies a Llama-architecture GGUF and adds ``output.weight`` holding only the rows of the
chosen tokens, byte for byte (quantized rows are whole blocks, so no value changes), with two keys:

* ``omnidraft.head_rows`` (uint32): how many rows; omnidraft's llama.cpp patch (``frhead.patch``) then builds
  the head with that many rows and pads the logits back to ``n_vocab`` columns with zeros;
* ``omnidraft.head_token_ids`` (int32 array): the token id of each row, in row order.

Column j of such a model's logits is token ``head_token_ids[j]`` for j < head_rows, and padding beyond.  A
llama.cpp without the patch refuses the file (``output.weight`` has the wrong shape), with that message.
The embedding stays whole: the drafter still reads every token of its context.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

from .convert import reader_kvs
from .errors import BadArgument, InvalidFile
from .header import IDS_KEY, ROWS_KEY, head_token_ids  # noqa: F401 - frhead's API; read there, gguf-py-free
from .inspect import read

log = logging.getLogger(__name__)

_SKIP = (ROWS_KEY, IDS_KEY)  # a head written anew, not copied


def rank(counts: np.ndarray) -> np.ndarray:
    """Token ids, most frequent first; ties (tokens never seen, mostly) by id, which BPE orders by merge."""
    return np.lexsort((np.arange(len(counts)), -np.asarray(counts))).astype(np.int32)


def control_ids(path: str | os.PathLike) -> list[int]:
    """The control tokens of a GGUF's vocabulary (end of generation, chat markers): a head keeps them all."""
    f = read(path).get_field("tokenizer.ggml.token_type")
    if f is None:
        return []
    types = [x for i in f.data for x in f.parts[i].tolist()]
    return [i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL]


def choose(ranking: np.ndarray, k: int, always: Sequence[int] = ()) -> np.ndarray:
    """The ``k`` tokens a frequency-ranked head keeps: ``always`` first, then the ranking's most frequent."""
    keep = list(dict.fromkeys(int(t) for t in always))[:k]
    seen = set(keep)
    for t in ranking:
        if len(keep) >= k:
            break
        if int(t) not in seen:
            keep.append(int(t))
    return np.asarray(keep, dtype=np.int32)


def _rows_of(tensor, ids: np.ndarray) -> np.ndarray:
    """Rows ``ids`` of a 2-D tensor as the reader holds it (quantized types: bytes per row)."""
    data = np.asarray(tensor.data)
    if data.ndim != 2:
        raise InvalidFile(f"{tensor.name}: expected a 2-D tensor, got shape {data.shape}")
    return np.ascontiguousarray(data[ids])


def write(src: str | os.PathLike, dst: str | os.PathLike, ids: Sequence[int]) -> Path:
    """Copy ``src`` to ``dst`` (atomically) with a head over ``ids`` only."""
    src, dst = Path(src), Path(dst)
    r = read(src)
    arch = bytes(r.get_field("general.architecture").parts[-1]).decode()
    if arch != "llama":
        raise BadArgument(f"{src}: a frequency-ranked head is patched into llama.cpp's llama architecture only, "
                          f"not {arch!r}")
    tensors = {t.name: t for t in r.tensors}
    head = tensors.get("output.weight") or tensors.get("token_embd.weight")
    if head is None:
        raise InvalidFile(f"{src}: has neither output.weight nor token_embd.weight")
    n_vocab = int(head.shape[1])
    ids = np.asarray(ids, dtype=np.int32)
    if len(ids) == 0 or len(np.unique(ids)) != len(ids) or ids.min() < 0 or ids.max() >= n_vocab:
        raise BadArgument(f"head ids must be distinct token ids in 0..{n_vocab - 1}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, arch)
        for kv in reader_kvs(r, _SKIP):
            w.add_key_value(*kv)
        w.add_uint32(ROWS_KEY, len(ids))
        w.add_array(IDS_KEY, ids.tolist())
        for t in r.tensors:
            if t.name != "output.weight":
                w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)  # quantized: bytes per row
        rows = _rows_of(head, ids)
        w.add_tensor("output.weight", rows, raw_dtype=head.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("%s: head over %d of %d tokens (%s) -> %s", src.name, len(ids), n_vocab, head.tensor_type.name, dst)
    return dst

