"""Bytes <-> token ids for one vocabulary, with a round-trip guarantee.

``Codec.encode(data)`` returns ids whose bytes are exactly ``data``, for any
bytes, including text that starts mid-word, starts or ends inside a UTF-8
character, or would make a SentencePiece tokenizer add its space prefix.
llama.cpp's tokenizer is only ever called on valid UTF-8 (it may abort on
anything else); the bytes around it are spelled with the vocabulary's byte tokens.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from omnidraft.errors import VocabularyMismatch


SHORT = 32  # bytes: texts up to this long are remembered (Codec._short)
SHORT_ENTRIES = 8192


class Tokenizes(Protocol):
    """What a Codec needs from an engine (kept narrow so tests can fake it)."""

    token_bytes: Sequence[bytes]
    is_special: Sequence[bool]

    def tokenize(self, text: str | bytes, add_bos: bool = False, special: bool = False) -> list[int]: ...


class Codec:
    def __init__(self, engine: Tokenizes):
        self.engine = engine
        self.token_bytes = engine.token_bytes
        # Longest-match spelling needs bytes -> id.  Bytes that are not valid UTF-8 (a character cut by a token
        # boundary: CJK, emoji) can only start with tokens that are not valid UTF-8 either, a few thousand of a
        # vocabulary; those are indexed now.  The whole table (13 MB for the Qwen and SmolLM2 pair) is built the
        # first time valid text needs it: always for a SentencePiece vocabulary, never for byte-level BPE whose
        # tokenizer spells text exactly.
        self._partial = _index(engine, lambda b: not b.isascii() and not _is_utf8(b))
        self._whole: _ByBytes | None = None
        self.space_prefix = self._detect_space_prefix()
        # short texts -> ids: the speculative loop encodes a few bytes of the target's output for the drafter
        # several times a step, the same pieces again and again (indentation, ' (', a name), and one
        # llama_tokenize call costs ~57 us on the 2-core EPYC, 0.25 ms of a step (more of a GPU step)
        self._short: dict[bytes, tuple[int, ...]] = {}

    def _detect_space_prefix(self) -> bool:
        ids = self.engine.tokenize("a")
        return self.decode(ids) == b" a"

    def decode(self, ids: Sequence[int]) -> bytes:
        tb = self.token_bytes
        return b"".join(tb[t] for t in ids)

    def encode(self, data: bytes) -> list[int]:
        """Token ids spelling exactly ``data`` (never special tokens)."""
        out: list[int] = []
        for valid, segment in _utf8_segments(data):
            out.extend(self._encode_text(segment) if valid else self._greedy(segment, self._partial))
        return out

    def _encode_text(self, data: bytes) -> list[int]:
        if len(data) > SHORT:
            return self._encode_uncached(data)
        ids = self._short.get(data)
        if ids is None:
            if len(self._short) >= SHORT_ENTRIES:  # bounded: a long server life sees endless distinct pieces
                self._short.clear()
            ids = self._short[data] = tuple(self._encode_uncached(data))
        return list(ids)

    def _encode_uncached(self, data: bytes) -> list[int]:
        if self.space_prefix:
            return self._encode_spm(data)
        ids = self.engine.tokenize(data)
        if self.decode(ids) != data:  # e.g. normalisation changed the text: spell it greedily
            return self._greedy(data)
        return ids

    def _encode_spm(self, data: bytes) -> list[int]:
        # The tokenizer prepends a space.  Text that starts with a space is handed over
        # without it; a leading word without one is spelled greedily up to the first space.
        if data.startswith(b" "):
            ids = self.engine.tokenize(data[1:])
            if self.decode(ids) == data:
                return ids
            return self._greedy(data)
        cut = data.find(b" ")
        head, tail = (data, b"") if cut < 0 else (data[:cut], data[cut:])
        return self._greedy(head) + (self._encode_spm(tail) if tail else [])

    def _greedy(self, data: bytes, table: _ByBytes | None = None) -> list[int]:
        """Longest-match spelling from a byte table (the whole vocabulary's unless given); needs single-byte
        tokens for the rest."""
        if table is None:
            if self._whole is None:
                self._whole = _index(self.engine, lambda b: True)
            table = self._whole
        by_bytes, longest = table
        out: list[int] = []
        i, n = 0, len(data)
        while i < n:
            for j in range(min(n, i + longest), i, -1):
                tid = by_bytes.get(data[i:j])
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:
                raise VocabularyMismatch(f"vocabulary cannot spell byte {data[i]:#04x}")
        return out


_ByBytes = tuple[dict[bytes, int], int]  # bytes -> the first non-special id spelling them; the longest key


def _index(engine: Tokenizes, keep: Callable[[bytes], bool]) -> _ByBytes:
    by_bytes: dict[bytes, int] = {}
    for tid, b in enumerate(engine.token_bytes):
        if b and not engine.is_special[tid] and keep(b) and b not in by_bytes:
            by_bytes[b] = tid
    return by_bytes, max((len(b) for b in by_bytes), default=1)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _utf8_segments(data: bytes):
    """Split into (True, valid UTF-8 run) and (False, bytes that are not valid UTF-8 here)."""
    i, n = 0, len(data)
    while i < n:
        try:
            data[i:].decode("utf-8")
            yield True, data[i:]
            return
        except UnicodeDecodeError as e:
            if e.start > 0:
                yield True, data[i: i + e.start]
            bad_end = i + e.start + max(1, e.end - e.start)
            yield False, data[i + e.start: bad_end]
            i = bad_end


def utf8_complete_prefix(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character."""
    n = len(data)
    i = n - 1
    while i >= 0 and n - i <= 4 and (data[i] & 0xC0) == 0x80:  # skip continuation bytes
        i -= 1
    if i < 0 or n - i > 4 or data[i] < 0xC0:
        return n  # ASCII end, or not a character in progress (invalid bytes are not "incomplete")
    have = n - i - 1
    return n if have >= _needs(data[i]) else i


def _needs(lead: int) -> int:
    """Continuation bytes a UTF-8 lead byte announces."""
    if lead >= 0xF0:
        return 3
    if lead >= 0xE0:
        return 2
    return 1
