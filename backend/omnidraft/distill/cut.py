"""The cut drafter: a model kept to the chosen layers, and its trained tensors saved and loaded (small int8
npz files that travel back from the GPU machine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from omnidraft.assets import models
from omnidraft.trainer.model import load_gguf_model


def cut_model(model, layers: list[int]):
    """Keep ``layers`` (in order) of a transformers Llama/Qwen2 model, renumbered 0..n-1."""
    types = getattr(model.config, "layer_types", None)
    return _set_layers(model, [model.model.layers[i] for i in layers], types and [types[i] for i in layers])


def grow_model(model, donor, extra: list[int]):
    """Append ``donor``'s layers ``extra`` (in order) after ``model``'s own: a deeper drafter that starts from a
    distilled shallow one instead of from a fresh cut (whose head first sees the new depth at a loss of about 9).
    The donor must be the model the shallow one was cut from (same widths); its layers go in as they are."""
    for i in extra:
        if not 0 <= i < len(donor.model.layers):
            raise ValueError(f"the donor has {len(donor.model.layers)} layers, not a layer {i}")
    types = getattr(model.config, "layer_types", None)
    return _set_layers(model, list(model.model.layers) + [donor.model.layers[i] for i in extra],
                       types and types + [donor.config.layer_types[i] for i in extra])


def _set_layers(model, kept: list, layer_types: list | None):
    """``kept`` as the model's layers, numbered 0..n-1 (each attention's index into the KV cache)."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    for n, layer in enumerate(kept):
        layer.self_attn.layer_idx = n
    model.model.layers = torch.nn.ModuleList(kept)
    model.config.num_hidden_layers = len(kept)
    if layer_types:
        model.config.layer_types = layer_types
    return model


def local_gguf(name_or_path: str) -> str:
    """A GGUF path as given, or a registry name (``smollm2-135m``) resolved to its local file."""
    if Path(name_or_path).exists():
        return name_or_path

    return str(models.resolve(name_or_path))


def load_cut(draft_gguf: str, layers: list[int]):
    return cut_model(load_gguf_model(local_gguf(draft_gguf)), layers)


def save_trained(model, names, out: Path, max_bytes: int = 15 << 20) -> list[Path]:
    """The trained tensors as npz files of at most ``max_bytes``: matrices as int8 with one scale per row
    (the GGUF they become is 4-8 bit), vectors as float32."""
    state = {n: p.detach().float().cpu().numpy() for n, p in model.named_parameters() if n in names}
    files, cur, size = [], {}, 0

    def flush():
        nonlocal cur, size
        if cur:
            p = out / f"trained-{len(files):02d}.npz"
            np.savez(p, **cur)
            files.append(p)
            cur, size = {}, 0

    chunks = []
    for n, w in sorted(state.items()):
        if w.ndim == 2:  # a matrix larger than a file (a trained embedding) is cut into row blocks n@0, n@1, ...
            scale = np.maximum(np.abs(w).max(1, keepdims=True), 1e-12) / 127.0
            q, scale = np.round(w / scale).astype(np.int8), scale.astype(np.float32)
            rows = max(1, (max_bytes // 2) // (w.shape[1] + 4))
            blocks = range(0, len(w), rows)
            for b in blocks:
                key = n if len(blocks) == 1 else f"{n}@{b // rows}"
                chunks.append({key + ".q": q[b: b + rows], key + ".s": scale[b: b + rows]})
        else:
            chunks.append({n: w.astype(np.float32)})
    for parts in chunks:
        nb = sum(v.nbytes for v in parts.values())
        if size + nb > max_bytes:
            flush()
        cur.update(parts)
        size += nb
    flush()
    return files


def load_trained(draft_gguf: str, layers: list[int], trained_dir: Path):
    """The cut drafter with the tensors of ``trained_dir`` (see :func:`save_trained`) put in."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    model = load_cut(draft_gguf, layers)
    state, blocks = {}, {}
    for f in sorted(Path(trained_dir).glob("trained-*.npz")):
        z = np.load(f)
        for k in z.files:
            if k.endswith(".s"):
                continue
            if k.endswith(".q"):
                name, w = k[:-2], z[k].astype(np.float32) * z[k[:-2] + ".s"]
            else:
                name, w = k, z[k]
            if "@" in name:
                base, j = name.rsplit("@", 1)
                blocks.setdefault(base, {})[int(j)] = w
            else:
                state[name] = torch.from_numpy(w)
    for base, parts in blocks.items():
        state[base] = torch.from_numpy(np.concatenate([parts[j] for j in sorted(parts)]))
    missing = [k for k in state if k not in dict(model.named_parameters())]
    if missing:
        raise ValueError(f"{trained_dir}: tensors not in the model: {missing[:4]}")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in state:
                p.copy_(state[n])
    return model.eval()
