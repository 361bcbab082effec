"""sbk.cpp's aarch64 variants (NEON dotprod, and NEON i8mm chosen at run time from the hwcaps), proven
without a phone: cross-compiled with Debian's aarch64 toolchain and run under qemu-aarch64 (user mode)
through tests/sbk_driver.cpp, since an aarch64 library cannot be loaded into this x86 Python.

Same checks as the x86 tiers (tests/test_sbk.py), from the same generators and float64 reference
(tests/sbk_harness.py), for both variants: every batch of 1..8 rows bit-identical to each row alone (the
batches over weight-row ranges split at an odd row, so i8mm's row pairs differ from the one-row calls'),
within 1e-5 of the reference, a drifted row caught.  The variants agree to float rounding (not bit for bit:
i8mm sums each block's integers whole, dotprod in 4 lanes added in float at the end), and each gives the
same bits in every build (GCC and clang, which Termux builds with; dotprod and i8mm targets).  Selection:
i8mm on qemu's ``max``, dotprod on Cortex-A76 and Neoverse-N1 (no i8mm), in every build that carries the
variant; each variant forced onto a model without its feature dies of SIGILL (the models really lack the
instructions), and a CPU without dotprod is refused; a plain ARMv8.0 build reports variant 0 and takes
nothing, leaving products to ggml.

Needs aarch64-linux-gnu-g++, clang++ and qemu-aarch64 (``bash android_demo/ci_setup.sh`` installs them);
skips without them, fails under CI.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests import sbk_harness as H

CI = bool(os.environ.get("CI"))
MAX_ROWS = 8
CXX, CLANG, QEMU = "aarch64-linux-gnu-g++", "clang++", "qemu-aarch64"
DRIVER = Path(__file__).with_name("sbk_driver.cpp")
DOTPROD, I8MM = 4, 5  # sbk.h's SBK_NEON_DOTPROD, SBK_NEON_I8MM
# build -> (compiler, -march, the best variant it carries).  The dotprod target is what setup and Termux
# build; GCC adds i8mm through function attributes, clang only where its flags enable it.
MARCH = {"armv8.0": "-march=armv8-a", "dotprod": "-march=armv8.2-a+dotprod", "i8mm": "-march=armv8.2-a+dotprod+i8mm"}
BUILDS = {"gcc dotprod": (CXX, MARCH["dotprod"], I8MM), "gcc i8mm": (CXX, MARCH["i8mm"], I8MM),
          "clang dotprod": (CLANG, MARCH["dotprod"], DOTPROD), "clang i8mm": (CLANG, MARCH["i8mm"], I8MM),
          "gcc armv8.0": (CXX, MARCH["armv8.0"], 0)}
BASE = "gcc dotprod"
# qemu 7.2's CPU models -> (hwcap dotprod, hwcap2 i8mm): max has every feature qemu knows; Cortex-A76 and
# Neoverse-N1 are phone- and server-class cores with dotprod and no i8mm; Cortex-A72 is ARMv8.0.
CPUS = {"max": (1, 1), "cortex-a76": (1, 0), "neoverse-n1": (1, 0), "cortex-a72": (0, 0)}
NO_DOTPROD_CPU = "cortex-a72"
SPLIT = 5  # batches over weight rows [0, 5) and [5, 37): odd ranges, other row pairs than the one-row calls'


def expected_variant(build: str, cpu: str) -> int:
    """What a build must choose on a CPU: i8mm where both have it, else dotprod (the build needs it anyway)."""
    best, (_, i8mm) = BUILDS[build][2], CPUS[cpu]
    return I8MM if best == I8MM and i8mm else min(best, DOTPROD)


def parallel_map(fn, items) -> list:
    """``[fn(x) for x in items]``, run on as many threads as this machine has cores (for compiler processes)."""
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return list(pool.map(fn, items))


def require_tools(*tools: str) -> None:
    """Skip where the cross toolchain or qemu is missing; fail in CI, which must run the emulated kernels."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        why = (f"{' and '.join(missing)} not on PATH: `bash android_demo/ci_setup.sh` installs them "
               "(Debian's g++-aarch64-linux-gnu, clang and qemu-user)")
        if CI:
            pytest.fail(f"CI runs the aarch64 kernels under qemu: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def drivers(tmp_path_factory) -> dict[str, Path]:
    """The driver built with sbk.cpp for each entry of BUILDS, static (qemu needs no aarch64 sysroot)."""
    require_tools(CXX, CLANG, QEMU)
    out = tmp_path_factory.mktemp("sbk_arm")

    def build(name: str):
        cxx, march, _ = BUILDS[name]
        exe = out / f"sbk_driver_{name.replace(' ', '_')}"
        target = ["--target=aarch64-linux-gnu"] if cxx == CLANG else []
        return exe, subprocess.run([cxx, *target, "-O2", "-std=c++17", march, "-static", "-DSBK_STANDALONE",
                                    str(DRIVER), str(H.PATCH / "sbk.cpp"), "-o", str(exe)], capture_output=True, text=True)

    built = {}
    for name, (exe, proc) in zip(BUILDS, parallel_map(build, BUILDS)):  # the builds side by side, one per core
        assert proc.returncode == 0, f"cross build {name} failed:\n{proc.stderr}"
        built[name] = exe
    return built


@dataclass
class Run:
    variant: int
    dotprod: int            # the CPU's hwcap as the driver read it
    ok: bool                # every sbk_gemm call took the case
    one: np.ndarray         # (n, rows): each activation row alone
    batches: list           # batches[m-1]: (m, rows), the first m rows in one call


def _qemu(exe: Path, cpu: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([QEMU, "-cpu", cpu, str(exe), *args], input=stdin, capture_output=True, timeout=300)


def _case(wtype: int, k: int, w: np.ndarray, act: np.ndarray) -> bytes:
    """The driver's input (see tests/sbk_driver.cpp)."""
    head = b"SBKD" + struct.pack("<iiiqQQ", wtype, w.shape[0], act.shape[0], k, w.shape[1], act.shape[1])
    return head + np.ascontiguousarray(w).tobytes() + np.ascontiguousarray(act).tobytes()


def run(exe: Path, cpu: str, wtype: int, k: int, w: np.ndarray, act: np.ndarray, variant: int | None = None,
        split: int = 0) -> Run:
    args = (*(("--variant", str(variant)) if variant is not None else ()), *(("--split", str(split)) if split else ()))
    proc = _qemu(exe, cpu, *args, stdin=_case(wtype, k, w, act))
    assert proc.returncode == 0, f"driver on {cpu}: rc {proc.returncode}: {proc.stderr.decode()}"
    rows, n = w.shape[0], act.shape[0]
    variant, dotprod, ok = np.frombuffer(proc.stdout[:12], "<i4")
    out = np.frombuffer(proc.stdout[12:], "<f4")
    assert out.size == n * rows + n * (n + 1) // 2 * rows, "driver output has the wrong length"
    one, at, batches = out[:n * rows].reshape(n, rows), n * rows, []
    for m in range(1, n + 1):
        batches.append(out[at:at + m * rows].reshape(m, rows))
        at += m * rows
    return Run(int(variant), int(dotprod), bool(ok), one, batches)


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def assert_rows_identical(one: np.ndarray, batches: list, label: str) -> None:
    """Every row of every batch bit-identical to that row computed alone; names the first that is not."""
    for m, batch in enumerate(batches, start=1):
        for j in range(m):
            assert np.array_equal(batch[j], one[j]), f"{label}: row {j} of a batch of {m} differs from row {j} alone"


def _random_case(fmt: str, seed: int):
    wtype, block, make_w, make_a, deq_w, deq_a = H.FORMATS[fmt]
    rng = np.random.default_rng(seed)
    k = block * (6 if block == 256 else 40)  # Q5_0/Q8_0: 1,280 values, not a multiple of 256
    w, act = make_w(rng, 37, k // block), make_a(rng, MAX_ROWS, k // block)
    return wtype, k, w, act, deq_a(act) @ deq_w(w).T


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_selection_follows_the_cpus_hwcaps(drivers, cpu):
    """The variant each qemu CPU model gets in each build: i8mm where the hwcaps (read at run time) and the
    build have it, dotprod otherwise (a CPU without dotprod too: the build needs it; the driver refuses)."""
    dotprod, i8mm = CPUS[cpu]
    for name, exe in drivers.items():
        info = _qemu(exe, cpu, "--info").stdout.decode().split()
        want = expected_variant(name, cpu)
        assert info == [f"variant={want}", f"dotprod={dotprod}", f"i8mm={i8mm}"], f"{name} build on {cpu}"


@pytest.mark.parametrize("cpu", ("max", "cortex-a76"))
@pytest.mark.parametrize("fmt", sorted(H.FORMATS))
def test_rows_bit_identical_and_match_reference(drivers, fmt, cpu):
    """i8mm on max, dotprod on Cortex-A76, as setup's build picks them; batches split at an odd weight row."""
    wtype, k, w, act, ref = _random_case(fmt, seed=11)
    r = run(drivers[BASE], cpu, wtype, k, w, act, split=SPLIT)
    label = f"{fmt} on {cpu} (variant {r.variant})"
    assert (r.variant, r.dotprod, r.ok) == (expected_variant(BASE, cpu), 1, True), label
    err = relative_error(r.one, ref)
    assert err < 1e-5, f"{label}: {err:.2e} of the largest output from the float64 reference"
    assert_rows_identical(r.one, r.batches, label)


@pytest.mark.parametrize("fmt", sorted(H.FORMATS))
def test_variants_agree_and_builds_give_the_same_bits(drivers, fmt):
    """On max (which runs both): each variant gives one result, bit for bit, in every build that carries it
    (two compilers, two targets: the float operations are explicit intrinsics, nothing for the compiler to
    fuse), and the two variants agree to float rounding: the same exact integers per block and output,
    summed in float differently (dotprod keeps 4 lanes to the end; i8mm adds Q4_K's mins in integers)."""
    wtype, k, w, act, ref = _random_case(fmt, seed=5)
    base = {v: run(drivers[BASE], "max", wtype, k, w, act, variant=v) for v in (DOTPROD, I8MM)}
    for name, exe in drivers.items():
        for variant in (v for v in (DOTPROD, I8MM) if v <= BUILDS[name][2]):
            r = run(exe, "max", wtype, k, w, act, variant=variant, split=SPLIT)
            label = f"{fmt}, {name} build, variant {variant}"
            assert r.ok and np.array_equal(r.one, base[variant].one), f"{label} differs from the {BASE} build's"
            assert_rows_identical(r.one, r.batches, label)
    err = relative_error(base[I8MM].one, base[DOTPROD].one)
    assert 0 < err < 1e-6, f"{fmt}: i8mm and dotprod {err:.2e} apart (relative to the largest output)"
    assert relative_error(base[I8MM].one, ref) < 1e-5 and relative_error(base[DOTPROD].one, ref) < 1e-5


@pytest.mark.parametrize("cpu", ("max", "cortex-a76"))
def test_a_drifted_row_is_caught(drivers, cpu):
    """The checks above can fail: one activation byte changed in row 5 changes that row only (on max, i8mm
    pairs it with row 4, whose outputs stay put), and a batch holding the drifted row fails the bit-identity
    check against the undrifted rows, naming row 5."""
    wtype, k, w, act, _ = _random_case("q4_K", seed=2)
    before = run(drivers[BASE], cpu, wtype, k, w, act)
    act[5, 100] ^= 0x01
    after = run(drivers[BASE], cpu, wtype, k, w, act)
    assert not np.array_equal(before.batches[-1][5], after.batches[-1][5])
    assert np.array_equal(np.delete(before.batches[-1], 5, 0), np.delete(after.batches[-1], 5, 0))
    with pytest.raises(AssertionError, match="row 5 of a batch of 6"):
        assert_rows_identical(before.one, after.batches, "drifted")


def test_each_variant_needs_its_feature_and_a_cpu_without_dotprod_is_refused(drivers):
    """Forced onto a CPU model without its feature, a variant dies of SIGILL: what the selection avoids (i8mm
    on Cortex-A76) and what the refusal avoids (dotprod on Cortex-A72, which the driver refuses unforced)."""
    wtype, k, w, act, _ = _random_case("q8_0", seed=3)
    exe = drivers[BASE]
    for variant, cpu in ((I8MM, "cortex-a76"), (DOTPROD, NO_DOTPROD_CPU)):
        forced = _qemu(exe, cpu, "--variant", str(variant), stdin=_case(wtype, k, w, act))
        assert forced.returncode == -signal.SIGILL, f"variant {variant} on {cpu}: rc {forced.returncode}"
    refused = _qemu(exe, NO_DOTPROD_CPU, stdin=_case(wtype, k, w, act))
    assert refused.returncode == 3 and b"needs a CPU with dotprod" in refused.stderr


@pytest.mark.parametrize("cpu", (NO_DOTPROD_CPU, "max"))
def test_an_armv8_0_build_has_no_variant_and_takes_nothing(drivers, cpu):
    """Without dotprod at compile time ggml's own kernels run: variant 0, every call refused.  Likewise a
    variant a build does not carry (i8mm in a clang build without it in its flags), asked for by name."""
    wtype, k, w, act, _ = _random_case("q4_K", seed=4)
    r = run(drivers["gcc armv8.0"], cpu, wtype, k, w, act)
    assert (r.variant, r.ok) == (0, False)
    assert np.isnan(r.one).all()
    if cpu == "max":
        r = run(drivers["clang dotprod"], cpu, wtype, k, w, act, variant=I8MM)
        assert not r.ok and np.isnan(r.one).all()
