"""Tiny random models with real vocabularies, as HF checkpoints and as GGUF files, for tests.

Typical use in a test module::

    from tests.gguf_helpers import tiny_gguf

    @pytest.fixture(scope="session")
    def drafter(tmp_path_factory):
        return tiny_gguf(tmp_path_factory, "llama")             # f32, 32,000-token llama SPM vocab

Built files are cached under the pytest session's base temp dir, so every test module
asking for the same (arch, vocab, outtype, quant, seed) shares one build.  The HF
tokenizer files derived from a vocab-only GGUF are cached in the omnidraft cache
(they depend only on the pinned GGUF and the transformers version).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_VOCAB = {"llama": "llama-spm", "qwen2": "qwen2"}

# Small enough to build and convert in seconds on 2 cores; 4 query / 2 KV heads exercise GQA.
TINY_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6,
                   initializer_range=0.1)  # wide init: logit gaps well above the f16 KV-cache noise


def hf_tokenizer_dir(vocab_name: str) -> Path:
    """HF tokenizer files (tokenizer.json, tokenizer_config.json, ...) made by transformers from
    ``ggml-vocab-<vocab_name>.gguf``; also writes ``n_tokens.json``.  Cached across sessions."""
    import transformers

    from omnidraft.assets.models import cache_dir, vocab_path

    dest = cache_dir() / "hf-tokenizers" / f"{vocab_name}-transformers{transformers.__version__}"
    if (dest / "n_tokens.json").is_file():
        return dest
    gguf_file = vocab_path(vocab_name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".tok-") as tmp:
        tok = transformers.AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
        out = Path(tmp) / "out"
        tok.save_pretrained(out)
        (out / "n_tokens.json").write_text(json.dumps({"n_tokens": len(tok)}))
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(out, dest)
    return dest


def load_hf_tokenizer(vocab_name: str):
    """The transformers tokenizer of a vocab-only GGUF (fast to load once cached)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(hf_tokenizer_dir(vocab_name)))


def make_tiny_hf_model(arch: str, vocab_name: str | None, out_dir: str | os.PathLike, seed: int = 0,
                       **config_overrides) -> Path:
    """Save a seeded random ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` plus tokenizer files to ``out_dir``.

    The embedding has exactly as many rows as the vocabulary of ``ggml-vocab-<vocab_name>.gguf``
    (default: llama-spm for llama, qwen2 for qwen2).  Norm weights and (qwen2) q/k/v biases are
    randomised too, so a wrong tensor mapping shows up in the logits.  Qwen2 ties its embeddings
    (like Qwen2.5-0.5B), llama does not, so both output paths are exercised.
    """
    import torch
    import transformers

    vocab_name = vocab_name or DEFAULT_VOCAB[arch]
    tok_dir = hf_tokenizer_dir(vocab_name)
    n_tokens = json.loads((tok_dir / "n_tokens.json").read_text())["n_tokens"]
    cls, cfg_cls = {"llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
                    "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config)}[arch]
    kw = dict(TINY_CONFIG, vocab_size=n_tokens, tie_word_embeddings=(arch == "qwen2"))
    kw.update(config_overrides)
    torch.manual_seed(seed)
    model = cls(cfg_cls(**kw)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn_like(p))
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    for f in tok_dir.iterdir():
        if f.name != "n_tokens.json":
            shutil.copy(f, out_dir / f.name)
    return out_dir


def make_tiny_gguf(arch: str, out_path: str | os.PathLike, vocab_name: str | None = None, outtype: str = "f32",
                   seed: int = 0, tokenizer_from_hf: bool = False) -> Path:
    """Build a tiny random model and convert it to GGUF at ``out_path``; return the path.

    The tokenizer metadata is copied from the vocab-only GGUF (exact), or rebuilt from the HF
    tokenizer files when ``tokenizer_from_hf`` is true (tests the converter's tokenizer path).
    The HF checkpoint is kept beside the GGUF as ``<out_path>.hf/``.
    """
    from gguf_tools.convert import convert
    from omnidraft.assets.models import vocab_path

    vocab_name = vocab_name or DEFAULT_VOCAB[arch]
    out_path = Path(out_path)
    hf_dir = make_tiny_hf_model(arch, vocab_name, out_path.with_name(out_path.name + ".hf"), seed=seed)
    return convert(hf_dir, out_path, outtype, vocab_from=None if tokenizer_from_hf else vocab_path(vocab_name))


def tiny_gguf(tmp_path_factory, arch: str = "llama", vocab_name: str | None = None, outtype: str = "f32",
              quant: str | None = None, seed: int = 0, tokenizer_from_hf: bool = False) -> Path:
    """Session-cached :func:`make_tiny_gguf`, optionally quantized (``quant='q8_0'``, ...) afterwards."""
    vocab_name = vocab_name or DEFAULT_VOCAB[arch]
    root = Path(tmp_path_factory.getbasetemp()) / "tiny-gguf"
    root.mkdir(exist_ok=True)
    stem = f"{arch}-{vocab_name}-s{seed}{'-hftok' if tokenizer_from_hf else ''}-{outtype}"
    base = root / f"{stem}.gguf"
    if not base.exists():
        make_tiny_gguf(arch, base, vocab_name, outtype, seed, tokenizer_from_hf)
        _trusted(base)
    if quant is None:
        return base
    out = root / f"{stem}-{quant}.gguf"
    if not out.exists():
        from gguf_tools.quantize import quantize

        quantize(base, out, quant, progress=False)
        _trusted(out)
    return out


def _trusted(path: Path) -> None:
    """Made by the product's own converter and quantizer, like the model cache's re-quantized copies: marked
    trusted as those are, so that each load skips the child process that checks a file (16 of them, 12 s of the
    suite).  tests/test_hardening_loadcheck.py tests that check; the files tests write themselves still get it."""
    from omnidraft.llama import loadcheck

    loadcheck.mark_trusted(path)


def tiny_hf_dir(tmp_path_factory, arch: str = "llama", seed: int = 0) -> Path:
    """The HF checkpoint directory behind ``tiny_gguf(tmp_path_factory, arch, seed=seed)``."""
    path = tiny_gguf(tmp_path_factory, arch, seed=seed)
    return path.with_name(path.name + ".hf")
