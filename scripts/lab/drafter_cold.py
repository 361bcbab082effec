"""What a drafter pass costs inside the loop, and why it costs more there than alone (issue 41's "drafter's cost per
drafted token <= 5 %").

    python scripts/lab/drafter_cold.py cold TARGET [--rounds 30]    one drafter pass warm (after a pass of the same
                                                                    shape), after a 1 GB numpy sum and after a
                                                                    target pass; 1 / 2 threads and 1..16 tokens
                                                                    after a target pass
    python scripts/lab/drafter_cold.py loop TARGET [--set humaneval] [--n 6]   the default generation, with every
                                                                    drafter decode timed by its size: where the
                                                                    drafter's time goes in the loop

The served drafter (``assets.models.SERVED_DRAFT``) in the fast mode, as the pair loads it.  A target pass streams
about a gigabyte of weights through the caches, so the drafter's next pass reads its ~21 MB from memory, not L3.
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics as st
import time

import llama_cpp
import numpy as np

import omnidraft  # noqa: F401  (loads llama_cpp before numpy's heavy users, as every entry point does)
from omnidraft.assets import models
from omnidraft.assets.snapshot import load_set
from omnidraft.llama.costmodel import _PROBE
from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.runtime.session import Session
from omnidraft.runtime.settings import Settings
from omnidraft.speculative.generator import GenerationParams


def _pair(target: str) -> tuple[Engine, Engine]:
    fast = {"n_ctx": 1024, "batch_invariant": False}
    return (Engine(models.resolve(models.SERVED_DRAFT), EngineConfig(n_threads=1, **fast)),
            Engine(models.resolve(target), EngineConfig(n_threads=2, **fast)))


def cold(target: str, rounds: int) -> dict:
    d, t = _pair(target)
    ids, tids = d.tokenize(_PROBE * 3), t.tokenize(_PROBE)
    d.decode(ids[:16], "none"), t.decode(tids[:16], "none")
    big = np.ones(1 << 27)  # 1 GB, as much as a target pass reads
    cases = [("warm (after a 1-token drafter pass)", 1, 1, "draft"), ("after a 1 GB numpy sum", 1, 1, "sum")]
    cases += [(f"after a target pass, {n} thread(s), {size} token(s)", n, size, "target")
              for size in (1, 2, 4, 8, 16) for n in (1, 2)]
    times: dict[str, list[float]] = collections.defaultdict(list)
    for r in range(rounds + 1):
        for label, n, size, before in cases:
            d.set_threads(n)
            if before == "sum":
                big.sum()
            elif before == "target":
                t.rollback(16), t.decode(tids[16:17], "last")
            elif before == "draft":  # the same shape just before: weights in cache, the graph reused
                d.rollback(16), d.decode(ids[16:17], "last")
            d.rollback(16)
            t0 = time.perf_counter()
            d.decode(ids[16:16 + size], "last")
            if r:  # round 0 warms up
                times[label].append(time.perf_counter() - t0)
    out = {k: round(st.median(v) * 1e3, 3) for k, v in times.items()}
    for k, v in out.items():
        print(f"drafter pass {k:45s} {v:.3f} ms")
    return out


def loop(target: str, set_name: str, n: int, batch_threads: int = 0) -> dict:
    s = Session(Settings(target=target)).warm_up()
    draft = s.pair.draft
    if batch_threads:  # an A/B of the batched passes' threads (llama.cpp's n_threads_batch)
        llama_cpp.llama_set_n_threads(draft._ctx, draft.live_threads, batch_threads)
    sizes: dict[str, list[float]] = collections.defaultdict(list)
    plain = draft.decode

    def timed(tokens, *a, **k):  # every drafter decode: prompt reads, catch-ups, drafting passes
        t0 = time.perf_counter()
        r = plain(tokens, *a, **k)
        sizes[str(len(tokens)) if len(tokens) < 4 else "4+"].append(time.perf_counter() - t0)
        return r

    draft.decode = timed
    tot = collections.Counter()
    for it in load_set(set_name).split("heldout")[:n]:
        for method in ("target", None):  # the target alone's decode (interleaved), then the default
            gen = s.generator(method=method)
            p = gen.prompt_from_messages([{"role": "user", "content": it.prompt}]) if it.chat else \
                gen.prompt_from_text(it.prompt)
            f = gen.generate(p, GenerationParams(max_tokens=64))
            if method == "target":
                tot["target_alone_decode_s"] += f.stats.total_s - f.stats.prefill_s
                tot["target_alone_tokens"] += len(f.token_ids)
                continue
            tot["tokens"] += len(f.token_ids)
            tot["decode_s"] += f.stats.total_s - f.stats.prefill_s
            tot["steps"] += len(f.steps)
            tot["proposed"] += sum(r.proposed for r in f.steps)
            tot["drafter_in_steps_s"] += sum(r.draft_s for r in f.steps)
            tot["catchup_s"] += sum(r.catchup_s for r in f.steps)
    s.close()
    passes = {k: {"calls": len(v), "median_ms": round(st.median(v) * 1e3, 3), "total_ms": round(sum(v) * 1e3, 1)}
              for k, v in sorted(sizes.items())}
    per_token = tot["target_alone_decode_s"] / max(tot["target_alone_tokens"], 1)
    share = tot["drafter_in_steps_s"] / max(tot["proposed"], 1) / per_token
    out = {"totals": dict(tot), "drafter_decodes": passes, "target_decode_ms": round(per_token * 1e3, 2),
           "drafter_threads": {"one_token": draft.live_threads, "batch": batch_threads or draft.live_threads},
           "drafter_share_per_proposed_token": round(share, 4)}
    print(json.dumps(out, indent=1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("cold", "loop"))
    ap.add_argument("target")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--set", default="humaneval")
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--batch-threads", type=int, default=0, help="loop: the drafter's batched passes' threads "
                    "(0: as the pair sets them, the one-token count: Engine.set_threads sets both)")
    ap.add_argument("--out")
    a = ap.parse_args()
    res = cold(a.target, a.rounds) if a.what == "cold" else loop(a.target, a.set, a.n, a.batch_threads)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"what": a.what, "target": a.target, "result": res}, f, indent=1)


if __name__ == "__main__":
    main()
