"""Phones: a **projection**, not a measurement, of T(n) (one target pass over n = 1..8 tokens) and of the
default's speedup for Qwen2.5-Coder-1.5B (Q4_K_M as pinned, and ``q4_0_pure``) on two named phone SoCs.

    python -m omnidraft.bench.armproj [--out DIR] [--recount]

No ARM machine was reachable: the small-batch kernels' aarch64 variants were checked under qemu (results,
not speed), so every figure here is arithmetic on the inputs below, each printed with the table:

- instructions per loop iteration of each kernel, counted in its disassembly (``--recount`` cross-compiles
  sbq4.cpp, sbk.cpp and ggml's own ARM kernels at -O3 and counts again; the numbers below were counted so),
  split into vector, load and other instructions;
- each SoC's big cores (frequency, 128-bit SIMD pipes, load pipes, decode width: Arm's published core
  descriptions), its DRAM bandwidth (the vendor's LPDDR spec) and the fraction of it a phone's llama.cpp
  decode reaches (one public llama.cpp figure, ANCHORS);
- the bytes of weights a pass reads (the pinned files' tensors);
- tokens per target pass at draft length 4 and the drafter's cost per drafted token, measured on x86
  (BENCHMARKS.md, "Drafter acceptance" and "The files users download").

Model.  A pass streams the weights once and runs the kernel's loop over every block; it takes
max(bytes / (bandwidth x efficiency), compute), compute being the loop's iterations over the cores' summed
rate, each core retiring an iteration in max(total / decode, vector / SIMD pipes, loads / load pipes)
cycles (throughput only: no latency, no frequency drop under load, no attention or norms).  ggml's own
path (what an unpatched ARM build runs) is priced the same way, its repeated passes over the weights for
rows it does not batch assumed to hit cache (optimistic for ggml).  The speedup is costmodel.speedup of
the expected tokens of a step (per-token acceptance from tau at k = 4, independent positions) over
T(k + 1) + k * t_draft, the best k in 0..4 (what the cost policy picks); hybrid's prompt lookup, worth
+0.05..+0.25x on x86, is left out, so it is the drafter's share of the default: a lower bound on that count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from omnidraft.llama import build
from omnidraft.llama.costmodel import speedup

PATCH = Path(build.PATCH_DIR)
GGML_CPU = Path(f".venv/src/llama_cpp_python-{build.VERSION}/vendor/llama.cpp/ggml")  # setup keeps the sdist there

# kernel -> (weights of the matrix one loop iteration consumes, {n rows: (total, vector, loads) per iteration}).
# sbq4: a block of 32 weights of 4 rows for n activation rows; sbk: a 256-weight super-block of one row for n
# rows; ggml: gemv (1 activation row) and its 4-row gemm, vec_dot (1 row).  Counted by recount() with
# aarch64-linux-gnu-g++ 12.2 -O3 (sbq4 i8mm at -march=armv8.2-a+dotprod+i8mm, the rest at +dotprod).
COUNTS: dict[str, tuple[int, dict[int, tuple[int, int, int]]]] = {
    "sbq4 i8mm 4x8": (128, {1: (42, 27, 10), 2: (50, 30, 14), 3: (74, 50, 17), 4: (83, 52, 23),
                            5: (106, 70, 28), 6: (121, 74, 35), 7: (150, 93, 42), 8: (162, 97, 48)}),
    "sbq4 dotprod 4x4": (128, {1: (36, 21, 10), 2: (52, 33, 13), 3: (68, 45, 16), 4: (83, 57, 18),
                               5: (98, 69, 20), 6: (113, 81, 22), 7: (131, 93, 27), 8: (153, 105, 34)}),
    "sbk q4_K": (256, {1: (148, 71, 34), 2: (212, 107, 50), 3: (283, 146, 70), 4: (353, 185, 87),
                       5: (429, 220, 111), 6: (526, 268, 142), 7: (609, 303, 165), 8: (669, 340, 176)}),
    "sbk q6_K": (256, {1: (195, 118, 53), 2: (277, 180, 68), 3: (359, 235, 91), 4: (447, 293, 115),
                       5: (530, 347, 134), 6: (618, 403, 158), 7: (744, 462, 199), 8: (824, 517, 211)}),
    "ggml gemv q4_0 4x4": (128, {1: (34, 23, 8)}),
    "ggml gemm q4_0 4x4": (128, {1: (79, 60, 14)}),
    "ggml gemv q4_0 4x8": (128, {1: (41, 29, 8)}),
    "ggml gemm q4_0 4x8 i8mm": (128, {1: (67, 48, 14)}),
    "ggml vec_dot q4_K": (256, {1: (136, 55, 18)}),
    "ggml vec_dot q6_K": (256, {1: (233, 132, 38)}),
}

MIB = 1 << 20
FILES = {  # weight bytes one pass reads (every matrix; the token embedding is one row a token) and how
    # many weights each kernel takes, from the pinned files' tensors; drafter cost per drafted token / T(1)
    "Q4_K_M": {"bytes": 979_517_952, "weights": {"q4_K": 1_112_014_848, "q6_K": 431_554_560},
               "draft_ratio": 0.09, "tau": {"humaneval": 2.52, "code-other": 2.22, "chat": 1.98, "nl": 1.82}},
    "q4_0_pure": {"bytes": 868_257_792, "weights": {"q4_0": 1_543_569_408},
                  "draft_ratio": 0.07, "tau": {"humaneval": 2.46, "code-other": 2.20, "chat": 1.88, "nl": 1.77}},
}
# core -> (GHz, 128-bit SIMD pipes, load pipes, decode width)
CORES = {"Cortex-X3": (3.19, 4, 3, 6), "Cortex-A715": (2.80, 2, 2, 5), "Cortex-A710": (2.80, 2, 2, 5),
         "Cortex-A78": (2.85, 2, 2, 4)}
SOCS = {
    "Snapdragon 8 Gen 2": {
        "cores": ["Cortex-X3", "Cortex-A715", "Cortex-A715", "Cortex-A710", "Cortex-A710"],
        "dram": "LPDDR5X-8400, 64-bit: 67.2 GB/s", "bandwidth": 67.2e9, "features": "dotprod + i8mm",
        "sbq4": "sbq4 i8mm 4x8", "ggml_q4_0": ("ggml gemm q4_0 4x8 i8mm", "ggml gemv q4_0 4x8"),
        "note": "5 threads on the big cores (the 3 Cortex-A510 slow a decode down)"},
    "Dimensity 8100 (Cortex-A78 class)": {
        "cores": ["Cortex-A78"] * 4,
        "dram": "LPDDR5-6400, 64-bit: 51.2 GB/s", "bandwidth": 51.2e9, "features": "dotprod, no i8mm",
        "sbq4": "sbq4 dotprod 4x4", "ggml_q4_0": ("ggml gemm q4_0 4x4", "ggml gemv q4_0 4x4"),
        "note": "4 threads on the 4 Cortex-A78"},
}
EFFICIENCY = 0.72  # decode bytes / time over peak bandwidth: ANCHORS[0]
# ... and what the 1.5-2B figures (ANCHORS[3], [4]) suggest: about 15-20 GB/s streamed on 60-67 GB/s phones
LOW_EFFICIENCY = 0.30
ANCHORS = [
    ("llama.cpp on a Snapdragon 8 Gen 3 (Galaxy S24 Ultra, LPDDR5X-9600: 76.8 GB/s), llama-v2-115m Q4_0_4_8 "
     "(70.81 MiB), 6 threads: tg128 750 t/s, i.e. 55.7 GB/s streamed, 72 % of peak (the efficiency used here)",
     "https://github.com/ggml-org/llama.cpp/pull/8672"),
    ("llama.cpp's ARM Q4_0 kernels (q4_0_4x4 GEMV with dotprod, 4x8 GEMM with i8mm), whose loops price ggml's "
     "path here; 2x text generation over vec_dot on Graviton3", "https://github.com/ggml-org/llama.cpp/pull/5780"),
    ("Snapdragon 8 Gen 2 topology (1 X3 3.19 GHz, 2 A715 + 2 A710 2.8 GHz, 3 A510) and 5 threads best for "
     "llama.cpp decode", "https://github.com/omnimind-ai/OmniInfer/pull/66"),
    ("A 2B-class Q4_0 model (Gemma 4 E2B) in llama.cpp on a Dimensity 9000+ (X2 + A710, dotprod + i8mm build): "
     "tg256 15.1-17.9 t/s", "https://pt13762104.github.io/2026/06/06/taking-a-look-at-gemma-4-e2b-qat/"),
    ("DeepSeek-R1-Distill-Qwen-1.5B (Qwen2.5-1.5B's architecture) on a Snapdragon 8 Gen 2 CPU through MediaPipe "
     "(another engine, its quantization unstated): 15.7 tok/s",
     "https://dodo13114arch.github.io/my-blowfish-lab/posts/2025-03-14-testing-local-ai-models-mobile"),
]
# x86 check of the speedup formula: T(n) ms of q4_0_pure measured here (BENCHMARKS.md, issue 41, AVX-512 build,
# n = 1, 2, 4, 8) and the `omnidraft` method's default-policy speedups measured on the same machine
X86_T = {1: 29.7, 2: 33.7, 4: 48.5, 8: 80.2}
X86_MEASURED = {"humaneval": 1.64, "code-other": 1.55, "chat": 1.33, "nl": 1.31}


# ------------------------------------------------------------------ counting instructions
# kernel -> (source, -march extension, function name regex with {n} for the row count, weights per iteration)
KERNEL_SOURCES = {
    "sbq4 i8mm 4x8": ("sbq4", "+dotprod+i8mm", r"group_mmla<3, {n}>", 128),
    "sbq4 dotprod 4x4": ("sbq4", "+dotprod", r"group_dot<2, {n}>", 128),
    "sbk q4_K": ("sbk", "+dotprod", r"q4k_row<{n}>", 256),
    "sbk q6_K": ("sbk", "+dotprod", r"q6k_row<{n}>", 256),
    "ggml gemv q4_0 4x4": ("ggml repack", "+dotprod", r"ggml_gemv_q4_0_4x4_q8_0$", 128),
    "ggml gemm q4_0 4x4": ("ggml repack", "+dotprod", r"ggml_gemm_q4_0_4x4_q8_0$", 128),
    "ggml gemv q4_0 4x8": ("ggml repack", "+dotprod+i8mm", r"ggml_gemv_q4_0_4x8_q8_0$", 128),
    "ggml gemm q4_0 4x8 i8mm": ("ggml repack", "+dotprod+i8mm", r"ggml_gemm_q4_0_4x8_q8_0$", 128),
    "ggml vec_dot q4_K": ("ggml quants", "+dotprod", r"ggml_vec_dot_q4_K_q8_K$", 256),
    "ggml vec_dot q6_K": ("ggml quants", "+dotprod", r"ggml_vec_dot_q6_K_q8_K$", 256),
}
DOT = {"sdot", "smmla", "udot"}


def _compile(source: str, ext: str, out: Path) -> Path:
    cxx = "aarch64-linux-gnu-g++"
    if shutil.which(cxx) is None:
        raise SystemExit(f"--recount needs {cxx} (android_demo/ci_setup.sh installs it)")
    obj = out / f"{source.replace(' ', '_')}{ext.replace('+', '_')}.o"
    inc = [f"-I{GGML_CPU / 'include'}", f"-I{GGML_CPU / 'src'}", f"-I{GGML_CPU / 'src' / 'ggml-cpu'}"]
    args = {"sbq4": ["-DSBQ4_STANDALONE", str(PATCH / "sbq4.cpp")], "sbk": ["-DSBK_STANDALONE", str(PATCH / "sbk.cpp")],
            "ggml repack": [*inc, str(GGML_CPU / "src" / "ggml-cpu" / "arch" / "arm" / "repack.cpp")],
            "ggml quants": [*inc, "-x", "c", str(GGML_CPU / "src" / "ggml-cpu" / "arch" / "arm" / "quants.c")]}[source]
    std = [] if source == "ggml quants" else ["-std=c++17"]
    subprocess.run([cxx, "-O3", *std, f"-march=armv8.2-a{ext}", "-DNDEBUG", "-c", *args, "-o", str(obj)], check=True)
    return obj


def _functions(obj: Path) -> dict[str, list[tuple[int, str, str]]]:
    text = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", "-C", str(obj)],
                          capture_output=True, text=True, check=True).stdout
    funcs: dict[str, list] = {}
    cur = None
    for line in text.splitlines():
        if m := re.match(r"^[0-9a-f]+ <(.*)>:$", line):
            cur = funcs.setdefault(m.group(1), [])
        elif cur is not None and (m := re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$", line)):
            cur.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def inner_loop(code: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The smallest backward-branch loop that holds a dot-product instruction: the per-block loop."""
    loops = []
    for addr, op, args in code:
        m = re.search(r"\b([0-9a-f]+) <", args)
        if (op.startswith("b") or op in ("cbz", "cbnz", "tbz", "tbnz")) and m and int(m.group(1), 16) <= addr:
            body = [x for x in code if int(m.group(1), 16) <= x[0] <= addr]
            if any(o in DOT for _, o, _ in body):
                loops.append(body)
    if not loops:
        raise ValueError("no loop with a dot-product instruction")
    return min(loops, key=len)


def classify(body: list[tuple[int, str, str]]) -> tuple[int, int, int]:
    """(total, vector, loads): loads (prefetches too) go to the load pipes, vector instructions (a v, q or d
    register operand, not a load or store) to the SIMD pipes."""
    loads = sum(op.startswith("ld") or op == "prfm" for _, op, _ in body)
    vec = sum(not op.startswith(("ld", "st", "prfm")) and bool(re.search(r"\b(v\d+\.|[qd]\d+\b)", args))
              for _, op, args in body)
    return len(body), vec, loads


def recount() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wanted = list(dict.fromkeys((source, ext) for source, ext, _, _ in KERNEL_SOURCES.values()))
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:  # the compiles side by side
            objs = dict(zip(wanted, pool.map(lambda se: _functions(_compile(*se, Path(tmp))), wanted)))
        out: dict = {}
        for name, (source, ext, pattern, weights) in KERNEL_SOURCES.items():
            funcs = objs[source, ext]
            rows = range(1, 9) if "{n}" in pattern else (1,)
            per_n = {}
            for n in rows:
                rx = re.compile(pattern.format(n=n))
                code = next(c for f, c in funcs.items() if rx.search(f))
                per_n[n] = classify(inner_loop(code))
            out[name] = (weights, per_n)
        return out


# ------------------------------------------------------------------ the model
def cycles(kernel: str, n: int, core: str, counts: dict = COUNTS) -> float:
    """Cycles one core spends on one loop iteration of a kernel (throughput bound only)."""
    total, vec, loads = counts[kernel][1][n]
    _, simd, ldp, decode = CORES[core]
    return max(total / decode, vec / simd, loads / ldp)


def compute_seconds(soc: dict, work: list[tuple[str, int, float]], counts: dict = COUNTS) -> float:
    """Seconds the SoC's cores need for ``work``: (kernel, n, iterations) items, the iterations shared out
    as ggml's chunks are (the faster cores take more)."""
    seconds = 0.0
    for kernel, n, iterations in work:
        rate = sum(CORES[c][0] * 1e9 / cycles(kernel, n, c, counts) for c in soc["cores"])
        seconds += iterations / rate
    return seconds


def work_of(fmt: str, n: int, soc: dict, path: str, counts: dict = COUNTS) -> list[tuple[str, int, float]]:
    """The loop iterations a pass over n tokens runs: this project's kernels ("ours"), or ggml's ("ggml": its
    4-row GEMM for whole groups of 4 rows and its GEMV for the rest, or one vec_dot per row for K-quants)."""
    weights = FILES[fmt]["weights"]
    out = []
    for wtype, count in weights.items():
        if wtype == "q4_0":
            if path == "ours":
                out.append((soc["sbq4"], n, count / counts[soc["sbq4"]][0]))
            else:
                gemm, gemv = soc["ggml_q4_0"]
                if n // 4:
                    out.append((gemm, 1, (n // 4) * count / counts[gemm][0]))
                if n % 4:
                    out.append((gemv, 1, (n % 4) * count / counts[gemv][0]))
        else:
            kernel = f"sbk {wtype}" if path == "ours" else f"ggml vec_dot {wtype}"
            rows = n if path == "ours" else 1
            out.append((kernel, rows, (1 if path == "ours" else n) * count / counts[kernel][0]))
    return out


def t_pass(fmt: str, n: int, soc: dict, path: str = "ours", efficiency: float = EFFICIENCY,
           counts: dict = COUNTS) -> dict:
    """T(n) in seconds: the slower of streaming the weights and the kernels' instructions."""
    memory = FILES[fmt]["bytes"] / (soc["bandwidth"] * efficiency)
    compute = compute_seconds(soc, work_of(fmt, n, soc, path, counts), counts)
    return {"t": max(memory, compute), "memory": memory, "compute": compute}


def acceptance_from_tau(tau: float, k: int = 4) -> float:
    """Per-token acceptance a with 1 + a + ... + a^k = tau (independent positions), by bisection."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(k + 1)) < tau else (lo, mid)
    return (lo + hi) / 2


def policy_speedup(t: dict[int, float], tau: float, draft_ratio: float, k_max: int = 4) -> tuple[float, int]:
    """(speedup, k) of the best draft length in 0..k_max, the cost policy's choice, from T(n) and tau at k = 4."""
    a = acceptance_from_tau(tau)
    best = (1.0, 0)
    for k in range(1, k_max + 1):
        tokens = sum(a ** i for i in range(k + 1))
        best = max(best, (speedup(tokens, t[k + 1] + k * draft_ratio * t[1], t[1]), k))
    return best


def x86_check() -> dict[str, tuple[float, float]]:
    """The speedup formula on x86's measured T(n) (linear between the measured n) against the measured
    speedups: what the formula misses where both are known."""
    ns = sorted(X86_T)
    t = {n: X86_T[n] if n in X86_T else next(X86_T[lo] + (X86_T[hi] - X86_T[lo]) * (n - lo) / (hi - lo)
                                              for lo, hi in zip(ns, ns[1:]) if lo < n < hi) for n in range(1, 9)}
    tau = FILES["q4_0_pure"]["tau"]
    return {s: (round(policy_speedup(t, tau[s], FILES["q4_0_pure"]["draft_ratio"])[0], 2), X86_MEASURED[s])
            for s in tau}


def project(efficiency: float = EFFICIENCY, counts: dict = COUNTS) -> dict:
    """Every SoC x file: T(n) for n = 1..8 with this project's kernels and with ggml's, and the speedups."""
    out = {"label": "PROJECTION (no ARM hardware measured)", "efficiency": efficiency, "socs": {}}
    for name, soc in SOCS.items():
        per_file = {}
        for fmt, f in FILES.items():
            rows = {}
            for path in ("ours", "ggml"):
                ts = {n: t_pass(fmt, n, soc, path, efficiency, counts) for n in range(1, 9)}
                t = {n: v["t"] for n, v in ts.items()}
                rows[path] = {"t_ms": {n: round(v * 1e3, 2) for n, v in t.items()},
                              "compute_ms": {n: round(v["compute"] * 1e3, 2) for n, v in ts.items()},
                              "memory_ms": round(ts[1]["memory"] * 1e3, 2),
                              "speedup": {s: policy_speedup(t, tau, f["draft_ratio"]) for s, tau in f["tau"].items()}}
            per_file[fmt] = rows
        out["socs"][name] = {"inputs": {k: v for k, v in soc.items() if k != "cores"} | {
            "cores": [f"{c} {CORES[c][0]} GHz, {CORES[c][1]} SIMD / {CORES[c][2]} load pipes, decode {CORES[c][3]}"
                      for c in soc["cores"]]}, "files": per_file}
    out["x86_check"] = x86_check()
    return out


# ------------------------------------------------------------------ report
def markdown(p: dict) -> str:
    """The projection as Markdown: its label, one table per SoC, the inputs, the anchors, the x86 check."""
    sets = list(FILES["q4_0_pure"]["tau"])
    out = [f"**{p['label']}.** Decode efficiency {p['efficiency']:.2f} of peak DRAM bandwidth; T(n) in ms, "
           "n = 1..8 (in brackets T(4) and T(8) over T(1)); speedup of the default's drafter (`omnidraft`, cost "
           f"policy k <= 4, prompt lookup left out) on {' / '.join(sets)}, with the k it picks.", ""]
    for name, s in p["socs"].items():
        i = s["inputs"]
        out += [f"*{name}*: {i['features']}; {i['dram']}; {i['note']}; kernels: `{i['sbq4']}`, `sbk` NEON dotprod.",
                "", "| file | kernels | T(1) .. T(8), ms | default's speedup (k) |", "|---|---|---|---|"]
        for fmt, rows in s["files"].items():
            for path, r in rows.items():
                t = r["t_ms"]
                ts = " / ".join(f"{t[n]:.1f}" for n in range(1, 9))
                sp = " / ".join(f"{x:.2f}x ({k})" for x, k in r["speedup"].values())
                who = "this project's" if path == "ours" else "ggml's own"
                out.append(f"| {fmt} | {who} | {ts} ({t[4] / t[1]:.2f} / {t[8] / t[1]:.2f}) | {sp} |")
        out.append("")
    if low := p.get("at_low_efficiency"):
        out += [f"At decode efficiency {low['efficiency']:.2f} (what the 1.5-2B anchors below suggest: slower decodes, "
                "so extra rows cost relatively less), T(1) and the default's speedup (k):", "",
                "| SoC | file | kernels | T(1), ms | T(4) / T(1) | speedup (k) |", "|---|---|---|---|---|---|"]
        for name, s in low["socs"].items():
            for fmt, rows in s["files"].items():
                for path, r in rows.items():
                    t = r["t_ms"]
                    sp = " / ".join(f"{x:.2f}x ({k})" for x, k in r["speedup"].values())
                    who = "this project's" if path == "ours" else "ggml's own"
                    out.append(f"| {name} | {fmt} | {who} | {t[1]:.1f} | {t[4] / t[1]:.2f} | {sp} |")
        out.append("")
    out += ["Inputs: instructions per loop iteration (total, vector, loads; `armproj.COUNTS`, counted with "
            "`--recount`), cores (GHz, SIMD / load pipes, decode width): " +
            "; ".join(f"{c} {v[0]} GHz, {v[1]} / {v[2]}, {v[3]}" for c, v in CORES.items()) + ". Weight bytes a "
            "pass reads: " + ", ".join(f"{k} {v['bytes'] / MIB:.0f} MiB" for k, v in FILES.items()) + ". Tau at k = 4 "
            "(x86, BENCHMARKS.md): " + "; ".join(f"{k} " + " / ".join(str(x) for x in v["tau"].values())
                                                 for k, v in FILES.items()) + ". Drafter cost per drafted token: "
            + ", ".join(f"{k} {v['draft_ratio']:.0%} of T(1)" for k, v in FILES.items()) + ".", "",
            "Anchors:", ""]
    out += [f"- {text} ({url})" for text, url in ANCHORS]
    out += ["", "The formula on x86's measured T(n) against x86's measured speedups (" + ", ".join(
        f"{s} {a:.2f}x predicted / {b:.2f}x measured" for s, (a, b) in p["x86_check"].items()) + ")."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Project T(n) and the default's speedup on phone SoCs (a projection).")
    ap.add_argument("--out", default="results/arm-projection", help="folder for projection.json and projection.md")
    ap.add_argument("--efficiency", type=float, default=EFFICIENCY, help="decode bytes/s over peak DRAM bandwidth")
    ap.add_argument("--recount", action="store_true",
                    help="count the kernels' instructions again (needs aarch64-linux-gnu-g++ and the pinned sdist)")
    args = ap.parse_args(argv)
    counts = recount() if args.recount else COUNTS
    p = project(args.efficiency, counts)
    p["counts"] = {k: [w, d] for k, (w, d) in counts.items()}
    low = project(LOW_EFFICIENCY, counts) if args.efficiency != LOW_EFFICIENCY else None
    if low:
        p["at_low_efficiency"] = low
    md = markdown(p)
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "projection.json").write_text(json.dumps(p, indent=1))
    (out / "projection.md").write_text(md)
    print(f"wrote {out / 'projection.json'} and {out / 'projection.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
