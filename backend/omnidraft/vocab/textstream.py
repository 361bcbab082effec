"""UTF-8-safe incremental text with stop strings and per-character provenance.

Token bytes arrive in pieces that may split a character; a stop string may arrive
split across steps.  ``TextStream`` turns appended bytes into text chunks that are
safe to show: complete characters only, never a prefix of a stop string that might
still complete, each chunk tagged with whether it came from an accepted draft.

Marks (e.g. a token's logprob entry) may ride along with the bytes: each one is handed out
with the chunk that completes its bytes' characters, and a stop string or the end keeps only
those whose bytes start inside the returned text.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field


@dataclass
class Chunk:
    text: str
    from_draft: bool
    # (character offset in the whole text where the mark's bytes start, mark) completed by this chunk
    marks: list[tuple[int, object]] = field(default_factory=list)


class TextStream:
    def __init__(self, stop: list[str] | None = None):
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = [s for s in (stop or []) if s]
        self.text = ""  # all decoded text so far
        self.flags: list[bool] = []  # per character: came from an accepted draft
        self.emitted = 0  # characters already handed out
        self.stopped = False
        self._marks: list[tuple[int, int, object]] = []  # (first char, char after the last, mark) pending
        self.released: list[tuple[int, object]] = []  # marks handed out, in order

    def push(self, data: bytes, from_draft: bool, marks: list[tuple[int, object]] = ()) -> list[Chunk]:
        """Append bytes; return the chunks that became safe to emit.

        ``marks``: (byte count, mark) for consecutive slices of ``data`` covering all of it, e.g. one per token."""
        if self.stopped or not (data or marks):
            return []
        if not marks:
            self._decode(data, from_draft)
        pos = 0
        for n, mark in marks:
            start = len(self.text)  # a character started by earlier bytes still gets this index
            self._decode(data[pos:pos + n], from_draft)
            pos += n
            pending = bool(self._dec.getstate()[0])  # its bytes end inside a character not complete yet
            self._marks.append((start, len(self.text) + pending, mark))
        assert not marks or pos == len(data), "marks must cover the pushed bytes"
        return self._release(final=False)

    def _decode(self, data: bytes, from_draft: bool) -> None:
        new = self._dec.decode(data)
        self.text += new
        self.flags.extend([from_draft] * len(new))

    def finish(self) -> list[Chunk]:
        """End of generation: flush what is held back.

        A character cut off by max_tokens (its first bytes only) is dropped, never shown as U+FFFD:
        the text stays what the tokens spell up to their last complete character."""
        self._dec.reset()
        return self._release(final=True)

    def _release(self, final: bool) -> list[Chunk]:
        end = len(self.text)
        for s in self.stop:
            at = self.text.find(s, max(0, self.emitted - len(s) + 1))
            if at >= 0 and at < end:
                end = at
                self.stopped = True
        if self.stopped:
            self.text, self.flags = self.text[:end], self.flags[:end]
        elif not final:
            end -= self._held_back()
        return self._emit(end, cut=self.stopped or final)

    def _held_back(self) -> int:
        """Characters at the end that could be the start of a stop string."""
        hold = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        return hold

    def _emit(self, end: int, cut: bool = False) -> list[Chunk]:
        chunks: list[Chunk] = []
        i = self.emitted
        while i < end:
            j = i
            while j < end and self.flags[j] == self.flags[i]:
                j += 1
            chunks.append(Chunk(self.text[i:j], self.flags[i]))
            i = j
        self.emitted = max(self.emitted, end)
        self._attach(chunks, end, cut)
        return chunks

    def _attach(self, chunks: list[Chunk], end: int, cut: bool) -> None:
        """Hand out the marks whose characters are all emitted; when the text is cut (stop string, end of
        generation), also those that start before the cut, and drop the rest."""
        n = 0
        while n < len(self._marks) and (self._marks[n][1] <= end or cut and self._marks[n][0] < end):
            n += 1
        ready, self._marks = self._marks[:n], ([] if cut else self._marks[n:])
        if not ready:
            return
        if not chunks:  # the marks' text went out earlier (held for a stop string that did not complete)
            chunks.append(Chunk("", False))
        pos, k = end - sum(len(c.text) for c in chunks), 0  # pos: where chunk k starts
        for start, stop, mark in ready:
            while k < len(chunks) - 1 and pos + len(chunks[k].text) < stop:
                pos += len(chunks[k].text)
                k += 1
            chunks[k].marks.append((start, mark))
            self.released.append((start, mark))
