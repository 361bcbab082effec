"""Does a target pass cost more in the speculative loop's order than in the timing rounds' (issue 41)?

The cost model times a target's n-token passes back to back; in the loop a two-token pass follows a drafter
pass, or a one-token pass of the target.  This times T(1) and T(2) of the default pair's target in five
orders: one-token passes back to back, two-token ones back to back, each two-token pass after a one-token
one, and each pass after a drafter pass (one and two tokens).  Medians and minima of 6 rounds x 8 passes.

    .venv/bin/python scripts/lab/pass_order.py --target qwen2.5-coder-0.5b [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))
from omnidraft.runtime.session import Session  # noqa: E402
from omnidraft.runtime.settings import Settings  # noqa: E402

TEXT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="qwen2.5-coder-0.5b")
    ap.add_argument("--draft", default="smollm2-135m-d8-qwen:q4_0_pure+fr")
    ap.add_argument("--out", default="", help="also write the figures to this JSON file")
    args = ap.parse_args()
    s = Session(Settings(target=args.target, draft=args.draft, method="omnidraft"))
    t, d = s.pair.target, s.pair.draft
    ids, dids = t.tokenize(TEXT * 8)[:160], d.tokenize(TEXT)[:17]
    t.reset(), t.decode(ids, "none")
    d.reset(), d.decode(dids[:-1], "none")
    base, dbase = t.n_past, d.n_past

    def target_pass(n: int) -> float:
        t.rollback(base)
        t0 = time.perf_counter()
        t.decode(ids[:n], "all")
        return time.perf_counter() - t0

    def draft_pass() -> None:
        d.rollback(dbase)
        d.decode(dids[-1:], "last")

    orders = {"1 back to back": lambda: target_pass(1), "2 back to back": lambda: target_pass(2),
              "2 after a 1": lambda: (target_pass(1), target_pass(2))[1],
              "1 after a drafter pass": lambda: (draft_pass(), target_pass(1))[1],
              "2 after a drafter pass": lambda: (draft_pass(), target_pass(2))[1]}
    times: dict[str, list[float]] = {k: [] for k in orders}
    for _ in range(6):  # rounds, so that the VM's drifts fall on every order alike
        for name, fn in orders.items():
            times[name] += [fn() for _ in range(8)]
    rows = {k: {"median_ms": round(statistics.median(v) * 1e3, 2), "min_ms": round(min(v) * 1e3, 2)}
            for k, v in times.items()}
    for k, r in rows.items():
        print(f"{k:24s} median {r['median_ms']:7.1f} ms   min {r['min_ms']:7.1f} ms")
    if args.out:
        Path(args.out).write_text(json.dumps({"cpu": platform.processor(), "target": args.target,
                                              "draft": args.draft, "orders": rows}, indent=1))


if __name__ == "__main__":
    main()
