"""Random-weight models of a real model's shapes (gguf_tools.synth) and the projection arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from gguf_tools import synth
from gguf_tools.convert import reader_kvs
from gguf_tools.inspect import read
from gguf_helpers import tiny_gguf

pytest.importorskip("torch")


def _kv(path):
    return {k: v for k, v, *_ in reader_kvs(read(path), synth._SKIP)}  # the KVs a skeleton copies


def test_skeleton_keeps_metadata_and_shapes_without_weights(tmp_path_factory, tmp_path):
    real = tiny_gguf(tmp_path_factory, "llama", quant="q8_0")
    skel = synth.skeleton(real, tmp_path / "s.gguf.gz")
    assert skel.stat().st_size < real.stat().st_size
    d = synth.describe(skel)
    assert d["arch"] == "llama" and d["source"]["bytes"] == real.stat().st_size
    assert [t[0] for t in d["tensors"]] == [t.name for t in read(real).tensors]
    assert synth.qtype_of(skel) == "q8_0"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_synthetic_model_matches_real_and_decodes(tmp_path_factory, tmp_path, arch):
    from omnidraft.llama.engine import Engine, EngineConfig

    real = tiny_gguf(tmp_path_factory, arch, quant="q8_0")
    skel = synth.skeleton(real, tmp_path / "s.gguf.gz")
    out = synth.build(skel, tmp_path / "syn.gguf", seed=3)
    assert synth.compare(real, out) == []
    real_kv, syn_kv = _kv(real), _kv(out)
    assert {k: v for k, v in real_kv.items() if k != "general.file_type"} == \
        {k: v for k, v in syn_kv.items() if k != "general.file_type"}
    with Engine(out, EngineConfig(n_ctx=64, n_threads=1)) as eng:
        logits = eng.decode(eng.tokenize("def f(x): return x"), "all")
        assert np.isfinite(logits).all() and logits.std() > 0


def test_first_layers_cut_keeps_width_and_vocabulary(tmp_path_factory, tmp_path):
    """A shallow drafter's timing shape: the first N blocks, everything else as the real model."""
    from omnidraft.llama.engine import Engine, EngineConfig

    real = tiny_gguf(tmp_path_factory, "llama", quant="q8_0")
    skel = synth.skeleton(real, tmp_path / "s.gguf.gz")
    n_real = _kv(real)["llama.block_count"]
    out = synth.build(skel, tmp_path / "cut.gguf", layers=1)
    names = [t.name for t in read(out).tensors]
    assert _kv(out)["llama.block_count"] == 1 < n_real
    assert names == [t.name for t in read(real).tensors if not t.name.startswith("blk.") or
                     t.name.startswith("blk.0.")]
    with Engine(out, EngineConfig(n_ctx=64, n_threads=1)) as eng:
        assert np.isfinite(eng.decode(eng.tokenize("x = 1"), "last")).all()
    with pytest.raises(ValueError, match="layers"):
        synth.synth(skel, tmp_path / "bad.gguf", layers=n_real + 1)


def test_synthetic_smollm2_same_tensors_as_shipped(tmp_path):
    from omnidraft.assets import models

    try:
        real = models.resolve("smollm2-135m")
    except Exception:
        pytest.skip("smollm2-135m not cached")
    if not real.exists():
        pytest.skip("smollm2-135m not cached")
    out = synth.build(synth.skeleton(real, tmp_path / "s.gguf.gz"), tmp_path / "syn.gguf")
    assert synth.compare(real, out) == []
    assert out.stat().st_size == real.stat().st_size


def test_compare_reports_differences(tmp_path_factory):
    a = tiny_gguf(tmp_path_factory, "llama", quant="q8_0")
    b = tiny_gguf(tmp_path_factory, "llama")
    assert any("Q8_0" in d for d in synth.compare(a, b))


# ------------------------------------------------------------------ projection arithmetic, no model
def test_projection_speedup_and_policy():
    from omnidraft.bench import projection as pj

    tv = {n: 0.010 + 0.001 * (n - 1) for n in range(1, 9)}  # bandwidth-bound: a pass of 5 costs 1.4x one
    td = {1: 0.001, 2: 0.0015, 3: 0.002}
    res = {"tokens": 30, "drafted": 40, "batch_hist": {"5": 10}}  # k=4, 3 tokens per pass; no pass sizes
    assert pj.predicted_speedup(res, tv, td) == pytest.approx(30 * 0.010 / (10 * 0.014 + 40 * 0.001))
    # with drafter pass sizes: each step's first pass ingests the target's last 2 tokens
    res["draft_pass_hist"] = {"2": 10, "1": 30}
    assert pj.predicted_speedup(res, tv, td) == pytest.approx(30 * 0.010 / (10 * 0.014 + 10 * 0.0015 + 30 * 0.001))
    res["draft_pass_hist"] = {"5": 10}  # past the table: extrapolated from its last two sizes
    assert pj.predicted_speedup(res, tv, td) == pytest.approx(30 * 0.010 / (10 * 0.014 + 10 * 0.003))
    assert pj.predicted_speedup({"tokens": 7, "batch_hist": {"1": 7}}, tv, None) == pytest.approx(1.0)
    # the cost policy's choice on a machine: the measured k that predicts fastest there, else the target
    k1 = {"k": 1, "tokens": 30, "drafted": 20, "batch_hist": {"2": 20}, "draft_pass_hist": {"2": 20}}
    k4 = {"k": 4, "tokens": 30, "drafted": 40, "batch_hist": {"5": 10}, "draft_pass_hist": {"2": 10, "1": 30}}
    k, sp = pj.cost_choice([k1, k4], tv, td)
    assert k == 4 and sp == pytest.approx(pj.predicted_speedup(k4, tv, td)) and sp > 1.0
    compute_bound = {n: 0.010 * n for n in range(1, 9)}
    assert pj.cost_choice([k1, k4], compute_bound, td) == (0, 1.0)
    assert pj.t_of({1: 1.0, 2: 2.0}, 4) == pytest.approx(4.0)


def test_honesty_check_flags_misses_and_reports_the_noise_floor():
    from omnidraft.bench import projection as pj

    cm = {"t_verify": {"1": 0.02, "2": 0.04}, "t_draft": 0.01, "t_draft_n": {"1": 0.01, "2": 0.015}}
    res = {"target": {"method": "target", "tokens": 10, "batch_hist": {"1": 10}},
           # 10 tokens in 5 passes of 2 with 5 one-token drafter passes: 0.2 / (0.2 + 0.05) = 0.8x predicted
           "good": {"method": "omnidraft", "tokens": 10, "batch_hist": {"2": 5}, "drafted": 5,
                    "draft_pass_hist": {"1": 5}, "speedup": 0.78, "tau": 2.0},
           "bad": {"method": "omnidraft", "tokens": 10, "batch_hist": {"2": 5}, "drafted": 5,
                   "draft_pass_hist": {"1": 5}, "speedup": 0.60, "tau": 2.0},
           "idle-a": {"method": "omnidraft", "tokens": 10, "batch_hist": {"1": 10}, "speedup": 0.95, "tau": 1.0},
           "idle-b": {"method": "slem", "tokens": 10, "batch_hist": {"1": 10}, "speedup": 1.03, "tau": 1.0}}
    data = {"draft": "smollm2-135m", "runs": [{"target": "t", "set": {"name": "s"}, "mode": "greedy",
                                                "cost_model": cm, "results": res}]}
    checks = {c["config"]: c for c in pj.honesty(data)}
    assert checks["good"]["predicted"] == pytest.approx(0.8) and checks["good"]["within"]
    assert not checks["bad"]["within"]
    table = pj.honesty_table(list(checks.values()))
    assert "3 of 4 configurations within 10%" in table
    assert "2 configurations did the target's own work" in table and "0.95x-1.03x" in table
