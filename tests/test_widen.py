"""A wide copy of a GGUF (gguf_tools.widen, ``omnidraft-gguf widen``, ``NAME:wide``): Q5_0/Q4_0 tensors re-encoded
as Q8_0 with every weight's value unchanged (gguf-py's own dequantizer is the reference), everything else copied
byte for byte, and llama.cpp decoding the copy as it decodes the source."""

from __future__ import annotations

import dataclasses
import shutil

import gguf
import numpy as np
import pytest

from gguf_tools import widen
from gguf_tools.cli import main as gguf_main
from gguf_tools.convert import field_kv
from gguf_tools.errors import BadArgument, InvalidFile
from gguf_tools.inspect import read
from omnidraft.assets import models
from omnidraft.errors import ModelNotFound
from omnidraft.llama import loadcheck
from omnidraft.llama.engine import Engine, EngineConfig
from tests.gguf_helpers import tiny_gguf

CFG = EngineConfig(n_ctx=256, n_threads=2)
Q = gguf.GGMLQuantizationType


@pytest.fixture(scope="module", params=["q5_0", "q4_0"])
def source(request, tmp_path_factory):
    """A tiny qwen2 model (151,936-token vocabulary, tied embeddings) quantized by llama.cpp to the type."""
    return request.param.upper(), tiny_gguf(tmp_path_factory, "qwen2", quant=request.param)


@pytest.fixture(scope="module")
def widened(source, tmp_path_factory):
    qtype, src = source
    return qtype, src, widen.widen(src, tmp_path_factory.mktemp("wide") / "wide.gguf", types=qtype)


def test_every_weight_keeps_its_value_and_the_rest_its_bytes(widened):
    qtype, src, out = widened
    a, b = read(src), read(out)
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    n_wide = 0
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.shape.tolist() == tb.shape.tolist(), ta.name
        if ta.tensor_type == Q[qtype]:
            n_wide += 1
            assert tb.tensor_type == Q.Q8_0
            want = gguf.quants.dequantize(np.asarray(ta.data), ta.tensor_type)
            got = gguf.quants.dequantize(np.asarray(tb.data), Q.Q8_0)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), ta.name  # bit for bit
        else:
            assert tb.tensor_type == ta.tensor_type
            assert np.asarray(tb.data).tobytes() == np.asarray(ta.data).tobytes(), ta.name
    assert n_wide >= 7  # q, k, v, o, gate, up, down of each layer at least
    skip = ("GGUF.tensor_count",)
    assert {k: field_kv(k, f) for k, f in a.fields.items() if k not in skip} == \
           {k: field_kv(k, f) for k, f in b.fields.items() if k not in skip}


def test_llama_cpp_decodes_the_wide_copy_as_the_source(widened):
    """Greedy tokens agree over 16 steps; logits are close, not identical: the Q8_0 kernel sums the same
    products in another order (and quantizes activations to Q8_0 either way, so the error is float rounding)."""
    _, src, out = widened
    prompt = "def fibonacci(n):\n    "
    want_ids, want_logits = _greedy(src, prompt)
    got_ids, got_logits = _greedy(out, prompt)
    assert got_ids == want_ids
    assert np.allclose(got_logits, want_logits, rtol=0, atol=1e-3 * np.abs(want_logits).max())


def _greedy(path, prompt: str, steps: int = 16) -> tuple[list[int], np.ndarray]:
    with Engine(path, CFG) as e:
        logits = e.decode(e.tokenize(prompt))
        first = logits[-1].copy()
        ids = []
        for _ in range(steps):
            ids.append(int(np.argmax(logits[-1])))
            logits = e.decode(ids[-1:])
    return ids, first


def test_the_conversions_match_gguf_py_on_every_bit_pattern():
    """Random blocks cover every nibble and fifth bit; the scales include negatives, zero and infinities."""
    rng = np.random.default_rng(0)
    for qtype, convert in ((Q.Q5_0, widen.q5_0_to_q8_0), (Q.Q4_0, widen.q4_0_to_q8_0)):
        blocks = rng.integers(0, 256, (4096, gguf.GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
        blocks[:4, :2] = np.array([0.0, -1.5, np.inf, 65504.0], np.float16).view(np.uint8).reshape(4, 2)
        with np.errstate(invalid="ignore"):  # inf * 0
            want = gguf.quants.dequantize(blocks, qtype)
            got = gguf.quants.dequantize(convert(blocks), Q.Q8_0)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), qtype.name


def test_a_file_with_nothing_to_widen_is_refused_and_leaves_nothing(tmp_path_factory, tmp_path):
    q8 = tiny_gguf(tmp_path_factory, "qwen2", quant="q8_0")
    with pytest.raises(BadArgument, match="nothing"):
        widen.widen(q8, tmp_path / "out.gguf")
    with pytest.raises(BadArgument, match="q5_0, q4_0"):
        widen.widen(q8, tmp_path / "out.gguf", types="q8_0")
    assert not list(tmp_path.iterdir())


def test_a_truncated_file_is_a_clear_error_and_leaves_nothing(source, tmp_path):
    _, src = source
    bad = tmp_path / "in" / "truncated.gguf"
    bad.parent.mkdir()
    with open(src, "rb") as f:
        bad.write_bytes(f.read(src.stat().st_size // 2))
    out = tmp_path / "out"
    with pytest.raises(InvalidFile, match="truncated"):
        widen.widen(bad, out / "wide.gguf")
    assert not out.exists() or not list(out.iterdir())


def test_cli(source, tmp_path, capsys):
    qtype, src = source
    out = tmp_path / "w.gguf"
    assert gguf_main(["widen", str(src), str(out), "--types", qtype.lower()]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert Q.Q8_0.name in {t.tensor_type.name for t in read(out).tensors}
    assert gguf_main(["widen", str(src), str(tmp_path / "x.gguf"), "--types", "q4_1"]) == 2
    assert "q5_0, q4_0" in capsys.readouterr().err and not (tmp_path / "x.gguf").exists()
    with pytest.raises(SystemExit) as e:
        gguf_main(["widen", "--help"])
    assert e.value.code == 0 and "not a requantization" in capsys.readouterr().out


def test_format_names():
    assert models.split_format(models.QWEN_05B, "wide") == ("", 0)
    assert models.is_wide("WIDE") and not models.is_wide("q4_0")
    assert models.derived_path(models.QWEN_05B, "wide").name.endswith("-wide.gguf")
    for bad in ("q4_0_pure+wide", "wide+fr", "wide+wide"):
        with pytest.raises(ModelNotFound, match="stands alone"):
            models.split_format(models.SMOLLM2_D8, bad)


def test_name_wide_is_made_once_from_the_pinned_file_and_trusted(tmp_path_factory, tmp_path, monkeypatch):
    """``qwen2.5-coder-0.5b:wide`` with the pinned file played by a tiny Q5_0 model (no download)."""
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    pinned = tmp_path / "pinned.gguf"
    shutil.copy(tiny_gguf(tmp_path_factory, "qwen2", quant="q5_0"), pinned)
    monkeypatch.setattr(models, "ensure_verified", lambda name: pinned)
    name = models.QWEN_05B
    out = models.resolve(f"{name}:wide")
    assert out == models.derived_path(name, "wide") and out.parent == tmp_path / "models" / "derived"
    assert models.derived_source(out) == models.get_spec(name).sha256
    types = {t.tensor_type for t in read(out).tensors}
    assert Q.Q8_0 in types and Q.Q5_0 not in types
    assert loadcheck._trusted(out)
    made = out.stat().st_mtime_ns
    assert models.resolve(f"{name}:wide") == out and out.stat().st_mtime_ns == made  # same pin: reused
    monkeypatch.setitem(models.REGISTRY, name, dataclasses.replace(models.get_spec(name), sha256="0" * 64))
    assert models.resolve(f"{name}:wide") == out and models.derived_source(out) == "0" * 64  # a new pin: remade
