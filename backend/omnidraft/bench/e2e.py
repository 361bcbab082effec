"""One table from the `bench run` files of an end-to-end sweep (issue 28, scripts/device/device_e2e.sh).

    python -m omnidraft.bench.e2e DIR     # reads DIR/<where>/*.json, writes DIR/e2e-summary.{md,json}

Each subfolder holds the runs of one place: ``cpu4``, ``cpu8``, ``gpu``, ... (the project's build),
``cpu4-upstream`` (plain llama-cpp-python's build: its target alone and its own ``Llama``), ``gpu-batch7``
(verification batches forced past the kernel plan).  A row per place, target and prompt set: the default
generation (the cost policy) against the target alone and plain llama-cpp-python, each fixed k, the cost
policy's choices, the cost model's prediction and where a default step's time goes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from omnidraft.speculative.stats import STEP_PARTS

UPSTREAM = "-upstream"
PEER = "llama-cpp-python"
# the default generation's config: the product's default method with its cost policy (hybrid since 2026-11-28;
# the device rounds before that ran omnidraft, whose rows still read as theirs)
DEFAULTS = ("hybrid adaptive", "omnidraft adaptive")


def load(root: Path) -> dict[tuple[str, str, str], dict]:
    """(place, target, set) -> that run's results, the place's upstream results merged in as ``upstream``."""
    runs: dict[tuple[str, str, str], dict] = {}
    for f in sorted(root.glob("*/*.json")):
        data = json.loads(f.read_text())
        for run in data.get("runs", []):
            key = (f.parent.name, run["target"], run["set"]["name"])
            runs[key] = {**run, "machine": data["machine"], "file": f"{f.parent.name}/{f.name}"}
    for (place, target, set_name), run in list(runs.items()):
        if place.endswith(UPSTREAM):
            base = runs.get((place[: -len(UPSTREAM)], target, set_name))
            if base is not None:
                base["upstream"] = run
            del runs[(place, target, set_name)]
    return runs


def row(place: str, target: str, set_name: str, run: dict) -> dict:
    res = run["results"]
    base = res.get("target", {})
    default = next((name for name in DEFAULTS if name in res), DEFAULTS[0])
    d = res.get(default, {})
    up = run.get("upstream", {}).get("results", {})
    # a place's "-upstream" runs fall back to the project's build where the upstream one failed or was not made
    # (2026-11-28's second machine): llamafile's kernels, on in pip's default build and off in ours, tell them apart
    up_is_upstream = run.get("upstream", {}).get("machine", {}).get("llamafile_kernels") is not False
    peer = up.get(PEER) or res.get(PEER) or {}
    out = {"place": place, "target": target, "set": set_name, "default": default, "threads": run.get("threads"),
           "draft_threads": run.get("draft_threads"),
           "gpu_layers": run.get("gpu_layers", 0), "kernels": run["kernels"]["mode"],
           "max_verify_batch": run["max_verify_batch"], "target_tok_s": base.get("tokens_per_s"),
           "peer_tok_s": peer.get("tokens_per_s"),
           "peer_build": "upstream" if up.get(PEER) and up_is_upstream else "this build",
           "upstream_target_tok_s": up.get("target", {}).get("tokens_per_s"),
           "default_tok_s": d.get("tokens_per_s"), "default_speedup": d.get("speedup"),
           "default_predicted": d.get("predicted_speedup"), "default_tau": d.get("tau"),
           "default_vs_peer": (d["tokens_per_s"] / peer["tokens_per_s"]) if d.get("tokens_per_s")
           and peer.get("tokens_per_s") else None,
           "cost_choices": (d.get("policy_stats") or {}).get("draft_lengths"),
           "fixed": {r["k"]: {"speedup": r.get("speedup"), "tau": r["tau"], "predicted": r.get("predicted_speedup")}
                     for r in res.values() if r.get("method") == default.split()[0] and r.get("policy") == "fixed"},
           "same_output": all(r.get("same_output_as_target") is not False for r in res.values()),
           "default_step_ms": d.get("step_ms"), "default_step_share": d.get("step_share"),
           "file": run["file"]}
    return out


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _f(v, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _choices(lengths: dict | None) -> str:
    """The cost policy's draft lengths as 'k: steps' (k = 0: the target went alone)."""
    return ", ".join(f"{k}: {n}" for k, n in sorted(lengths.items(), key=lambda kv: int(kv[0]))) if lengths else "-"


def _threads(r: dict) -> str:
    """'8' or, where the drafter ran on its own count (auto-tuned or --draft-threads), '8 (4)'."""
    if r.get("gpu_layers"):
        return "GPU"
    d = r.get("draft_threads")
    return f"{r['threads']}" + (f" ({d})" if d and d != r["threads"] else "")


def table(rows: list[dict]) -> str:
    ks = sorted({int(k) for r in rows for k in r["fixed"]})
    head = ["place", "target", "set", "threads (drafter's)", "plain llama-cpp-python tok/s", "target alone tok/s",
            "default tok/s", "default vs target alone", "vs plain", "predicted", *[f"k={k}" for k in ks], "tau",
            "cost policy's k: steps", "same output", "default step ms: " + " / ".join(STEP_PARTS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        fixed = {int(k): v for k, v in r["fixed"].items()}
        ms = r["default_step_ms"] or {}
        step = (f"{ms.get('step', 0):.2f}: " + " / ".join(f"{ms.get(p, 0):.2f}" for p in STEP_PARTS)) if ms else "-"
        peer = _f(r["peer_tok_s"]) + (" (this build)" if r["peer_build"] != "upstream" and r["peer_tok_s"] else "")
        lines.append("| " + " | ".join([
            r["place"], r["target"], r["set"], _threads(r), peer, _f(r["target_tok_s"]), _f(r["default_tok_s"]),
            _x(r["default_speedup"]), _x(r["default_vs_peer"]), _x(r["default_predicted"]),
            *[_x(fixed.get(k, {}).get("speedup")) for k in ks], _f(r["default_tau"], "{:.2f}"),
            _choices(r["cost_choices"]), "yes" if r["same_output"] else "NO", step]) + " |")
    return "\n".join(lines)


def summarize(root: Path) -> tuple[Path, Path]:
    runs = load(root)
    rows = [row(place, target, set_name, run) for (place, target, set_name), run in sorted(runs.items())]
    md = ["# End-to-end sweep (issue 28)", "",
          "Default = the cost policy (k <= 4); speedups against the target alone in the same run; plain "
          "llama-cpp-python from the upstream build's run where there is one. Step: ms of a default step and "
          "its parts (" + ", ".join(STEP_PARTS) + ").", "", table(rows), ""]
    machines = {r["place"]: runs[(r["place"], r["target"], r["set"])]["machine"] for r in rows}
    md += ["Machines:", ""] + [f"- {p}: {m}" for p, m in sorted(machines.items())] + [""]
    out_md, out_js = root / "e2e-summary.md", root / "e2e-summary.json"
    out_md.write_text("\n".join(md))
    out_js.write_text(json.dumps({"rows": rows, "machines": machines}, indent=1, default=float))
    return out_md, out_js


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    md_path, _ = summarize(Path(sys.argv[1]))
    print(md_path.read_text())
