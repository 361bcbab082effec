"""The small-batch Q4_0 kernel (backend/omnidraft/llama/patch/sbq4.cpp) through the product's Engine.

It must give rows bit-identical to one-token decoding for every batch of 1..8 rows, stay within float
tolerance of ggml's own kernels (``OMNIDRAFT_SBQ4=0`` sends the same process back to them: the switch is
read at every product), and make the invariance probe report 8 bit-identical rows for a pure Q4_0 file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from omnidraft.llama import buildprobe, buildsrc, invariance, build as llama_build
from omnidraft.assets import models
from omnidraft.llama.engine import Engine, EngineConfig
from tests.reference import rows_by_batch

CI = bool(os.environ.get("CI"))
MAX_ROWS = 8


def _require_kernel() -> None:
    if llama_build.sbq4_variant():
        return
    if CI and llama_build.is_x86():
        pytest.fail("CI on x86 must run the patched build (scripts/setup/setup.sh builds it)")
    pytest.skip("this llama.cpp build has no small-batch kernel (ARM, or OMNIDRAFT_SBQ4=0 at setup)")


@pytest.fixture
def ggml_kernels(monkeypatch):
    """A switch: inside ``with ggml_kernels():`` products run through ggml's own kernels."""
    import contextlib

    @contextlib.contextmanager
    def use():
        monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
        try:
            yield
        finally:
            monkeypatch.delenv("OMNIDRAFT_SBQ4")

    monkeypatch.delenv("OMNIDRAFT_SBQ4", raising=False)
    return use



def _check(engine: Engine, prefix: list[int], seq: list[int], ggml_kernels, rel_tol: float) -> None:
    single, batches = rows_by_batch(engine, prefix, seq)
    for n, rows in enumerate(batches, start=1):
        assert np.array_equal(rows, single[:n]), f"a batch of {n} rows differs from one-token decoding"
    with ggml_kernels():
        theirs, _ = rows_by_batch(engine, prefix, seq)
    assert not np.array_equal(single, theirs), "OMNIDRAFT_SBQ4=0 did not reach ggml's kernels"
    spread = float(theirs.std())
    rms = float(np.sqrt(np.mean((single - theirs) ** 2)))
    assert rms <= rel_tol * spread, f"kernel differs from ggml's by {rms / spread:.3g} of the logits' spread"
    agree = float(np.mean(single.argmax(1) == theirs.argmax(1)))
    assert agree >= 0.75, f"argmax agrees with ggml's kernels on only {agree:.0%} of rows"


# ---------------------------------------------------------------- random weights
def test_random_weights_rows_bit_identical_and_close_to_ggml(tmp_path, ggml_kernels):
    """buildprobe's tiny Llama (every product Q4_0, rows in multiples of 8), fast mode, 1 and 2 threads."""
    _require_kernel()
    model = tmp_path / "tiny.gguf"
    weights = buildprobe.write_probe_model(model, seed=3)
    ids = [1] + list(np.random.default_rng(5).integers(3, 259, 40))
    for threads in (1, 2):
        with Engine(model, EngineConfig(n_ctx=256, n_threads=threads, batch_invariant=False)) as e:
            _check(e, ids[:30], ids[30:30 + MAX_ROWS], ggml_kernels, rel_tol=0.05)
            single, _ = rows_by_batch(e, ids[:30], ids[30:30 + MAX_ROWS])
    ref = buildprobe.reference_logits(weights, ids[:30 + MAX_ROWS])[30:]  # float64 forward pass of the weights
    assert float(np.sqrt(np.mean((single - ref) ** 2))) <= 0.05 * float(ref.std())


# ---------------------------------------------------------------- real weights
@pytest.fixture(scope="module")
def pure_target(tmp_path_factory) -> Path:
    """The default target requantized with every tensor Q4_0 (the output head too): all its products
    run through the kernel.  Made once per machine in the model cache (about 5 s)."""
    return models.resolve(f"{models.QWEN_05B}:q4_0_pure")


def test_real_weights_rows_bit_identical_and_close_to_ggml(pure_target, ggml_kernels):
    _require_kernel()
    with Engine(pure_target, EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)) as e:
        ids = e.tokenize(invariance.PROBE_TEXT)
        _check(e, ids[:20], ids[20:20 + MAX_ROWS], ggml_kernels, rel_tol=0.05)


def test_invariance_probe_reports_eight_identical_rows(pure_target):
    """What the product reads at start-up: the fast mode of a pure Q4_0 file verifies 8 rows exactly,
    also across the 256-cell KV boundary (the probe's second prefix)."""
    _require_kernel()
    with Engine(pure_target, EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)) as e:
        fid = invariance.measure(e, MAX_ROWS, timing=False)
    assert (fid.max_identical, fid.bound, fid.flips) == (MAX_ROWS, 0.0, 0)
    assert invariance.plan_for(fid) == invariance.VerifyPlan("fast", MAX_ROWS)


# ---------------------------------------------------------------- the patch itself
def test_patch_applies_to_the_pinned_sources(tmp_path):
    """Setup's own patch step still applies to the pinned sdist (setup keeps a copy under .venv/src): the
    kernel files land where the hook includes them from, and the hook is in the sources it changes."""
    sdists = list(Path(".venv/src").glob(f"llama_cpp_python-{llama_build.VERSION}.tar.gz"))
    if not sdists:
        if CI and llama_build.is_x86():
            pytest.fail("setup should have left the pinned sdist in .venv/src")
        pytest.skip("no pinned sdist here (setup did not build the patched sources)")
    tree = Path(llama_build.extract(str(sdists[0]), str(tmp_path)))
    llama_build.patch_tree(str(tree))
    ggml_cpu = tree / llama_build.GGML_CPU
    assert (ggml_cpu / "sbq4.cpp").is_file() and (ggml_cpu / "sbq4.h").is_file()
    assert "ggml_sbq4_mul_mat" in (ggml_cpu / "repack.cpp").read_text()
    assert "ggml-cpu/sbq4.cpp" in (ggml_cpu / "CMakeLists.txt").read_text()
    assert (ggml_cpu / "sbk.cpp").is_file() and "ggml-cpu/sbk.cpp" in (ggml_cpu / "CMakeLists.txt").read_text()
    assert "ggml_sbk_mul_mat" in (ggml_cpu / "ggml-cpu.c").read_text()
    assert f'{llama_build.PATCH_ID_SYMBOL}(void) {{ return "{llama_build.patch_id()}"; }}' in \
        (ggml_cpu / "sbq4.cpp").read_text()


def test_check_asks_for_a_rebuild_when_a_kernel_source_changes(monkeypatch, tmp_path, capsys):
    """Setup rebuilds llama.cpp only where `build.py check` fails.  A build that carries every kernel but was
    made from older kernel sources (a checkout updated since) must fail it, or it would keep the old kernels."""
    built = llama_build.built_patch_id()
    if built is None:
        if CI and llama_build.is_x86():
            pytest.fail("setup's build should carry the kernel sources' id")
        pytest.skip("no patched build here")
    assert built == llama_build.patch_id()
    assert llama_build.main(["check"]) == 0
    copy = tmp_path / "patch"
    shutil.copytree(llama_build.PATCH_DIR, copy)
    monkeypatch.setattr(buildsrc, "PATCH_DIR", str(copy))
    assert llama_build.patch_id() == built  # the id is the files' content, not where they sit
    with open(copy / "sbq4.cpp", "a") as f:
        f.write("// an edit\n")
    assert llama_build.patch_id() != built
    assert llama_build.main(["check"]) == 1
    assert "built from other kernel sources" in capsys.readouterr().err
    from omnidraft.apps import doctor

    assert "rerun setup" in doctor._sources_line()


def test_build_probe_checks_the_kernel(monkeypatch):
    """With the kernel on, the probe demands bit-identical fast batches: a row off by far less than the
    numeric tolerance fails it, and the same drift passes where ggml's own kernels run."""
    _require_kernel()
    assert "small-batch Q4_0 kernel on" in buildprobe.probe().line
    monkeypatch.setenv(buildprobe.PROBE_FAULT_ENV, "drift")
    res = buildprobe.probe()
    assert not res.ok and "small-batch" in res.line, res.line
    monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
    assert buildprobe.probe().ok


def test_doctor_names_the_kernel(monkeypatch):
    from omnidraft.apps import doctor

    lines, _ = doctor.build_section()
    line = next(x for x in lines if x.startswith("small-batch Q4_0 kernel:"))
    if llama_build.sbq4_variant():
        assert ", on:" in line
        monkeypatch.setenv("OMNIDRAFT_SBQ4", "0")
        assert "off for this process" in doctor._sbq4_line()
    else:
        assert "not in this build" in line
