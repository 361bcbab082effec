"""Typed exceptions.  Callers (CLI, server) map them to exit codes / HTTP codes by type."""


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


class InvalidModelFile(OmniDraftError):
    """A file is missing, truncated, not GGUF, or llama.cpp refused to load it."""

    http_status = 400


class ContextOverflow(OmniDraftError):
    """The prompt (plus what is asked to generate) does not fit in the context window."""

    http_status = 400


class VocabularyMismatch(OmniDraftError):
    """Drafter and target cannot be paired (e.g. no shared tokens, bad same-vocab claim)."""

    http_status = 400


class EngineError(OmniDraftError):
    """llama.cpp returned an error code from decode / tokenize."""


class BadRequest(OmniDraftError):
    """Invalid user parameters (CLI or HTTP)."""

    http_status = 400


class RegistryCorrupt(OmniDraftError):
    """A drafter registry file (CURRENT) holds something other than what publish writes."""
