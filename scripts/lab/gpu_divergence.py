"""Where greedy speculation's text leaves the target alone's on a GPU, and why (issue 28's device sweep found
two such answers on an H100 with verification batches the start-up probe called bit-identical).

Per prompt of a snapshot (assets.snapshot): the target alone twice (is the GPU run itself repeatable?), then
drafting at fixed k = 2 (3-row passes, what the product's CUDA plan allows), and the first token where the
texts part.  There, the target's logits for that position from a one-token pass against the same position
inside passes of 2 and 3 rows.  Then the start-up probe again at longer prefixes, and one-token passes
timed in a run against right after a 3-row pass (the start-up cost model's bias on the GPU).

    python scripts/lab/gpu_divergence.py TARGET SNAPSHOT.json OUT.json [GPU_LAYERS] [N] [TOKENS]
"""

from __future__ import annotations

# llama_cpp (and with it the CUDA libraries) before numpy: `python -m omnidraft.apps.cli` loads them in that
# order and runs; this script, importing numpy first, segfaulted in the first model load on the device (twice,
# llama_model_load_from_file) - the order is the one difference found, not a proven cause
import llama_cpp  # noqa: F401  isort: skip
import json
import sys
import tempfile
import time
from statistics import median

import numpy as np

from omnidraft.assets.snapshot import load_snapshot
from omnidraft.llama import invariance
from omnidraft.runtime.session import Session, Settings
from omnidraft.seq import common_prefix
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig


def first_diff(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two texts part (the shorter one's end if one continues the other)."""
    return None if a == b else common_prefix(a, b)


def rows_at(engine, ctx: list[int], nxt: list[int]) -> dict:
    """Logits predicting the token after ``ctx`` from a one-token pass, against the same position as row j of
    passes of 2 and 3 rows (the pass starting j tokens back, or continuing with the alone text's next tokens
    ``nxt``).  The last 3 positions of ``ctx`` are decoded one token at a time first, as the target alone
    does, so that every pass reads the same KV entries: a pass that read entries written by the prompt's
    large batch would differ for that reason alone (0.16 logits on this machine's bit-identical CPU build)."""
    base = len(ctx) - 3
    engine.reset()
    engine.decode(ctx[:base], "none")
    single = [engine.decode([t], "last")[0].copy() for t in ctx[base:]][-1]
    out = {"top2_margin": float(np.diff(np.sort(single)[-2:])[0]), "passes": []}
    for n in (2, 3):
        for back in range(n):  # the position is row `back` of a pass starting `back` tokens before ctx's end
            start = len(ctx) - 1 - back
            fed = ctx[start:] + nxt[: n - 1 - back]
            if len(fed) != n:
                continue
            engine.rollback(start)
            row = engine.decode(fed, "all")[back]
            out["passes"].append({"rows": n, "row": back, "max_abs": float(np.max(np.abs(row - single))),
                                  "argmax_same": bool(np.argmax(row) == np.argmax(single))})
    engine.reset()
    return out


def t1_bias(engine, reps: int = 15) -> dict:
    ids = engine.tokenize("def add(a, b):\n    return a + b\n" * 8)[:128]
    engine.reset()
    engine.decode(ids, "none")
    base = len(ids)

    def one() -> float:
        engine.rollback(base)
        t0 = time.perf_counter()
        engine.decode(ids[:1], "last")
        return time.perf_counter() - t0

    in_row = [one() for _ in range(reps + 5)][5:]
    after = []
    for _ in range(reps):
        engine.rollback(base)
        engine.decode(ids[:3], "all")
        after.append(one())
    engine.reset()
    return {"t1_in_a_row_ms": median(in_row) * 1e3, "t1_after_3_rows_ms": median(after) * 1e3}


def main(target: str, snapshot: str, out: str, gpu_layers: int = -1, n: int = 4, tokens: int = 96) -> None:
    state = tempfile.mkdtemp(prefix="diverge-")
    s = Session(Settings(target=target, gpu_layers=gpu_layers, state_dir=state)).warm_up()
    alone = s.compose("target", None, DraftPolicy(PolicyConfig(name="fixed", k=0)))
    spec = s.compose("omnidraft", s.pair, DraftPolicy(PolicyConfig(name="fixed", k=2)))
    params = GenerationParams(max_tokens=tokens)
    report = {"target": target, "plan": s.plan.as_dict(), "prompts": []}
    for item in load_snapshot(snapshot).items[:n]:
        p = alone.prompt_for(item.prompt, item.chat)
        a1, a2 = alone.generate(p, params).token_ids, alone.generate(p, params).token_ids
        sp = spec.generate(spec.prompt_for(item.prompt, item.chat), params).token_ids
        d = first_diff(a1, sp)
        row = {"id": item.id, "prompt_tokens": len(p.target_ids), "alone_repeatable": a1 == a2,
               "alone_parts_at": first_diff(a1, a2), "spec_parts_at": d}
        if d is not None:
            row["at_divergence"] = rows_at(s.target, list(p.target_ids) + a1[:d], a1[d:d + 2])
        report["prompts"].append(row)
        print(json.dumps(row), flush=True)
    fid = invariance.measure(s.target, 8, prefixes=(37, 250, 700, 1500), timing=False)
    report["probe_long"] = fid.as_dict()
    report["t1_bias"] = t1_bias(s.target)
    report["draft_t1_bias"] = t1_bias(s.draft)  # the drafter's own pass, alone on the GPU
    print(json.dumps({k: report[k] for k in ("plan", "probe_long", "t1_bias", "draft_t1_bias")}), flush=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    s.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) < 3:
        sys.exit(__doc__)
    main(a[0], a[1], a[2], *(int(x) for x in a[3:6]))
