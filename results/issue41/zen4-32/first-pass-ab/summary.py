"""The first-pass pricing A/B: measured and drift-free ratios of each run's default, printed and saved as JSON.

Each run dir (``p<A/B><round>-<drafter>-<set>-<before|after>``; the A/B ``p2``'s "after" had only the first-pass
price) holds one ``omnidraft bench run`` JSON with the target alone,
fixed k and the default (``hybrid adaptive``).  Measured: the default's tokens a second over the same run's target
alone and fixed k.  Modelled: each configuration's counts (target passes by rows, drafter passes by tokens read)
priced with one table per drafter, the medians of all its runs' cost models (``costmodel.predicted_time``), so the
VM's drift between runs drops out; what is left is what each policy chose to do.

    python results/issue41/zen4-32/first-pass-ab/summary.py results/issue41/zen4-32/first-pass-ab/runs \
        results/issue41/zen4-32/first-pass-ab/summary.json > results/issue41/zen4-32/first-pass-ab/summary.txt
"""
import json
import statistics
import sys
from pathlib import Path

from omnidraft.llama.costmodel import predicted_time

base = Path(sys.argv[1])
runs = {}
for d in sorted(base.glob("[rp]*-*")):
    if d.is_dir() and list(d.glob("*.json")):
        rnd, drafter, set_name, version = d.name.split("-", 3)
        if rnd.startswith("p2") and version == "after":  # the first A/B's "after": the first-pass price only
            version = "first-pass"
        runs[d.name] = (rnd, drafter, set_name, version, json.loads(next(d.glob("*.json")).read_text())["runs"][0])

tables = {}
for drafter in sorted({v[1] for v in runs.values()}):
    cms = [r[4]["cost_model"] for r in runs.values() if r[1] == drafter]
    tv = {int(n): statistics.median(c["t_verify"][n] for c in cms) for n in cms[0]["t_verify"]}
    td = {int(n): statistics.median(c["t_draft_n"][n] for c in cms) for n in cms[0]["t_draft_n"]}
    tables[drafter] = (tv, td)
    print(f"{drafter}: T(n) ms {[round(t * 1e3, 1) for t in tv.values()]}, "
          f"drafter pass ms {[round(t * 1e3, 2) for t in td.values()]}")

rows = []
for name, (rnd, drafter, set_name, version, run) in runs.items():
    res = run["results"]
    fixed = next(k for k in res if k.startswith("hybrid k="))
    tv, td = tables[drafter]
    model = {c: res[c]["tokens"] / predicted_time(res[c]["batch_hist"], tv, res[c]["draft_pass_hist"], td)
             for c in ("target", fixed, "hybrid adaptive")}
    d = res["hybrid adaptive"]
    rows.append({"run": name, "round": rnd, "drafter": drafter, "set": set_name, "version": version, "fixed": fixed,
                 "tok_s": {c: round(res[c]["tokens_per_s"], 2) for c in model},
                 "default_vs_target": d["tokens_per_s"] / res["target"]["tokens_per_s"],
                 "default_vs_fixed": d["tokens_per_s"] / res[fixed]["tokens_per_s"],
                 "modelled_default_vs_target": model["hybrid adaptive"] / model["target"],
                 "modelled_fixed_vs_target": model[fixed] / model["target"],
                 "draft_lengths": d["policy_stats"]["draft_lengths"], "steps": d["steps"], "drafted": d["drafted"],
                 "tau": d["tau"], "same_output": all(res[c]["same_output_as_target"] for c in model),
                 "draft_pass_ms": d["policy_stats"].get("draft_pass_ms")})
print(f"\n{'run':34} {'alone':>6} {'fixed':>6} {'dflt':>6} | {'d/alone':>7} {'d/fixed':>7} | "
      f"{'mod d/a':>7} {'mod f/a':>7} | steps drafted lengths")
for r in sorted(rows, key=lambda r: (r["drafter"], r["set"], r["version"], r["round"])):
    t = list(r["tok_s"].values())
    print(f"{r['run']:34} {t[0]:6.1f} {t[1]:6.1f} {t[2]:6.1f} | "
          f"{r['default_vs_target']:7.3f} {r['default_vs_fixed']:7.3f} | "
          f"{r['modelled_default_vs_target']:7.3f} {r['modelled_fixed_vs_target']:7.3f} | {r['steps']} {r['drafted']} "
          f"{r['draft_lengths']}{'' if r['same_output'] else ' OUTPUT DIFFERS'}")
print()
for key in sorted({(r["drafter"], r["set"]) for r in rows}):
    for v in ("before", "first-pass", "after"):
        sel = [r for r in rows if (r["drafter"], r["set"]) == key and r["version"] == v]
        if sel:
            m = lambda f: statistics.mean(r[f] for r in sel)  # noqa: E731
            print(f"{key[0]:8} {key[1]:10} {v:6}: default/alone {m('default_vs_target'):.3f}, default/fixed "
                  f"{m('default_vs_fixed'):.3f}, modelled default/alone {m('modelled_default_vs_target'):.3f} "
                  f"[{min(r['modelled_default_vs_target'] for r in sel):.3f}-"
                  f"{max(r['modelled_default_vs_target'] for r in sel):.3f}] "
                  f"(fixed {m('modelled_fixed_vs_target'):.3f}), "
                  f"{len(sel)} runs")
(Path(sys.argv[2]) if len(sys.argv) > 2 else base / "summary.json").write_text(json.dumps(rows, indent=1))
