"""Would a new process gain from starting where the last one's acceptance estimates ended?  On the priced clock.

Each `omnidraft generate` is a process whose cost policy starts from the prior (ACC_PRIOR for every draft position),
while a server's next request starts from what the last one learned, leaned half-way back to the prior
(``DraftPolicy.begin_request``).  Here every prompt of a held-out set is its own fresh policy's only request
(priced_policy.py's clock: real drafts and verdicts, pass times from one table under a seeded drift), starting
either from the prior or from a kept acceptance: the long-run estimates one pass over the same set left in one
process (seed 999).  Paired by seed; the output must equal the target alone's (priced_policy.run_seed checks it
per set there, not here: the policy's start changes no token, only what is drafted).

    PYTHONPATH=backend .venv/bin/python scripts/lab/fresh_process_policy.py --sets chat-fresh --seeds 6 --out OUT.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
from pathlib import Path

from omnidraft.assets.snapshot import load_set
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.policy import ACC_PRIOR, DraftPolicy

sys.path.insert(0, str(Path(__file__).parent))
import priced_policy as pp  # noqa: E402


def starting_from(acc: list[float] | None):
    """DraftPolicy's constructor, patched so that a new policy's estimates start at ``acc`` (None: the prior)."""
    init = DraftPolicy.__init__

    def patched(self, *args, **kw):
        init(self, *args, **kw)
        if acc is not None:
            self.acc = (list(acc) + [ACC_PRIOR] * len(self.acc))[: len(self.acc)]
            self.acc_long = list(self.acc)
    return init, patched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="chat-fresh,humaneval")
    ap.add_argument("--n", type=int, default=6, help="prompts per set")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    clock = argparse.Namespace(t_verify=pp.T_VERIFY_MS, t_draft=pp.T_DRAFT_MS, drift=0.10, memory=50.0, jitter=0.03,
                               seed_noise=0.05, policy="cost", k=4, trace=False)
    session = Session(Settings(target="qwen2.5-coder-1.5b", method="hybrid", context_prices=False))
    params = GenerationParams(max_tokens=a.max_tokens)
    cache = copy.deepcopy(session.pair.cache)
    out = {}
    for s in a.sets.split(","):
        items = load_set(s).split("heldout")[: a.n]
        kept = pp.run_seed(session, cache, items, params, 999, clock)["acc_long"]
        out[s] = {"kept_acceptance": kept}
        for start, acc in (("prior", None), ("kept", kept)):
            init, patched = starting_from(acc)
            DraftPolicy.__init__ = patched
            try:
                speed = []
                for seed in range(a.seeds):  # each prompt a process: its priced time over the target alone's
                    runs = [pp.run_seed(session, cache, [it], params, seed * 100 + i, clock) for i, it in
                            enumerate(items)]
                    speed.append(sum(r["tokens"] for r in runs) / sum(r["tokens"] / r["speedup"] for r in runs))
            finally:
                DraftPolicy.__init__ = init
            out[s][start] = speed
            print(s, start, [round(x, 3) for x in speed], flush=True)
        d = [k / p - 1 for p, k in zip(out[s]["prior"], out[s]["kept"])]
        out[s]["kept_vs_prior"] = {"mean": statistics.mean(d), "se": statistics.stdev(d) / math.sqrt(len(d))}
        print(f"{s}: kept against prior {100 * statistics.mean(d):+.2f} % (standard error "
              f"{100 * out[s]['kept_vs_prior']['se']:.2f} %)", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
