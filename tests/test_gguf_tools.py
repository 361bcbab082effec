"""gguf_tools: convert (logits vs transformers), quantize, inspect, vocab-overlap, CLI, bad files."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.assets.models import vocab_path
from omnidraft.errors import InvalidModelFile

from tests.gguf_helpers import DEFAULT_VOCAB, load_hf_tokenizer, tiny_gguf, tiny_hf_dir

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gguf_tools import cli  # noqa: E402
from gguf_tools.errors import BadArgument, InvalidFile, VocabMismatch  # noqa: E402
from gguf_tools.convert import convert, convert_model, permute_qk  # noqa: E402
from gguf_tools.inspect import inspect  # noqa: E402
from gguf_tools.quantize import quantize  # noqa: E402
from gguf_tools.vocab import vocab_overlap  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog. def add(a, b):\n    return a + b  # 1234 ünïcødé 日本語"
SMALL = EngineConfig(n_ctx=256, n_threads=2)


def llama_logits(path, ids) -> np.ndarray:
    with Engine(path, SMALL) as e:
        return e.decode(ids, "all").copy()


def hf_logits(hf_dir, ids) -> np.ndarray:
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def arch(request):
    return request.param


# ------------------------------------------------------------------ convert
def test_permute_qk_interleaves_each_head():
    w = np.arange(8)[:, None] * np.ones((1, 3))  # 2 heads x head_dim 4, rows tagged by index
    assert permute_qk(w, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert permute_qk(np.arange(8.0), 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_converted_logits_match_transformers(tmp_path_factory, arch):
    path = tiny_gguf(tmp_path_factory, arch)
    ids = load_hf_tokenizer(DEFAULT_VOCAB[arch])(TEXT).input_ids
    ref = hf_logits(tiny_hf_dir(tmp_path_factory, arch), ids)
    got = llama_logits(path, ids)
    spread = float(ref.max() - ref.min())
    diff = float(np.abs(got - ref).max())
    print(f"{arch}: {len(ids)} positions, max|diff|={diff:.2e}, spread={spread:.2f}, rel={diff / spread:.1e}")
    # Both sides compute in f32 from f32 weights; llama.cpp differs only in summation order and its
    # f16 KV cache (~5e-4 relative rounding of K/V).  Measured rel ~4e-7; 1e-3 of the spread still
    # catches any mapping, permutation, bias, norm or rope error (those give O(spread) errors).
    assert diff <= 1e-3 * spread
    assert (got.argmax(1) == ref.argmax(1)).all()


def test_tokenizer_rebuilt_from_hf_files_matches_vocab_gguf(tmp_path_factory, arch):
    rebuilt = tiny_gguf(tmp_path_factory, arch, tokenizer_from_hf=True)
    cfg = EngineConfig(vocab_only=True)
    with Engine(rebuilt, cfg) as got, Engine(vocab_path(DEFAULT_VOCAB[arch]), cfg) as ref:
        assert got.token_bytes == ref.token_bytes
        assert (got.is_special == ref.is_special).all()
        assert (got.bos_id, got.eos_id, got.add_bos) == (ref.bos_id, ref.eos_id, ref.add_bos)
        for text in (TEXT, " leading space", "x\n\n\ty  z", "1234567 99", "<|im_start|>user"):
            assert got.tokenize(text, add_bos=True) == ref.tokenize(text, add_bos=True), text
        assert (got.chat_template is None) == (ref.chat_template is None)


def test_f16_bf16_and_in_memory_convert(tmp_path_factory, tmp_path):
    hf_dir = tiny_hf_dir(tmp_path_factory, "llama")
    ids = load_hf_tokenizer("llama-spm")(TEXT).input_ids
    ref = llama_logits(tiny_gguf(tmp_path_factory, "llama"), ids)
    for outtype in ("f16", "bf16"):
        out = convert(hf_dir, tmp_path / f"{outtype}.gguf", outtype, vocab_from=vocab_path("llama-spm"))
        info = inspect(out)
        assert info["file_type"] == outtype.upper()
        assert set(info["tensor_types"]) == {outtype.upper(), "F32"}  # norms stay f32
        agree = (llama_logits(out, ids).argmax(1) == ref.argmax(1)).mean()
        print(f"{outtype}: argmax agreement with f32 {agree:.0%}")
        assert agree >= 0.8
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32)
    mem = convert_model(model, tmp_path / "mem.gguf", "f32", vocab_from=vocab_path("llama-spm"))
    np.testing.assert_array_equal(llama_logits(mem, ids), ref)


def test_convert_rejects_bad_input(tmp_path, tmp_path_factory):
    with pytest.raises(InvalidFile, match="config.json"):
        convert(tmp_path, tmp_path / "x.gguf")
    hf_dir = tiny_hf_dir(tmp_path_factory, "llama")
    with pytest.raises(BadArgument, match="outtype"):
        convert(hf_dir, tmp_path / "x.gguf", "q4_0", vocab_from=vocab_path("llama-spm"))
    with pytest.raises(VocabMismatch, match="tokens but"):  # 50,257-token vocab on a 32,000-row model
        convert(hf_dir, tmp_path / "x.gguf", "f32", vocab_from=vocab_path("gpt-2"))
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*tmp"))


# ------------------------------------------------------------------ quantize
def test_quantize_q8_0_and_q4_k_m(tmp_path_factory):
    base = tiny_gguf(tmp_path_factory, "llama")
    ids = load_hf_tokenizer("llama-spm")(TEXT).input_ids
    ref = llama_logits(base, ids).argmax(1)
    for qtype in ("q8_0", "q4_k_m"):
        out = tiny_gguf(tmp_path_factory, "llama", quant=qtype)
        logits = llama_logits(out, ids)
        assert np.isfinite(logits).all()
        agree = (logits.argmax(1) == ref).mean()
        print(f"{qtype}: {os.path.getsize(out):,} bytes, argmax agreement with f32 {agree:.0%}")
        if qtype == "q8_0":
            assert inspect(out)["file_type"] == "Q8_0"
            assert agree >= 0.8  # q8_0 is near-lossless; loose bound for a random 2-layer model


def test_quantize_rejects_unknown_type_and_leaves_no_temp(tmp_path, tmp_path_factory):
    with pytest.raises(BadArgument, match="valid types: .*q4_k_m"):
        quantize(tiny_gguf(tmp_path_factory, "llama"), tmp_path / "x.gguf", "q7_k")
    with pytest.raises(InvalidFile):
        quantize(vocab_path("llama-spm"), tmp_path / "x.gguf", "q8_0")  # vocab-only: no tensors
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ bad files
@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    good = tiny_gguf(tmp_path_factory, "llama").read_bytes()
    rng = np.random.default_rng(0)
    files = {
        "random": rng.bytes(4096),
        "magic+random": b"GGUF\x03\x00\x00\x00" + rng.bytes(4096),
        "truncated": good[: len(good) // 2],
        "cut-in-vocab": good[:100_000],  # inside the token strings: the reader's array loop must stop
        "empty": b"",
        "not-gguf": b"this is a text file, not a model\n" * 10,
    }
    for name, data in files.items():
        (d / f"{name}.gguf").write_bytes(data)
    return {name: d / f"{name}.gguf" for name in files}


@pytest.mark.parametrize("kind", ["random", "magic+random", "truncated", "cut-in-vocab", "empty", "not-gguf"])
def test_bad_files_raise_invalid_model_file(bad_files, kind, tmp_path):
    path = bad_files[kind]
    with pytest.raises(InvalidFile):
        inspect(path)
    with pytest.raises(InvalidFile):
        quantize(path, tmp_path / "out.gguf", "q8_0")
    with pytest.raises(InvalidModelFile):
        Engine(path, SMALL)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ inspect
def test_inspect_tiny(tmp_path_factory):
    info = inspect(tiny_gguf(tmp_path_factory, "llama"))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_hf_dir(tmp_path_factory, "llama")))
    assert info["architecture"] == "llama"
    assert info["parameters"] == hf.num_parameters()
    assert info["vocab_size"] == 32000 and info["tokenizer_model"] == "llama"
    assert (info["block_count"], info["embedding_length"], info["head_count"], info["head_count_kv"]) == (2, 64, 4, 2)
    assert info["tensor_types"] == {"F32": 2 + 2 * 9 + 1}  # embd, output, 9 per layer, output_norm
    assert info["special_tokens"]["bos"] == {"id": 1, "text": "<s>"}


@pytest.mark.slow
def test_inspect_smollm2():
    from omnidraft.assets.models import resolve

    info = inspect(resolve("smollm2-135m"))
    assert info["architecture"] == "llama" and info["vocab_size"] == 49152
    assert info["file_type"] == "Q4_1" and info["tensor_types"]["Q4_1"] > 200
    assert (info["block_count"], info["embedding_length"], info["head_count"], info["head_count_kv"]) == (30, 576, 9, 3)
    assert 130e6 < info["parameters"] < 140e6
    assert info["chat_template"] and info["special_tokens"]["eos"]["text"] == "<|im_end|>"


# ------------------------------------------------------------------ vocab overlap
def _open_vocab(path):
    return Engine(path, EngineConfig(vocab_only=True))


def test_vocab_overlap_with_itself(tmp_path_factory):
    r = vocab_overlap(tiny_gguf(tmp_path_factory, "llama"), vocab_path("llama-spm"), _open_vocab)
    assert r["shared"] == r["a"]["n_regular"] == r["b"]["n_regular"] > 31000
    assert r["coverage_a"] == r["coverage_b"] == 1.0 and r["b_multi_in_a"] == 0


@pytest.mark.slow
def test_vocab_overlap_smollm2_vs_qwen():
    from omnidraft.assets.models import resolve

    r = vocab_overlap(resolve("smollm2-135m"), resolve("qwen2.5-coder-0.5b"), _open_vocab)
    assert r["shared"] > 10000
    assert 0 < r["coverage_a"] <= 1 and 0 < r["coverage_b"] <= 1
    assert 0 < r["b_multi_in_a"] < r["b"]["n_regular"]


# ------------------------------------------------------------------ CLI
@pytest.mark.parametrize("sub", [[], ["inspect"], ["quantize"], ["convert"], ["vocab-overlap"]])
def test_cli_help(sub, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(sub + ["--help"])
    assert e.value.code == 0
    assert "usage: omnidraft-gguf" in capsys.readouterr().out


def test_cli_inspect_json_and_errors(tmp_path_factory, bad_files, capsys):
    assert cli.main(["inspect", str(tiny_gguf(tmp_path_factory, "llama")), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vocab_size"] == 32000
    assert cli.main(["inspect", str(bad_files["truncated"])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "truncated" in err and "\n" not in err
    assert cli.main(["inspect", "no-such-model"]) == 2


def test_fast_reader_reads_what_gguf_py_reads(tmp_path_factory):
    """inspect.read parses from a plain view of the memory map: same fields, parts and tensors as gguf-py."""
    import gguf

    from gguf_tools.inspect import read

    path = tiny_gguf(tmp_path_factory, "llama", quant="q8_0")
    ours, theirs = read(path), gguf.GGUFReader(path)
    assert list(ours.fields) == list(theirs.fields)
    for key, f in theirs.fields.items():
        g = ours.fields[key]
        assert (g.types, g.data, g.offset) == (f.types, f.data, f.offset), key
        assert len(g.parts) == len(f.parts) and all(
            a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(g.parts, f.parts)), key
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset) for t in ours.tensors] == \
        [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset) for t in theirs.tensors]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(ours.tensors, theirs.tensors))


def test_read_kv_reads_one_value_as_gguf_py_does(tmp_path_factory, bad_files):
    """header.read_kv (the drafter's head ids at every load) walks the header without parsing the vocabulary:
    each key's value equals gguf-py's, an absent key is None, and a cut or corrupt file is InvalidFile."""
    from gguf_tools.header import read_kv
    from gguf_tools.inspect import field_value, read

    path = tiny_gguf(tmp_path_factory, "llama", quant="q8_0")
    reader = read(path)
    for key in (k for k in reader.fields if not k.startswith("GGUF.")):
        got, want = read_kv(path, key), field_value(reader, key)
        got = got.tolist() if isinstance(got, np.ndarray) else got
        assert got == want, key
    assert isinstance(read_kv(path, "tokenizer.ggml.scores"), np.ndarray)
    assert read_kv(path, "no.such.key") is None
    for kind in ("random", "magic+random", "cut-in-vocab", "empty", "not-gguf"):
        with pytest.raises(InvalidFile):
            read_kv(bad_files[kind], "no.such.key")
