"""``omnidraft doctor``: what this installation is, and whether it works here.

Prints the llama.cpp build (version, flags, the CPU features it uses and those the CPU has that it
leaves alone), the machine, the model cache, and runs the build probe (``buildprobe``) in a child
process.  Exit status 0 when nothing is wrong, 1 otherwise: usable in scripts and bug reports.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import llama_cpp

from omnidraft.llama import buildprobe, build as llama_build, cpuid, hostmem
from omnidraft.llama.engine import flash_attn_default
from omnidraft.assets import models
from omnidraft.runtime import formats, memory, wideprobe
from omnidraft.runtime.settings import Settings

# CPU flags (as /proc/cpuinfo names them) -> ggml feature name, for "used / refused"
_ISA = {"avx2": "avx2", "fma": "fma", "f16c": "f16c", "avx_vnni": "avx_vnni", "avx512f": "avx512",
        "avx512vbmi": "avx512_vbmi", "avx512_vnni": "avx512_vnni", "avx512_bf16": "avx512_bf16",
        "amx_int8": "amx_int8"}


def cpu_name() -> str:
    """The CPU as figures name the machine that gave them: model name, family/model and core, speed flags."""
    return cpuid.cpu_summary()


def build_section() -> tuple[list[str], list[str]]:
    """Lines about the llama.cpp build, and the problems found."""
    lines = [f"llama-cpp-python {llama_cpp.__version__} ({Path(llama_cpp.__file__).parent})"]
    sysinfo = llama_cpp.llama_print_system_info()
    lines.append("system info: " + (sysinfo.decode() if isinstance(sysinfo, bytes) else str(sysinfo)).strip())
    lines.append(f"GPU offload: {'yes' if llama_cpp.llama_supports_gpu_offload() else 'no (CPU build)'}")
    feats = llama_build.compiled_features()
    lines.append("compiled in: " + (", ".join(k for k, v in feats.items() if v and k != "llamafile") or "none"))
    flags = llama_build.cpu_flags()
    if flags:
        refused = [f for f, g in _ISA.items() if f in flags and not feats.get(g)]
        lines.append("CPU has but the build leaves alone: " + (", ".join(refused) or "nothing") +
                     ("  (AMX: off on purpose, see OMNIDRAFT_AMX in llama_build.py)" if "amx_int8" in refused else ""))
        over = [g for f, g in _ISA.items() if feats.get(g) and f not in flags]
        if over:
            lines.append("build uses what this CPU does not advertise: " + ", ".join(over))
            return lines, [f"build uses instructions this CPU lacks: {', '.join(over)}"]
    lines.append("llamafile kernels: " + ("ON (breaks exactness)" if feats.get("llamafile") else "off (needed)"))
    lines.append("small-batch Q4_0 kernel: " + _sbq4_line())
    lines.append("small-batch K-quant kernel: " + _sbk_line())
    lines.append("frequency-ranked drafter head: " + _frhead_line())
    lines.append("flash attention on the CPU: " + _flash_attn_line())
    lines.append("kernel sources: " + _sources_line())
    return lines, llama_build.problems()


def _sources_line() -> str:
    """Whether the build was made from the kernel sources this checkout holds (build.patch_id)."""
    built, here = llama_build.built_patch_id(), llama_build.patch_id()
    if built is None:
        return "not marked in this build (upstream sources, or built before the mark existed)"
    if built == here:
        return f"{built}, as in this checkout"
    return f"built from {built}, this checkout holds {here}: rerun setup (make setup) to build the kernels it holds"


_FLASH_ATTN_WHY = {  # engine.flash_attn_default's reasons, after "on" / "off"
    "hook": "(fa-hook.patch keeps a single row's attention on the batch's path: rows bit-identical to decoding; "
            "fa_rows.cpp reads the KV cache in blocks shared by a pass's heads and rows, so long contexts stay "
            "cheap to verify; GPU engines keep it off)",
    "hook-off": "for this process (OMNIDRAFT_SBQ4=0 turns the hook off with the kernels)",
    "no-hook": "(fa-hook.patch not in this build, rerun setup: upstream's flash attention splits one row's KV cache "
               "over threads from 512 cells up, and batched rows would differ from decoding)"}


def _flash_attn_line() -> str:
    """What a CPU engine runs with no flag (engine.flash_attn_default, as EngineConfig.use_flash_attn), and why."""
    on, why = flash_attn_default()
    if why == "forced":
        return f"{'on' if on else 'off'} (OMNIDRAFT_FLASH_ATTN={os.environ['OMNIDRAFT_FLASH_ATTN']} for this process)"
    return f"{'on' if on else 'off'} {_FLASH_ATTN_WHY[why]}"


def _frhead_line() -> str:
    if llama_build.has_frhead():
        return "yes (the served drafter drafts over its 16k most frequent tokens: a third cheaper pass)"
    return "no (frhead.patch not in this build): drafters use their full head"


_SBQ4_NAMES = {0: "compiled in but idle (no AVX2 in this build; on ARM, no dotprod)", 1: "AVX2", 2: "AVX-VNNI (256-bit)",
               3: "AVX-512 VNNI", 4: "NEON dotprod", 5: "NEON i8mm"}
# What ARM users get told: the aarch64 kernels exist and were checked under emulation, never timed.
_ARM_UNMEASURED = ("checked under qemu-aarch64 only (standalone: bit-identical rows, a float64 reference, CPU models "
                   "with and without the features; and inside a cross-built ggml's mul_mat, tests/test_arm_ggml.py); "
                   "never run on a phone, ARM speed is unmeasured here (BENCHMARKS.md has a projection)")


def _sbq4_line() -> str:
    variant = llama_build.sbq4_variant()
    if variant is None:
        return ("not in this build (upstream sources, or OMNIDRAFT_SBQ4=0 at setup); Q4_0 batches use "
                "ggml's kernels" if llama_build.is_x86() else "not in this build (upstream sources, or OMNIDRAFT_SBQ4=0 "
                "at setup; setup patches x86 and aarch64 Linux/Android builds); ggml's ARM kernels run. The "
                "aarch64 variants: " + _ARM_UNMEASURED)
    state = "on" if llama_build.sbq4_active() else "off for this process (OMNIDRAFT_SBQ4=0)"
    arm = f"; {_ARM_UNMEASURED}" if variant >= 4 else ""
    return (f"{_SBQ4_NAMES.get(variant, variant)}, {state}: fast-mode Q4_0 batches of 1-8 rows, bit-identical to "
            f"decoding{arm}")


def _sbk_line() -> str:
    variant = llama_build.sbk_variant()
    if variant is None:
        return ("not in this build; Q4_K_M / Q8_0 batches use ggml's kernels (2-3x a decode for 4 rows on AVX2)"
                if llama_build.is_x86() else "not in this build (upstream sources, or OMNIDRAFT_SBQ4=0 at setup); "
                "ggml's ARM kernels run. The aarch64 variant: " + _ARM_UNMEASURED)
    state = "on" if llama_build.sbk_active() else "off for this process (OMNIDRAFT_SBQ4=0)"
    arm = f"; {_ARM_UNMEASURED}" if variant >= 4 else ""
    x8 = ("; not fast-mode (repacked) Q4_K: sbkx8.cpp is x86-only, ggml's ARM kernels run it" if variant >= 4 else
          "; fast-mode (repacked) Q4_K and Q6_K too (sbkx8.cpp, sbq6x8.cpp)" if llama_build.has_sbq6x8() else
          "; fast-mode (repacked) Q4_K too (not Q6_K: this build predates sbq6x8.cpp, rerun setup)"
          if llama_build.has_sbkx8() else
          "; not fast-mode (repacked) Q4_K: this build predates sbkx8.cpp, rerun setup")
    q8k = ("; activations quantized with AVX2 (q8k.cpp, the reference's bytes)" if llama_build.has_q8k() else
           "; activations by ggml's scalar quantizer (this build predates q8k.cpp, rerun setup)"
           if variant < 4 else "")
    return (f"{_SBQ4_NAMES.get(variant, variant)}, {state}: exact-mode Q4_K / Q6_K / Q5_0 / Q8_0 batches of 1-8 "
            f"rows (Q4_K_M files as downloaded){x8}{q8k}, bit-identical to decoding{arm}")


def _cxx_runtime() -> str:
    """The C++ runtime this process mapped (a build compiled by a newer GCC than the one that made the
    system's libstdc++ can crash when the older one is loaded first)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "libstdc++" in line}
    except OSError:
        return "unknown"
    return ", ".join(sorted(libs)) or "not loaded"


def machine_section() -> list[str]:
    total, free = hostmem.total_bytes(), hostmem.available_bytes()
    mem = "unknown" if total is None else f"{total / 2**30:.1f} GiB" + (
        f", {free / 2**30:.1f} GiB available now" if free is not None else "")
    return [f"C++ runtime: {_cxx_runtime()}" + (f" (LD_PRELOAD={os.environ['LD_PRELOAD']})"
                                                if os.environ.get("LD_PRELOAD") else ""),
            f"CPU: {cpu_name()}, {os.cpu_count()} cores, {platform.machine()}",
            "mostly-Q5_0 targets (" + ", ".join(formats.MOSTLY_Q5_0) + "): " +
            ("their exact ':wide' copy (this CPU unpacks Q5_0 slowly: AVX2 without VNNI)"
             if formats.wide_pays(cpuid.cpu_identity()["flags"])
             else "the pinned file or its exact ':wide' copy, whichever decodes faster here (timed at first start)"),
            *(f"speed format on offer: {formats.speed_offer(name)}" for name in formats.SPEED_FORMATS),
            f"memory: {mem}",
            f"OS: {platform.platform()}; Python {platform.python_version()} ({sys.executable})"]


def cache_section() -> list[str]:
    root = models.cache_dir()
    lines = [f"cache: {root}" + ("" if root.exists() else " (not created yet)")]
    for s in models.REGISTRY.values():
        state = "verified" if models.is_verified(s) else "not downloaded"
        lines.append(f"  {s.name:22s} {state}")
    state = root / "state"
    if state.is_dir():
        n = sum(1 for _ in state.iterdir())
        lines.append(f"  state: {state} ({n} files: n-gram caches, predictors, probe results)")
        lines += [f"  timed here, pinned or wide: {line}" for line in wideprobe.describe(state)]
    return lines + _pair_memory()


def _pair_memory() -> list[str]:
    """What the default pair, and the 0.5B's, need at the default context (runtime.memory), for a phone's choice."""
    lines = []
    for target in dict.fromkeys((models.DEFAULT_TARGET, models.QWEN_05B)):
        s = Settings(target=target)
        need = memory.pair_bytes(s)
        if need is not None and models.resolve(target, fetch=False).is_file():
            lines.append(f"  memory: {target} with {s.draft} needs about {need / 1e6:,.0f} MB at {s.n_ctx} tokens "
                         f"of context")
    return lines


def run(probe_threads: int = 0, gpu_layers: int = 0) -> int:
    problems: list[str] = []
    print("== llama.cpp build")
    try:
        lines, found = build_section()
    except Exception as e:  # noqa: BLE001 - the doctor reports a broken install instead of dying of it
        lines, found = [f"llama_cpp does not load: {e}"], [f"llama_cpp does not load: {e}"]
    print("\n".join("  " + x for x in lines))
    problems += found
    print("== machine")
    print("\n".join("  " + x for x in machine_section()))
    print("== models")
    print("\n".join("  " + x for x in cache_section()))
    print("== probe (tiny model in a child process, both engine modes, batches of 1-8)")
    res = buildprobe.probe(probe_threads, n_gpu_layers=gpu_layers)
    print(f"  {res.line} [{res.seconds:.1f} s]")
    if res.figures:
        print("  figures: " + ", ".join(f"{k} {v:.3g}" for k, v in res.figures.items()))
    if not res.ok:
        problems.append(res.line)
    print("== verdict")
    if problems:
        for p in problems:
            print(f"  PROBLEM: {p}")
        print("  fix: `rm .venv/.omnidraft-setup && make setup` rebuilds llama-cpp-python with the flags "
              "llama_build.py names and falls back to safer instruction sets if the probe fails")
        return 1
    print("  OK: this installation works on this machine")
    return 0
