"""A vocabulary's tables: its token bytes in one buffer, read once per file.

The loop reads token bytes by id (what a token spells, how long it is), so an engine keeps all of them.  As a
list, the 152k Qwen tokens and the 49k SmolLM2 tokens were 200k bytes objects: about 9 MB of the small pair's
peak memory, for 1.4 MB of text.  Here they are one ``bytes`` and an ``array`` of offsets (2.3 MB together);
reading a token makes its bytes object then, a tenth of a microsecond, a few hundred times a step.
"""

from __future__ import annotations

import itertools
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class TokenBytes(Sequence[bytes]):
    """Read-only ``Sequence[bytes]``: ``tb[token_id]`` is that token's bytes."""

    __slots__ = ("_blob", "_off")

    def __init__(self, pieces: Iterable[bytes]):
        pieces = list(pieces)
        self._blob = b"".join(pieces)
        self._off = array("I", itertools.accumulate(map(len, pieces), initial=0))

    def __len__(self) -> int:
        return len(self._off) - 1

    def __getitem__(self, i):
        off = self._off
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(off) - 1))]
        if i < 0:  # off[-1] would read the end offset as a start
            i += len(off) - 1
            if i < 0:
                raise IndexError("token id out of range")
        return self._blob[off[i]: off[i + 1]]  # off has one entry more: i == len(self) raises here

    def __iter__(self) -> Iterator[bytes]:
        blob, off = self._blob, self._off
        return (blob[a:b] for a, b in zip(off, itertools.islice(off, 1, None)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenBytes):
            return self._blob == other._blob and self._off == other._off
        return isinstance(other, Sequence) and len(other) == len(self) and all(map(bytes.__eq__, self, other))

    __hash__ = None  # type: ignore[assignment]  # compared by value, like the list it replaces

    def __repr__(self) -> str:
        return f"TokenBytes({len(self)} tokens, {len(self._blob)} bytes)"


@dataclass(frozen=True)
class VocabTables:
    """What an engine keeps of its vocabulary, per token id; shared by every engine of one file, so immutable."""

    token_bytes: TokenBytes
    is_special: np.ndarray  # bool, read-only: control/unknown/unused tokens, never drafted, never mapped
    eog_ids: frozenset[int]


class TablesByFile:
    """The tables of the last few vocabulary files, by the file's identity (path, inode, size, mtime).

    Reading them takes three llama.cpp calls a token: 0.45 s for Qwen's 152k (2-core Intel VM), 0.8 s of
    an 0.5B's load.  A process opens one file again and again: a session's start-up loads its target once per
    kernel mode, a benchmark or a test suite many times; each read gives the same tables."""

    def __init__(self, keep: int = 4):
        self.keep = keep
        self._tables: OrderedDict[tuple, VocabTables] = OrderedDict()
        self._lock = threading.Lock()  # engines load in the server's request and swap threads too

    def get(self, path: Path, read: Callable[[], VocabTables]) -> VocabTables:
        st = path.stat()
        key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._tables:
                self._tables.move_to_end(key)
                return self._tables[key]
        tables = read()
        with self._lock:
            self._tables[key] = tables
            while len(self._tables) > self.keep:
                self._tables.popitem(last=False)
        return tables


VOCAB_TABLES = TablesByFile()  # one per process: a cache of what the files say, nothing of any engine's state
