"""sbk.cpp's aarch64 variant (NEON dotprod), proven without a phone: cross-compiled with Debian's
aarch64 toolchain and run under qemu-aarch64 (user mode) through tests/sbk_driver.cpp, since an aarch64
library cannot be loaded into this x86 Python.

Same checks as the x86 tiers (tests/test_sbk.py), from the same generators and float64 reference
(tests/sbk_harness.py): every batch of 1..8 rows bit-identical to each row alone, within 1e-5 of the
reference, a drifted row caught.  And the selection: a dotprod build reports variant 4 and refuses a CPU
model without dotprod (which, forced, dies of SIGILL: qemu's model really lacks the instruction); a plain
ARMv8.0 build reports variant 0 and takes nothing, leaving products to ggml.

Needs aarch64-linux-gnu-g++ and qemu-aarch64 (``bash android_demo/ci_setup.sh`` installs them); skips
without them, fails under CI.
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
CXX, QEMU = "aarch64-linux-gnu-g++", "qemu-aarch64"
DRIVER = Path(__file__).with_name("sbk_driver.cpp")
# build -> (its -march, the variant it must report)
BUILDS = {"dotprod": ("-march=armv8.2-a+dotprod", 4), "armv8.0": ("-march=armv8-a", 0)}
# qemu's CPU models: with dotprod (max has every feature qemu knows, i8mm included; cortex-a76 is a
# phone-class core with dotprod and no i8mm), and without (cortex-a72: ARMv8.0).
DOTPROD_CPUS = ("max", "cortex-a76")
NO_DOTPROD_CPU = "cortex-a72"


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
    require_tools(CXX, QEMU)
    out = tmp_path_factory.mktemp("sbk_arm")

    def build(name: str):
        exe = out / f"sbk_driver_{name}"
        return exe, subprocess.run([CXX, "-O2", "-std=c++17", BUILDS[name][0], "-static", "-DSBK_STANDALONE",
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


def run(exe: Path, cpu: str, wtype: int, k: int, w: np.ndarray, act: np.ndarray) -> Run:
    proc = _qemu(exe, cpu, stdin=_case(wtype, k, w, act))
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


@pytest.mark.parametrize("cpu", DOTPROD_CPUS)
@pytest.mark.parametrize("fmt", sorted(H.FORMATS))
def test_dotprod_rows_bit_identical_and_match_reference(drivers, fmt, cpu):
    wtype, k, w, act, ref = _random_case(fmt, seed=11)
    r = run(drivers["dotprod"], cpu, wtype, k, w, act)
    assert (r.variant, r.dotprod, r.ok) == (4, 1, True)
    err = float(np.abs(r.one - ref).max() / np.abs(ref).max())
    assert err < 1e-5, f"{fmt} on {cpu}: {err:.2e} of the largest output from the float64 reference"
    assert_rows_identical(r.one, r.batches, f"{fmt} on {cpu}")


def test_a_drifted_row_is_caught(drivers):
    """The checks above can fail: one activation byte changed in row 5 changes that row only, and a batch
    holding the drifted row fails the bit-identity check against the undrifted rows, naming row 5."""
    wtype, k, w, act, _ = _random_case("q4_K", seed=2)
    before = run(drivers["dotprod"], "max", wtype, k, w, act)
    act[5, 100] ^= 0x01
    after = run(drivers["dotprod"], "max", wtype, k, w, act)
    assert not np.array_equal(before.batches[-1][5], after.batches[-1][5])
    assert np.array_equal(np.delete(before.batches[-1], 5, 0), np.delete(after.batches[-1], 5, 0))
    with pytest.raises(AssertionError, match="row 5 of a batch of 6"):
        assert_rows_identical(before.one, after.batches, "drifted")


def test_a_cpu_without_dotprod_is_refused_and_really_lacks_it(drivers):
    exe = drivers["dotprod"]
    assert _qemu(exe, NO_DOTPROD_CPU, "--info").stdout.decode().split() == ["variant=4", "dotprod=0"]
    wtype, k, w, act, _ = _random_case("q8_0", seed=3)
    refused = _qemu(exe, NO_DOTPROD_CPU, stdin=_case(wtype, k, w, act))
    assert refused.returncode == 3 and b"needs a CPU with dotprod" in refused.stderr
    forced = _qemu(exe, NO_DOTPROD_CPU, "--force", stdin=_case(wtype, k, w, act))
    assert forced.returncode == -signal.SIGILL, f"forced run on {NO_DOTPROD_CPU}: rc {forced.returncode}"


@pytest.mark.parametrize("cpu", (NO_DOTPROD_CPU, "max"))
def test_an_armv8_0_build_has_no_variant_and_takes_nothing(drivers, cpu):
    """Without dotprod at compile time ggml's own kernels run: variant 0, every call refused."""
    wtype, k, w, act, _ = _random_case("q4_K", seed=4)
    r = run(drivers["armv8.0"], cpu, wtype, k, w, act)
    assert (r.variant, r.ok) == (0, False)
    assert np.isnan(r.one).all()
