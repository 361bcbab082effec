"""The phone projection (omnidraft.bench.armproj): labelled a projection, its arithmetic sane, its command
writing JSON and Markdown, and its instruction counts the ones the kernels compile to (where the aarch64
cross compiler and the pinned sources are here: CI has both)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from omnidraft.bench import armproj

CI = bool(os.environ.get("CI"))


def test_projection_is_labelled_and_sane():
    p = armproj.project()
    assert "PROJECTION" in p["label"]
    for soc in p["socs"].values():
        for rows in soc["files"].values():
            ours, ggml = rows["ours"], rows["ggml"]
            t = ours["t_ms"]
            assert all(t[n] <= t[n + 1] for n in range(1, 8)), "this project's T(n) grows with n"
            assert t[1] == pytest.approx(ours["memory_ms"]), "one token is memory-bound on both SoCs"
            assert all(ours["t_ms"][n] <= ggml["t_ms"][n] * 1.02 for n in (2, 3, 5, 6, 7))
            for x, k in ours["speedup"].values():
                assert x >= 1.0 and 0 <= k <= 4  # k = 0: the target alone


def test_acceptance_round_trips_tau():
    a = armproj.acceptance_from_tau(2.46)
    assert sum(a ** i for i in range(5)) == pytest.approx(2.46, abs=1e-9)


def test_command_writes_json_and_markdown(tmp_path, capsys):
    assert armproj.main(["--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "projection.json").read_text())
    md = (tmp_path / "projection.md").read_text()
    assert "PROJECTION" in md and "Snapdragon 8 Gen 2" in md and "github.com/ggml-org/llama.cpp/pull" in md
    assert set(data["socs"]) == set(armproj.SOCS) and "at_low_efficiency" in data
    assert "PROJECTION" in capsys.readouterr().out


def test_counts_are_what_the_kernels_compile_to():
    tools = shutil.which("aarch64-linux-gnu-g++") and shutil.which("aarch64-linux-gnu-objdump")
    if not tools or not (armproj.GGML_CPU / "src").is_dir():
        if CI:
            pytest.fail("CI has the aarch64 cross compiler and the pinned sdist: recount must run")
        pytest.skip("no aarch64 cross compiler or no pinned sdist in .venv/src")
    assert armproj.recount() == armproj.COUNTS, "the kernels changed: rerun with --recount and update COUNTS"
