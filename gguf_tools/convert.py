"""Hugging Face Llama / Qwen2 checkpoints -> GGUF (f32, f16 or bf16), written with ``gguf.GGUFWriter``.

Three parts: hyper-parameters from config.json, tensors renamed (and, for the
llama arch, the q/k rows permuted to the interleaved RoPE layout llama.cpp uses),
and tokenizer metadata, either rebuilt from the HF tokenizer files
(:mod:`gguf_tools.hf_tokenizer`) or copied verbatim from an existing GGUF
(``vocab_from``), which is how a fine-tuned drafter with an unchanged tokenizer is re-exported.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import gguf
import numpy as np

from .errors import BadArgument, InvalidFile, VocabMismatch

from . import hf_tokenizer
from .inspect import read

log = logging.getLogger(__name__)

OUTTYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
            "bf16": gguf.LlamaFileType.MOSTLY_BF16}
ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}  # HF class -> GGUF arch

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}


@dataclass(frozen=True)
class HParams:
    """What llama.cpp needs from config.json."""

    arch: str
    vocab_size: int
    context_length: int
    embedding_length: int
    block_count: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    head_dim: int
    rope_freq_base: float
    rms_eps: float
    tied: bool

    @classmethod
    def from_config(cls, cfg: dict) -> "HParams":
        archs = cfg.get("architectures") or []
        arch = next((ARCHS[a] for a in archs if a in ARCHS), None) or {"llama": "llama", "qwen2": "qwen2"}.get(
            cfg.get("model_type", ""))
        if arch is None:
            raise BadArgument(f"unsupported architecture {archs or cfg.get('model_type')}; "
                             f"supported: {', '.join(ARCHS)}")
        scaling = cfg.get("rope_scaling") or {}
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in ("default", None):
            raise BadArgument(f"rope_scaling type {rope_type!r} is not supported by this converter")
        params = cfg.get("rope_parameters") or {}  # transformers 5 moved rope_theta here
        if params.get("rope_type", "default") != "default":
            raise BadArgument(f"rope type {params['rope_type']!r} is not supported by this converter")
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        head_dim = cfg.get("head_dim") or hidden // heads
        if head_dim * heads != hidden:
            raise BadArgument(f"head_dim {head_dim} x {heads} heads != hidden_size {hidden}: not supported")
        return cls(
            arch=arch,
            vocab_size=cfg["vocab_size"],
            context_length=cfg.get("max_position_embeddings", 2048),
            embedding_length=hidden,
            block_count=cfg["num_hidden_layers"],
            feed_forward_length=cfg["intermediate_size"],
            head_count=heads,
            head_count_kv=cfg.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rope_freq_base=float(cfg.get("rope_theta") or params.get("rope_theta") or 10000.0),
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tied=bool(cfg.get("tie_word_embeddings", False)),
        )


# ------------------------------------------------------------------ public API
def convert(hf_dir: str | os.PathLike, out_path: str | os.PathLike, outtype: str = "f16",
            vocab_from: str | os.PathLike | None = None) -> Path:
    """Convert a HF checkpoint directory (config.json, *.safetensors, tokenizer files) to GGUF."""
    hf_dir = Path(hf_dir)
    cfg_path = hf_dir / "config.json"
    if not cfg_path.is_file():
        raise InvalidFile(f"{hf_dir}: no config.json (expected a Hugging Face model directory)")
    cfg = json.loads(cfg_path.read_text())
    hp = HParams.from_config(cfg)
    tok = _tokenizer_kv(hp, vocab_from, hf_dir)
    return _write(out_path, hp, _safetensors(hf_dir), tok, outtype, cfg.get("_name_or_path") or hf_dir.name)


def convert_model(model: Any, out_path: str | os.PathLike, outtype: str = "f16",
                  vocab_from: str | os.PathLike | None = None, tokenizer: Any = None) -> Path:
    """Convert an in-memory transformers model; the tokenizer comes from ``vocab_from`` or ``tokenizer``."""
    hp = HParams.from_config(model.config.to_dict())
    if vocab_from is None and tokenizer is None:
        raise BadArgument("convert_model needs vocab_from (a GGUF) or tokenizer (a HF tokenizer)")
    if vocab_from is not None:
        tok = _tokenizer_kv(hp, vocab_from, None)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer.save_pretrained(tmp)
            tok = _tokenizer_kv(hp, None, Path(tmp))
    state = ((k, v.detach()) for k, v in model.state_dict().items())
    return _write(out_path, hp, state, tok, outtype, getattr(model.config, "_name_or_path", "") or hp.arch)


# ------------------------------------------------------------------ tensors
def _safetensors(hf_dir: Path) -> Iterator[tuple[str, Any]]:
    """(name, torch tensor) for every tensor of every shard, loaded one at a time."""
    from safetensors import safe_open

    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise InvalidFile(f"{hf_dir}: no *.safetensors files (only safetensors checkpoints are supported)")
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    yield name, st.get_tensor(name)
        except Exception as e:
            if isinstance(e, (InvalidFile, BadArgument)):
                raise
            raise InvalidFile(f"{f}: cannot read safetensors ({e})") from None


def gguf_name(hf_name: str) -> str | None:
    """GGUF tensor name for a HF one; None for tensors llama.cpp does not use (rotary inv_freq)."""
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    m = _LAYER.match(hf_name)
    if m and m.group(2) in LAYER_NAMES:
        return f"blk.{m.group(1)}.{LAYER_NAMES[m.group(2)]}"
    if hf_name.endswith("rotary_emb.inv_freq"):
        return None
    raise BadArgument(f"unexpected tensor {hf_name!r} in the checkpoint; the converter does not know where it goes")


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotate-half row order -> llama.cpp interleaved-pair order, per head.

    HF stores each head's rows as [x_0..x_{d/2-1}, x_{d/2}..x_{d-1}] and rotates (x_i, x_{i+d/2});
    llama.cpp's llama arch rotates adjacent pairs (x_{2i}, x_{2i+1}), so rows go to order 0, d/2, 1, d/2+1, ...
    Works for weights (rows, cols) and biases (rows,).
    """
    rows = w.shape[0]
    d = rows // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _prepare(name: str, t: Any, hp: HParams, outtype: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
    """Torch tensor -> (numpy array, GGML type) in the output precision; 1-D tensors stay f32."""
    import torch

    t = t.to(torch.float32)
    if hp.arch == "llama" and name.endswith(("attn_q.weight", "attn_q.bias")):
        t = torch.from_numpy(permute_qk(t.numpy(), hp.head_count))
    elif hp.arch == "llama" and name.endswith(("attn_k.weight", "attn_k.bias")):
        t = torch.from_numpy(permute_qk(t.numpy(), hp.head_count_kv))
    if t.ndim == 1 or outtype == "f32":
        return t.numpy(), gguf.GGMLQuantizationType.F32
    if outtype == "f16":
        return t.to(torch.float16).numpy(), gguf.GGMLQuantizationType.F16
    # numpy has no bfloat16: hand the writer the raw 16-bit patterns and say what they are
    return t.to(torch.bfloat16).view(torch.int16).numpy(), gguf.GGMLQuantizationType.BF16


# ------------------------------------------------------------------ tokenizer
KV = tuple[str, Any, gguf.GGUFValueType, "gguf.GGUFValueType | None"]


def _tokenizer_kv(hp: HParams, vocab_from: str | os.PathLike | None, hf_dir: Path | None) -> list[KV]:
    if vocab_from is not None:
        kv = copy_tokenizer_kv(vocab_from)
        n = next((len(v) for k, v, *_ in kv if k == gguf.Keys.Tokenizer.LIST), None)
        if n != hp.vocab_size:
            raise VocabMismatch(f"{vocab_from} has {n} tokens but the model's embedding has {hp.vocab_size} rows")
        return kv
    return hf_tokenizer.tokenizer_kv(hf_dir, hp.arch, hp.vocab_size)


def field_kv(key: str, f) -> KV:
    """One GGUFReader field as (key, value, type, array element type); strings stay raw bytes."""
    vtype = f.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        sub = f.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return key, [bytes(f.parts[i]) for i in f.data], vtype, sub  # raw bytes: no UTF-8 round trip
        return key, [x for i in f.data for x in f.parts[i].tolist()], vtype, sub
    if vtype == gguf.GGUFValueType.STRING:
        return key, bytes(f.parts[-1]), vtype, None
    return key, f.parts[-1].tolist()[0], vtype, None


WRITER_KEYS = ("GGUF.", "general.architecture", "general.alignment")  # key prefixes GGUFWriter writes itself


def reader_kvs(reader: gguf.GGUFReader, skip: tuple[str, ...] = ()) -> list[KV]:
    """Every KV of a read GGUF as :func:`field_kv` gives it, but the writer's own and those starting with
    ``skip``: what a tool that rewrites a file copies into its writer."""
    drop = WRITER_KEYS + skip
    return [field_kv(key, f) for key, f in reader.fields.items() if not key.startswith(drop)]


def copy_tokenizer_kv(path: str | os.PathLike) -> list[KV]:
    """Every ``tokenizer.*`` KV (tokens, merges, scores, types, special ids, chat template) of a GGUF."""
    r = read(path)
    out: list[KV] = []
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        out.append(field_kv(key, f))
    if not any(k == gguf.Keys.Tokenizer.LIST for k, *_ in out):
        raise InvalidFile(f"{path}: has no tokenizer.ggml.tokens; cannot copy a vocabulary from it")
    return out


# ------------------------------------------------------------------ writing
def _write(out_path: str | os.PathLike, hp: HParams, tensors: Iterable[tuple[str, Any]], tok: list[KV],
           outtype: str, name: str) -> Path:
    if outtype not in OUTTYPES:
        raise BadArgument(f"unknown outtype {outtype!r}; valid: {', '.join(OUTTYPES)} (quantize afterwards)")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, hp.arch)
        w.add_name(Path(str(name)).name)
        w.add_file_type(OUTTYPES[outtype])
        w.add_context_length(hp.context_length)
        w.add_embedding_length(hp.embedding_length)
        w.add_block_count(hp.block_count)
        w.add_feed_forward_length(hp.feed_forward_length)
        w.add_head_count(hp.head_count)
        w.add_head_count_kv(hp.head_count_kv)
        w.add_rope_dimension_count(hp.head_dim)
        w.add_rope_freq_base(hp.rope_freq_base)
        w.add_layer_norm_rms_eps(hp.rms_eps)
        w.add_vocab_size(hp.vocab_size)
        for key, val, vtype, sub in tok:
            w.add_key_value(key, val, vtype, sub)
        seen = set()
        for hf_name, t in tensors:
            name = gguf_name(hf_name)
            if name is None or (name == "output.weight" and hp.tied):
                continue  # tied: llama.cpp reuses token_embd when output.weight is absent
            arr, qtype = _prepare(name, t, hp, outtype)
            w.add_tensor(name, arr, raw_dtype=qtype)
            seen.add(name)
        _check_complete(seen, hp)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file(progress=log.isEnabledFor(logging.INFO))
        w.close()
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("wrote %s (%s, %s bytes)", out_path, outtype, f"{out_path.stat().st_size:,}")
    return out_path


def _check_complete(seen: set[str], hp: HParams) -> None:
    need = {"token_embd.weight", "output_norm.weight"} | ({"output.weight"} if not hp.tied else set())
    for i in range(hp.block_count):
        need |= {f"blk.{i}.{v}" for k, v in LAYER_NAMES.items() if not k.endswith(".bias")}
        if hp.arch == "qwen2":
            need |= {f"blk.{i}.attn_{x}.bias" for x in "qkv"}
    missing = sorted(need - seen)
    if missing:
        raise InvalidFile(f"checkpoint is missing {len(missing)} tensors, e.g. {missing[:3]}")
