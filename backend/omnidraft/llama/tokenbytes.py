"""A vocabulary's token bytes in one buffer.

The loop reads token bytes by id (what a token spells, how long it is), so an engine keeps all of them.  As a
list, the 152k Qwen tokens and the 49k SmolLM2 tokens were 200k bytes objects: about 9 MB of the small pair's
peak memory, for 1.4 MB of text.  Here they are one ``bytes`` and an ``array`` of offsets (2.3 MB together);
reading a token makes its bytes object then, a tenth of a microsecond, a few hundred times a step.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator, Sequence


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
