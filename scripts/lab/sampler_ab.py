"""What a change to the sampler saves, read from a `scripts/lab/bench_ab.sh` A/B of sampled runs (issue 41).

A 2-core VM's pace drifts between runs by more than the sampler costs, so tokens a second across runs do not
show it.  The step's "sample" phase (verification: each verified row sampled, the verdict, the rollback) is timed
apart in every run (``step_ms``), and it is CPU work in numpy, not memory-bound: its before/after difference is
the saving.  The "modelled" column takes that saving off the same run's own step time, so every figure compares
one version with itself.

    python scripts/lab/sampler_ab.py /tmp/ab/t1 [--json OUT.json] > OUT.md
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def load(base: Path) -> dict[tuple[str, str, str], list[dict]]:
    """(set, configuration, version) -> each run's figures, from folders ``r<round>-<drafter>-<set>-<version>``."""
    out: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for path in sorted(base.glob("r*-*/*.json")):
        parts = path.parent.name.split("-")
        version, set_name = parts[-1], "-".join(parts[2:-1])
        for cfg, x in json.loads(path.read_text())["runs"][0]["results"].items():
            out[(set_name, cfg, version)].append({
                "sample_ms_token": 1e3 * x["sample_s"] / x["tokens"], "sample_ms_step": x["step_ms"]["sample"],
                "step_ms": x["step_ms"]["step"], "tokens_per_s": x["tokens_per_s"],
                "same_output": x["same_output_as_target"]})
    return out


def summary(runs: dict) -> list[dict]:
    rows = []
    for (set_name, cfg) in sorted({k[:2] for k in runs}):
        before, after = runs.get((set_name, cfg, "before")), runs.get((set_name, cfg, "after"))
        if not before or not after:
            continue
        mean = lambda rs, key: statistics.mean(r[key] for r in rs)  # noqa: E731
        saved = mean(before, "sample_ms_step") - mean(after, "sample_ms_step")
        step = mean(before, "step_ms")
        rows.append({"set": set_name, "config": cfg, "runs": [len(before), len(after)],
                     "sample_ms_token": [mean(before, "sample_ms_token"), mean(after, "sample_ms_token")],
                     "sample_ms_step": [mean(before, "sample_ms_step"), mean(after, "sample_ms_step")],
                     "step_ms_before": step, "modelled_speedup": step / (step - saved),
                     "tokens_per_s": [mean(before, "tokens_per_s"), mean(after, "tokens_per_s")],
                     "same_output": all(r["same_output"] for r in before + after)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="bench_ab.sh's OUT folder")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    rows = summary(load(args.base))
    print("| set | configuration | sample ms a token (before -> after) | sample ms a step | step ms before | "
          "modelled speedup | tok/s measured (drift included) | same output |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        b, a = r["sample_ms_token"], r["sample_ms_step"]
        print(f"| {r['set']} | {r['config']} | {b[0]:.2f} -> {b[1]:.2f} | {a[0]:.2f} -> {a[1]:.2f} | "
              f"{r['step_ms_before']:.1f} | {r['modelled_speedup']:.3f}x | {r['tokens_per_s'][0]:.1f} -> "
              f"{r['tokens_per_s'][1]:.1f} | {'yes' if r['same_output'] else 'NO'} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
