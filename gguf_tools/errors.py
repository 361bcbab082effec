"""The GGUF tools' own errors: they stand alone (no omnidraft import), and omnidraft maps them to its types."""


class GGUFToolError(Exception):
    """Base class for every error the GGUF tools raise on purpose (the CLI prints one line and exits 2)."""


class InvalidFile(GGUFToolError):
    """A file is missing, truncated, not GGUF or not the checkpoint expected, or llama.cpp refused it."""


class BadArgument(GGUFToolError):
    """An unknown type, an unsupported architecture or option, or arguments that contradict each other."""


class VocabMismatch(GGUFToolError):
    """A vocabulary does not fit the model it is given to (more tokens than embedding rows)."""
