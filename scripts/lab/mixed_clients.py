"""One server, two kinds of client: does it pay for greedy and sampled requests to learn their draft lengths apart?

    python scripts/lab/mixed_clients.py TARGET [--n 8] [--greedy-set humaneval] [--sampled-set chat-fresh]
                                        [--temperature 1.0] [--top-k 0] [--top-p 1.0] [--out FILE.json]

Two sessions on the same pair, each with its own fresh state dir, serve the same stream: a greedy request (a code
plugin at temperature 0) then a sampled one (a chat app at the API's default temperature), prompt after prompt.
"split" asks for each request's kind, as the server's worker does (runtime.policies.learner); "shared" asks for a
greedy generator every time, as the worker did before: one policy, one acceptance predictor, one guard verdict
for both kinds.  The two sessions take turns request by request, the first of each pair alternating, so the VM's
drift falls on both.  Their output must be the same token for token (seeded sampling is exact).  ``--same``
makes both sessions learn apart: an A/A run, whose ratios are the harness's own noise (the thirty-sixth session, 1.5B
at temperature 1, three runs: 0.95-1.10x; two alike sessions' policies drift apart on timing noise).
"""
from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time

import omnidraft  # noqa: F401  (loads llama_cpp before numpy's heavy users, as every entry point does)
from omnidraft.assets.snapshot import load_set
from omnidraft.bench import report
from omnidraft.runtime.session import Session
from omnidraft.runtime.settings import Settings
from omnidraft.speculative.generator import GenerationParams


def run(target: str, n: int, greedy_set: str, sampled_set: str, sampling: dict, max_tokens: int,
        flip: bool = False, same: bool = False) -> dict:
    stream = []
    pairs = zip(load_set(greedy_set).split("heldout")[:n], load_set(sampled_set).split("heldout")[:n])
    for i, (g, s) in enumerate(pairs):
        stream += [("greedy", g, GenerationParams(max_tokens=max_tokens)),
                   ("sampled", s, GenerationParams(max_tokens=max_tokens, seed=1000 + i, **sampling))]
    # --flip also creates the shared session first: the A/A runs found the second-made session 2-5 % faster
    made = ("shared", "split") if flip else ("split", "shared")
    dirs = {name: tempfile.mkdtemp(prefix=f"mixed-{name}-") for name in made}
    sessions = {name: Session(Settings(target=target, state_dir=d)).warm_up() for name, d in dirs.items()}
    tot = {name: {kind: collections.Counter() for kind in ("greedy", "sampled")} for name in sessions}
    outputs: dict[str, list] = {name: [] for name in sessions}
    for j, (kind, item, params) in enumerate(stream):
        order = ("split", "shared") if (j % 4 < 2) != flip else ("shared", "split")
        for name in order:
            apart = name == "split" or same  # --same: both sessions learn apart (an A/A run)
            gen = sessions[name].generator(sampled=kind == "sampled" and apart)
            f = gen.generate(gen.prompt_for(item.prompt, item.chat), params)
            sessions[name].save_state()  # as the server does after each request
            c = tot[name][kind]
            c["tokens"] += len(f.token_ids)
            c["decode_s"] += f.stats.total_s - f.stats.prefill_s
            c["steps"] += len(f.steps)
            c["proposed"] += f.stats.proposed
            c["accepted"] += f.stats.accepted
            outputs[name].append(f.token_ids)
        rates = (f"{name} {tot[name][kind]['tokens'] / tot[name][kind]['decode_s']:.1f} tok/s" for name in order)
        print(f"{j + 1}/{len(stream)} {kind}: " + "  ".join(rates), flush=True)
    for s in sessions.values():
        s.close()
    res = {name: {kind: dict(c, tokens_per_s=round(c["tokens"] / c["decode_s"], 2),
                             tau=round(c["tokens"] / max(c["steps"], 1), 3),
                             drafted_per_step=round(c["proposed"] / max(c["steps"], 1), 3),
                             kept=round(c["accepted"] / max(c["proposed"], 1), 3))
                  for kind, c in per.items()} for name, per in tot.items()}
    res["same_output"] = outputs["split"] == outputs["shared"]
    return res


def table(res: dict) -> str:
    rows = ["| requests | shared tok/s | split tok/s | split / shared | drafted a step (shared / split) | "
            "kept (shared / split) | tau (shared / split) |", "|---|---|---|---|---|---|---|"]
    for kind in ("greedy", "sampled"):
        a, b = res["shared"][kind], res["split"][kind]
        rows.append(f"| {kind} | {a['tokens_per_s']} | {b['tokens_per_s']} | "
                    f"**{b['tokens_per_s'] / a['tokens_per_s']:.3f}x** | {a['drafted_per_step']} / "
                    f"{b['drafted_per_step']} | {a['kept']} / {b['kept']} | {a['tau']} / {b['tau']} |")
    return "\n".join(rows) + f"\n\nsame output: {res['same_output']}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="the target model (a name `omnidraft models list` shows, or a GGUF path)")
    ap.add_argument("--n", type=int, default=8, help="requests of each kind (held-out prompts)")
    ap.add_argument("--greedy-set", default="humaneval")
    ap.add_argument("--sampled-set", default="chat-fresh")
    ap.add_argument("--temperature", type=float, default=1.0, help="the sampled requests' temperature")
    ap.add_argument("--top-k", type=int, default=0, help="the sampled requests' top-k (0: off)")
    ap.add_argument("--top-p", type=float, default=1.0, help="the sampled requests' top-p (1: off)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--flip", action="store_true", help="the shared session made first and first in the first pair "
                    "(a second round: cancels the harness's bias)")
    ap.add_argument("--same", action="store_true", help="the 'shared' session learns apart too: an A/A run, the "
                    "harness's own bias between its two sessions")
    ap.add_argument("--out", help="write the figures here (JSON; a .md table beside it)")
    a = ap.parse_args()
    t0 = time.time()
    sampling = {"temperature": a.temperature, "top_k": a.top_k, "top_p": a.top_p}
    res = run(a.target, a.n, a.greedy_set, a.sampled_set, sampling, a.max_tokens, a.flip, a.same)
    md = table(res)
    print(md)
    if a.out:
        meta = {"command": vars(a), "machine": report.machine(),
                "minutes": round((time.time() - t0) / 60, 1)}
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "result": res}, f, indent=1)
        with open(a.out.removesuffix(".json") + ".md", "w") as f:
            f.write(f"# Mixed clients: {a.target}\n\nCommand: `{json.dumps(vars(a))}`\n\n{md}")


if __name__ == "__main__":
    main()
