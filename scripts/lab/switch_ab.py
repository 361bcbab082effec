"""T(n) of one engine with a run-time switch of the kernels on and off, alternated pass by pass in one process
(a shared 2-core VM drifts by 5-15 % over minutes: only an interleaved comparison tells a few per cent).

    PYTHONPATH=<build> .venv/bin/python scripts/lab/switch_ab.py FILE [--var OMNIDRAFT_Q8K] [--mode fast]
        [--ns 1,4,8] [--rounds 40] [--out DIR]

The switch must be one the kernels read at every call (OMNIDRAFT_SBQ4, OMNIDRAFT_Q8K), not at load.  Each
pass decodes n tokens at position ~60 asking logits for every row (what verification asks) and is rolled
back; per round, each n runs once with the switch on ("1": unset) and once off ("0"), in turn first.  Prints
and writes (DIR/switch-ab-<var>-<time>.json) per n: the minimum and median of each side, and the median of
the per-round ratio off / on.
"""

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from omnidraft.apps.doctor import cpu_name
from omnidraft.llama.engine import Engine, EngineConfig

PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n" * 3


def timed_pass(eng: Engine, base: int, n: int, first: int = 1000) -> float:
    """Milliseconds of one pass of n tokens (ids first..first+n-1) after ``base`` cells, logits for every row,
    rolled back after (scripts/lab/fa_ab.py times its passes with this too)."""
    t = time.perf_counter()
    eng.decode(list(range(first, first + n)), logits_for="all")
    dt = time.perf_counter() - t
    eng.rollback(base)
    return dt * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="GGUF to time")
    ap.add_argument("--var", default="OMNIDRAFT_Q8K", help="the switch: off = '0', on = unset")
    ap.add_argument("--mode", choices=("fast", "exact"), default="fast", help="kernel mode (fast: repacked)")
    ap.add_argument("--ns", default="1,4,8", help="pass sizes")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--out", default="", help="directory for the JSON")
    args = ap.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    eng = Engine(args.file, EngineConfig(n_ctx=512, n_threads=args.threads, batch_invariant=args.mode == "exact"))
    eng.prefill(eng.tokenize(PROMPT, add_bos=True))
    base = eng.n_past
    samples = {n: {"on": [], "off": []} for n in ns}
    os.environ.pop(args.var, None)
    for n in ns:  # warm both paths
        timed_pass(eng, base, n)
    for r in range(args.rounds):
        for n in ns:
            for side in (("on", "off") if r % 2 == 0 else ("off", "on")):
                if side == "off":
                    os.environ[args.var] = "0"
                else:
                    os.environ.pop(args.var, None)
                samples[n][side].append(timed_pass(eng, base, n))
    os.environ.pop(args.var, None)
    report = {"file": args.file, "var": args.var, "mode": args.mode, "rounds": args.rounds, "cpu": cpu_name(),
              "threads": eng.live_threads, "n_past": base, "ns": {}}
    print(f"{Path(args.file).name}, {args.mode} mode, {args.var} on vs off, {args.rounds} rounds, {report['cpu']}")
    print("| n | on: min / median ms | off: min / median ms | off / on (median of rounds) |")
    print("|---|---|---|---|")
    for n in ns:
        on, off = np.array(samples[n]["on"]), np.array(samples[n]["off"])
        ratio = float(np.median(off / on))
        report["ns"][n] = {"on_ms": on.round(3).tolist(), "off_ms": off.round(3).tolist(), "off_over_on": ratio}
        print(f"| {n} | {on.min():.2f} / {np.median(on):.2f} | {off.min():.2f} / {np.median(off):.2f} | {ratio:.3f} |")
    if args.out:
        out = Path(args.out) / f"switch-ab-{args.var}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1))
        print(f"wrote {out}")
    eng.close()


if __name__ == "__main__":
    main()
