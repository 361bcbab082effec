"""T(n) with flash attention on and off, at several lengths of context: two engines of one file in one process,
their passes alternated (the order flips each round), so that a shared VM's drift lands on both.

    PYTHONPATH=<build> .venv/bin/python scripts/lab/fa_ab.py FILE [--mode fast] [--contexts 100,300,600]
        [--rounds 25] [--out results/issue41/zen5/fa/NAME.json]

Each pass decodes n = 1, 4, 8 tokens after a prefix of the given length, asking logits for every row, and is
rolled back.  Prints a Markdown table of the medians (ms) and their ratio; writes them as JSON.  Which engine
runs flash attention is the engine's own flag (EngineConfig.flash_attn), so the build decides what "on" computes
(with fa-hook.patch: rows bit-identical to decoding).
"""

import argparse
import json
from pathlib import Path

import numpy as np

from omnidraft.llama.engine import Engine, EngineConfig
from switch_ab import timed_pass  # this script's folder is on sys.path when it runs

NS = (1, 4, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="GGUF to time")
    ap.add_argument("--mode", choices=("fast", "exact"), default="fast", help="kernel mode (fast: repacked)")
    ap.add_argument("--contexts", default="100,300,600", help="prefix lengths (tokens)")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--out", default="", help="JSON file for the medians")
    args = ap.parse_args()
    engines = {fa: Engine(args.file, EngineConfig(n_ctx=2048, batch_invariant=args.mode == "exact", flash_attn=fa))
               for fa in (False, True)}
    out = {}
    print("| context | n | FA off ms | FA on ms | on / off |\n|---|---|---|---|---|")
    for ctx in (int(c) for c in args.contexts.split(",")):
        for e in engines.values():
            e.reset()
            e.prefill(list(range(100, 100 + ctx)))
        ms = {(fa, n): [] for fa in engines for n in NS}
        for r in range(args.rounds):
            for n in NS:
                for fa, e in (engines.items() if r % 2 == 0 else reversed(engines.items())):
                    ms[fa, n].append(timed_pass(e, ctx, n, first=500))
        for n in NS:
            off, on = float(np.median(ms[False, n])), float(np.median(ms[True, n]))
            out[f"{ctx}/{n}"] = {"fa_off_ms": off, "fa_on_ms": on}
            print(f"| {ctx} | {n} | {off:.2f} | {on:.2f} | {on / off:.3f} |", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))
    for e in engines.values():
        e.close()


if __name__ == "__main__":
    main()
