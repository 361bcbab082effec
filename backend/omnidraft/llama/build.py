"""Which llama.cpp build omnidraft needs, and the CMake flags that make one on this CPU.

Two rules, both checked here:

* No llamafile kernels (``GGML_LLAMAFILE=OFF``): tinyBLAS takes over matrix products from 2 rows up and rounds
  differently from one-row decoding, so speculative output would differ from the target alone at near-ties.
* A portable x86 build: ``-march=native`` compiles ggml's AMX kernels on Xeons that advertise AMX, and those trap
  with SIGILL where the OS or hypervisor has not granted the tile state to every worker thread (Linux XFD;
  llama.cpp PR #26954, issues #28328/#28756).  So the build names its instruction sets one by one
  (``GGML_NATIVE=OFF``) from what this CPU advertises, AMX off unless asked for (``OMNIDRAFT_AMX=1``; setup's
  probe must then pass).  If even that build fails the probe (an ISA the CPU advertises but the OS does not
  enable), setup rebuilds at the ``safe`` tier (x86-64-v3: AVX2/FMA/F16C) and then ``baseline`` (SSE4.2).

The build also carries omnidraft's small-batch kernels (``patch/``, each called from a small hook; listed in
docs/ARCHITECTURE.md): products of 1..8 rows in one pass over the weights, each row bit-identical to one-row
decoding, on x86 and on aarch64 Linux/Android (Termux; checked under qemu, tests/test_arm_ggml.py).  ``source``
prepares the patched sources, which setup builds first, and the upstream ones if the build probe fails.
``OMNIDRAFT_SBQ4=0`` turns them off: at setup it builds the upstream sources, at run time it sends products back
to ggml's own kernels.

Run as a plain script by scripts/setup/setup.sh and android_demo/termux/setup.sh, before omnidraft itself is
installed, so: standard library (plus llama_cpp for ``check``) only.

    python llama_build.py check            exit 0 if the installed build is right (made from the kernel
                                           sources in patch/ as they are now), 1 if not
    python llama_build.py cmake-args TIER  print CMAKE_ARGS for TIER = native | safe | baseline
    python llama_build.py wants-kernel     exit 0 if setup should build the small-batch kernel here
    python llama_build.py source DIR       download the pinned sdist into DIR, apply the kernel patch,
                                           print the source tree's path (x86 and aarch64 hooks both in)
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import platform
import subprocess
import sys
import tarfile

try:  # imported from the package, or run as setup's plain script (then buildsrc is found beside this file)
    from .buildsrc import (GGML_CPU, HOOKS, KERNEL_FILES, PATCH_DIR, PATCH_ID_SYMBOL, SDIST_SHA256, VERSION,
                           extract, patch_id, patch_tree, prepare_source)
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from buildsrc import (GGML_CPU, HOOKS, KERNEL_FILES, PATCH_DIR, PATCH_ID_SYMBOL, SDIST_SHA256,  # noqa: F401
                          VERSION, extract, patch_id, patch_tree, prepare_source)

TIERS = ("native", "safe", "baseline")
COMMON = ["-DLLAVA_BUILD=OFF", "-DGGML_LLAMAFILE=OFF"]
FRHEAD_MARK = b"omnidraft.head_rows"  # the GGUF key frhead.patch reads: in libllama's strings only when patched
# ggml option -> the /proc/cpuinfo flags it needs (all of them)
_X86_OPTIONS = {
    "GGML_SSE42": ("sse4_2",), "GGML_AVX": ("avx",), "GGML_AVX2": ("avx2",), "GGML_BMI2": ("bmi2",),
    "GGML_FMA": ("fma",), "GGML_F16C": ("f16c",), "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512f", "avx512vbmi"), "GGML_AVX512_VNNI": ("avx512f", "avx512_vnni"),
    "GGML_AVX512_BF16": ("avx512f", "avx512_bf16"),
    "GGML_AMX_TILE": ("amx_tile",), "GGML_AMX_INT8": ("amx_tile", "amx_int8"),
    "GGML_AMX_BF16": ("amx_tile", "amx_bf16"),
}
_SAFE = ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_FMA", "GGML_F16C")  # x86-64-v3
_BASELINE = ("GGML_SSE42",)


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (empty where there is no /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def amx_wanted() -> bool:
    return os.environ.get("OMNIDRAFT_AMX", "") == "1"


def x86_options(tier: str, flags: set[str] | None = None) -> dict[str, bool]:
    """ggml ISA options for a tier: ``native`` = everything this CPU advertises (AMX only on request)."""
    if tier not in TIERS:
        raise ValueError(f"unknown build tier {tier!r}; choose from {', '.join(TIERS)}")
    flags = cpu_flags() if flags is None else flags
    allowed = {"native": tuple(_X86_OPTIONS), "safe": _SAFE, "baseline": _BASELINE}[tier]
    opts = {}
    for opt, needs in _X86_OPTIONS.items():
        on = opt in allowed and all(n in flags for n in needs)
        if opt.startswith("GGML_AMX") and not amx_wanted():
            on = False
        opts[opt] = on
    return opts


# aarch64 tiers.  native: on the device (Termux), ggml probes dotprod, i8mm, SVE and SME with the compiler.
# safe: ARMv8.2 with dotprod (every phone core since Cortex-A55/A76), what tests/test_arm_ggml.py checks.
# baseline: ARMv8.0, no dotprod: sbk.cpp takes nothing and ggml keeps Q4_0 unrepacked (sbq4 idle).
ARM_SAFE_ARCH = "armv8.2-a+dotprod"


def is_aarch64() -> bool:
    return platform.machine().lower() in ("aarch64", "arm64")


def arm_cmake_args(tier: str = "native") -> list[str]:
    """CMAKE_ARGS for an aarch64 build at ``tier`` (also for cross builds: run on any machine)."""
    if tier == "native":
        return COMMON + ["-DGGML_NATIVE=ON"]
    if tier == "safe":
        return COMMON + ["-DGGML_NATIVE=OFF", f"-DGGML_CPU_ARM_ARCH={ARM_SAFE_ARCH}"]
    return COMMON + ["-DGGML_NATIVE=OFF"]


def cmake_args(tier: str = "native", flags: set[str] | None = None) -> list[str]:
    """CMAKE_ARGS for llama-cpp-python's source build at ``tier`` on this machine."""
    if not is_x86():
        # ARM (phones, Apple, Graviton): ggml's native detection probes each feature with the
        # compiler and has no AMX-like trap; the lower tiers turn the optional extensions off.
        return arm_cmake_args(tier)
    opts = x86_options(tier, flags)
    return COMMON + ["-DGGML_NATIVE=OFF"] + [f"-D{k}={'ON' if v else 'OFF'}" for k, v in opts.items()]


# ------------------------------------------------------------- the installed build
def _lib_paths(stem: str) -> list[str]:
    """The installed llama-cpp-python's copies of ``stem`` (``libggml-cpu.so``, ``libllama.so``), sorted."""
    # lazy: setup runs this file as a plain script (cmake-args, source) before llama-cpp-python is installed,
    # and again to rebuild over a build that fails the probe: only the commands that read the build load it
    import llama_cpp

    return sorted(glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", stem + "*")))


def _cpu_lib():
    libs = _lib_paths("libggml-cpu.so")
    return ctypes.CDLL(libs[0]) if libs else None


@functools.lru_cache(maxsize=None)
def _build_stamp(path: str | None) -> str:
    if path is None:
        return "no-cpu-lib"
    st = os.stat(os.path.realpath(path))
    return f"{st.st_size}:{st.st_mtime_ns}"


def build_id() -> str:
    """The installed llama.cpp build as measurement caches key it: the version, the CPU library's size and
    time (a rebuild with new kernels changes what a mode computes and how fast), and OMNIDRAFT_SBQ4.
    The library is stat'ed once per process: a rebuild replaces it under a new process (setup, check)."""
    import llama_cpp  # lazy: as in _lib_paths (setup runs this file before llama-cpp-python is installed)

    libs = _lib_paths("libggml-cpu.so")
    return f"{llama_cpp.__version__}:{_build_stamp(libs[0] if libs else None)}:sbq4-{'off' if _sbq4_off() else 'on'}"


def has_frhead() -> bool:
    """Whether the installed libllama loads drafters with a frequency-ranked head (``frhead.patch``)."""
    try:
        import llama_cpp  # lazy: guarded, as in _lib_paths
    except Exception:  # noqa: BLE001 - no llama.cpp: no patch
        return False
    for lib in _lib_paths("libllama.so"):
        with open(lib, "rb") as f:
            if FRHEAD_MARK in f.read():
                return True
    return False


def has_llamafile() -> bool | None:
    """Whether the installed ggml CPU backend has llamafile kernels; None if its library is not found."""
    lib = _cpu_lib()
    return bool(lib.ggml_cpu_has_llamafile()) if lib is not None else None


def compiled_features() -> dict[str, bool]:
    """The CPU features the installed ggml was compiled to use (``ggml_cpu_has_*``)."""
    lib = _cpu_lib()
    out: dict[str, bool] = {}
    if lib is None:
        return out
    for name in ("sse3", "ssse3", "avx", "avx2", "avx_vnni", "bmi2", "f16c", "fma", "avx512", "avx512_vbmi",
                 "avx512_vnni", "avx512_bf16", "amx_int8", "neon", "arm_fma", "fp16_va", "dotprod",
                 "matmul_int8", "sve", "sme", "llamafile"):
        fn = getattr(lib, f"ggml_cpu_has_{name}", None)
        if fn is not None:
            out[name] = bool(fn())
    return out


def problems() -> list[str]:
    """Why the installed build is not the one omnidraft needs (empty list: it is)."""
    try:
        import llama_cpp  # lazy: guarded, as in _lib_paths
    except Exception as e:  # noqa: BLE001 - a broken install is reported, not raised
        return [f"llama_cpp does not import: {e}"]
    out = []
    if llama_cpp.__version__ != VERSION:
        out.append(f"llama-cpp-python {llama_cpp.__version__} installed, {VERSION} needed")
    if has_llamafile() is not False:
        out.append("built with llamafile kernels (GGML_LLAMAFILE=ON): exactness would break")
    if compiled_features().get("amx_int8") and not amx_wanted():
        out.append("built with AMX kernels, which trap on machines that do not grant AMX tiles to threads")
    return out


def sbq4_variant() -> int | None:
    """The small-batch kernel the installed build carries: 0 none, 1 AVX2, 2 AVX-VNNI, 3 AVX-512 VNNI, 4 NEON
    dotprod, 5 NEON i8mm (aarch64: chosen at run time from the CPU's hwcaps); None for a build without the patch."""
    return _call("ggml_cpu_sbq4_variant")


def sbk_variant() -> int | None:
    """The small-batch Q4_K/Q6_K/Q8_0 kernel that runs in the installed build (same numbering as
    ``sbq4_variant``: on aarch64, 5 where the CPU has i8mm, else 4); None for a build without it."""
    return _call("ggml_cpu_sbk_variant")


def _symbol(name: str):
    """The installed libggml-cpu's function ``name``; None where the build does not export it."""
    lib = _cpu_lib()
    return getattr(lib, name, None) if lib is not None else None


def _exports(symbol: str) -> bool:
    """Whether the installed libggml-cpu exports ``symbol`` (how a patched build is told from an older one)."""
    return _symbol(symbol) is not None


def _call(symbol: str, restype=ctypes.c_int):
    """``symbol()`` of the installed libggml-cpu; None where the build does not export it."""
    fn = _symbol(symbol)
    if fn is None:
        return None
    fn.restype = restype
    return fn()


def built_patch_id() -> str | None:
    """The patch_id() the installed build was made from; None for a build without it (upstream, or older)."""
    v = _call(PATCH_ID_SYMBOL, ctypes.c_char_p)
    return v.decode() if v is not None else None


def has_sbkx8() -> bool:
    """Whether the build carries sbkx8.cpp: the fast mode's repacked Q4_K (Q4_K_M files), rows bit-identical."""
    return _exports("sbk_q4kx8_gemm")


def has_sbq6x8() -> bool:
    """Whether the build carries sbq6x8.cpp: the fast mode repacks Q6_K (a third of a Q4_K_M file) for it."""
    return _exports("sbk_q6kx8_gemm")


def has_q8k() -> bool:
    """Whether the build carries q8k.cpp: x86 Q8_K activations quantized with AVX2 (the scalar reference's bytes)."""
    return _exports("sbk_quantize_q8_K")


def has_fa_invariant() -> bool:
    """Whether the build carries fa-hook.patch: flash attention's rows bit-identical to decoding on the CPU."""
    return _exports("ggml_sbk_fa_rows_invariant")


def has_fa_rows() -> bool:
    """Whether the build carries fa_rows.cpp: a pass of a few rows takes its attention in blocks of the KV cache
    shared by the heads that read them, sums vectorized (ggml's one_chunk: one head and row, one cell at a time)."""
    return _exports("ggml_sbk_fa_rows")


def fa_invariant_active() -> bool:
    """The same, taking ``OMNIDRAFT_SBQ4=0`` (the hook's run-time off) into account."""
    return not _sbq4_off() and has_fa_invariant()


def sbk_active() -> int:
    """The variant plain Q4_K/Q6_K/Q8_0 products (the exact mode's) run through now (0: ggml's own)."""
    return 0 if _sbq4_off() else sbk_variant() or 0


def _sbq4_off() -> bool:
    """``OMNIDRAFT_SBQ4=0``: the same test sbq4.cpp makes at every product."""
    return os.environ.get("OMNIDRAFT_SBQ4", "") == "0"


def sbq4_wanted() -> bool:
    """Whether setup should build the small-batch kernels here: x86, or aarch64 Linux/Android (Termux:
    the aarch64 variants pick themselves from the Linux hwcaps), and not turned off."""
    arm = is_aarch64() and sys.platform.startswith(("linux", "android"))
    return (is_x86() or arm) and not _sbq4_off()


def sbq4_active() -> int:
    """The variant the fast mode's Q4_0 products run through now (0: ggml's own kernels), taking
    ``OMNIDRAFT_SBQ4=0`` (run-time off) into account."""
    return 0 if _sbq4_off() else sbq4_variant() or 0


def kernel_problems() -> list[str]:
    """Why the installed build is not the patched one setup makes here (empty: it is, from these sources)."""
    if not sbq4_wanted():
        return []
    if sbq4_variant() is None or sbk_variant() is None or not has_sbkx8() or not has_sbq6x8() or \
            (is_x86() and not has_q8k()) or not has_fa_invariant():
        return ["built without omnidraft's small-batch kernels (or without the repacked Q4_K / Q6_K ones, "
                "the AVX2 Q8_K quantizer or the flash-attention hook)"]
    if not has_frhead():
        return ["built without omnidraft's frequency-ranked drafter head (frhead.patch)"]
    built, here = built_patch_id(), patch_id()
    if built != here:
        return [f"built from other kernel sources ({built or 'unmarked'}) than backend/omnidraft/llama/patch/ "
                f"holds now ({here})"]
    return []


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "check"
    if cmd == "check":  # setup's question: is a (re)build needed?
        why = problems() or kernel_problems()
        for line in why:
            print(f"llama.cpp build: {line}", file=sys.stderr)
        return 0 if not why else 1
    if cmd == "cmake-args":
        print(" ".join(cmake_args(argv[1] if len(argv) > 1 else "native")))
        return 0
    if cmd == "wants-kernel":
        return 0 if sbq4_wanted() else 1
    if cmd == "source" and len(argv) == 2:
        try:
            print(prepare_source(argv[1]))
        except (OSError, subprocess.CalledProcessError, tarfile.TarError) as e:
            print(f"llama_build source: could not prepare the patched sources: {e}", file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
