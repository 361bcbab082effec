"""sbq4.cpp's aarch64 variants (NEON dotprod and NEON i8mm, for ggml's two ARM layouts of repacked Q4_0),
proven without a phone: cross-compiled with Debian's aarch64 toolchain and run under qemu-aarch64 (user
mode) through tests/sbq4_driver.cpp, since an aarch64 library cannot be loaded into this x86 Python.

On random weights and activations, n = 1..8: the activations quantized to the bytes ggml's
quantize_row_q8_0 makes (a numpy mirror), every batch bit-identical to each row alone, within 1e-5 of a
float64 reference, a drifted row caught.  The two variants, the two layouts, two compilers (GCC, and
clang, which Termux builds with) and three compile targets give the same bits.  Selection: the variant each of qemu's CPU models gets from its hwcaps (i8mm on
``max``, dotprod on Cortex-A76 and Neoverse-N1, none on Cortex-A72 and A53, which leave products to
ggml), and each variant forced onto a model without its feature dies of SIGILL, so the models really
lack the instructions the selection avoids.  The same driver built natively runs the x86 variant on
x86's layout, which checks the harness against the kernel production runs.

Needs aarch64-linux-gnu-g++, clang++ and qemu-aarch64 (``bash android_demo/ci_setup.sh`` installs them);
skips without them, fails under CI.
"""

from __future__ import annotations

import shutil
import signal
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests import sbk_harness
from tests.test_sbk_arm import assert_rows_identical, parallel_map, require_tools

MAX_ROWS = 8
CXX, CLANG, QEMU = "aarch64-linux-gnu-g++", "clang++", "qemu-aarch64"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "backend" / "omnidraft" / "llama" / "patch" / "sbq4.cpp"
DRIVER = Path(__file__).with_name("sbq4_driver.cpp")

LAYOUTS = {"8x8": 1, "4x4": 2, "4x8": 3}  # sbq4.h's SBQ4_8X8 / 4X4 / 4X8: (rows per group, bytes per interleave)
DOTPROD, I8MM = 4, 5                      # SBQ4_NEON_DOTPROD, SBQ4_NEON_I8MM
# Builds: name -> (compiler, -march, the best variant it carries).  GCC at ARMv8.0 carries both variants
# through function attributes (what a portable build would ship); at the flags of ggml's dotprod and i8mm
# builds the features are on for the whole file.  clang (Termux's compiler) builds what its flags enable.
MARCH = {"armv8.0": "-march=armv8-a", "dotprod": "-march=armv8.2-a+dotprod", "i8mm": "-march=armv8.2-a+dotprod+i8mm"}
BUILDS = {"gcc armv8.0": (CXX, MARCH["armv8.0"], I8MM), "gcc dotprod": (CXX, MARCH["dotprod"], I8MM),
          "gcc i8mm": (CXX, MARCH["i8mm"], I8MM), "clang armv8.0": (CLANG, MARCH["armv8.0"], 0),
          "clang dotprod": (CLANG, MARCH["dotprod"], DOTPROD), "clang i8mm": (CLANG, MARCH["i8mm"], I8MM)}
BASE = "gcc armv8.0"
# qemu 7.2's CPU models -> (hwcap dotprod, hwcap2 i8mm, the variant sbq4 must choose)
CPUS = {"max": (1, 1, I8MM), "neoverse-n1": (1, 0, DOTPROD), "cortex-a76": (1, 0, DOTPROD),
        "cortex-a72": (0, 0, 0), "cortex-a53": (0, 0, 0)}
ROWS, NBLOCKS = 36, 40  # 36 weight rows: 9 groups of 4 (not a multiple of 8); 1,280 values a row
ACT = np.dtype([("qs", "i1", 32), ("bias", "<i4"), ("d", "<f4")])


@pytest.fixture(scope="module")
def drivers(tmp_path_factory) -> dict[str, Path]:
    """The driver built with sbq4.cpp for each entry of BUILDS, static (qemu needs no aarch64 sysroot)."""
    require_tools(CXX, CLANG, QEMU)
    out = tmp_path_factory.mktemp("sbq4_arm")

    def build(name: str):
        cxx, march, _ = BUILDS[name]
        exe = out / f"sbq4_driver_{name.replace(' ', '_')}"
        target = ["--target=aarch64-linux-gnu"] if cxx == CLANG else []
        return exe, subprocess.run([cxx, *target, "-O2", "-std=c++17", march, "-static", "-DSBQ4_STANDALONE",
                                    str(DRIVER), str(SOURCE), "-o", str(exe)], capture_output=True, text=True)

    built = {}
    for name, (exe, proc) in zip(BUILDS, parallel_map(build, BUILDS)):  # the builds side by side, one per core
        assert proc.returncode == 0, f"cross build {name} failed:\n{proc.stderr}"
        built[name] = exe
    return built


# ---------------------------------------------------------------- cases, in ggml's layouts
def q4_0_blocks(rng, rows: int, nb: int) -> np.ndarray:
    """(rows, nb, 18) bytes of block_q4_0: fp16 d, 16 bytes of nibbles (elements 0..15 low, 16..31 high)."""
    out = rng.integers(0, 256, (rows, nb, 18), dtype=np.uint8)
    out[:, :, 0:2] = rng.uniform(1e-3, 2e-2, (rows, nb)).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    return out


def repack(blocks: np.ndarray, layout: str) -> np.ndarray:
    """ggml's make_block_q4_0x4 / make_block_q4_0x8 (repack.cpp): groups of `cols` rows, each block holding the
    rows' scales, then their quant bytes `il` at a time, row by row, xor-ed with 0x88."""
    cols, il = {"8x8": (8, 8), "4x4": (4, 4), "4x8": (4, 8)}[layout]
    rows, nb, _ = blocks.shape
    g = blocks.reshape(rows // cols, cols, nb, 18).transpose(0, 2, 1, 3)     # (group, block, row, 18)
    scales = g[..., 0:2].reshape(rows // cols, nb, 2 * cols)
    qs = (g[..., 2:] ^ 0x88).reshape(rows // cols, nb, cols, 16 // il, il)    # (.., row, chunk, byte)
    qs = qs.transpose(0, 1, 3, 2, 4).reshape(rows // cols, nb, 16 * cols)    # chunk by chunk, row by row
    return np.concatenate([scales, qs], axis=-1).reshape(-1)


def deq_q4_0(blocks: np.ndarray) -> np.ndarray:
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    qs = blocks[..., 2:].astype(np.int64)
    vals = np.concatenate([qs & 0xF, qs >> 4], axis=-1) - 8
    return (d[..., None] * vals).reshape(blocks.shape[0], -1)


def quantize_q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's quantize_row_q8_0 in float32: d = amax / 127, q = round-to-even(x * (1 / d)), d kept as fp16."""
    x = x.reshape(x.shape[0], -1, 32).astype(np.float32)
    d = (np.abs(x).max(-1) / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = np.rint(x * inv[..., None]).astype(np.int8)
    return q, d.astype(np.float16).astype(np.float32)


@dataclass
class Case:
    blocks: np.ndarray   # (rows, nb, 18) plain block_q4_0
    act: np.ndarray      # (n, nb * 32) float32

    def input(self, layout: str) -> bytes:
        """The driver's input (see tests/sbq4_driver.cpp)."""
        rows, nb, _ = self.blocks.shape
        head = b"SBQ4" + struct.pack("<iiiq", LAYOUTS[layout], rows, self.act.shape[0], nb)
        return head + repack(self.blocks, layout).tobytes() + np.ascontiguousarray(self.act, "<f4").tobytes()

    def reference(self) -> np.ndarray:
        """float64 products of the dequantized weights with the activations as quantize_q8_0 makes them."""
        q, d = quantize_q8_0(self.act)
        return (q.astype(np.float64) * d[..., None]).reshape(q.shape[0], -1) @ deq_q4_0(self.blocks).T


def random_case(seed: int, rows: int = ROWS, nb: int = NBLOCKS) -> Case:
    rng = np.random.default_rng(seed)
    act = rng.standard_normal((MAX_ROWS, nb * 32)).astype(np.float32)
    act[:, ::97] *= 20  # a few outliers, as activations have
    return Case(q4_0_blocks(rng, rows, nb), act)


@dataclass
class Run:
    variant: int
    dotprod: int            # the CPU's hwcaps as the driver read them
    i8mm: int
    ok: bool                # every call took the case
    qs: np.ndarray          # (n, nb, 32) the quantized activations
    d: np.ndarray           # (n, nb)
    one: np.ndarray         # (n, rows): each activation row alone
    batches: list           # batches[m-1]: (m, rows), the first m rows in one call


def _qemu(exe: Path, cpu: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([QEMU, "-cpu", cpu, str(exe), *args], input=stdin, capture_output=True, timeout=300)


def parse(stdout: bytes, rows: int, n: int, nb: int) -> Run:
    variant, dotprod, i8mm, ok = np.frombuffer(stdout[:16], "<i4")
    at = 16 + n * nb * ACT.itemsize
    acts = np.frombuffer(stdout[16:at], ACT).reshape(n, nb)
    out = np.frombuffer(stdout[at:], "<f4")
    assert out.size == n * rows + n * (n + 1) // 2 * rows, "driver output has the wrong length"
    one, at, batches = out[:n * rows].reshape(n, rows), n * rows, []
    for m in range(1, n + 1):
        batches.append(out[at:at + m * rows].reshape(m, rows))
        at += m * rows
    return Run(int(variant), int(dotprod), int(i8mm), bool(ok), acts["qs"], acts["d"], one, batches)


def run(exe: Path, cpu: str, case: Case, layout: str, variant: int | None = None) -> Run:
    args = () if variant is None else ("--variant", str(variant))
    proc = _qemu(exe, cpu, *args, stdin=case.input(layout))
    assert proc.returncode == 0, f"driver on {cpu}: rc {proc.returncode}: {proc.stderr.decode()}"
    rows, nb, _ = case.blocks.shape
    return parse(proc.stdout, rows, case.act.shape[0], nb)


def check(r: Run, case: Case, label: str) -> None:
    """Activations quantized as ggml does, each row within 1e-5 of the reference, every batch row identical."""
    q, d = quantize_q8_0(case.act)
    assert np.array_equal(r.qs, q) and np.array_equal(r.d, d), f"{label}: activations quantized differently"
    ref = case.reference()
    err = float(np.abs(r.one - ref).max() / np.abs(ref).max())
    assert err < 1e-5, f"{label}: {err:.2e} of the largest output from the float64 reference"
    assert_rows_identical(r.one, r.batches, label)


# ---------------------------------------------------------------- the tests
def test_repack_mirror_matches_ggml_on_one_block():
    """The numpy repack above against make_block_q4_0x4's loop written out for one group (4x4 and 4x8)."""
    blocks = q4_0_blocks(np.random.default_rng(0), 4, 1)
    for layout, il in (("4x4", 4), ("4x8", 8)):
        want = bytearray(blocks[:, 0, 0:2].tobytes())
        for i in range(64 // il):  # end = QK4_0 * 2 / blck_size_interleave
            src, off = i % 4, (i // 4) * il
            want += bytes(b ^ 0x88 for b in blocks[src, 0, 2 + off:2 + off + il])
        assert repack(blocks, layout).tobytes() == bytes(want), layout


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_selection_follows_the_cpus_hwcaps(drivers, cpu):
    """The variant each qemu CPU model gets in each build: the best that both its hwcaps (read at run time)
    and the build allow."""
    dotprod, i8mm, variant = CPUS[cpu]
    for name, exe in drivers.items():
        if name.endswith("i8mm") and not i8mm:
            continue  # the whole file built for i8mm: only for CPUs that have it
        want = min(variant, BUILDS[name][2])
        info = _qemu(exe, cpu, "--info").stdout.decode().split()
        assert info == [f"variant={want}", f"dotprod={dotprod}", f"i8mm={i8mm}"], f"{name} build on {cpu}"


@pytest.mark.parametrize("layout", ("4x4", "4x8"))
@pytest.mark.parametrize("cpu", ("max", "cortex-a76"))
def test_rows_bit_identical_and_match_reference(drivers, cpu, layout):
    case = random_case(seed=11)
    r = run(drivers[BASE], cpu, case, layout)
    assert (r.variant, r.ok) == (CPUS[cpu][2], True)
    check(r, case, f"{layout} on {cpu} (variant {r.variant})")


def test_variants_layouts_and_builds_give_the_same_bits(drivers):
    """dotprod and i8mm, 4x4 and 4x8, and every build (two compilers, three targets): one result, bit for bit
    (integer sums are exact and the float operations the same), on qemu's max (which runs all of them)."""
    case = random_case(seed=5)
    base = run(drivers[BASE], "max", case, "4x4", DOTPROD)
    check(base, case, "dotprod 4x4")
    for name, exe in drivers.items():
        for layout in ("4x4", "4x8"):
            for variant in (v for v in (DOTPROD, I8MM) if v <= BUILDS[name][2]):
                r = run(exe, "max", case, layout, variant)
                label = f"{name} build, {layout}, variant {variant}"
                assert r.ok, label
                assert np.array_equal(r.one, base.one), f"{label} differs from dotprod 4x4"
                assert_rows_identical(r.one, r.batches, label)


def test_a_drifted_row_is_caught(drivers):
    """The checks above can fail: one activation changed in row 5 changes that row only, and a batch holding
    the drifted row fails the bit-identity check against the undrifted rows, naming row 5."""
    case = random_case(seed=2)
    before = run(drivers[BASE], "max", case, "4x8")
    case.act[5, 100] += 3.0
    after = run(drivers[BASE], "max", case, "4x8")
    assert not np.array_equal(before.batches[-1][5], after.batches[-1][5])
    assert np.array_equal(np.delete(before.batches[-1], 5, 0), np.delete(after.batches[-1], 5, 0))
    with pytest.raises(AssertionError, match="row 5 of a batch of 6"):
        assert_rows_identical(before.one, after.batches, "drifted")


def test_each_variant_needs_its_feature(drivers):
    """Forced onto a CPU model without its feature, a variant dies of SIGILL: what the selection avoids."""
    case = random_case(seed=3, rows=8, nb=4)
    exe = drivers[BASE]
    for variant, cpu in ((I8MM, "cortex-a76"), (DOTPROD, "cortex-a72")):
        forced = _qemu(exe, cpu, "--variant", str(variant), stdin=case.input("4x8"))
        assert forced.returncode == -signal.SIGILL, f"variant {variant} on {cpu}: rc {forced.returncode}"


@pytest.mark.parametrize("cpu", ("cortex-a72", "cortex-a53"))
def test_a_cpu_without_dotprod_takes_nothing(drivers, cpu):
    """Variant 0: every call refused (NaN left), so ggml's own kernels would run.  Likewise a clang build
    without dotprod in its flags, on any CPU."""
    case = random_case(seed=4, rows=8, nb=4)
    for name, host in ((BASE, cpu), ("clang armv8.0", "max")):
        r = run(drivers[name], host, case, "4x4")
        assert (r.variant, r.ok) == (0, False), f"{name} on {host}"
        assert np.isnan(r.one).all()


def test_what_the_aarch64_variants_refuse(drivers):
    """x86's layout, and weight rows that are not whole groups of 4: refused, dst left alone."""
    case = random_case(seed=6, rows=8, nb=4)
    assert not run(drivers[BASE], "max", case, "8x8").ok
    six = b"SBQ4" + struct.pack("<iiiq", LAYOUTS["4x4"], 6, 1, 4) + bytes(6 * 4 * 18) + bytes(4 * 32 * 4)
    proc = _qemu(drivers[BASE], "max", stdin=six)
    assert proc.returncode == 0 and not parse(proc.stdout, 6, 1, 4).ok


def test_x86_variant_through_the_same_harness(tmp_path):
    """The driver built natively for this x86 CPU (AVX2 tier) on x86's layout: the harness's repack,
    quantization and reference agree with the kernel the x86 build runs."""
    if "avx2" not in sbk_harness.cpu_flags() or "f16c" not in sbk_harness.cpu_flags():
        pytest.skip("not an x86 CPU with AVX2")
    cxx = shutil.which("g++") or shutil.which("c++")
    exe = tmp_path / "sbq4_driver_x86"
    subprocess.run([cxx, "-O2", "-std=c++17", "-mavx2", "-mfma", "-mf16c", "-DSBQ4_STANDALONE", str(DRIVER),
                    str(SOURCE), "-o", str(exe)], check=True, capture_output=True)
    case = random_case(seed=11, rows=40)
    proc = subprocess.run([str(exe)], input=case.input("8x8"), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    r = parse(proc.stdout, 40, MAX_ROWS, NBLOCKS)
    assert (r.variant, r.ok) == (1, True)
    check(r, case, "x86 AVX2 8x8")
