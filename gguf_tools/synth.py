"""Random-weight GGUFs with the exact shapes, metadata and quantization of a real model.

Timing a llama.cpp pass does not depend on the values of the weights, only on their shapes
and types, so the cost model of another machine can be measured with a random model of the
same shapes without shipping the real one there.  Two steps:

* ``skeleton(real, out)`` writes a small GGUF holding every KV of the real file
  (hyper-parameters, tokenizer, chat template) and, in the KV ``omnidraft.synth.tensors``,
  the name, shape and type of each tensor, but no tensor data (a few MB; ``.gz`` accepted).
* ``synth(skeleton, out, seed)`` writes a loadable random-weight GGUF of those shapes: 2-D+
  weights f16 drawn from N(0, 0.02), norms 1, other 1-D tensors (biases) N(0, 0.02) in f32.
  ``gguf_tools.quantize`` then turns it into the real file's quantization (``build``).

Values stay small, so no NaN or inf ever reaches the kernels.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import gguf
import numpy as np

from .convert import KV, reader_kvs
from .errors import InvalidFile
from .inspect import read

log = logging.getLogger(__name__)

TENSORS_KEY = "omnidraft.synth.tensors"  # JSON: [[name, [ne0, ne1, ...], ggml type name], ...]
SOURCE_KEY = "omnidraft.synth.source"  # JSON: file name, size, file type of the real model
_SKIP = (TENSORS_KEY, SOURCE_KEY)  # a skeleton's own keys, written anew

_STD = 0.02


def _arch(reader: gguf.GGUFReader, path: Path) -> str:
    f = reader.get_field("general.architecture")
    if f is None:
        raise InvalidFile(f"{path}: has no general.architecture")
    return bytes(f.parts[-1]).decode()


def _open(path: Path) -> tuple[gguf.GGUFReader, Path | None]:
    """A reader for a .gguf or .gguf.gz skeleton; the second item is a temp file to delete."""
    if path.suffix != ".gz":
        return read(path), None
    fd, tmp = tempfile.mkstemp(suffix=".gguf")
    with os.fdopen(fd, "wb") as dst, gzip.open(path, "rb") as src:
        shutil.copyfileobj(src, dst)
    return read(tmp), Path(tmp)


def _atomic_writer(out: Path, arch: str) -> tuple[gguf.GGUFWriter, str]:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    return gguf.GGUFWriter(tmp, arch), tmp


def skeleton(real: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the metadata and tensor list of ``real`` (no weights) to ``out`` (gzip if it ends in .gz)."""
    real, out = Path(real), Path(out)
    r = read(real)
    if not r.tensors:
        raise InvalidFile(f"{real}: has no tensors (vocab-only file?); nothing to describe")
    arch = _arch(r, real)
    tensors = [[t.name, [int(x) for x in t.shape], t.tensor_type.name] for t in r.tensors]
    ftype = r.get_field("general.file_type")
    source = {"file": real.name, "bytes": real.stat().st_size,
              "file_type": int(ftype.parts[-1][0]) if ftype is not None else None}
    plain = out.with_suffix("") if out.suffix == ".gz" else out
    w, tmp = _atomic_writer(plain, arch)
    try:
        for key, val, vtype, sub in reader_kvs(r, _SKIP):
            w.add_key_value(key, val, vtype, sub)
        w.add_string(TENSORS_KEY, json.dumps(tensors))
        w.add_string(SOURCE_KEY, json.dumps(source))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        if out.suffix == ".gz":
            with open(tmp, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
        else:
            os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("skeleton of %s (%d tensors, %s) -> %s (%s bytes)", real.name, len(tensors), arch, out,
             f"{out.stat().st_size:,}")
    return out


def describe(skel: str | os.PathLike) -> dict:
    """Architecture, source description and tensor list of a skeleton."""
    r, tmp = _open(Path(skel))
    try:
        f = r.get_field(TENSORS_KEY)
        if f is None:
            raise InvalidFile(f"{skel}: not a skeleton (no {TENSORS_KEY})")
        src = r.get_field(SOURCE_KEY)
        return {"arch": _arch(r, Path(skel)), "tensors": json.loads(bytes(f.parts[-1]).decode()),
                "source": json.loads(bytes(src.parts[-1]).decode()) if src is not None else {}}
    finally:
        if tmp is not None:
            tmp.unlink()


def _random(name: str, shape: list[int], rng: np.random.Generator, pool: np.ndarray) -> np.ndarray:
    """Values for one tensor; numpy order is the reverse of GGUF's (ne0 is the fastest axis).

    2-D weights are windows at random offsets into a pool of N(0, 0.02) draws: as random as
    timing needs, at copy speed (drawing 1.5B normals one by one takes minutes).
    """
    np_shape = tuple(reversed(shape))
    if len(shape) == 1 or all(d == 1 for d in shape[1:]):
        if "norm" in name:
            return np.ones(np_shape, dtype=np.float32)
        return (rng.standard_normal(np_shape, dtype=np.float32) * _STD).astype(np.float32)
    out = np.empty(np_shape, dtype=np.float16)
    flat = out.reshape(-1)
    step = pool.size - _POOL_SLACK
    for i in range(0, flat.size, step):
        n = min(step, flat.size - i)
        off = int(rng.integers(0, _POOL_SLACK))
        flat[i:i + n] = pool[off:off + n]
    return out


_POOL, _POOL_SLACK = 1 << 22, 1 << 18


def _first_layers(arch: str, tensors: list, kvs: list[KV], layers: int) -> tuple[list, list[KV]]:
    """The skeleton cut to its first ``layers`` blocks (a shallow drafter's shape: same width, vocabulary)."""
    key = f"{arch}.block_count"
    have = next((int(v) for k, v, *_ in kvs if k == key), None)
    if have is None or not 1 <= layers <= have:
        raise ValueError(f"layers must be within 1..{have} for this skeleton")
    keep = [t for t in tensors if not t[0].startswith("blk.") or int(t[0].split(".")[1]) < layers]
    return keep, [(k, layers if k == key else v, vt, sub) for k, v, vt, sub in kvs]


def synth(skel: str | os.PathLike, out: str | os.PathLike, seed: int = 0, layers: int | None = None) -> Path:
    """Write a random-weight f16 GGUF (1-D tensors f32) with the skeleton's metadata and shapes
    (``layers``: only its first blocks)."""
    skel, out = Path(skel), Path(out)
    r, tmp_in = _open(skel)
    try:
        arch = _arch(r, skel)
        f = r.get_field(TENSORS_KEY)
        if f is None:
            raise InvalidFile(f"{skel}: not a skeleton (no {TENSORS_KEY})")
        tensors = json.loads(bytes(f.parts[-1]).decode())
        kvs = reader_kvs(r, _SKIP)
    finally:
        if tmp_in is not None:
            tmp_in.unlink()
    if layers is not None:
        tensors, kvs = _first_layers(arch, tensors, kvs, layers)
    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(_POOL + _POOL_SLACK, dtype=np.float32) * _STD).astype(np.float16)
    w, tmp = _atomic_writer(out, arch)
    try:
        for key, val, vtype, sub in kvs:
            if key == "general.file_type":
                val = int(gguf.LlamaFileType.MOSTLY_F16)
            w.add_key_value(key, val, vtype, sub)
        for name, shape, _ in tensors:
            is_1d = len(shape) == 1 or all(d == 1 for d in shape[1:])
            dtype = np.float32 if is_1d else np.float16
            n = int(np.prod(shape))
            w.add_tensor_info(name, list(reversed(shape)), np.dtype(dtype), n * np.dtype(dtype).itemsize)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for name, shape, _ in tensors:
            w.write_tensor_data(_random(name, shape, rng, pool))
        w.close()
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("random-weight %s model (%d tensors, seed %d) -> %s (%s bytes)", arch, len(tensors), seed, out,
             f"{out.stat().st_size:,}")
    return out


def qtype_of(skel: str | os.PathLike, source: dict | None = None) -> str:
    """The quantize type name (q4_k_m, q4_1, ...) of the skeleton's real file."""
    ftype = (source if source is not None else describe(skel)["source"]).get("file_type")
    try:
        name = gguf.LlamaFileType(ftype).name  # e.g. MOSTLY_Q4_K_M
    except ValueError:
        raise InvalidFile(f"{skel}: unknown file type {ftype!r}") from None
    return "f32" if name == "ALL_F32" else name.removeprefix("MOSTLY_").lower()


def build(skel: str | os.PathLike, out: str | os.PathLike, seed: int = 0, qtype: str | None = None,
          nthreads: int = 0, layers: int | None = None, log_tail=None) -> Path:
    """Synthesize at f16 beside ``out``, quantize to the real file's type (or ``qtype``), drop the f16.
    ``log_tail``: as :func:`gguf_tools.quantize.quantize` takes it."""
    from .quantize import quantize

    out = Path(out)
    q = qtype or qtype_of(skel)
    f16 = out.with_name(out.stem + "-f16.gguf")
    synth(skel, f16, seed, layers)
    if q == "f16":
        os.replace(f16, out)
        return out
    try:
        quantize(f16, out, q, nthreads=nthreads, progress=False, log_tail=log_tail)
    finally:
        f16.unlink(missing_ok=True)
    return out


def compare(a: str | os.PathLike, b: str | os.PathLike) -> list[str]:
    """Differences in tensor names, shapes and types between two GGUFs (empty when alike)."""
    ta = {t.name: ([int(x) for x in t.shape], t.tensor_type.name) for t in read(a).tensors}
    tb = {t.name: ([int(x) for x in t.shape], t.tensor_type.name) for t in read(b).tensors}
    diffs = [f"only in {Path(a).name}: {n}" for n in sorted(ta.keys() - tb.keys())]
    diffs += [f"only in {Path(b).name}: {n}" for n in sorted(tb.keys() - ta.keys())]
    diffs += [f"{n}: {ta[n]} vs {tb[n]}" for n in sorted(ta.keys() & tb.keys()) if ta[n] != tb[n]]
    return diffs
