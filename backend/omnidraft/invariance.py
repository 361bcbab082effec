"""How large may a verification batch be and still give bit-identical logits?

Exact speculative decoding needs the target's logits for a verified row to equal
the logits the target alone computes one token at a time.  llama.cpp's CPU kernels
switch algorithms with the batch size (repacked gemm at 4+ rows, others at 8+ on
this build), so we measure, once per model file / build / thread count, the largest
batch whose every row equals sequential decoding, across a 256-cell KV boundary,
and never verify more than that at once.  The answer is cached on disk.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

import llama_cpp

from .engine import Engine

log = logging.getLogger(__name__)

PROBE_TEXT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
              "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n")


def _key(engine: Engine) -> str:
    st = engine.path.stat()
    cfg = engine.config
    return "|".join(str(x) for x in (engine.path.resolve(), st.st_size, st.st_mtime_ns, cfg.threads(),
                                     cfg.batch_invariant, cfg.flash_attn, cfg.n_gpu_layers,
                                     llama_cpp.__version__))


def probe(engine: Engine, max_n: int = 8) -> int:
    """Largest n <= max_n such that a batch of n reproduces one-token decoding bit for bit.

    Checked after a short and a long prefix (the second straddles a 256-cell KV boundary)."""
    ids = engine.tokenize(PROBE_TEXT)
    best = max_n
    for n_prefix in (37, 250):
        prefix = (ids * (n_prefix // len(ids) + 1))[:n_prefix]
        best = min(best, _probe_at(engine, prefix, ids[:max_n]))
    engine.reset()
    return best


def _probe_at(engine: Engine, prefix: list[int], seq: list[int]) -> int:
    engine.reset()
    engine.decode(prefix, "none")
    single = [engine.decode([tok], "last")[0].copy() for tok in seq]
    best = 1
    for n in range(2, len(seq) + 1):
        engine.rollback(len(prefix))
        rows = engine.decode(seq[:n], "all")
        if not all(np.array_equal(rows[i], single[i]) for i in range(n)):
            break
        best = n
    return best


def max_invariant_batch(engine: Engine, cache_file: Path | None, max_n: int = 8) -> int:
    key = _key(engine)
    table: dict = {}
    if cache_file is not None and cache_file.exists():
        try:
            table = json.loads(cache_file.read_text())
        except ValueError:
            table = {}
    if key in table:
        return int(table[key])
    n = probe(engine, max_n)
    log.info("%s: verification batches up to %d tokens are bit-identical to one-token decoding",
             engine.path.name, n)
    if cache_file is not None:
        table[key] = n
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(cache_file.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, cache_file)
    return n
