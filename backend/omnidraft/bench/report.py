"""Benchmark outputs: JSON with every raw figure, a markdown table, PNG plots."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

import llama_cpp

from omnidraft.llama.build import has_llamafile
from omnidraft.llama.cpuid import cpu_identity
from omnidraft.speculative.stats import STEP_PARTS


def machine(gpu: bool = False) -> dict:
    """The CPU, the build and (``gpu``) the GPUs nvidia-smi names, for every result file."""
    ident = cpu_identity()
    return {"cpu": ident["name"], "cpu_family": ident["family"], "cpu_model": ident["model"],
            "cpu_core": ident["core"], "cpu_flags": ident["flags"], "cores": os.cpu_count(),
            "machine": platform.machine(), "system": platform.system(),
            "python": platform.python_version(), "llama_cpp_python": llama_cpp.__version__,
            "llamafile_kernels": has_llamafile(), **({"gpu": _gpus(), "gpu_offload": bool(
                llama_cpp.llama_supports_gpu_offload())} if gpu else {})}


def _gpus() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no nvidia-smi)"


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float))
    tmp.replace(path)


def _same(v) -> str:
    return "n/a" if v is None else ("yes" if v else "NO")


def results_table(results: dict[str, dict]) -> str:
    head = ("| config | accept | tau (tok/pass) | tok/s | speedup | first token | predicted | meas/pred "
            "| n-gram hits/step | draft / verify / translate / python | same output |")
    lines = [head, "|" + "---|" * 11]
    for label, r in results.items():
        share = r["share"]
        first = f"{r['first_token_ms']:.0f} ms" if r.get("first_token_ms") else "-"  # older files lack it
        lines.append(
            f"| {label} | {r['acceptance_rate']:.1%} | {r['tau']:.2f} | {r['tokens_per_s']:.1f} | "
            f"{r.get('speedup', 1.0):.2f}x | {first} | {r.get('predicted_speedup', 1.0):.2f}x | "
            f"{r.get('measured_over_predicted', 1.0):.2f} | {r['ngram_hits_per_step']:.2f} | "
            f"{share['draft']:.0%} / {share['verify']:.0%} / {share['translate']:.0%} / {share['python']:.0%} | "
            f"{_same(r.get('same_output_as_target', True))} |")
    return "\n".join(lines)


def step_table(results: dict[str, dict]) -> str:
    """Where a speculative step's time goes (stats.STEP_PARTS): ms per step, and each part's share of it."""
    names = {"target": "target pass", "sample": "sample/accept"}
    lines = ["| config | step | " + " | ".join(names.get(p, p) for p in STEP_PARTS) + " |",
             "|" + "---|" * (len(STEP_PARTS) + 2)]
    for label, r in results.items():
        ms, share = r.get("step_ms"), r.get("step_share")
        if not ms or not ms.get("step"):  # plain llama-cpp-python: no steps of ours to break down
            continue
        lines.append(f"| {label} | {ms['step']:.2f} ms | "
                     + " | ".join(f"{ms[p]:.2f} ms ({share[p]:.0%})" for p in STEP_PARTS) + " |")
    return "\n".join(lines)


def adaptive_notes(results: dict[str, dict]) -> str:
    """Calibration of the acceptance predictor and draft lengths used, per adaptive configuration."""
    lines = []
    for label, r in results.items():
        ps = r.get("policy_stats")
        if not ps:
            continue
        cal = ps["calibration"]
        ece = "n/a" if cal["ece"] is None else f"{cal['ece']:.3f}"
        best_fixed = max((v.get("speedup", 0) for v in results.values()
                          if v["method"] == r["method"] and v["policy"] == "fixed"), default=0)
        lines.append(f"- {label}: calibration error (ECE) {ece} over {cal['examples']} drafted tokens; "
                     f"draft lengths {ps['draft_lengths']}; speedup {r.get('speedup', 1):.2f}x vs best fixed "
                     f"{best_fixed:.2f}x")
    return "\n".join(lines)


def cost_table(cost: dict) -> str:
    tv = cost["t_verify"]
    ns = sorted(int(n) for n in tv)
    lines = ["| n tokens per target pass | " + " | ".join(str(n) for n in ns) + " |",
             "|---|" + "---|" * len(ns),
             "| T_verify(n) ms | " + " | ".join(f"{tv[n] * 1e3:.1f}" for n in ns) + " |",
             "| T_verify(n) / T_decode(1) | " + " | ".join(f"{tv[n] / tv[1]:.2f}" for n in ns) + " |"]
    td = cost.get("t_draft_n") or {1: cost["t_draft"]}
    passes = ", ".join(f"{n} tokens {t * 1e3:.1f} ms" for n, t in sorted((int(n), t) for n, t in td.items()))
    return "\n".join(lines) + f"\n\nT_draft, a drafter pass of: {passes}"


def plots(results: dict[str, dict], out_prefix: Path) -> list[Path]:
    """speedup and tau vs draft length per method; time breakdown per config."""
    try:  # lazy: matplotlib costs ~0.7 s at start-up and is the optional 'plots' extra (no plot without it)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: as above
    except ImportError:
        return []
    written = []
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    methods = sorted({r["method"] for r in results.values() if r["method"] != "target"})
    for m in methods:
        pts = sorted((r["k"], r) for r in results.values() if r["method"] == m and r["policy"] == "fixed")
        if pts:
            axes[0].plot([k for k, _ in pts], [r.get("speedup", 1) for _, r in pts], marker="o", label=m)
            axes[1].plot([k for k, _ in pts], [r["tau"] for _, r in pts], marker="o", label=m)
        ad = [r for r in results.values() if r["method"] == m and r["policy"] == "cost"]
        if ad:
            axes[0].axhline(ad[0].get("speedup", 1), ls=":", lw=1, color=axes[0].lines[-1].get_color()
                            if axes[0].lines else None)
    axes[0].axhline(1.0, color="grey", lw=1)
    axes[0].set(xlabel="draft length k", ylabel="speedup over target alone", title="Wall-clock speedup "
                "(dotted: adaptive)")
    axes[1].set(xlabel="draft length k", ylabel="tokens per target pass", title="Tokens per target pass (tau)")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    p = out_prefix.with_name(out_prefix.name + "-speedup.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    written.append(p)

    labels = list(results)
    parts = ("draft", "translate", "verify", "python")
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(labels) + 1.5))
    left = [0.0] * len(labels)
    for part in parts:
        vals = [results[lb]["share"][part] for lb in labels]
        ax.barh(labels, vals, left=left, label=part)
        left = [a + b for a, b in zip(left, vals)]
    ax.set(xlabel="share of generation time", title="Where the time goes")
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    p = out_prefix.with_name(out_prefix.name + "-time.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    written.append(p)
    return written
