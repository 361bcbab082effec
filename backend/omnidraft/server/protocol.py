"""OpenAI request validation and response shapes (no Flask, no engine: pure data).

Validation raises ``ApiError`` (status, message, param, code); the app renders it as
OpenAI's ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ..cliutil import TEMPERATURE
from ..errors import OmniDraftError
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.methods import METHODS
from omnidraft.speculative.policy import POLICIES
from omnidraft.vocab import chat

MAX_STOP = 4
MAX_K = 6
MAX_TOP_LOGPROBS = 20  # chat's top_logprobs, as OpenAI
MAX_LEGACY_LOGPROBS = 5  # completions' logprobs, as OpenAI


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type_: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")
        self.headers = headers or {}

    @classmethod
    def from_exception(cls, e: OmniDraftError) -> "ApiError":
        """Typed library errors map to HTTP by their class's ``http_status``, never by message text."""
        return cls(e.http_status, str(e), code=type(e).__name__)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Request:
    """One validated completion request."""

    kind: str  # "chat" | "completion"
    prompt: str | None  # completion
    messages: list[dict] | None  # chat
    params: GenerationParams
    stream: bool = False
    include_usage: bool = False
    method: str | None = None
    k: int | None = None
    policy: str | None = None
    model: str = ""
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


def _bad(msg: str, param: str | None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, msg, param, code)


def _text(s: str, param: str) -> str:
    """A string that can be encoded as UTF-8 (JSON's "\\ud800" decodes to a lone surrogate, which cannot)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _bad(f"'{param}' is not valid Unicode text: {e.reason} at index {e.start}", param) from None
    return s


def _number(body: dict, name: str, default, lo: float, hi: float, integer: bool = False):
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise _bad(f"'{name}' must be {'an integer' if integer else 'a number'}", name, "invalid_type")
    if not lo <= v <= hi:
        raise _bad(f"'{name}' must be within [{lo}, {hi}], got {v}", name)
    return v


def _bool(body: dict, name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _bad(f"'{name}' must be a boolean", name, "invalid_type")
    return v


def _stop(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise _bad("'stop' must be a string or a list of strings", "stop", "invalid_type")
    if len(v) > MAX_STOP:
        raise _bad(f"'stop' takes at most {MAX_STOP} strings", "stop")
    if "" in v:  # it would match before the first character: an answer that is always empty
        raise _bad("'stop' strings must not be empty", "stop")
    return [_text(s, "stop") for s in v]


def _content(c, i: int):
    """OpenAI content: a string, or a list of {"type": "text", "text": ...} parts (joined)."""
    if isinstance(c, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in c):
            raise _bad("only text content parts are supported", f"messages[{i}].content")
        return "".join(p["text"] for p in c)
    return c


def _logprobs(body: dict, kind: str) -> int | None:
    """None (off) or the number of alternatives per token.  Chat: ``logprobs: bool`` and
    ``top_logprobs: 0..20``; completions (legacy): ``logprobs: 0..5``."""
    if kind == "completion":
        return _number(body, "logprobs", None, 0, MAX_LEGACY_LOGPROBS, integer=True)
    on = _bool(body, "logprobs")
    top = _number(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS, integer=True)
    if top is not None and not on:
        raise _bad("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    return (top or 0) if on else None


def _off(*harmless) -> Callable[[object], bool]:
    """A test of a field's value: does it ask for nothing?  None, or one of ``harmless`` (same type and value)."""
    return lambda v: v is None or any(type(v) is type(h) and v == h for h in harmless)


# OpenAI fields whose behaviour this server does not implement: (field, "chat"/"completion"/None for both,
# what it asks for, whether a value asks for nothing).  A value that asks for nothing (what SDKs send by
# default) is accepted; any other is refused by name, never silently ignored.  Fields with no effect on
# the answer (user, store, metadata, service_tier, ...) are accepted as they are.
UNSUPPORTED: tuple[tuple[str, str | None, str, Callable[[object], bool]], ...] = (
    ("tools", None, "tool calling", _off([])),
    ("tool_choice", None, "tool calling", _off("none")),
    ("functions", None, "function calling", _off([])),
    ("function_call", None, "function calling", _off("none")),
    ("response_format", None, "structured output (only {\"type\": \"text\"} is served)", _off({"type": "text"})),
    ("logit_bias", None, "logit bias", _off({})),
    ("presence_penalty", None, "repetition penalties", _off(0, 0.0)),
    ("frequency_penalty", None, "repetition penalties", _off(0, 0.0)),
    ("best_of", "completion", "best-of sampling", _off(1)),
    ("echo", "completion", "echoing the prompt", _off(False)),
    ("suffix", "completion", "insertion (a suffix)", _off("")),
    ("audio", None, "audio output", _off()),
    ("modalities", None, "output other than text", _off(["text"])),
    ("prediction", None, "predicted outputs", _off()),
    ("web_search_options", None, "web search", _off()),
    ("reasoning_effort", None, "reasoning effort", _off()),
)


def _refuse_unsupported(body: dict, kind: str) -> None:
    for name, only, what, harmless in UNSUPPORTED:
        if (only is None or only == kind) and name in body and not harmless(body[name]):
            raise _bad(f"'{name}' is not supported: this server does not implement {what}; "
                       f"remove it from the request", name, "unsupported_parameter")
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        raise _bad(f"'n' must be 1: this server returns one choice per request, got {n}", "n",
                   "unsupported_parameter")


def _extension(body: dict) -> tuple[str | None, int | None, str | None]:
    ext = body.get("omnidraft")
    if ext is None:
        return None, None, None
    if not isinstance(ext, dict):
        raise _bad("'omnidraft' must be an object", "omnidraft", "invalid_type")
    unknown = set(ext) - {"method", "k", "policy"}
    if unknown:
        raise _bad(f"unknown 'omnidraft' fields: {sorted(unknown)}", "omnidraft")
    method, k, policy = ext.get("method"), ext.get("k"), ext.get("policy")
    if method is not None and method not in METHODS:
        raise _bad(f"'omnidraft.method' must be one of {list(METHODS)}", "omnidraft.method")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K):
        raise _bad(f"'omnidraft.k' must be an integer within [1, {MAX_K}]", "omnidraft.k")
    if policy is not None and policy not in POLICIES:
        raise _bad(f"'omnidraft.policy' must be one of {list(POLICIES)}", "omnidraft.policy")
    return method, k, policy


def parse_request(body, kind: str, n_ctx: int, model_ids: tuple[str, ...]) -> Request:
    """Validate a decoded JSON body for /v1/completions ("completion") or /v1/chat/completions ("chat")."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", None, "invalid_type")
    _refuse_unsupported(body, kind)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("'model' must be a string", "model", "invalid_type")
    if model and model not in model_ids:
        raise ApiError(404, f"the model '{model}' does not exist; this server serves {list(model_ids)}",
                       "model", "model_not_found")
    prompt = messages = None
    if kind == "completion":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise _bad("'prompt' is required and must be a string", "prompt",
                       "missing" if prompt is None else "invalid_type")
        if not prompt:
            raise _bad("'prompt' must not be empty", "prompt")
        _text(prompt, "prompt")
    else:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("'messages' is required and must be a non-empty list", "messages",
                       "missing" if messages is None else "invalid_type")
        if len(messages) > chat.MAX_MESSAGES:  # bounded here, before its preparation takes the engine's worker
            raise _bad(f"{len(messages)} messages: at most {chat.MAX_MESSAGES} in one chat", "messages",
                       "too_many_messages")
        out = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise _bad(f"messages[{i}] must be an object", f"messages[{i}]", "invalid_type")
            role, content = m.get("role"), _content(m.get("content"), i)
            if role not in ("system", "user", "assistant", "developer"):
                raise _bad(f"messages[{i}].role {role!r} is not one of system, user, assistant", f"messages[{i}].role")
            if not isinstance(content, str):
                raise _bad(f"messages[{i}].content must be a string", f"messages[{i}].content", "invalid_type")
            _text(content, f"messages[{i}].content")
            out.append({"role": "system" if role == "developer" else role, "content": content})
        messages = out
    n = _number(body, "n", 1, 1, 1, integer=True)
    assert n == 1
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _number({name: max_tokens}, name, 16 if kind == "completion" else min(512, n_ctx), 1, n_ctx,
                         integer=True)
    params = GenerationParams(
        max_tokens=max_tokens,
        temperature=float(_number(body, "temperature", 1.0, *TEMPERATURE)),
        top_p=float(_number(body, "top_p", 1.0, 0.0, 1.0)),
        top_k=int(_number(body, "top_k", 0, 0, 1000, integer=True)),
        seed=_number(body, "seed", None, -(2 ** 63), 2 ** 64 - 1, integer=True),
        stop=_stop(body),
        logprobs=_logprobs(body, kind),
        reuse_prefix=True)  # chat turns: only the new tokens are prefilled (one cached sequence, no extra memory)
    if params.top_p <= 0.0:
        raise _bad("'top_p' must be greater than 0", "top_p")
    if params.seed is not None and params.seed < 0:
        params.seed &= (1 << 64) - 1
    stream = _bool(body, "stream")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise _bad("'stream_options' must be an object", "stream_options", "invalid_type")
    include_usage = bool(so and _bool(so, "include_usage"))
    if so is not None and not stream:
        raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
    method, k, policy = _extension(body)
    return Request(kind, prompt, messages, params, stream, include_usage, method, k, policy, model or model_ids[0])


# ------------------------------------------------------------------ responses
def usage(stats) -> dict:
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.completion_tokens,
            "total_tokens": stats.prompt_tokens + stats.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": stats.reused_tokens}}


def _head(req: Request, obj: str) -> dict:
    prefix = "chatcmpl-" if req.kind == "chat" else "cmpl-"
    return {"id": prefix + req.id, "object": obj, "created": req.created, "model": req.model,
            "system_fingerprint": "omnidraft"}


def _piece(b: bytes) -> str:
    return b.decode("utf-8", "replace")  # a token that ends inside a character: its exact bytes are in "bytes"


def logprobs(req: Request, marks: list) -> dict | None:
    """OpenAI's logprobs object for tokens given as TextStream marks: (character offset in the
    completion, generator.TokenLogprob).  Legacy offsets count from the prompt's start, as OpenAI's."""
    if req.params.logprobs is None:
        return None
    if req.kind == "chat":
        return {"content": [{"token": _piece(lp.piece), "logprob": lp.logprob, "bytes": list(lp.piece),
                             "top_logprobs": [{"token": _piece(b), "logprob": v, "bytes": list(b)}
                                              for _, b, v in lp.top]} for _, lp in marks], "refusal": None}
    tops = []
    for _, lp in marks:  # the sampled token is always listed, so up to logprobs + 1 entries
        top = {}
        for _, b, v in lp.top + [(lp.id, lp.piece, lp.logprob)]:
            top.setdefault(_piece(b), v)
        tops.append(top)
    base = len(req.prompt or "")
    return {"tokens": [_piece(lp.piece) for _, lp in marks], "token_logprobs": [lp.logprob for _, lp in marks],
            "top_logprobs": tops, "text_offset": [base + at for at, _ in marks]}


def full_response(req: Request, text: str, finish_reason: str, stats, ext: dict, marks: list = ()) -> dict:
    lp = logprobs(req, list(marks))
    if req.kind == "chat":
        d = _head(req, "chat.completion")
        d["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": lp,
                         "finish_reason": finish_reason}]
    else:
        d = _head(req, "text_completion")
        d["choices"] = [{"index": 0, "text": text, "logprobs": lp, "finish_reason": finish_reason}]
    d["usage"] = usage(stats)
    d["omnidraft"] = ext
    return d


def chunk(req: Request, text: str | None, finish_reason: str | None = None, ext: dict | None = None,
          role: bool = False, marks: list | None = None) -> dict:
    """One streamed chunk. ``text=None`` with a finish_reason is the final (empty-delta) chunk;
    ``marks``: the logprob entries of the tokens this chunk's text completes (when asked for)."""
    lp = None if marks is None else logprobs(req, marks)
    if req.kind == "chat":
        d = _head(req, "chat.completion.chunk")
        delta = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
        d["choices"] = [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish_reason}]
    else:
        d = _head(req, "text_completion")
        d["choices"] = [{"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish_reason}]
    if req.include_usage:
        d["usage"] = None
    if ext is not None:
        d["omnidraft"] = ext
    return d


def usage_chunk(req: Request, stats) -> dict:
    d = _head(req, "chat.completion.chunk" if req.kind == "chat" else "text_completion")
    d["choices"] = []
    d["usage"] = usage(stats)
    return d


def draft_spans(chunks) -> list[list[int]]:
    """[[start, end], ...] character offsets of the text that came from accepted drafts (merged)."""
    spans: list[list[int]] = []
    pos = 0
    for c in chunks:
        end = pos + len(c.text)
        if c.from_draft and end > pos:
            if spans and spans[-1][1] == pos:
                spans[-1][1] = end
            else:
                spans.append([pos, end])
        pos = end
    return spans
