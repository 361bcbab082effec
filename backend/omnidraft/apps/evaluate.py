"""Held-out measurement of drafters (the distilled ones above all): T_draft here, acceptance and tokens per target pass at
k = 1..6, and wall-clock speed against the target alone, through the bench runner (fixed policy).

Acceptance at k < K comes from the fixed-K run's steps: a step that accepted a of its drafts would have
accepted min(a, k) of k greedy drafts (the drafter's first k tokens are the same), so

    tau(k) = mean_steps(min(a, k)) + 1      acceptance(k) = mean_steps(min(a, k)) / k

an estimate over the positions the K run visited (steps that proposed fewer than k count as proposed).

    python -m omnidraft.apps.evaluate --drafts smollm2-135m,models/x.gguf --n 4 --configs 6
    python -m omnidraft.apps.evaluate --drafts models/x.gguf --configs target,3,cost   (speed)
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from statistics import median

import numpy as np
from tqdm import tqdm

from omnidraft.assets import models
from omnidraft.assets.snapshot import load_set
from omnidraft.bench.runner import BenchContext, Config
from omnidraft.llama.costmodel import time_passes
from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.runtime.session import Session, Settings
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.stats import GenerationStats

from omnidraft.distill.data import chat_items

log = logging.getLogger(__name__)


def t_draft(path, threads: int = 2, repeats: int = 9) -> float:
    """Median seconds of one drafter token after a 128-token prefix (the Engine, ``threads`` threads)."""
    with Engine(models.resolve(path), EngineConfig(n_ctx=512, n_threads=threads, batch_invariant=False)) as e:
        return time_passes(e, range(1, 2), repeats=repeats)[1]


def timing(drafts: list[str], target: str, threads: int = 2, rounds: int = 5) -> dict:
    """T_draft of each drafter and the target's T_verify(n), n = 1..7, in interleaved rounds (medians), so
    that other load on the machine hits all of them alike."""
    engines = {d: Engine(models.resolve(d), EngineConfig(n_ctx=512, n_threads=threads, batch_invariant=False))
               for d in drafts}
    tgt = Engine(models.resolve(target), EngineConfig(n_ctx=512, n_threads=threads))
    samples: dict = {d: [] for d in drafts}
    tv: dict = {n: [] for n in range(1, 8)}
    try:
        for _ in range(rounds):
            for d, e in engines.items():
                samples[d].append(time_passes(e, range(1, 2), repeats=5)[1])
            for n, t in time_passes(tgt, range(1, 8), repeats=3).items():
                tv[n].append(t)
    finally:
        for e in engines.values():
            e.close()
        tgt.close()
    return {"t_draft_ms": {d: 1e3 * median(v) for d, v in samples.items()},
            "t_verify_ms": {n: 1e3 * median(v) for n, v in tv.items()}, "threads": threads, "rounds": rounds}


def items_for(name: str, n: int, seed: int = 0):
    # load_set (assets.snapshot) also knows the repository (repo_sets) and language (lang_sets) sets and .json
    # snapshots
    if name == "chat":
        return chat_items(seed, n)
    return load_set(name, seed).split("heldout")[:n]


def parse_configs(spec: str):
    """'target,6,cost' -> [target, omnidraft k=6 fixed, omnidraft adaptive (cost policy, k <= 6)]."""
    out, kmax = [], max([int(x) for x in spec.split(",") if x.isdigit()] or [6])
    for x in spec.split(","):
        if x == "target":
            out.append(Config("target"))
        elif x.isdigit():
            out.append(Config("omnidraft", int(x), "fixed"))
        elif x == "cost":
            out.append(Config("omnidraft", kmax, "cost"))
    return out


def run_sets(draft: str, target: str, sets: list[str], n: int, max_tokens: int, configs: str, threads: int,
             progress: bool = True, kernels: str = "auto") -> dict:
    """Per set and configuration (interleaved per prompt): tokens/s, the accepted-draft counts of every step
    and, for fixed-k runs, tau/acceptance at 1..k; speedups against `target` when it is among them."""
    cfgs = parse_configs(configs)
    session = Session(Settings(target=target, draft=draft, threads=threads, method="omnidraft", kernels=kernels))
    ctx = BenchContext(session)
    out = {}
    try:
        gens = {c.label: ctx.generator(c) for c in cfgs}
        params = GenerationParams(max_tokens=max_tokens)
        for s in sets:
            items = items_for(s, n)
            acc = {c.label: [] for c in cfgs}
            tot, outs = {c.label: GenerationStats(c.method) for c in cfgs}, {}
            for i, item in enumerate(tqdm(items, desc=f"{Path(str(draft)).name} {s}", disable=not progress)):
                for c in cfgs[i % len(cfgs):] + cfgs[: i % len(cfgs)]:
                    g = gens[c.label]
                    f = g.generate(g.prompt_for(item.prompt, item.chat), params)
                    tot[c.label].add(f.stats)
                    outs.setdefault(c.label, []).append(f.token_ids)
                    acc[c.label] += [st.accepted for st in f.steps if st.proposed > 0]
            r = {"prompts": len(items), "tokens_per_s": {lab: t.tokens_per_s for lab, t in tot.items()}}
            for c in cfgs:
                a = np.array(acc[c.label] or [0])
                r.setdefault("steps", {})[c.label] = len(acc[c.label])
                r.setdefault("mean_accepted", {})[c.label] = float(a.mean())
                if c.policy == "fixed" and c.method != "target":
                    r.setdefault("tau", {})[c.label] = {j: float(np.minimum(a, j).mean() + 1) for j in range(1, c.k + 1)}
                    r.setdefault("acceptance", {})[c.label] = {j: float(np.minimum(a, j).mean() / j)
                                                               for j in range(1, c.k + 1)}
                if "target" in tot and c.method != "target" and tot[c.label].generation_s:
                    r.setdefault("speedup", {})[c.label] = r["tokens_per_s"][c.label] / r["tokens_per_s"]["target"]
                    r.setdefault("same_output_as_target", {})[c.label] = outs[c.label] == outs["target"]
            out[s] = r
            log.info("%s %s: %s", draft, s, r)
    finally:
        ctx.close()
        session.close()
    return out


def tau_at(set_result: dict, k: int) -> tuple[float, float] | None:
    """(tau, acceptance) at k from the fixed-k run of smallest K >= k: exact when K == k, the min(a, k)
    estimate above it; None when no fixed run drafted k.  Keys may be ints or, read back from JSON, strings."""
    runs = []
    for label, by_k in set_result.get("tau", {}).items():
        taus = {int(j): v for j, v in by_k.items()}
        if k in taus:
            accs = {int(j): v for j, v in set_result["acceptance"][label].items()}
            runs.append((max(taus), taus[k], accs[k]))
    return min(runs)[1:] if runs else None


def summary_markdown(res: dict, k: int = 4) -> str:
    """One row per drafter, one column per set: tau at k (acceptance at k), under a line naming the run."""
    sets = list(dict.fromkeys(s for d in res["drafts"].values() for s in d["sets"]))
    lines = [f"target `{res['target']}`, n = {res['n']} held-out prompts per set, max_tokens = {res['max_tokens']}: "
             f"tau at k = {k} (acceptance at k = {k})", "",
             "| drafter | " + " | ".join(sets) + " |", "|---" * (len(sets) + 1) + "|"]
    for name, d in res["drafts"].items():
        got = [tau_at(d["sets"][s], k) if s in d["sets"] else None for s in sets]
        lines.append(f"| `{name}` | " + " | ".join(f"{g[0]:.2f} ({g[1]:.2f})" if g else "-" for g in got) + " |")
    return "\n".join(lines) + "\n"


def write_summary(res: dict, out: Path, k: int = 4) -> Path:
    """The Markdown summary next to the JSON results: same stem, .md."""
    md = out.with_suffix(".md")
    md.write_text(summary_markdown(res, k))
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafts", required=True, help="comma-separated drafter names or GGUF paths")
    ap.add_argument("--target", default=models.QWEN_05B)
    ap.add_argument("--sets", default="humaneval,stubs,code-other,chat,chat-fresh,nl",
                    help="prompt sets (assets.prompts, assets.repo_sets, assets.lang_sets, or snapshot .json paths); "
                         "each contributes its first --n held-out items")
    ap.add_argument("--n", type=int, default=4, help="held-out prompts per set")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--configs", default="6", help="target, fixed draft lengths (digits) and/or cost")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kernels", default="auto", help="target kernels (exact: verification batches up to 7, so "
                                                    "k = 6 is really drafted; fast/auto may cap it lower)")
    ap.add_argument("--no-tdraft", action="store_true", help="skip timing the drafter")
    ap.add_argument("--out", default="results/distill-eval.json")
    ap.add_argument("--timing", action="store_true", help="only T_draft of the drafters and T_verify of the target")
    ap.add_argument("--summary", action="store_true",
                    help="also write a Markdown table of tau (acceptance) at k = 4 per drafter and set, as --out .md")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if a.timing:
        res = timing([x for x in a.drafts.split(",") if x], a.target, a.threads)
        print(json.dumps(res, indent=1))
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
        return 0
    res = {"target": a.target, "configs": a.configs, "kernels": a.kernels, "n": a.n, "max_tokens": a.max_tokens, "threads": a.threads,
           "when": time.strftime("%Y-%m-%d %H:%M:%S"), "drafts": {}}
    for d in [x for x in a.drafts.split(",") if x]:
        res["drafts"][d] = {"t_draft_ms": None if a.no_tdraft else 1e3 * t_draft(d, a.threads),
                            "sets": run_sets(d, a.target, a.sets.split(","), a.n, a.max_tokens, a.configs, a.threads,
                                             kernels=a.kernels)}
        print(d, json.dumps(res["drafts"][d]), flush=True)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
    if a.summary and res["drafts"]:
        print("summary:", write_summary(res, Path(a.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
