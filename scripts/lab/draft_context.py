"""What a model's one-token pass and its reading of a prompt cost as the context grows: the case for the drafter's
window (drafters.window_start, ``--draft-window``).

    .venv/bin/python scripts/lab/draft_context.py --model smollm2-135m-d8-qwen:q4_0_pure+fr \\
        --ctx 128,512,1024,2048,3072 --out results/.../draft-context.json

The context is stdlib source (``textwrap``, repeated).  Per length: the median of 15 one-token passes after it
(each rolled back), and the seconds to read that many tokens from an empty cache, as ``Engine.prefill`` does.
"""

import argparse
import inspect
import os
import statistics
import textwrap
import time
from pathlib import Path

from omnidraft.assets import models
from omnidraft.bench.report import write_json
from omnidraft.llama.engine import Engine, EngineConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-d8-qwen:q4_0_pure+fr", help="model name or .gguf path")
    ap.add_argument("--ctx", default="128,512,1024,2048,3072", help="context lengths (tokens)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads")
    ap.add_argument("--out", help="JSON results")
    a = ap.parse_args()
    lengths = [int(x) for x in a.ctx.split(",")]
    rows = []
    with Engine(models.resolve(a.model), EngineConfig(n_ctx=max(lengths) + 64, n_threads=a.threads)) as e:
        toks = e.tokenize(inspect.getsource(textwrap) * 4)
        assert len(toks) > max(lengths) + 1, "the context text is too short"
        for n in lengths:
            t0 = time.perf_counter()
            e.prefill(toks[:n + 1], reuse=False)  # n tokens into the cache
            read_s = time.perf_counter() - t0
            passes = []
            for _ in range(15):
                t0 = time.perf_counter()
                e.decode(toks[n:n + 1], "last")
                passes.append(time.perf_counter() - t0)
                e.rollback(n)
            rows.append({"ctx": n, "pass_ms": round(statistics.median(passes) * 1e3, 2), "read_s": round(read_s, 3)})
            print(f"ctx {n:5d}: one-token pass {rows[-1]['pass_ms']:.2f} ms; reading {n} tokens {read_s:.2f} s",
                  flush=True)
    if a.out:
        write_json(Path(a.out), {"model": a.model, "threads": a.threads, "rows": rows})


if __name__ == "__main__":
    main()
