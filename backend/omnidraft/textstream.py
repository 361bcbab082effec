"""UTF-8-safe incremental text with stop strings and per-character provenance.

Token bytes arrive in pieces that may split a character; a stop string may arrive
split across steps.  ``TextStream`` turns appended bytes into text chunks that are
safe to show: complete characters only, never a prefix of a stop string that might
still complete, each chunk tagged with whether it came from an accepted draft.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass
class Chunk:
    text: str
    from_draft: bool


class TextStream:
    def __init__(self, stop: list[str] | None = None):
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = [s for s in (stop or []) if s]
        self.text = ""  # all decoded text so far
        self.flags: list[bool] = []  # per character: came from an accepted draft
        self.emitted = 0  # characters already handed out
        self.stopped = False

    def push(self, data: bytes, from_draft: bool) -> list[Chunk]:
        """Append bytes; return the chunks that became safe to emit."""
        if self.stopped or not data:
            return []
        new = self._dec.decode(data)
        self.text += new
        self.flags.extend([from_draft] * len(new))
        return self._release(final=False)

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
        return self._emit(end)

    def _held_back(self) -> int:
        """Characters at the end that could be the start of a stop string."""
        hold = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        return hold

    def _emit(self, end: int) -> list[Chunk]:
        chunks: list[Chunk] = []
        i = self.emitted
        while i < end:
            j = i
            while j < end and self.flags[j] == self.flags[i]:
                j += 1
            chunks.append(Chunk(self.text[i:j], self.flags[i]))
            i = j
        self.emitted = max(self.emitted, end)
        return chunks
