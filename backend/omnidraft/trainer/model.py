"""A llama / qwen2 GGUF (f32, f16, or any quantization gguf-py can dequantize) -> a transformers model.

Tensor names go back through ``gguf_tools.convert``'s table, and the llama arch's q/k rows are
un-permuted (inverse of ``permute_qk``).  A GGUF without ``output.weight`` has tied embeddings.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import gguf
import numpy as np

from gguf_tools.convert import LAYER_NAMES, TOP_NAMES  # the one table, read backwards (_hf_names)
from gguf_tools.inspect import field_value, inspect, read
from omnidraft.errors import BadRequest, from_gguf_tools

log = logging.getLogger(__name__)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of ``gguf_tools.convert.permute_qk``: llama.cpp interleaved pairs -> HF rotate-half."""
    d = w.shape[0] // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _hf_names() -> dict[str, str]:
    return {v: k for k, v in TOP_NAMES.items()}, {v: k for k, v in LAYER_NAMES.items()}


def load_gguf_model(path: str | os.PathLike, dtype=None):
    """Load a GGUF drafter as a float32 ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (eval mode)."""
    # lazy: torch and transformers cost ~6 s at start-up and are the optional 'train' extra
    import torch
    import transformers

    with from_gguf_tools():
        reader = read(path)
    arch = field_value(reader, "general.architecture")
    if arch not in ("llama", "qwen2"):
        raise BadRequest(f"{path}: the trainer supports llama and qwen2 drafters, not {arch!r}")
    kv = lambda key, default=None: field_value(reader, f"{arch}.{key}") if f"{arch}.{key}" in reader.fields \
        else default  # noqa: E731
    tensors = {t.name: t for t in reader.tensors}
    emb = tensors["token_embd.weight"]
    n_vocab, hidden = int(emb.shape[1]), int(emb.shape[0])
    n_head, n_kv = int(kv("attention.head_count")), int(kv("attention.head_count_kv", kv("attention.head_count")))
    cfg = dict(vocab_size=n_vocab, hidden_size=hidden, intermediate_size=int(kv("feed_forward_length")),
               num_hidden_layers=int(kv("block_count")), num_attention_heads=n_head, num_key_value_heads=n_kv,
               max_position_embeddings=int(kv("context_length", 2048)),
               rms_norm_eps=float(kv("attention.layer_norm_rms_epsilon", 1e-6)),
               rope_theta=float(kv("rope.freq_base", 10000.0)),
               tie_word_embeddings="output.weight" not in tensors)
    key_len = kv("attention.key_length")
    if key_len is not None and int(key_len) != hidden // n_head:
        cfg["head_dim"] = int(key_len)
    cls, cfg_cls = {"llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
                    "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config)}[arch]
    config = cfg_cls(**cfg)
    config.architectures = [cls.__name__]
    with torch.device("meta"):
        model = cls(config)
    top, layer = _hf_names()
    state = {}
    for name, t in tensors.items():
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)])
        if name in top:
            hf = top[name]
        else:
            blk, rest = name.split(".", 2)[1], name.split(".", 2)[2]
            if rest not in layer:
                raise BadRequest(f"{path}: unexpected tensor {name}")
            hf = f"model.layers.{blk}.{layer[rest]}"
            if arch == "llama" and rest in ("attn_q.weight", "attn_q.bias"):
                w = unpermute_qk(w, n_head)
            elif arch == "llama" and rest in ("attn_k.weight", "attn_k.bias"):
                w = unpermute_qk(w, n_kv)
        state[hf] = torch.from_numpy(np.array(w, dtype=np.float32))  # writable copy
    if config.tie_word_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [m for m in missing if "rotary" not in m]
    if missing or unexpected:
        raise BadRequest(f"{path}: tensors missing {missing[:4]} / unexpected {unexpected[:4]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    # buffers (rotary inv_freq) were created on the meta device: rebuild them on the CPU
    for name, mod in list(model.named_modules()):
        if any(getattr(b, "is_meta", False) for b in mod.buffers(recurse=False)):
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], type(mod)(config=model.config))
    return model.to(dtype or torch.float32).eval()


def add_lora(model, rank: int = 32, alpha: float | None = None, dropout: float = 0.0):
    """Wrap ``model`` with a fresh LoRA adapter on every attention and MLP projection."""
    try:  # lazy: peft pulls torch and transformers (~6 s at start-up), the optional 'train' extra
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # LoRA is the default update: say what to install, or how to do without
        raise BadRequest("LoRA updates need peft: pip install 'omnidraft[train]' (or train with --lora-rank 0, "
                         "full fine-tuning)") from e

    cfg = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else rank, lora_dropout=dropout,
                     target_modules=LORA_TARGETS, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def merged(model):
    """The plain transformers model with any LoRA adapter merged in (in place; the adapter is gone)."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def model_file_type(path: str | Path) -> str:
    """The quantization type name gguf_tools.quantize understands for a GGUF's general.file_type."""
    with from_gguf_tools():
        ftype = (inspect(path).get("file_type") or "f16").lower()
    return {"all_f32": "f32", "mostly_f16": "f16"}.get(ftype, ftype)
