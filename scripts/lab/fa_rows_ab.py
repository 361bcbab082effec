"""T(n) of one file at several context lengths, fa_rows.cpp against ggml's one_chunk (OMNIDRAFT_FA_ROWS=0, read
by the library at every pass), passes alternated in one process, each rolled back: what the attention costs as the
context grows, and what reading the KV cache in shared, vectorized blocks saves (fast mode, 2 threads).

    .venv/bin/python scripts/lab/fa_rows_ab.py --file qwen2.5-coder-1.5b --ctx 64,512,1024,2048,3072 \\
        --n 1,2,4,5,8 --out results/.../fa-rows-ab.json

The context is stdlib source (``textwrap``, repeated), read once in 8-token passes as the product reads prompts.
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


def context_tokens(e: Engine, cells: int) -> list[int]:
    """Stdlib source (``textwrap``, repeated) as tokens: more than ``cells`` of them, for a context and the passes
    that follow it."""
    return e.tokenize(inspect.getsource(textwrap) * (cells // 2000 + 2))


def read(e: Engine, toks: list[int], start: int, end: int) -> None:
    """``toks[start:end]`` into the cache, 8 tokens a pass, as the product reads a prompt."""
    for i in range(start, end, 8):
        e.decode(toks[i:min(i + 8, end)], "none")


def timed(e: Engine, toks: list[int], at: int, n: int, reps: int) -> dict[str, float]:
    """Median ms of an n-token pass at context ``at``, both ways, alternated."""
    ts: dict[str, list[float]] = {"fa_rows": [], "one_chunk": []}
    for r in range(reps):
        for label, env in (("fa_rows", "1"), ("one_chunk", "0")):
            os.environ["OMNIDRAFT_FA_ROWS"] = env
            t = time.perf_counter()
            e.decode(toks[at + r % 7: at + r % 7 + n], "all")
            ts[label].append(time.perf_counter() - t)
            e.rollback(at)
    os.environ.pop("OMNIDRAFT_FA_ROWS", None)
    return {k: round(statistics.median(v[1:]) * 1e3, 2) for k, v in ts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="qwen2.5-coder-1.5b", help="model name or .gguf path (fast mode)")
    ap.add_argument("--ctx", default="64,512,1024,2048,3072", help="context lengths (tokens) the passes follow")
    ap.add_argument("--n", default="1,2,4,5,8", help="pass sizes")
    ap.add_argument("--reps", type=int, default=12, help="passes a size, context and side")
    ap.add_argument("--out", help="JSON results")
    a = ap.parse_args()
    ctxs, ns = [int(x) for x in a.ctx.split(",")], [int(x) for x in a.n.split(",")]
    e = Engine(models.resolve(a.file), EngineConfig(n_threads=2, n_ctx=max(ctxs) + 64, batch_invariant=False))
    toks = context_tokens(e, max(ctxs))
    rows, done = [], 0
    for c in ctxs:
        read(e, toks, done, c)
        done = c
        row = {"ctx": c, **{f"T({n})": timed(e, toks, c, n, a.reps) for n in ns}}
        rows.append(row)
        cells = "  ".join(f"T({n}) {row[f'T({n})']['fa_rows']:.1f} / {row[f'T({n})']['one_chunk']:.1f}" for n in ns)
        print(f"ctx {c:5d}: {cells} ms (fa_rows / one_chunk)", flush=True)
    if a.out:
        write_json(Path(a.out), {"file": a.file, "reps": a.reps, "rows": rows})


if __name__ == "__main__":
    main()
