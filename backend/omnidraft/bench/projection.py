"""Predicted speedup of every method on other machines: their cost model x the acceptance measured here.

    python -m omnidraft.bench.projection --results results/<tag>.json \\
        --device results/device-cpu.json results/device-gpu.json --out results

For each configuration of a benchmark run (``bench run``: per-config ``tokens``, the histogram of
target-pass sizes and the histogram of drafter-pass sizes), the time it would take on machine M is

    sum_n hist[n] * T_M(n)  +  sum_m draft_hist[m] * Tdraft_M(m)

(``costmodel.predicted_time``; a step's first drafter pass also ingests the target's last tokens)

against ``tokens * T_M(1)`` for the target alone; the ratio is the predicted speedup.  Acceptance
does not depend on the machine, so the histograms measured here carry over.  Adaptive runs chose
their lengths from this machine's costs, so for them the table gives what the default cost
policy would choose on M instead (``cost_choice``).  The honesty check compares
predicted with measured speedup on this machine, from the same results file.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from omnidraft.assets import models
from omnidraft.llama.costmodel import predicted_time, speedup, t_of

log = logging.getLogger(__name__)

DRAFTER = models.SMOLLM2
TOLERANCE = 0.10


# ------------------------------------------------------------------ cost models
def machines_of(device: dict) -> dict[str, dict]:
    """Machine label -> {"desc", "t_verify": {model: {n: s}}, "t_draft_of": {model: {n: s}}} from a device JSON."""
    out: dict[str, dict] = {}
    m = device.get("machine", {})
    desc = m.get("gpu") if device.get("label") == "gpu" else \
        f"{m.get('lscpu_model_name', m.get('cpu', '?'))}, {m.get('cores', '?')} cores"
    for r in device["measurements"]:
        if "error" in r:
            continue
        label = "gpu" if r["device"] == "gpu" else f"cpu-{r['threads']}t"
        mach = out.setdefault(label, {"desc": desc, "t_verify": {}, "t_draft_of": {}, "source": device.get("label")})
        tv = {int(n): t for n, t in r["t_verify"].items()}
        # targets: as the product runs them (batch-invariant); drafters: as they run (not), else whatever exists
        if r["batch_invariant"] or r["model"] not in mach["t_verify"]:
            mach["t_verify"][r["model"]] = tv
        if not r["batch_invariant"] or r["model"] not in mach["t_draft_of"]:
            mach["t_draft_of"][r["model"]] = tv
    return out


def machine_here(run: dict, draft: str, desc: str) -> dict:
    """The cost model a results run measured on this machine (sampled through the run since 2026-11-26)."""
    cm = run["cost_model"]
    td = {int(n): t for n, t in cm.get("t_draft_n", {}).items()} or {1: cm["t_draft"]}
    return {"desc": desc, "source": "results", "t_verify": {run["target"]: {int(n): t for n, t in cm["t_verify"].items()}},
            "t_draft_of": {draft: td}}


# ------------------------------------------------------------------ projection
def predicted_speedup(res: dict, tv: dict[int, float], t_draft: dict[int, float] | None) -> float:
    """Speedup of one configuration on a machine with target costs ``tv`` and drafter costs ``t_draft``."""
    cost = predicted_time(res["batch_hist"], tv, res.get("draft_pass_hist"), t_draft, res.get("drafted", 0))
    return speedup(res["tokens"], cost, tv[1])


def cost_choice(confs: list[dict], tv: dict[int, float], t_draft: dict[int, float] | None) -> tuple[int, float]:
    """The cost policy's draft length on a machine: the k with the highest expected speed, 0 = the
    target alone. With its acceptance estimates equal to those measured here, its expected speed at k
    is the predicted speedup of the measured fixed-k configuration, first drafter passes included."""
    best_k, best = 0, 1.0
    for c in confs:
        sp = predicted_speedup(c, tv, t_draft)
        if sp > best:
            best_k, best = c["k"], sp
    return best_k, best


def _draft_model(method: str, data: dict) -> str | None:
    if method == "prompt-lookup":
        return None
    if method == "same-vocab":
        return data.get("settings", {}).get("same_vocab")
    return data.get("draft", DRAFTER)


def project(data: dict, machines: dict[str, dict]) -> list[dict]:
    """One row per (run, configuration, machine), plus the cost policy's choice per (run, method, machine)."""
    rows = []
    for run in data["runs"]:
        target = run["target"]
        here = machine_here(run, data.get("draft", DRAFTER), _here_desc(data))
        all_m = {"here": here, **machines}
        fixed: dict[str, list[dict]] = {}
        for label, res in run["results"].items():
            if res.get("policy") == "fixed" and res.get("method") != "target":
                fixed.setdefault(res["method"], []).append(res)
            for mname, m in all_m.items():
                tv = m["t_verify"].get(target)
                dm = _draft_model(res.get("method", ""), data)
                if tv is None or (dm is not None and dm not in m["t_draft_of"]):
                    continue
                td = m["t_draft_of"][dm] if dm else None
                rows.append({"run": _run_name(run), "config": label, "method": res.get("method"), "k": res.get("k"),
                             "policy": res.get("policy"), "machine": mname, "tau": res.get("tau"),
                             "predicted_speedup": predicted_speedup(res, tv, td),
                             "measured_speedup_here": res.get("speedup")})
        for method, confs in fixed.items():
            dm = _draft_model(method, data)
            for mname, m in all_m.items():
                tv = m["t_verify"].get(target)
                if tv is None or (dm is not None and dm not in m["t_draft_of"]):
                    continue
                k, sp = cost_choice(confs, tv, m["t_draft_of"][dm] if dm else None)
                rows.append({"run": _run_name(run), "config": f"{method} cost policy", "method": method, "k": k,
                             "policy": "cost-projected", "machine": mname, "predicted_speedup": sp})
    return rows


def honesty(data: dict, tolerance: float = TOLERANCE) -> list[dict]:
    """Predicted (from this machine's cost model) vs measured speedup of every configuration, this machine."""
    out = []
    for run in data["runs"]:
        here = machine_here(run, data.get("draft", DRAFTER), "")
        tv = here["t_verify"][run["target"]]
        for label, res in run["results"].items():
            if res.get("method") == "target" or "speedup" not in res:
                continue
            dm = _draft_model(res.get("method", ""), data)
            td = here["t_draft_of"].get(dm) if dm else None
            # same-vocab's drafter is not the cost model's drafter: the runner's own prediction is the reference
            pred = res.get("predicted_speedup") if res.get("method") == "same-vocab" else predicted_speedup(res, tv, td)
            meas = res["speedup"]
            err = pred / meas - 1.0 if meas else float("inf")
            out.append({"run": _run_name(run), "config": label, "predicted": pred, "measured": meas,
                        "tau": res.get("tau", 0.0), "runner_predicted": res.get("predicted_speedup"), "error": err,
                        "within": abs(err) <= tolerance})
    return out


def _run_name(run: dict) -> str:
    s = run.get("set")
    name = s.get("name") if isinstance(s, dict) else str(s).split(" ")[0]
    return f"{run['target']} / {name} / {run.get('mode', '')}"


def _here_desc(data: dict) -> str:
    m = data.get("machine", {})
    return f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores (this machine)"


# ------------------------------------------------------------------ tables
def cost_table(machines: dict[str, dict], target: str, draft: str = DRAFTER) -> str:
    rows = ["| machine | what | T_decode ms | T_verify(2) | T_verify(4) | T_verify(8) | T_draft ms | "
            "T_draft(3) |", "|---|---|---|---|---|---|---|---|"]
    for name, m in machines.items():
        tv = m["t_verify"].get(target)
        if not tv:
            continue
        td = m["t_draft_of"].get(draft)
        r = [f"{t_of(tv, n) / tv[1]:.2f}x" for n in (2, 4, 8)]
        d = [f"{td[1] * 1e3:.2f}", f"{td[3] / td[1]:.2f}x" if 3 in td else "-"] if td else ["-", "-"]
        rows.append(f"| {name} | {m['desc']} | {tv[1] * 1e3:.2f} | {' | '.join(r)} | {' | '.join(d)} |")
    return "\n".join(rows)


def speedup_table(rows: list[dict], run: str, machines: list[str]) -> str:
    configs: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["run"] == run:
            configs.setdefault(r["config"], {})[r["machine"]] = r
    head = "| config | measured here | " + " | ".join(machines) + " |"
    out = [head, "|" + "---|" * (len(machines) + 2)]
    for cfg, by_m in configs.items():
        first = next(iter(by_m.values()))
        meas = first.get("measured_speedup_here")
        cells = []
        for m in machines:
            r = by_m.get(m)
            if r is None:
                cells.append("-")
            elif r["policy"] == "cost-projected":
                cells.append(f"k={r['k']}: {r['predicted_speedup']:.2f}x")
            else:
                cells.append(f"{r['predicted_speedup']:.2f}x")
        out.append(f"| {cfg} | {f'{meas:.2f}x' if meas is not None else '-'} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def honesty_table(checks: list[dict]) -> str:
    out = ["| run | config | predicted | measured | predicted / measured - 1 | within 10 % |", "|---|---|---|---|---|---|"]
    for c in checks:
        out.append(f"| {c['run']} | {c['config']} | {c['predicted']:.2f}x | {c['measured']:.2f}x | "
                   f"{c['error'] * 100:+.1f} % | {'yes' if c['within'] else 'no'} |")
    n = sum(c["within"] for c in checks)
    errs = sorted(abs(c["error"]) for c in checks)
    out.append(f"\n{n} of {len(checks)} configurations within {TOLERANCE:.0%}"
               + (f"; median |error| {errs[len(errs) // 2]:.1%}, largest {errs[-1]:.1%}." if errs else "."))
    # rows that did the target's own work (the policy declined to draft): their measured spread is
    # the measurement's scatter at this run length, the floor under any prediction's error
    same = [c["measured"] for c in checks if c.get("tau") and c["tau"] <= 1.01]
    if len(same) >= 2:
        out.append(f"Noise floor: {len(same)} configurations did the target's own work (tau <= 1.01) and measured "
                   f"{min(same):.2f}x-{max(same):.2f}x against the target alone.")
    return "\n".join(out)


def report(results: Path, devices: list[Path], out_dir: Path | None) -> dict:
    data = json.loads(results.read_text())
    machines: dict[str, dict] = {}
    for d in devices:
        machines.update(machines_of(json.loads(d.read_text())))
    rows = project(data, machines)
    checks = honesty(data)
    md = [f"Results: `{results}`; cost models: " + ", ".join(f"`{d}`" for d in devices), ""]
    for run in data["runs"]:
        here = machine_here(run, data.get("draft", DRAFTER), _here_desc(data))
        md += [f"### {_run_name(run)}", "", cost_table({"here": here, **machines}, run["target"]), "",
               speedup_table(rows, _run_name(run), ["here", *machines]), ""]
    md += ["### Honesty check (this machine: predicted from its cost model vs measured)", "", honesty_table(checks)]
    text = "\n".join(md)
    print(text)
    out = {"results": str(results), "devices": [str(d) for d in devices], "machines": machines, "rows": rows,
           "honesty": checks, "markdown": text}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / f"device-projection-{results.stem}"
        Path(f"{stem}.json").write_text(json.dumps(out, indent=1, default=str))
        Path(f"{stem}.md").write_text(text + "\n")
        print(f"\nwrote {stem}.json and {stem}.md")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", type=Path, required=True, help="a `bench run` JSON measured on this machine")
    p.add_argument("--device", type=Path, nargs="+", default=[], help="cost-model JSONs from bench/device.py")
    p.add_argument("--out", type=Path, default=None, help="folder for device-projection-<tag>.json/.md")


def cmd_project(args: argparse.Namespace) -> int:
    """Entry point for ``omnidraft bench project`` (wired in bench/cli.py)."""
    report(args.results, args.device, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omnidraft.bench.projection", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return cmd_project(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
