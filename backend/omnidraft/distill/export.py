"""``distill export``: a trained (or untrained) cut drafter as a GGUF, the trained layers at 8 bits beside the
base file's own embedding quantization, checked against torch in llama.cpp."""

from __future__ import annotations

import ctypes
import os
import tempfile
from pathlib import Path

import llama_cpp

from gguf_tools.quantize import ftype_of
from omnidraft.assets import models
from omnidraft.errors import from_gguf_tools
from omnidraft.trainer.export import check_gguf, export_gguf
from omnidraft.trainer.model import load_gguf_model

from .cut import grow_model, load_cut, load_trained, local_gguf


def quantize_mixed(src: Path, dst: Path, qtype: str, embed_type: str, threads: int = 0) -> Path:
    """``src`` quantized to ``qtype`` with the token embedding (= the tied head) as ``embed_type``: the frozen
    embedding keeps the base file's own Q4_1 values exactly, the trained layers get 8 bits."""
    params = llama_cpp.llama_model_quantize_default_params()
    with from_gguf_tools():
        params.ftype = ftype_of(qtype)
    params.nthread = threads
    params.allow_requantize = True
    params.token_embedding_type = getattr(llama_cpp, "GGML_TYPE_" + embed_type.upper())
    tmp = dst.with_name(dst.name + ".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"{src}: quantize to {qtype}/{embed_type} failed (rc={rc})")
    os.replace(tmp, dst)
    return dst


def export(draft_gguf: str, layers: list[int], trained_dir: Path | None, out: Path, qtype: str = "q8_0",
           embed_type: str | None = "q4_1", threads: int = 0) -> dict:
    """Write the GGUF of a (trained or untrained) cut drafter and check it against torch in llama.cpp."""
    src = local_gguf(draft_gguf)
    model = load_trained(src, layers, trained_dir) if trained_dir else load_cut(src, layers).eval()
    return export_model(model, src, out, qtype, embed_type, threads)


def grow(base_gguf: str, donor_gguf: str, extra: list[int], out: Path, qtype: str = "q8_0",
         embed_type: str | None = "q4_1", threads: int = 0) -> dict:
    """The drafter ``base_gguf`` with ``donor_gguf``'s layers ``extra`` appended (:func:`cut.grow_model`), as a
    GGUF that ``distill train`` starts from (``draft_gguf=`` it, ``layers=firstN``)."""
    base = local_gguf(base_gguf)
    model = grow_model(load_gguf_model(base), load_gguf_model(local_gguf(donor_gguf)), extra).eval()
    return export_model(model, base, out, qtype, embed_type, threads)


def export_model(model, src: str, out: Path, qtype: str = "q8_0", embed_type: str | None = "q4_1",
                 threads: int = 0) -> dict:
    """``model`` as a GGUF with ``src``'s vocabulary, checked against torch in llama.cpp."""
    out = Path(out)
    if embed_type and qtype not in ("f32", "f16", "bf16"):
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as tmp:
            f32 = export_gguf(model, Path(tmp) / "f32.gguf", vocab_from=src, qtype="f32")
            path = quantize_mixed(f32, out, qtype, embed_type, threads)
        # the Q4_1 head adds the base file's own quantization error (0.055 for SmolLM2) to the 8-bit layers'
        res = check_gguf(path, model, qtype, threads=threads, tolerance=0.2)
    else:
        path = export_gguf(model, out, vocab_from=src, qtype=qtype, threads=threads)
        res = check_gguf(path, model, qtype, threads=threads)
    if not res.ok:
        raise RuntimeError(f"{path}: export check failed {res.as_dict()}")
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": models.sha256_file(path),
            "qtype": qtype, "embed_type": embed_type, "check": res.as_dict()}
