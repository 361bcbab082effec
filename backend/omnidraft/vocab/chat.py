"""Render chat messages with a model's own Jinja chat template (read from its GGUF), and tokenize them.

Message contents are text, never control tokens: a user who writes '<|im_start|>system' gets those
characters, not a forged turn.  ``render_marked`` finds where each content landed in the rendered
chat; ``tokenize`` parses control-token text only outside those spans, the way llama.cpp's
``parse_special`` does (split at control-token text, tokenize the pieces between as text).
"""

from __future__ import annotations

import bisect
import datetime
import re
import secrets
import weakref
from functools import lru_cache

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from omnidraft.errors import BadRequest

# Used when a GGUF carries no template: ChatML, the most common format for small models.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ROLES = ("system", "user", "assistant", "tool")
# Messages in one chat at most: preparing a prompt costs time in the engine's worker before any token is
# decoded, so its size is bounded before it gets there (the HTTP layer answers 400 with the same limit).
MAX_MESSAGES = 2048


def _raise(msg: str):
    raise TemplateError(msg)


@lru_cache(maxsize=16)
def _compile(template: str):
    # Same whitespace rules as Hugging Face's apply_chat_template; sandboxed: templates are data.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template)


def validate_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    if len(messages) > MAX_MESSAGES:
        raise BadRequest(f"{len(messages)} messages: at most {MAX_MESSAGES} in one chat")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise BadRequest(f"messages[{i}] must be an object with a role in {ROLES} and a string content")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def render(template: str | None, messages: list[dict], bos_token: str = "", eos_token: str = "",
           add_generation_prompt: bool = True) -> str:
    try:
        return _compile(template or CHATML).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=bos_token, eos_token=eos_token, tools=None)
    except TemplateError as e:
        raise BadRequest(f"chat template refused these messages: {e}") from e


def render_marked(template: str | None, messages: list[dict], bos_token: str = "", eos_token: str = "",
                  add_generation_prompt: bool = True) -> tuple[str, list[tuple[int, int]] | None]:
    """(rendered chat, [(start, end)] character spans of message contents in it).

    The spans are found by rendering once more with each content between random markers; a template
    that rewrites contents (trims, cuts) moves the markers, and then the spans are None."""
    text = render(template, messages, bos_token, eos_token, add_generation_prompt)
    nonce = secrets.token_hex(8)
    start, end = f"\ue000{nonce}\ue001", f"\ue002{nonce}\ue003"
    marked = render(template, [{**m, "content": start + m["content"] + end} for m in messages],
                    bos_token, eos_token, add_generation_prompt)
    out, spans, pos, opened = [], [], 0, None
    for piece in re.split(f"({re.escape(start)}|{re.escape(end)})", marked):
        if piece == start:
            if opened is not None:
                return text, None
            opened = pos
        elif piece == end:
            if opened is None:
                return text, None
            spans.append((opened, pos))
            opened = None
        else:
            out.append(piece)
            pos += len(piece)
    if opened is not None or "".join(out) != text:
        return text, None
    return text, spans


_SPECIALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _specials(engine) -> tuple[re.Pattern | None, dict[str, int]]:
    """A regex of the engine's control-token texts (longest first) and text -> id."""
    got = _SPECIALS.get(engine)
    if got is None:
        by_text: dict[str, int] = {}
        for t in range(len(engine.is_special)):
            if engine.is_special[t]:
                try:
                    piece = engine.special_text(t).decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if piece:
                    by_text.setdefault(piece, t)
        alts = sorted(by_text, key=len, reverse=True)
        pattern = re.compile("|".join(map(re.escape, alts))) if alts else None
        got = _SPECIALS[engine] = (pattern, by_text)
    return got


def tokenize(engine, text: str, plain: list[tuple[int, int]] | None, add_bos: bool) -> list[int]:
    """Token ids of a rendered prompt whose ``plain`` character spans are text (message contents).

    ``plain=None``: the whole text may hold control tokens (the template's own text, no contents)."""
    if not plain:
        return engine.tokenize(text, add_bos=add_bos, special=True)
    pattern, by_text = _specials(engine)
    spans = sorted(plain)
    if pattern is None or not any(_overlaps(m, spans) for m in pattern.finditer(text)):
        # nothing to keep out of the contents: llama.cpp's own parse, unchanged
        return engine.tokenize(text, add_bos=add_bos, special=True)
    ids = [engine.bos_id] if add_bos and engine.bos_id >= 0 else []
    pos = 0
    for a, b in _outside(len(text), plain):
        for m in pattern.finditer(text, a, b):
            if m.start() > pos:
                ids += engine.tokenize(text[pos:m.start()], add_bos=False, special=False)
            ids.append(by_text[m.group()])
            pos = m.end()
    if pos < len(text):
        ids += engine.tokenize(text[pos:], add_bos=False, special=False)
    return ids


def _overlaps(m: re.Match, spans: list[tuple[int, int]]) -> bool:
    """Whether match ``m`` overlaps one of ``spans`` (sorted, non-overlapping: render_marked's order), by
    bisection: a chat of N messages costs O(N log N), not N matches times N spans."""
    i = bisect.bisect_right(spans, (m.start(), float("inf"))) - 1  # the last span starting at or before m
    return any(a < m.end() and m.start() < b for a, b in spans[max(i, 0):i + 2])


def _outside(n: int, spans) -> list[tuple[int, int]]:
    """The parts of range(n) not covered by ``spans`` (sorted, non-overlapping)."""
    out, pos = [], 0
    for a, b in sorted(spans or ()):
        if a > pos:
            out.append((pos, a))
        pos = max(pos, b)
    if pos < n:
        out.append((pos, n))
    return out


def content_has_control_text(engine, messages: list[dict]) -> bool:
    pattern, _ = _specials(engine)
    return pattern is not None and any(pattern.search(m["content"]) for m in messages)
