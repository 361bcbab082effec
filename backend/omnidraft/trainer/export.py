"""Torch drafter -> GGUF (tokenizer copied from the original) -> quantized -> checked in llama.cpp.

The check loads the file with :class:`omnidraft.llama.engine.Engine` (the runtime that will use it) and
compares its logits on a few tokens with the torch model's.  The error measure is

    rel = ||logits_gguf - logits_torch||_F / ||logits_torch - rowmean||_F

(scale-free), which must stay under ``TOLERANCE[qtype]``; a wrong tensor mapping or q/k layout gives
rel ~ 1, quantization gives a few percent (SmolLM2-135M Q4_1 dequantized vs llama.cpp: 0.055).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_tools.convert import convert_model
from gguf_tools.quantize import quantize
from omnidraft.errors import InvalidModelFile, from_gguf_tools
from omnidraft.llama import log as llama_log
from omnidraft.llama.engine import Engine, EngineConfig

log = logging.getLogger(__name__)

# q8_0: llama.cpp also rounds activations to 8 bits and keeps an f16 KV cache, so even a perfect export
# sits at rel ~0.05-0.1 from the f32 torch model (measured 0.08-0.11 on LoRA-updated SmolLM2-135M);
# a broken tensor mapping is at ~1.
TOLERANCE = {"f32": 2e-3, "f16": 0.02, "bf16": 0.03, "q8_0": 0.15}
DEFAULT_TOLERANCE = 0.3  # 4-6 bit types
CHECK_TEXT = "def add(a, b):\n    return a + b  # the sum\n"


@dataclass
class CheckResult:
    rel_error: float
    top1_agreement: float
    max_abs: float
    tolerance: float
    n_tokens: int

    @property
    def ok(self) -> bool:
        return self.rel_error <= self.tolerance

    def as_dict(self) -> dict:
        return {"rel_error": round(self.rel_error, 5), "top1_agreement": round(self.top1_agreement, 4),
                "max_abs": round(self.max_abs, 4), "tolerance": self.tolerance, "n_tokens": self.n_tokens,
                "ok": self.ok}


def export_gguf(model, out_path: str | os.PathLike, vocab_from: str | os.PathLike, qtype: str = "q4_1",
                threads: int = 0) -> Path:
    """Write ``model`` (a plain transformers Llama/Qwen2, LoRA merged) as a ``qtype`` GGUF at ``out_path``."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with from_gguf_tools():
        if qtype in ("f32", "f16", "bf16"):
            return convert_model(model, out_path, qtype, vocab_from=vocab_from)
        with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=".export-") as tmp:
            f32 = convert_model(model, Path(tmp) / "f32.gguf", "f32", vocab_from=vocab_from)
            return quantize(f32, out_path, qtype, nthreads=threads, progress=False,
                            log_tail=llama_log.SINK.take_recent)


def check_gguf(path: str | os.PathLike, model, qtype: str, n_tokens: int = 16, threads: int = 0,
               tolerance: float | None = None) -> CheckResult:
    """Load ``path`` in llama.cpp and compare its logits with ``model``'s on ``n_tokens`` tokens."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    tol = tolerance if tolerance is not None else TOLERANCE.get(qtype, DEFAULT_TOLERANCE)
    try:
        eng = Engine(path, EngineConfig(n_ctx=max(64, n_tokens + 8), n_threads=threads, batch_invariant=False))
    except Exception as e:
        raise InvalidModelFile(f"{path}: exported drafter does not load in llama.cpp: {e}") from e
    try:
        ids = eng.tokenize(CHECK_TEXT, add_bos=eng.add_bos)[:n_tokens]
        lg = np.asarray(eng.decode(ids, "all"), dtype=np.float64)
    finally:
        eng.close()
    was_training = model.training
    model.eval()
    with torch.no_grad():
        lt = model(input_ids=torch.tensor([ids])).logits[0].double().numpy()
    model.train(was_training)
    centred = lt - lt.mean(-1, keepdims=True)
    rel = float(np.linalg.norm(lg - lt) / max(np.linalg.norm(centred), 1e-12))
    res = CheckResult(rel, float((lg.argmax(-1) == lt.argmax(-1)).mean()), float(np.abs(lg - lt).max()), tol, len(ids))
    log.info("export check %s: %s", Path(path).name, res.as_dict())
    return res
