"""The llama.cpp build check: portable flags, a probe that catches a crash or wrong numbers in a child
process and says so in one line, and `omnidraft doctor`."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from omnidraft.llama import buildprobe, build as llama_build, cpuid

XEON_FLAGS = set("sse4_2 avx avx2 bmi2 fma f16c avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi "
                 "avx512_vnni avx512_bf16 avx_vnni amx_tile amx_int8 amx_bf16".split())
ZEN4_FLAGS = XEON_FLAGS - {"amx_tile", "amx_int8", "amx_bf16", "avx_vnni"}


def _run_probe_cli(fault: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(buildprobe.PROBE_FAULT_ENV, None)
    if fault:
        env[buildprobe.PROBE_FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "omnidraft.llama.buildprobe"], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.skipif(not llama_build.is_x86(), reason="x86 instruction-set flags")
def test_flags_name_each_isa_and_leave_amx_off(monkeypatch):
    monkeypatch.delenv("OMNIDRAFT_AMX", raising=False)
    args = llama_build.cmake_args("native", XEON_FLAGS)
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_LLAMAFILE=OFF" in args
    assert "-DGGML_AVX512=ON" in args and "-DGGML_AVX512_VNNI=ON" in args
    assert "-DGGML_AMX_INT8=OFF" in args and "-DGGML_AMX_TILE=OFF" in args
    assert "-DGGML_AVX_VNNI=OFF" in llama_build.cmake_args("native", ZEN4_FLAGS)
    safe = llama_build.cmake_args("safe", XEON_FLAGS)
    assert "-DGGML_AVX2=ON" in safe and "-DGGML_AVX512=OFF" in safe
    base = llama_build.cmake_args("baseline", XEON_FLAGS)
    assert "-DGGML_SSE42=ON" in base and "-DGGML_AVX2=OFF" in base
    monkeypatch.setenv("OMNIDRAFT_AMX", "1")  # the user's explicit opt-in
    assert "-DGGML_AMX_INT8=ON" in llama_build.cmake_args("native", XEON_FLAGS)
    assert "-DGGML_AMX_INT8=OFF" in llama_build.cmake_args("safe", XEON_FLAGS)


def test_cpu_identity_names_the_core_that_a_vm_hides():
    """VMs report "AMD EPYC" for a Zen 3, a Zen 4 and a Zen 5 alike: the family/model pair tells them apart."""
    def cpuinfo(family: int, model: int, flags: str) -> str:
        return (f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n"
                f"model name\t: AMD EPYC\nflags\t\t: fpu {flags}\n\nprocessor\t: 1\nmodel name\t: other\n")
    milan = cpuid.cpu_identity(cpuinfo(25, 1, "avx2 fma"))
    assert milan == {"name": "AMD EPYC", "family": "25", "model": "1", "core": "Zen 3", "flags": ["avx2"]}
    assert cpuid.cpu_identity(cpuinfo(25, 17, "avx2 avx512f avx512_vnni"))["core"] == "Zen 4"
    turin = cpuid.cpu_identity(cpuinfo(26, 2, "avx2 avx_vnni avx512f avx512_vnni"))
    assert turin["core"] == "Zen 5" and turin["flags"] == ["avx2", "avx_vnni", "avx512f", "avx512_vnni"]
    intel = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\nflags\t\t: avx2 amx_int8\n"
    assert cpuid.cpu_identity(intel) | {"name": ""} == {"name": "", "family": "6", "model": "207", "core": "",
                                                            "flags": ["avx2", "amx_int8"]}
    phone = "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\n"
    assert cpuid.cpu_identity(phone)["flags"] == ["asimddp", "i8mm"]


def test_installed_build_is_the_one_setup_makes():
    assert llama_build.problems() == []
    feats = llama_build.compiled_features()
    assert feats.get("llamafile") is False
    assert not feats.get("amx_int8")


def test_reference_forward_pass_is_causal(tmp_path):
    """The numpy reference the probe trusts: a later token never changes earlier logits."""
    w = buildprobe.write_probe_model(tmp_path / "p.gguf")
    ids = buildprobe._token_ids(0)
    a = buildprobe.reference_logits(w, ids[:10])
    b = buildprobe.reference_logits(w, ids[:10] + [5, 6, 7])
    np.testing.assert_allclose(a, b[:10], rtol=1e-9, atol=1e-9)
    assert a.shape == (10, buildprobe.N_VOCAB)


def test_probe_passes_on_this_build():
    res = buildprobe.probe()
    assert res.ok, res.line
    assert res.figures["exact_vs_reference"] < buildprobe.REL_TOL_REFERENCE
    assert res.figures["fast_batch_vs_single"] < buildprobe.REL_TOL_BATCH
    assert "\n" not in res.line


def test_probe_catches_an_illegal_instruction_on_a_worker_thread():
    """A real ud2 on a thread of the child, as AMX tiles the OS did not grant: one line, exit 1."""
    proc = _run_probe_cli("sigill")
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "FAILED" in lines[0] and "SIGILL" in lines[0] and "illegal instruction" in lines[0]


def test_probe_catches_wrong_numbers():
    proc = _run_probe_cli("wrong")
    assert proc.returncode == 1
    assert proc.stdout.strip().startswith("llama.cpp build check FAILED: wrong numbers")


def test_doctor_reports_build_machine_models_and_verdict():
    env_before = os.environ.pop(buildprobe.PROBE_FAULT_ENV, None)
    try:
        proc = subprocess.run([sys.executable, "-m", "omnidraft.apps.cli", "doctor"], capture_output=True, text=True,
                              timeout=300)
    finally:
        if env_before is not None:
            os.environ[buildprobe.PROBE_FAULT_ENV] = env_before
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for heading in ("== llama.cpp build", "== machine", "== models", "== probe", "OK: this installation works"):
        assert heading in proc.stdout
    assert "llamafile kernels: off" in proc.stdout


def test_doctor_exits_nonzero_when_the_probe_fails():
    env = dict(os.environ, **{buildprobe.PROBE_FAULT_ENV: "sigill"})
    proc = subprocess.run([sys.executable, "-m", "omnidraft.apps.cli", "doctor"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 1
    assert "PROBLEM: llama.cpp build check FAILED" in proc.stdout
