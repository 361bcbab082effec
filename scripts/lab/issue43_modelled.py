"""Issue 43: drift-free wall-clock ratios for `issue43_wallclock.py`'s runs.

This VM's pace drifts by 7 % and more between runs minutes apart, so tokens a second measured in two runs compare the
runs' moments as much as their drafters.  Greedy decoding makes each drafter's counts the same on any machine and in
every round: target passes by rows (``batch_hist``) and drafter passes (``draft_pass_hist``).  Priced with one cost
table for all drafters (the target's T(n) from the product's cost model on this machine; one drafter pass, pooled over
every run, since all drafters share the architecture and type), they give each drafter's tokens a second with the
drift taken out.  Prints a table and writes JSON.

    python scripts/lab/issue43_modelled.py --runs WALLCLOCK_DIR/runs [--runs ...] --t-ms 27.0,29.1,36.7,... --out F.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(dirs: list[Path], config: str) -> dict[str, list[dict]]:
    """Run results by '<set>-<drafter>' (the round prefix dropped)."""
    runs: dict[str, list[dict]] = {}
    for base in dirs:
        for d in sorted(base.glob("r*-*")):
            res = json.loads(next(d.glob("*.json")).read_text())["runs"][0]["results"][config]
            runs.setdefault(d.name.split("-", 1)[1], []).append(res)
    return runs


def modelled(r: dict, t_ms: dict[int, float], pass_ms: float) -> float:
    target = sum(t_ms[int(n)] * c for n, c in r["batch_hist"].items())
    return r["tokens"] / ((target + pass_ms * sum(r["draft_pass_hist"].values())) / 1e3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, action="append", required=True, help="a wallclock run's runs/ folder")
    ap.add_argument("--t-ms", required=True, help="the target's T(1),T(2),... in ms (costmodel.json's t_verify)")
    ap.add_argument("--config", default="hybrid k=3", help="the configuration compared (bench's result key)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    t_ms = {i + 1: float(x) for i, x in enumerate(a.t_ms.split(","))}
    runs = load(a.runs, a.config)
    passes = sum(sum(r["draft_pass_hist"].values()) for rs in runs.values() for r in rs)
    pass_ms = 1e3 * sum(r["draft_s"] for rs in runs.values() for r in rs) / passes
    rows = []
    for name, rs in runs.items():
        counts = {json.dumps([r["batch_hist"], r["draft_pass_hist"], r["tokens"]], sort_keys=True) for r in rs}
        if len(counts) != 1:
            raise SystemExit(f"{name}: its rounds' counts differ; greedy runs of one drafter should repeat exactly")
        r = rs[0]
        rows.append({"run": name, "modelled_tok_s": modelled(r, t_ms, pass_ms), "tau": r["tau"], "steps": r["steps"],
                     "drafted": r["drafted"], "measured_tok_s": [x["tokens_per_s"] for x in rs]})
    by_name = {x["run"]: x for x in rows}
    for row in rows:  # '<set>-control' and '<set>-after-NNNN-VERSION'
        set_name = row["run"].split("-after-")[0].removesuffix("-control")
        row["set"] = set_name
        row["vs_control"] = row["modelled_tok_s"] / by_name[f"{set_name}-control"]["modelled_tok_s"]
    print(f"one drafter pass, pooled: {pass_ms:.2f} ms over {passes} passes; T(n) ms {t_ms}")
    for row in sorted(rows, key=lambda x: x["run"]):
        print(f"{row['run']:34s} modelled {row['modelled_tok_s']:5.1f} tok/s, {row['vs_control']:.3f}x the control; "
              f"tau {row['tau']:.2f}, {row['steps']} steps, {row['drafted']} drafted; measured "
              + " / ".join(f"{x:.1f}" for x in row["measured_tok_s"]))
    a.out.write_text(json.dumps({"pass_ms": pass_ms, "t_ms": t_ms, "config": a.config, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
