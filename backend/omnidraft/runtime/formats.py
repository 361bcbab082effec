"""Which file a target runs from: the pinned one, or its exact ``:wide`` copy where that decodes faster; and the
requantized speed format on offer for a registry target run from its pinned weights (never taken unasked).

Qwen2.5-Coder-0.5B's Q4_K_M file is 55 % Q5_0 by bytes (its 896-wide rows hold no 256-value K-quant blocks).
On x86 CPUs with AVX2 and no VNNI, unpacking Q5_0's fifth bit bounds its decode; the same weights as Q8_0 blocks
(``NAME:wide``, gguf_tools.widen: no value changes) decode in 0.83x the time on a 2-core Zen 1 (T(1) 39.8
against 48.1 ms, BENCHMARKS.md).  With VNNI or on ARM no rule holds (a Zen 5 decodes the wide copy faster, a
Zen 4's memory-bound decode may not), so ``auto`` times both there once (``runtime.wideprobe``).  A registry
name means "these weights, in the encoding this CPU runs fastest"; a path always means that file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from omnidraft.assets import models
from omnidraft.errors import BadRequest
from omnidraft.llama import cpuid

log = logging.getLogger(__name__)

WIDE_CHOICES = ("auto", "on", "off")


# Registry targets whose pinned file is mostly Q5_0, and their wide copy's bytes over the pinned file's (measured: the
# 0.5B, 491 -> 637 MB; Gemma-3-270M's is 18 % Q5_0, not worth 1.3x the file).
MOSTLY_Q5_0 = {models.QWEN_05B: 1.296}


@dataclass(frozen=True)
class SpeedFormat:
    """A registry target's requantized copy that decodes faster than its pinned file, and what it costs."""

    fmt: str  # the ``NAME:FORMAT`` suffix that makes it (assets.models.resolve_derived)
    ppl_pinned: float  # perplexity of the pinned file, and of the copy, on the same held-out text
    ppl: float
    gain: str  # the target alone's tokens a second against the pinned file's, where and when measured


# Perplexity: `python -m omnidraft.bench.quality`, 4,689 held-out tokens of HumanEval and stdlib code in 512-token
# windows; gain: the product's target alone on held-out HumanEval and chat, one file against the other, a 2-core
# Zen 4, 2026-12-06 (BENCHMARKS.md "A Zen 4 after nine sessions of changes"), where the decode is bound by memory and
# the smaller file wins; the 1.5B's range takes in 2026-12-07's 1.09-1.16x on the same class ("A Zen 4 after four
# sessions of changes": its Q4_K_M kernels had caught up).  On that machine plain llama-cpp-python on the 0.5B's copy
# outran the product on its pinned file (0.84x): a user should know the choice exists, and make it.
_ZEN4 = "as fast as from the pinned file on a 2-core Zen 4"
SPEED_FORMATS = {
    models.QWEN_15B: SpeedFormat("q4_0_pure", 3.623, 3.821, f"the target alone 1.09-1.40x {_ZEN4}"),
    models.QWEN_05B: SpeedFormat("q4_0_pure", 4.648, 4.980, f"the target alone 1.48-1.49x {_ZEN4}"),
}


def speed_offer(name: str) -> str:
    """One line offering ``name``'s speed format, with its gain where measured and its perplexity beside the pinned
    file's; "" for a name that has none (a path, a format already named, a model without one)."""
    spec = SPEED_FORMATS.get(str(name).lower())
    if spec is None:
        return ""
    cost = 100.0 * (spec.ppl / spec.ppl_pinned - 1.0)
    return (f"{name}: '{name}:{spec.fmt}' is this model requantized for speed ({spec.gain}; perplexity on held-out "
            f"code {spec.ppl:.3f} against {spec.ppl_pinned:.3f} for the pinned file, +{cost:.1f} %); name it with "
            f"--target to use it")


def wide_pays(flags: Iterable[str]) -> bool:
    """Whether a CPU with these /proc/cpuinfo flags decodes Q8_0 faster than Q5_0: x86 AVX2 without VNNI."""
    flags = set(flags)
    return "avx2" in flags and not flags & {"avx_vnni", "avx512_vnni"}


def _registry(name_or_path: str) -> bool:
    """A registry model's name, not a file of the user's (a path always means that file)."""
    return str(name_or_path).lower() in models.REGISTRY and not Path(name_or_path).expanduser().is_file()


def measures_wide(name_or_path: str, wide: str = "auto", gpu_layers: int = 0,
                  flags: Iterable[str] | None = None) -> bool:
    """Whether ``auto`` must time the pinned file against its wide copy (``runtime.wideprobe``): a mostly-Q5_0
    registry target on the CPU, where no rule (:func:`wide_pays`) decides."""
    if wide != "auto" or gpu_layers or not _registry(name_or_path) or str(name_or_path).lower() not in MOSTLY_Q5_0:
        return False
    return not wide_pays(cpuid.cpu_identity()["flags"] if flags is None else flags)


def check_wide(wide: str) -> None:
    """Refuse a ``--wide`` choice that does not exist (Settings.check, before anything loads)."""
    if wide not in WIDE_CHOICES:
        raise BadRequest(f"wide must be one of {', '.join(WIDE_CHOICES)}, not {wide!r}")


def target_file(name_or_path: str, wide: str = "auto", flags: Iterable[str] | None = None) -> Path:
    """The file ``name_or_path`` runs from.  ``wide``: ``auto`` takes the ``:wide`` copy of a mostly-Q5_0
    registry target where :func:`wide_pays` on this CPU; ``on`` takes it for any registry name; ``off`` never."""
    check_wide(wide)
    name = str(name_or_path).lower()
    registry = _registry(name_or_path)
    if wide == "on" and not registry:
        raise BadRequest(f"--wide on takes a registry model name, not {name_or_path!s}; for a file of your own, "
                         f"`omnidraft-gguf widen IN OUT` makes the copy")
    if registry and (offer := speed_offer(name)):
        log.info("%s", offer)
    if wide == "off" or not registry:
        return models.resolve(name_or_path)
    if wide == "auto":
        flags = cpuid.cpu_identity()["flags"] if flags is None else flags
        if name not in MOSTLY_Q5_0 or not wide_pays(flags):
            return models.resolve(name_or_path)
    log.info("%s: running its exact wide copy (%s:wide: Q5_0 blocks as Q8_0, every weight unchanged), which this "
             "CPU decodes faster; --wide off runs the pinned file", name, name)
    return models.resolve(f"{name}:{models.WIDE}")
