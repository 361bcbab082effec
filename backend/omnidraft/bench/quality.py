"""What requantizing costs: perplexity of each target file on held-out text.

    python -m omnidraft.bench.quality --targets qwen2.5-coder-1.5b,qwen2.5-coder-1.5b:q4_0

The text is the held-out split of the benchmark prompt sets (HumanEval prompts and standard-library
functions of held-out modules), cut into windows of ``--window`` tokens; each window is scored in one
pass (exact kernels), and the perplexity is exp(mean negative log-likelihood) over every predicted token.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from omnidraft.assets import models, prompts
from omnidraft.llama.engine import Engine, EngineConfig


def heldout_text(max_chars: int = 60_000) -> str:
    parts = []
    for name in ("humaneval", "stdlib-code"):
        parts += [i.prompt for i in prompts.load(name).split("heldout")]
    return "\n\n".join(parts)[:max_chars]


def perplexity(path: Path, text: str, window: int = 512, threads: int = 0) -> dict:
    with Engine(path, EngineConfig(n_ctx=window + 8, n_threads=threads, n_batch=window)) as e:
        ids = e.tokenize(text, add_bos=False)
        nll, n = 0.0, 0
        for start in range(0, len(ids) - 1, window):
            chunk = ids[start:start + window]
            if len(chunk) < 2:
                break
            e.reset()
            rows = np.asarray(e.decode(chunk, "all"), dtype=np.float64)
            z = rows[:-1] - rows[:-1].max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            nll -= float(logp[np.arange(len(chunk) - 1), chunk[1:]].sum())
            n += len(chunk) - 1
    return {"file": path.name, "bytes": path.stat().st_size, "tokens": n, "ppl": math.exp(nll / n)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omnidraft.bench.quality", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", default=f"{models.QWEN_05B},{models.QWEN_05B}:q4_0")
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--max-chars", type=int, default=16_000, help="held-out text to score (about 4 chars a token)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default="results")
    args = p.parse_args(argv)
    text = heldout_text(args.max_chars)
    rows = []
    for t in args.targets.split(","):
        r = perplexity(models.resolve(t), text, args.window, args.threads)
        rows.append(dict(target=t, **r))
        print(f"{t:32s} {r['bytes'] / 1e6:8.1f} MB  perplexity {r['ppl']:.4f} over {r['tokens']} tokens", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"quality-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
