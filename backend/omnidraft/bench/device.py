"""Cost model of another machine from random-weight models of the default models' shapes.

    python -m omnidraft.bench.device --skeletons DIR --work DIR --threads 1,2,4,8 [--gpu] --out FILE.json

Synthesizes each ``DIR/<name>.gguf.gz`` skeleton (``gguf_tools.synth``: same metadata, shapes and
quantization as the real file, random weights), then times target passes of n = 1..max_n tokens
(``costmodel.time_passes``) at each thread count on the CPU and, with ``--gpu``, fully offloaded.
The JSON records the machine (CPU model, cores, GPU, build flags) beside every figure.
``scripts/device/device_costmodel.sh`` runs this on the lent GPU machine; ``cmd_synthetic`` is the
``omnidraft bench costmodel --synthetic`` entry point on this machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp
import numpy as np  # after llama_cpp: its libstdc++ first (see scripts/device/device_costmodel.sh)

from gguf_tools import synth
from omnidraft.assets import models
from omnidraft.errors import from_gguf_tools
from omnidraft.llama import log as llama_log
from omnidraft.llama.costmodel import time_passes
from omnidraft.llama.engine import Engine, EngineConfig

from . import runner

log = logging.getLogger(__name__)

DEFAULT_MODELS = (models.SMOLLM2, models.QWEN_05B, models.QWEN_15B, models.GEMMA3)
DRAFTER = models.SMOLLM2


def machine_info() -> dict:
    """CPU model, logical and physical cores, memory, GPU and llama.cpp build of this machine."""
    info = {"cpu": platform.processor(), "cores": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version()}
    lscpu = _run(["lscpu"])
    for line in lscpu.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("Thread(s) per core", "Core(s) per socket", "Socket(s)", "Model name", "L3 cache",
                           "Flags"):
            info["lscpu_" + key.strip().lower().replace("(s)", "s").replace(" ", "_")] = \
                " ".join(x for x in val.split() if x.startswith(("avx", "amx", "fma", "f16c"))) \
                if key.strip() == "Flags" else val.strip()
    try:
        info["mem_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    gpu = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem",
                "--format=csv,noheader"]).strip()
    info["gpu"] = gpu or None
    info["cmake_args"] = os.environ.get("CMAKE_ARGS", "")
    info["host"] = platform.node()
    # in a child process: a crash inside llama.cpp must not cost the measurements
    info["llama_system_info"] = _run([sys.executable, "-c", "import llama_cpp; "
                                      "print(llama_cpp.llama_print_system_info().decode(errors='replace'))"]).strip()
    return info


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def synthesize(skeletons: Path, work: Path, names: list[str], seed: int = 0) -> dict[str, dict]:
    """Build each named model from ``skeletons/<name>.gguf.gz`` into ``work``; return name -> description."""
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, dict] = {}
    for name in names:
        skel = skeletons / f"{name}.gguf.gz"
        path = work / f"{name}-synthetic.gguf"
        t0 = time.perf_counter()
        with from_gguf_tools():
            if not path.exists():
                synth.build(skel, path, seed=seed, log_tail=llama_log.SINK.take_recent)
            d = synth.describe(skel)
        out[name] = {"path": str(path), "arch": d["arch"], "qtype": synth.qtype_of(skel, d["source"]), "bytes": path.stat().st_size,
                     "real": d["source"], "build_s": time.perf_counter() - t0}
        log.info("%s: %s bytes (real %s), %.1f s", name, f"{out[name]['bytes']:,}",
                 f"{d['source'].get('bytes', 0):,}", out[name]["build_s"])
    return out


def measure_one(path: str | os.PathLike, threads: int, gpu: bool, batch_invariant: bool, max_n: int = 8,
                repeats: int = 5) -> dict:
    """T_verify(1..max_n) of one model in one setting, with load time and a finite-logits check."""
    llama_cpp.llama_backend_init()  # Engine never calls it; builds made on the lent machine crashed loading without
    cfg = EngineConfig(n_ctx=1024, n_threads=threads, n_gpu_layers=-1 if gpu else 0,
                       batch_invariant=batch_invariant)
    t0 = time.perf_counter()
    with Engine(path, cfg) as eng:
        load_s = time.perf_counter() - t0
        probe = eng.tokenize("def f(x):\n    return x")
        finite = bool(np.isfinite(eng.decode(probe, "all")).all())
        eng.reset()
        time_passes(eng, range(1, 3), 1)  # warm-up: first graphs, caches, GPU kernels
        tv = time_passes(eng, range(1, max_n + 1), repeats)
    return {"threads": threads, "device": "gpu" if gpu else "cpu", "batch_invariant": batch_invariant,
            "t_verify": {str(n): t for n, t in tv.items()}, "load_s": load_s, "finite_logits": finite}


def measure_direct(path: str, threads: int, gpu: bool, batch_invariant: bool, max_n: int = 8,
                   repeats: int = 5, prefix_len: int = 64) -> dict:
    """``measure_one`` through llama_cpp.Llama's context and raw llama_decode, without omnidraft's Engine.

    Builds made on the lent machine segfaulted inside llama_model_load_from_file when called
    from Engine, but loaded through llama_cpp.Llama (2026-11-26); same passes, same timing.
    """
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(str(path), n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                          n_gpu_layers=-1 if gpu else 0, logits_all=False, verbose=True,
                          **({"type_k": 0, "type_v": 0} if batch_invariant else {}))
    load_s = time.perf_counter() - t0
    ctx = llm._ctx.ctx
    mem = llama_cpp.llama_get_memory(ctx)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    ids = llm.tokenize(b"def add(a, b):\n    return a + b\n\nclass Point:\n", add_bos=False)
    prefix = (ids * (prefix_len // len(ids) + 1))[:prefix_len]
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llm._model.model))

    def decode(toks: list[int], pos0: int) -> None:
        batch.n_tokens = len(toks)
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, pos0 + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, 1
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        llama_cpp.llama_synchronize(ctx)

    def passes(sizes, reps) -> dict[int, float]:
        llama_cpp.llama_memory_clear(mem, True)
        decode(prefix, 0)
        out = {}
        for n in sizes:
            times = []
            for _ in range(reps):
                llama_cpp.llama_memory_seq_rm(mem, 0, prefix_len, -1)
                t = time.perf_counter()
                decode((ids * 2)[:n], prefix_len)
                times.append(time.perf_counter() - t)
            out[n] = sorted(times)[len(times) // 2]
        return out

    passes(range(1, 3), 1)
    tv = passes(range(1, max_n + 1), repeats)
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx), shape=(max_n * n_vocab,))
    finite = bool(np.isfinite(logits).all())
    llama_cpp.llama_batch_free(batch)
    llm.close()
    return {"threads": threads, "device": "gpu" if gpu else "cpu", "batch_invariant": batch_invariant,
            "t_verify": {str(n): t for n, t in tv.items()}, "load_s": load_s, "finite_logits": finite,
            "via": "llama_cpp.Llama + llama_decode"}


def measure_isolated(path: str, threads: int, gpu: bool, batch_invariant: bool, max_n: int, repeats: int) -> dict:
    """``measure_one`` in a child process, so that a crash in llama.cpp loses one figure, not the run;
    after a crash, once more through ``measure_direct``."""
    err = ""
    for how in ("engine", "direct"):
        cmd = [sys.executable, "-X", "faulthandler", "-m", "omnidraft.bench.device", "--one", json.dumps(
            [str(path), threads, gpu, batch_invariant, max_n, repeats, how])]
        p = subprocess.run(cmd, capture_output=True, text=True)
        lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
        if p.returncode == 0 and lines:
            r = json.loads(lines[-1])
            if err:
                r["engine_error"] = err
            return r
        err += f"{how}: rc={p.returncode}: {p.stderr[-1200:]}\n"
    return {"threads": threads, "device": "gpu" if gpu else "cpu", "batch_invariant": batch_invariant, "error": err}


def measure(models: dict[str, dict], threads: list[int], gpu: bool, max_n: int = 8, repeats: int = 5) -> list[dict]:
    """Every model at every thread count (CPU) or once fully offloaded (GPU), each in its own process.

    Targets are timed as the product runs them (batch-invariant: f32 KV cache, no repacked
    weights); the drafter runs without in the product; the GPU is cheap enough to time both.
    """
    out = []
    for name, m in models.items():
        # CPU: targets as the product runs them; the drafter both ways (repacked weights can crash on AMX)
        variants = (True, False) if gpu or name == DRAFTER else (True,)
        for th in ([max(threads)] if gpu else threads):
            for bi in variants:
                r = measure_isolated(m["path"], th, gpu, bi, max_n, repeats)
                r["model"] = name
                out.append(r)
                if "error" in r:
                    log.error("%s %s %d thr bi=%d failed: %s", name, r["device"], th, bi, r["error"])
                    continue
                tv = r["t_verify"]
                log.info("%-20s %s %2d thr bi=%d: T(1) %.2f ms, T(%d) %.2f ms (%.2fx)", name, r["device"], th, bi,
                         tv["1"] * 1e3, max_n, tv[str(max_n)] * 1e3, tv[str(max_n)] / tv["1"])
    return out


def table(data: dict) -> str:
    """Markdown: one row per model and setting, T_verify(n)/T(1) ratios beside T(1)."""
    rows = ["| model | device | threads | batch-inv. | T(1) ms | T(2)/T(1) | T(4)/T(1) | T(8)/T(1) |",
            "|---|---|---|---|---|---|---|---|"]
    for r in data["measurements"]:
        if "error" in r:
            rows.append(f"| {r['model']} | {r['device']} | {r['threads']} | {r['batch_invariant']} | failed |||| ")
            continue
        tv = r["t_verify"]
        top = max(tv, key=int)
        rows.append(f"| {r['model']} | {r['device']} | {r['threads']} | {'yes' if r['batch_invariant'] else 'no'} "
                    f"| {tv['1'] * 1e3:.2f} | {tv['2'] / tv['1']:.2f} | {tv.get('4', tv[top]) / tv['1']:.2f} | "
                    f"{tv[top] / tv['1']:.2f} |")
    return "\n".join(rows)


def run(skeletons: Path, work: Path, names: list[str], threads: list[int], gpu: bool, out: Path,
        max_n: int = 8, repeats: int = 5, label: str = "") -> dict:
    t0 = time.perf_counter()
    models = synthesize(skeletons, work, names)
    data = {"label": label or ("gpu" if gpu else "cpu"), "models": models, "max_n": max_n, "repeats": repeats,
            "synth_s": time.perf_counter() - t0, "measurements": measure(models, threads, gpu, max_n, repeats)}
    data["machine"] = machine_info()
    data["wall_s"] = time.perf_counter() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, out)
    print(table(data), flush=True)
    return data


# ------------------------------------------------------------------ local entry (bench costmodel --synthetic)
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated model names")
    p.add_argument("--threads", default="1,2", help="comma-separated CPU thread counts")
    p.add_argument("--gpu", action="store_true", help="time fully offloaded to the GPU (a GPU build) instead")
    p.add_argument("--max-n", type=int, default=8, help="largest target pass to time")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per n (median kept)")
    p.add_argument("--label", default="", help="machine label stored in the JSON (cpu-8t, gpu, here, ...)")


def cmd_synthetic(args: argparse.Namespace) -> int:
    """``omnidraft bench costmodel --synthetic``: skeletons of the cached real models, random models, timings."""
    names = [x.strip() for x in args.models.split(",") if x.strip()]
    work = models.cache_dir() / "synthetic"
    skel_dir = work / "skeletons"
    skel_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        skel = skel_dir / f"{name}.gguf.gz"
        if not skel.exists():
            with from_gguf_tools():
                synth.skeleton(models.resolve(name), skel)
    out = Path(args.out) / f"device-{args.label or 'here'}-{runner.now_tag()}.json"
    run(skel_dir, work, names, [int(t) for t in args.threads.split(",")], args.gpu, out, args.max_n, args.repeats,
        args.label or "here")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--one":  # child of measure_isolated
        path, threads, gpu, bi, max_n, repeats, how = json.loads(sys.argv[2])
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")  # llama.cpp's last words
        logging.getLogger("omnidraft.llama_cpp").setLevel(logging.INFO)
        fn = measure_one if how == "engine" else measure_direct
        print(json.dumps(fn(path, threads, gpu, bi, max_n, repeats)), flush=True)
        return 0
    p = argparse.ArgumentParser(prog="python -m omnidraft.bench.device", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skeletons", type=Path, required=True, help="folder of <name>.gguf.gz skeletons")
    p.add_argument("--work", type=Path, required=True, help="folder for the synthetic models")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument("--synth-only", action="store_true", help="only build the synthetic models")
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("omnidraft.llama_cpp").setLevel(logging.ERROR)
    logging.getLogger("gguf").setLevel(logging.WARNING)
    names = [x.strip() for x in args.models.split(",") if x.strip()]
    if args.synth_only:
        synthesize(args.skeletons, args.work, names)
        return 0
    run(args.skeletons, args.work, names, [int(t) for t in args.threads.split(",")], args.gpu, args.out,
        args.max_n, args.repeats, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
