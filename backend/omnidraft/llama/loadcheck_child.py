"""The child process of ``loadcheck``: load a model file as the engine would, check its context length and
decode a few tokens; print ``refused: why`` for a file it can name the fault of.  A file that aborts llama.cpp
kills this process, not the caller's.  Run as ``python -m omnidraft.llama.loadcheck_child PATH CONFIGS_JSON`` (a
list of EngineConfig fields, one per load: ``loadcheck.check_together`` checks a target's two modes at once)."""

from __future__ import annotations

import json
import sys

import llama_cpp

from .engine import Engine, EngineConfig
from .loadcheck import MIN_CONTEXT, PROBE_TOKENS


def main(path: str, cfgs_json: str) -> int:
    """Load like the engine, check its context length, decode PROBE_TOKENS; print 'refused: why' or nothing.
    ``cfgs_json``: a list of EngineConfig fields, checked in turn (the first refusal ends it)."""
    for cfg in json.loads(cfgs_json):
        rc = check(path, EngineConfig(**cfg))
        if rc:
            return rc
    return 0


def check(path: str, cfg: EngineConfig) -> int:
    try:
        eng = Engine(path, cfg)
    except Exception as e:  # noqa: BLE001 - any refusal becomes the verdict's line
        print(f"refused: {e}", flush=True)
        return 3
    if cfg.vocab_only:
        eng.close()
        return 0
    n_batch, n_train = llama_cpp.llama_n_batch(eng._ctx), llama_cpp.llama_model_n_ctx_train(eng._model)
    if 0 < n_train < min(cfg.n_ctx, MIN_CONTEXT):
        print(f"refused: its context length {n_train} is too short to use (at least {MIN_CONTEXT} tokens: "
              f"llama.cpp would take batches of {n_batch} tokens)", flush=True)
        return 3
    n = min(PROBE_TOKENS, eng.n_ctx)
    eng.decode([max(eng.bos_id, 0)] * n, "last")
    eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
