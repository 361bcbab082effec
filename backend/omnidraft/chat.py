"""Render chat messages with a model's own Jinja chat template (read from its GGUF)."""

from __future__ import annotations

import datetime
from functools import lru_cache

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import BadRequest

# Used when a GGUF carries no template: ChatML, the most common format for small models.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ROLES = ("system", "user", "assistant", "tool")


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
