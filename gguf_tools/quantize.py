"""Quantize a GGUF file with llama.cpp's own quantizer (``llama_model_quantize``).

The output is written to a temp file beside the destination and renamed into
place, so a crash or Ctrl-C never leaves a half-written model under the real name.
"""

from __future__ import annotations

import ctypes
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Callable

import llama_cpp

from .errors import BadArgument, InvalidFile

log = logging.getLogger(__name__)

# user-facing name -> llama.cpp LLAMA_FTYPE_* constant name
_TYPES = {
    "q4_0": "MOSTLY_Q4_0", "q4_1": "MOSTLY_Q4_1", "q5_0": "MOSTLY_Q5_0", "q5_1": "MOSTLY_Q5_1",
    "q8_0": "MOSTLY_Q8_0", "q2_k": "MOSTLY_Q2_K", "q3_k_s": "MOSTLY_Q3_K_S", "q3_k_m": "MOSTLY_Q3_K_M",
    "q3_k_l": "MOSTLY_Q3_K_L", "q4_k_s": "MOSTLY_Q4_K_S", "q4_k_m": "MOSTLY_Q4_K_M", "q5_k_s": "MOSTLY_Q5_K_S",
    "q5_k_m": "MOSTLY_Q5_K_M", "q6_k": "MOSTLY_Q6_K", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16",
    "f32": "ALL_F32",
}
# "_pure" (llama-quantize's --pure): every tensor in the one type, the output head included.  q4_0_pure is
# the x86 speed format: its head runs through the same small-batch kernel as every other product, so a
# verification pass of up to 8 tokens is bit-identical to decoding and little dearer than one.
PURE = "_pure"
_PURE_TYPES = ("q4_0", "q8_0")
QUANT_TYPES: tuple[str, ...] = tuple(k for k, v in _TYPES.items() if hasattr(llama_cpp, "LLAMA_FTYPE_" + v)) + \
    tuple(t + PURE for t in _PURE_TYPES)


def _key(qtype: str) -> str:
    return qtype.lower().replace("-", "_")


def ftype_of(qtype: str) -> int:
    """The LLAMA_FTYPE_* value for a type name such as 'q4_k_m' (case-insensitive)."""
    key = _key(qtype)
    if key not in QUANT_TYPES:
        raise BadArgument(f"unknown quantization type {qtype!r}; valid types: {', '.join(QUANT_TYPES)}")
    return getattr(llama_cpp, "LLAMA_FTYPE_" + _TYPES[key.removesuffix(PURE)])


def quantize(src: str | os.PathLike, dst: str | os.PathLike, qtype: str,
             allow_requantize: bool = True, nthreads: int = 0, progress: bool = True,
             log_tail: Callable[[], str] | None = None) -> Path:
    """Write ``src`` quantized to ``qtype`` at ``dst`` (atomically); return ``dst``.

    ``allow_requantize`` lets an already-quantized input be quantized again (lossy twice);
    ``nthreads`` 0 lets llama.cpp use every core.  ``log_tail``, where the caller routes llama.cpp's log,
    returns (and forgets) its last error lines: they explain a refusal.
    """
    log_tail = log_tail or (lambda: "")
    src, dst = Path(src), Path(dst)
    ftype = ftype_of(qtype)
    # lazy: gguf-py, sentencepiece, yaml: 5 MB a serving process (which needs ftype_of) never loads (issue 41)
    from .inspect import read

    reader = read(src)  # validates header + tensor extents before llama.cpp sees the file
    if not reader.tensors:
        raise InvalidFile(f"{src}: has no tensors (vocab-only file?); nothing to quantize")
    if src.resolve() == dst.resolve():
        raise BadArgument(f"input and output are the same file: {src}")
    dst.parent.mkdir(parents=True, exist_ok=True)

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = nthreads
    params.allow_requantize = allow_requantize
    params.pure = _key(qtype).endswith(PURE)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    os.close(fd)
    try:
        log_tail()
        rc = _run_with_spinner(
            lambda: llama_cpp.llama_model_quantize(str(src).encode(), tmp.encode(), ctypes.byref(params)),
            f"quantize {src.name} -> {qtype}", progress)
        if rc != 0:
            why = log_tail() or "llama.cpp gave no reason"
            raise InvalidFile(f"{src}: llama.cpp could not quantize to {qtype} (rc={rc}: {why})")
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("quantized %s (%s bytes) -> %s (%s bytes, %s)",
             src, f"{src.stat().st_size:,}", dst, f"{dst.stat().st_size:,}", qtype)
    return dst


def _run_with_spinner(fn, desc: str, enabled: bool):
    """Run ``fn`` in a worker thread while a tqdm bar shows elapsed time; return its result."""
    from tqdm import tqdm

    out: dict = {}

    def work() -> None:
        try:
            out["rc"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            out["err"] = e

    t = threading.Thread(target=work, daemon=True)
    t.start()
    with tqdm(desc=desc, total=None, bar_format="{desc}: {elapsed}", disable=not enabled, leave=False) as bar:
        while t.is_alive():
            t.join(0.2)
            bar.refresh()
    if "err" in out:
        raise out["err"]
    return out["rc"]
