"""A cheap pre-flight check of a GGUF file's header: obvious non-GGUFs fail with a clear message."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np

from .errors import InvalidFile

GGUF_MAGIC = b"GGUF"

# GGUF value types: fixed-size scalars by their numpy dtype; 8 is a string, 9 an array
_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8",
            12: "<f8"}
_STRING, _ARRAY = 8, 9


def check_header(path: Path) -> None:
    """Raise InvalidFile unless ``path`` is a regular file starting with a GGUF v2/v3 header."""
    if not path.exists():
        raise InvalidFile(f"{path}: no such file")
    if not path.is_file():
        raise InvalidFile(f"{path}: not a regular file")
    size = path.stat().st_size
    if size < 24:
        raise InvalidFile(f"{path}: {size} bytes is too small to be a GGUF file")
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] != GGUF_MAGIC:
        raise InvalidFile(f"{path}: not a GGUF file (magic {head[:4]!r}, expected b'GGUF')")
    version = int.from_bytes(head[4:8], "little")
    if version not in (2, 3):
        raise InvalidFile(f"{path}: unsupported GGUF version {version}")


def read_kv(path: Path, key: str) -> object | None:
    """One metadata value of a GGUF file (None when absent), read without parsing the rest.

    gguf-py's reader turns every vocabulary string into numpy objects: for a 49k-token drafter that took
    0.34 s and left 15 MB resident (a 152k vocabulary: 0.67 s, 29 MB, 130 MB at its peak), which the served
    drafter paid at every load just to find its head's token ids.  This walks the header and skips values by
    their lengths.  Scalars come back as Python numbers, strings as str, numeric arrays as numpy arrays and
    string arrays as lists of str."""
    return read_kvs(path, (key,)).get(key)


def read_kvs(path: Path, keys: tuple[str, ...]) -> dict[str, object]:
    """Several metadata values in one walk of the header (an absent key costs a walk to its end: 75 ms past a
    152k vocabulary); the keys present, as :func:`read_kv` returns them."""
    check_header(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        try:
            return _find(mm, {k.encode() for k in keys})
        except (struct.error, ValueError, UnicodeDecodeError, RecursionError) as e:
            raise InvalidFile(f"{path}: corrupt or truncated GGUF header ({type(e).__name__}: {e})") from None


def _find(mm: mmap.mmap, keys: set[bytes]) -> dict[str, object]:
    (n_kv,) = struct.unpack_from("<Q", mm, 16)
    pos, found = 24, {}
    for _ in range(n_kv):
        start, pos = _string(mm, pos)
        name = mm[start:pos]
        (vtype,) = struct.unpack_from("<I", mm, pos)
        value, pos = _walk(mm, pos + 4, vtype, want=name in keys)
        if name in keys:
            found[name.decode()] = value
            if len(found) == len(keys):
                return found
    if pos > len(mm):
        raise ValueError("the last value runs past the end of the file")
    return found


def _string(mm: mmap.mmap, pos: int) -> tuple[int, int]:
    """Where the bytes of the string at ``pos`` start and end (read for its length only, nothing copied)."""
    (n,) = struct.unpack_from("<Q", mm, pos)
    if pos + 8 + n > len(mm):
        raise ValueError(f"a string at byte {pos} runs past the end of the file")
    return pos + 8, pos + 8 + n


def _walk(mm: mmap.mmap, pos: int, vtype: int, want: bool) -> tuple[object | None, int]:
    """The value of type ``vtype`` at ``pos`` (None unless ``want``: a skipped value is read for its lengths
    only, no string copied) and the position after it."""
    if vtype in _SCALARS:
        dtype = np.dtype(_SCALARS[vtype])
        end = pos + dtype.itemsize
        return (np.frombuffer(mm, dtype, 1, pos)[0].item() if want else None), end
    if vtype == _STRING:
        start, end = _string(mm, pos)
        return (mm[start:end].decode() if want else None), end
    if vtype != _ARRAY:
        raise ValueError(f"unknown value type {vtype} at byte {pos}")
    itype, count = struct.unpack_from("<IQ", mm, pos)
    pos += 12
    if itype in _SCALARS:
        dtype = np.dtype(_SCALARS[itype])
        end = pos + count * dtype.itemsize
        if end > len(mm):
            raise ValueError(f"an array at byte {pos} runs past the end of the file")
        return (np.frombuffer(mm, dtype, count, pos).copy() if want else None), end  # a copy: the mapping closes
    items = []
    for _ in range(count):  # strings (or nested arrays): one length at a time
        item, pos = _walk(mm, pos, itype, want)
        if want:
            items.append(item)
    return (items if want else None), pos


def kv_values_per_token(path: str | os.PathLike) -> int | None:
    """How many K and V values one token of context keeps over all layers (layers x KV heads x (key + value
    length)), from the header; None where it does not say (no architecture, block count or head count).  A
    per-layer head count (an array) counts its largest: this sizes memory from above."""
    path = Path(path)
    arch = read_kv(path, "general.architecture")
    if not isinstance(arch, str):
        return None
    names = ("block_count", "attention.head_count", "attention.head_count_kv", "embedding_length",
             "attention.key_length", "attention.value_length")
    kv = read_kvs(path, tuple(f"{arch}.{n}" for n in names))
    layers, heads, kv_heads, width, key, value = (kv.get(f"{arch}.{n}") for n in names)
    heads, kv_heads = (int(np.max(h)) if isinstance(h, np.ndarray) else h for h in (heads, kv_heads))
    if not isinstance(layers, int) or not isinstance(heads, int) or heads <= 0:
        return None
    kv_heads = kv_heads if isinstance(kv_heads, int) and kv_heads > 0 else heads
    head = width // heads if isinstance(width, int) else 0
    key, value = key or head, value or head
    return layers * kv_heads * (int(key) + int(value))


# ---------------------------------------------------------------- frequency-ranked heads (gguf_tools.frhead)
# Read here, without gguf-py, because every drafter load asks: gguf-py, sentencepiece and yaml are 5 MB that a
# serving process otherwise never imports (issue 41's memory goal).  frhead writes them and re-exports these.
ROWS_KEY = "omnidraft.head_rows"
IDS_KEY = "omnidraft.head_token_ids"


def head_token_ids(path: str | os.PathLike) -> np.ndarray | None:
    """The token id of each head row of a frequency-ranked-head file; None for a full head."""
    ids = read_kv(Path(path), IDS_KEY)
    return None if ids is None else np.asarray(ids, dtype=np.int32)
