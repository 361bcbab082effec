"""T(n): what one target pass over n = 1..8 tokens costs, per kernel build, beside this CPU's roofline.

    omnidraft bench passes --targets qwen2.5-coder-1.5b:q4_0_pure --threads-list 1,2
    omnidraft bench passes --upstream /path/to/site-packages   # also plain llama-cpp-python's build

Each kernel runs in its own child process (the same GGUF, the engine mode ``--mode`` names: ``fast``,
repacked weights, where pure Q4_0 files run; ``exact``, plain weights, where Q4_K_M / Q8_0 files run):

* ``sbq4``: this build with omnidraft's small-batch kernels (Q4_0 repacked; Q4_K/Q6_K/Q5_0/Q8_0 plain);
* ``ggml``: this build with ``OMNIDRAFT_SBQ4=0``: ggml's own repacked kernels, i.e. the project's build
  without the patch;
* ``upstream``: ``--upstream DIR``, a llama-cpp-python installed as a user would (``pip install
  llama-cpp-python``: -march=native, llamafile kernels on), put first on the child's ``PYTHONPATH``;
  always in the fast mode (repacked weights), what plain llama-cpp-python runs.

Rounds alternate the kernels so that drift in the machine's speed lands on all of them; the figure per n
is the median over rounds.  Each child also reports how many batch rows are bit-identical to one-token
decoding (``invariance.measure``).  The roofline (bench/roofline.py) gives each T(n) its floor:
``max(weight bytes / read bandwidth, n * weights / int8 peak)``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from omnidraft.assets import models
from omnidraft.llama import build as llama_build, costmodel, invariance
from omnidraft.llama import log as llama_log  # noqa: F401 - keeps llama.cpp's log lines off stderr
from omnidraft.llama.engine import Engine, EngineConfig

from . import report, roofline

log = logging.getLogger(__name__)

MAX_N = 8


def child(path: str, threads: int, rounds: int, fidelity: bool, mode: str = "fast") -> dict:
    """In this process: T(1..MAX_N) of one engine mode (seconds, every sample) and its fidelity."""
    with Engine(path, EngineConfig(n_ctx=1024, n_threads=threads, batch_invariant=(mode == "exact"))) as e:
        fid = invariance.measure(e, MAX_N, timing=False) if fidelity else None
        times = costmodel.sample_passes(e, range(1, MAX_N + 1), rounds)
    return {"times": {str(n): v for n, v in times.items()}, "sbq4": llama_build.sbq4_active(),
            "llamafile": llama_build.has_llamafile(),
            "fidelity": None if fid is None else {"max_identical": fid.max_identical, "bound": fid.bound,
                                                  "flips": fid.flips}}


def _env(kernel: str, upstream: str | None) -> dict:
    env = dict(os.environ)
    env.pop("OMNIDRAFT_SBQ4", None)
    if kernel == "ggml":
        env["OMNIDRAFT_SBQ4"] = "0"
    if kernel == "upstream":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [upstream, env.get("PYTHONPATH")]))
    return env


def _run_child(path: Path, threads: int, kernel: str, upstream: str | None, rounds: int, fidelity: bool,
               mode: str) -> dict:
    cmd = [sys.executable, "-m", "omnidraft.bench.passes", "--child", str(path), "--threads-list", str(threads),
           "--rounds", str(rounds), "--mode", "fast" if kernel == "upstream" else mode] + \
          (["--fidelity"] if fidelity else [])
    proc = subprocess.run(cmd, env=_env(kernel, upstream), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{kernel} child failed on {path.name}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(path: Path, threads: int, kernels: list[str], upstream: str | None, rounds: int,
            mode: str = "fast") -> dict:
    """Per kernel: median T(n) in ms over ``rounds`` alternating child runs, and the fidelity seen."""
    samples: dict[str, dict[int, list[float]]] = {k: {n: [] for n in range(1, MAX_N + 1)} for k in kernels}
    info: dict[str, dict] = {}
    for r in range(rounds):
        for kernel in kernels if r % 2 == 0 else kernels[::-1]:
            out = _run_child(path, threads, kernel, upstream, rounds=3, fidelity=(r == 0), mode=mode)
            for n, v in out["times"].items():
                samples[kernel][int(n)] += v
            if r == 0:
                info[kernel] = {"fidelity": out["fidelity"], "sbq4": out["sbq4"], "llamafile": out["llamafile"]}
    return {k: dict(info[k], t_ms={n: 1e3 * median(v) for n, v in samples[k].items()}) for k in kernels}


def _table(target: str, threads: int, res: dict, floor: list[float], ceiling) -> list[str]:
    head = "| kernels | T(1) | " + " | ".join(f"T({n})" for n in range(2, MAX_N + 1)) + \
           " | bit-identical rows | roofline / T(n) at n = 1, 4, 8 |"
    lines = [f"**{target}, {threads} thread(s)** (T(n) as a multiple of this kernel's T(1)); roofline from "
             f"{ceiling.read_gbps:.1f} GB/s read and {ceiling.int8_gmacs} G int8 multiply-adds/s "
             f"({ceiling.int8_isa}), measured right after", "", head, "|" + "---|" * (MAX_N + 3)]
    for kernel, r in res.items():
        t = r["t_ms"]
        fid = r["fidelity"] or {}
        frac = ", ".join(f"{floor[n - 1] / t[n]:.0%}" for n in (1, 4, 8))
        lines.append(f"| {kernel} | {t[1]:.1f} ms | " + " | ".join(f"{t[n] / t[1]:.2f}x" for n in range(2, MAX_N + 1))
                     + f" | {fid.get('max_identical', '?')} | {frac} |")
    lines.append("| roofline | " + f"{floor[0]:.1f} ms | " +
                 " | ".join(f"{floor[n - 1] / floor[0]:.2f}x" for n in range(2, MAX_N + 1)) + " | | |")
    return lines + [""]


def plot(data: dict, path: Path) -> None:
    """T(n) in ms per kernel and the roofline, one panel per (target, threads)."""
    # lazy: matplotlib costs ~0.7 s at start-up and is the optional 'plots' extra
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    runs = data["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.6), squeeze=False)
    ns = list(range(1, MAX_N + 1))
    for ax, run in zip(axes[0], runs):
        for kernel, r in run["kernels"].items():
            ax.plot(ns, [r["t_ms"][str(n)] if str(n) in r["t_ms"] else r["t_ms"][n] for n in ns], marker="o",
                    label=kernel)
        ax.plot(ns, run["roofline_ms"], "k--", label="roofline")
        ax.set_title(f"{run['target']}\n{run['threads']} thread(s)", fontsize=9)
        ax.set_xlabel("tokens in the pass (n)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("T(n), ms")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"One target pass over n tokens: {data['machine']['cpu']}, {data['machine']['cores']} cores",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--targets", default=f"{models.QWEN_15B}:q4_0_pure,{models.QWEN_15B}:q4_0",
                   help="comma-separated targets (NAME:QTYPE = requantized copy, made on first use)")
    p.add_argument("--threads-list", default="1,2", help="comma-separated thread counts")
    p.add_argument("--kernels", default="sbq4,ggml", help="comma-separated: sbq4, ggml, upstream")
    p.add_argument("--upstream", default=None,
                   help="directory holding a plain llama-cpp-python install (pip install --target DIR); "
                        "adds the 'upstream' kernels")
    p.add_argument("--rounds", type=int, default=3, help="child runs per kernel (alternating)")
    p.add_argument("--mode", choices=("fast", "exact"), default="fast",
                   help="engine mode of this build's kernels: fast (repacked; pure Q4_0 files) or exact (plain "
                        "weights; Q4_K_M, Q8_0 files); upstream always runs fast, as plain llama-cpp-python does")
    p.add_argument("--out", default="results", help="directory for the JSON and markdown")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--fidelity", action="store_true", help=argparse.SUPPRESS)


def cmd_passes(args) -> int:
    threads_list = [int(t) for t in args.threads_list.split(",")]
    if args.child:
        print(json.dumps(child(args.child, threads_list[0], args.rounds, args.fidelity, args.mode)))
        return 0

    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    if args.upstream and "upstream" not in kernels:
        kernels.append("upstream")
    command = (f"omnidraft bench passes --targets {args.targets} --threads-list {args.threads_list} "
               f"--kernels {','.join(kernels)} --rounds {args.rounds} --mode {args.mode}" + (" --upstream DIR" if args.upstream else ""))
    data = {"command": command, "machine": report.machine(), "runs": []}
    md = [f"# Target pass cost T(n), {time.strftime('%Y-%m-%d %H:%M')}", "", f"Command: `{command}`", "",
          f"Machine: {data['machine']['cpu']}, {data['machine']['cores']} cores", ""]
    for target in [x.strip() for x in args.targets.split(",") if x.strip()]:
        path = models.resolve(target)
        nbytes, params = roofline.model_weights(path)
        for threads in threads_list:
            res = measure(path, threads, kernels, args.upstream, args.rounds, args.mode)
            ceiling = roofline.measure([threads])[threads]  # right after the timings: the machine drifts
            floor = [ceiling.floor_ms(nbytes, params, n) for n in range(1, MAX_N + 1)]
            data["runs"].append({"target": target, "file": path.name, "weight_bytes": nbytes, "weights": params,
                                 "threads": threads, "roofline": vars(ceiling), "roofline_ms": floor,
                                 "kernels": res})
            table = _table(target, threads, res, floor, ceiling)
            md += table
            print("\n".join(table), flush=True)
    out = Path(args.out)
    tag = time.strftime("%Y%m%d-%H%M%S")
    report.write_json(out / f"passes-{tag}.json", data)
    (out / f"passes-{tag}.md").write_text("\n".join(md) + "\n")
    plot(data, out / f"passes-{tag}.png")
    print(f"wrote {out}/passes-{tag}.json, .md and .png")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omnidraft.bench.passes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return cmd_passes(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
