"""``omnidraft-gguf`` and ``omnidraft gguf``: the standalone GGUF tools, lent this package's short model names,
llama.cpp tokenizers (vocab-overlap), log (why llama.cpp refused a file) and typed errors."""

from __future__ import annotations

import sys

from gguf_tools import cli as gguf_cli
from omnidraft.assets import models
from omnidraft.cliutil import apply_ranges
from omnidraft.errors import OmniDraftError
from omnidraft.llama import log as llama_log
from omnidraft.llama.engine import Engine, EngineConfig


def host() -> gguf_cli.Host:
    return gguf_cli.Host(resolve=models.resolve, names=tuple(models.REGISTRY),
                         open_vocab=lambda path: Engine(path, EngineConfig(vocab_only=True)),
                         log_tail=llama_log.SINK.take_recent, llama_logger=llama_log.log.name,
                         errors=(OmniDraftError,), check_flags=apply_ranges)


def main(argv: list[str] | None = None) -> int:
    return gguf_cli.main(argv, host())


if __name__ == "__main__":
    sys.exit(main())
