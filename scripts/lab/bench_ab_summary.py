"""An A/B of `omnidraft bench run`s (scripts/lab/bench_ab.sh): each run's default, measured and with the drift taken
out, printed as a table and saved as JSON.

Each run folder, ``<round>-<drafter>-<set>-<version>`` (``<round>-<drafter>-<version>`` where one set ran), holds one
``bench run`` JSON with the target alone, fixed k and the default (``hybrid adaptive``).
- Measured: the default's tokens a second over the same run's target alone and fixed k.
- Modelled: each configuration's counts (target passes by rows, drafter passes by tokens read) priced with one table
  per drafter, the medians of all its runs' cost models (``costmodel.predicted_time``). The VM's drift between runs
  drops out; what is left is what each policy chose to do.

    python scripts/lab/bench_ab_summary.py /tmp/ab [--json OUT.json] [--label 'p2*-after=first-pass'] > summary.txt
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))
from omnidraft.llama.costmodel import predicted_time  # noqa: E402

DEFAULT = "hybrid adaptive"
RANK = {"before": 0, "after": 2}  # other labels (a partial change) between the two


def load(base: Path, labels: dict[str, str]) -> dict[str, dict]:
    """Every run folder's first run, keyed by folder name, with its round, drafter, set and version."""
    runs = {}
    for d in sorted(base.glob("[rp]*-*")):
        files = sorted(d.glob("*.json")) if d.is_dir() else []
        if not files:
            continue
        parts = d.name.split("-")
        rnd, drafter, version = parts[0], parts[1], parts[-1]
        set_name = "-".join(parts[2:-1]) or "-"
        version = next((v for pat, v in labels.items() if fnmatch.fnmatch(d.name, pat)), version)
        runs[d.name] = {"round": rnd, "drafter": drafter, "set": set_name, "version": version,
                        "run": json.loads(files[0].read_text())["runs"][0]}
    return runs


def tables(runs: dict[str, dict]) -> dict[str, tuple[dict, dict]]:
    """Per drafter: the medians of its runs' target pass times T(n) and drafter pass times by tokens read."""
    out = {}
    for drafter in sorted({r["drafter"] for r in runs.values()}):
        cms = [r["run"]["cost_model"] for r in runs.values() if r["drafter"] == drafter]
        tv = {int(n): statistics.median(c["t_verify"][n] for c in cms) for n in cms[0]["t_verify"]}
        td = {int(n): statistics.median(c["t_draft_n"][n] for c in cms) for n in cms[0]["t_draft_n"]}
        out[drafter] = (tv, td)
    return out


def row(name: str, r: dict, table: tuple[dict, dict]) -> dict:
    res = r["run"]["results"]
    fixed = next(k for k in res if k.startswith("hybrid k="))
    tv, td = table
    model = {c: res[c]["tokens"] / predicted_time(res[c]["batch_hist"], tv, res[c]["draft_pass_hist"], td)
             for c in ("target", fixed, DEFAULT)}
    d = res[DEFAULT]
    stats = d.get("policy_stats", {})
    return {"run": name, **{k: r[k] for k in ("round", "drafter", "set", "version")}, "fixed": fixed,
            "tok_s": {c: round(res[c]["tokens_per_s"], 2) for c in model},
            "default_vs_target": d["tokens_per_s"] / res["target"]["tokens_per_s"],
            "default_vs_fixed": d["tokens_per_s"] / res[fixed]["tokens_per_s"],
            "modelled_default_vs_target": model[DEFAULT] / model["target"],
            "modelled_fixed_vs_target": model[fixed] / model["target"],
            "draft_lengths": stats.get("draft_lengths"), "steps": d["steps"], "drafted": d["drafted"],
            "tau": d["tau"], "same_output": all(res[c]["same_output_as_target"] for c in model),
            "draft_pass_ms": stats.get("draft_pass_ms"), "target_pass_ms": stats.get("target_pass_ms"),
            "alone_pass_ms": round(res["target"]["step_ms"]["target"], 2)}


def report(rows: list[dict], tabs: dict[str, tuple[dict, dict]]) -> str:
    lines = [f"{d}: T(n) ms {[round(t * 1e3, 1) for t in tv.values()]}, "
             f"drafter pass ms {[round(t * 1e3, 2) for t in td.values()]}" for d, (tv, td) in tabs.items()]
    lines += ["", f"{'run':34} {'alone':>6} {'fixed':>6} {'dflt':>6} | {'d/alone':>7} {'d/fixed':>7} | "
              f"{'mod d/a':>7} {'mod f/a':>7} | steps drafted lengths"]
    for r in sorted(rows, key=lambda r: (r["drafter"], r["set"], r["version"], r["round"])):
        t = list(r["tok_s"].values())
        lines.append(f"{r['run']:34} {t[0]:6.1f} {t[1]:6.1f} {t[2]:6.1f} | "
                     f"{r['default_vs_target']:7.3f} {r['default_vs_fixed']:7.3f} | "
                     f"{r['modelled_default_vs_target']:7.3f} {r['modelled_fixed_vs_target']:7.3f} | {r['steps']} "
                     f"{r['drafted']} {r['draft_lengths']}{'' if r['same_output'] else ' OUTPUT DIFFERS'}")
    lines.append("")
    for key in sorted({(r["drafter"], r["set"]) for r in rows}):
        for v in sorted({r["version"] for r in rows}, key=lambda v: (RANK.get(v, 1), v)):
            sel = [r for r in rows if (r["drafter"], r["set"]) == key and r["version"] == v]
            if not sel:
                continue
            m = lambda f: statistics.mean(r[f] for r in sel)  # noqa: E731
            mod = [r["modelled_default_vs_target"] for r in sel]
            lines.append(f"{key[0]:8} {key[1]:10} {v:6}: default/alone {m('default_vs_target'):.3f}, default/fixed "
                         f"{m('default_vs_fixed'):.3f}, modelled default/alone {m('modelled_default_vs_target'):.3f} "
                         f"[{min(mod):.3f}-{max(mod):.3f}] (fixed {m('modelled_fixed_vs_target'):.3f}), "
                         f"{len(sel)} runs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="the folder bench_ab.sh wrote")
    ap.add_argument("--json", type=Path, help="where to save the rows (default: RUNS/summary.json)")
    ap.add_argument("--label", action="append", default=[], metavar="GLOB=VERSION",
                    help="call the runs whose folder matches GLOB this version instead")
    a = ap.parse_args(argv)
    runs = load(a.runs, dict(x.split("=", 1) for x in a.label))
    if not runs:
        ap.error(f"no run folders with a JSON under {a.runs}")
    tabs = tables(runs)
    rows = [row(name, r, tabs[r["drafter"]]) for name, r in runs.items()]
    print(report(rows, tabs))
    (a.json or a.runs / "summary.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
