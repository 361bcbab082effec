"""Typed exceptions.  Callers (CLI, server) map them to exit codes / HTTP codes by type."""

from __future__ import annotations

import contextlib

from gguf_tools import errors as gguf_errors


class OmniDraftError(Exception):
    """Base class for every error this package raises on purpose."""

    http_status = 500


class ModelNotFound(OmniDraftError):
    """A model name is neither a known short name nor an existing .gguf file."""

    http_status = 404


class ModelFetchError(OmniDraftError):
    """Downloading or assembling a model failed (network, pip, missing member)."""


class ChecksumMismatch(ModelFetchError):
    """An assembled file does not match its sha256 pin; the bad file was removed."""


class InvalidModelFile(OmniDraftError, gguf_errors.InvalidFile):
    """A file is missing, truncated, not GGUF, or llama.cpp refused to load it."""

    http_status = 400


class ContextOverflow(OmniDraftError):
    """The prompt (plus what is asked to generate) does not fit in the context window."""

    http_status = 400


class VocabularyMismatch(OmniDraftError, gguf_errors.VocabMismatch):
    """Drafter and target cannot be paired (e.g. no shared tokens, bad same-vocab claim)."""

    http_status = 400


class EngineError(OmniDraftError):
    """llama.cpp returned an error code from decode / tokenize."""


class BadRequest(OmniDraftError):
    """Invalid user parameters (CLI or HTTP)."""

    http_status = 400


class RegistryCorrupt(OmniDraftError):
    """A drafter registry file (CURRENT) holds something other than what publish writes."""


_FROM_GGUF_TOOLS = {gguf_errors.InvalidFile: InvalidModelFile, gguf_errors.BadArgument: BadRequest,
                    gguf_errors.VocabMismatch: VocabularyMismatch}


@contextlib.contextmanager
def from_gguf_tools():
    """Calls into gguf_tools raise its own errors (it stands alone); here they become ours, same message,
    so that the CLI's exit code and the servers' HTTP codes stay what they are for every other error."""
    try:
        yield
    except OmniDraftError:
        raise
    except gguf_errors.GGUFToolError as e:
        raise _FROM_GGUF_TOOLS.get(type(e), OmniDraftError)(str(e)) from e
