"""Pinned or wide, measured where no rule decides: the target a mostly-Q5_0 registry model runs from.

``formats.wide_pays`` covers the CPUs measured to decode the 0.5B's ``:wide`` copy faster (AVX2 without VNNI: the
Zen 1). Elsewhere it depends on the moment's bound. On a 2-core Zen 5 (AVX-512 VNNI) the wide copy's 4-row pass
took 12.9-13.0 ms against the pinned file's 17.5-17.9 every time, but its one-token pass 9.3 against 10.4 ms in one
run and 11.3 against 10.9 in another, when the VM read memory slower (BENCHMARKS.md, thirty-seventh session); a
Zen 4's decode is bound by memory, which the wide file's 1.55x bytes of Q5_0 tensors cost. So ``--wide auto`` there
times both files once per machine, build and setting, interleaved so that the VM's drift lands on both, scores
them as the kernel modes are scored, runs the better and remembers the verdict (``formats.json`` in the state dir).
Both files hold the same values, so the choice changes speed only, never a token.

The copy is 1.3x the file, and timing holds both at once. Where the host lacks the memory for that now (a phone
beside its other apps), ``auto`` serves the pinned file, says so and asks again at the next start; the same holds
for serving a copy that a verdict or a rule names.
"""

from __future__ import annotations

import json
import logging
import platform
from pathlib import Path
from statistics import median
from types import SimpleNamespace

from omnidraft import statefile
from omnidraft.assets import models
from omnidraft.llama import build as llama_build
from omnidraft.llama import cpuid, invariance
from omnidraft.llama.costmodel import sample_passes
from omnidraft.llama.engine import Engine
from omnidraft.llama.invariance import VerifyPlan

from . import formats, memory
from .settings import Settings

log = logging.getLogger(__name__)

VERDICTS = "formats.json"
ROUNDS = 4  # interleaved timing rounds (each: 3 passes of each size 1..4 per file)


def prefers_wide(times: dict[str, dict[int, float]]) -> bool:
    """Whether the wide copy serves faster, judged as the kernel modes are (``invariance.choose_mode``): tokens a
    second at a nominal acceptance over the timed pass sizes, and within ``SCORE_TIE`` of each other the faster
    one-token pass (what the target alone runs at), kept by the pinned file on a tie."""
    def scored(t: dict[int, float]) -> float:
        return invariance.score(SimpleNamespace(t=lambda n: t.get(n, 0.0)), SimpleNamespace(max_batch=max(t)))

    pinned, wide = scored(times["pinned"]), scored(times["wide"])
    if wide >= (1 - invariance.SCORE_TIE) * pinned and pinned >= (1 - invariance.SCORE_TIE) * wide:
        return times["wide"][1] < times["pinned"][1]
    return wide > pinned


def _machine() -> str:
    """The part of a verdict's key that names this machine and its llama.cpp build."""
    cpu = cpuid.cpu_identity()
    return "|".join((platform.node(), cpu["name"], cpu["family"], cpu["model"], " ".join(cpu["flags"]),
                     llama_build.build_id()))


def verdict_key(settings: Settings, pinned: Path) -> str:
    """What the verdict depends on: the machine, the llama.cpp build, the pinned file, threads and kernels."""
    return "|".join((_machine(), f"{pinned.name}:{pinned.stat().st_size}", str(settings.threads), settings.kernels))


def kept_file(settings: Settings, state_root: Path) -> Path | None:
    """The file this machine's kept verdict names for ``settings.target`` (None: not timed here yet)."""
    pinned = models.resolve(settings.target)
    known = statefile.read(state_root / VERDICTS, verdict_key(settings, pinned)) or {}
    if known.get("choice") == "pinned":
        return pinned
    return models.resolve(f"{settings.target}:{models.WIDE}") if known.get("choice") == "wide" else None


def describe(state_root: Path) -> list[str]:
    """One line per verdict kept for this machine and build (``omnidraft doctor``): the file, the setting, the
    choice and its timings."""
    try:
        table = json.loads((state_root / VERDICTS).read_text())
    except (OSError, ValueError):
        return []
    here, lines = _machine() + "|", []
    for key, v in table.items() if isinstance(table, dict) else ():
        if not key.startswith(here):
            continue
        try:
            file, threads, kernels = key[len(here):].split("|")
            p, w = v["t_ms"]["pinned"], v["t_ms"]["wide"]
            n = max(p, key=int)
            lines.append(f"{file.rsplit(':', 1)[0]} (threads {threads}, kernels {kernels}): the {v['choice']} file "
                         f"(T(1) pinned {p['1']} / wide {w['1']} ms, T({n}) {p[n]} / {w[n]} ms)")
        except (KeyError, TypeError, ValueError):
            continue
    return lines


def _fitting(settings: Settings, chosen: Path, pinned: Path) -> Path:
    """The file a kept verdict names, or the pinned one where this host lacks the memory for the wide copy now."""
    if chosen == pinned or not (short := memory.shortfall(memory.engine_bytes(chosen, settings.n_ctx))):
        return chosen
    log.warning("%s: its wide copy serves faster here, but this host has %s for it now; running the pinned file "
                "(the same tokens, %.0f MB smaller)", settings.target, short,
                (chosen.stat().st_size - pinned.stat().st_size) / 1e6)
    return pinned


def _room_to_time(settings: Settings, pinned: Path, made: bool) -> bool:
    """Whether this host can hold both files' engines at once now, as the timing does (the copy's size estimated
    where it is not made yet); a warning where not: the pinned file serves and the next start asks again."""
    size = pinned.stat().st_size
    wide_bytes = int(size * formats.MOSTLY_Q5_0[settings.target.lower()]) if made \
        else models.derived_path(settings.target, models.WIDE).stat().st_size
    one = memory.engine_bytes(pinned, settings.n_ctx)  # the same weights' cache: the header read once
    both = 2 * one + wide_bytes - size
    if short := memory.shortfall(both):
        log.warning("%s: not timing its wide copy against the pinned file, which holds both at once (%s); running "
                    "the pinned file, and the next start asks again (--wide off stops asking, --wide on runs the "
                    "copy)", settings.target, short)
    return not short


def _load(settings: Settings, path: Path, state_root: Path) -> tuple[Engine, VerifyPlan]:
    return invariance.load_target(path, settings.n_ctx, settings.threads, settings.kernels,
                                  state_root / "invariance.json", settings.gpu_layers)


def _time(engines: dict[str, Engine], max_n: int) -> dict[str, dict[int, float]]:
    """Median seconds of a pass over 1..max_n rows, per file, the files taking turns first round by round."""
    samples: dict[str, dict[int, list[float]]] = {w: {n: [] for n in range(1, max_n + 1)} for w in engines}
    order = list(engines)
    for r in range(ROUNDS):
        for which in (order if r % 2 == 0 else order[::-1]):
            for n, ts in sample_passes(engines[which], range(1, max_n + 1), 3).items():
                samples[which][n].extend(ts)
    return {w: {n: median(v) for n, v in s.items()} for w, s in samples.items()}


def load(settings: Settings, state_root: Path) -> tuple[Engine, VerifyPlan]:
    """The session's target: the file ``formats.target_file`` names, or where no rule decides between a
    mostly-Q5_0 target's pinned file and its wide copy, the one this machine's timing chose (:func:`measured`)."""
    if formats.measures_wide(settings.target, settings.wide, settings.gpu_layers):
        return measured(settings, state_root)
    path = formats.target_file(settings.target, settings.wide)
    if settings.wide == "auto" and str(settings.target).lower() in formats.MOSTLY_Q5_0 and not settings.gpu_layers:
        path = _fitting(settings, path, models.resolve(settings.target))  # the rule's copy, where it fits
    return _load(settings, path, state_root)


def measured(settings: Settings, state_root: Path) -> tuple[Engine, VerifyPlan]:
    """The target, from its pinned file or its wide copy, whichever this machine's verdict names; measured and
    remembered on first use. A pinned verdict removes a wide copy that this measurement made."""
    name = settings.target
    pinned = models.resolve(name)
    if (chosen := kept_file(settings, state_root)) is not None:
        return _load(settings, _fitting(settings, chosen, pinned), state_root)
    made = not models.derived_path(name, models.WIDE).is_file()
    if not _room_to_time(settings, pinned, made):
        return _load(settings, pinned, state_root)
    log.info("%s: timing its pinned file against its exact wide copy (Q5_0 blocks as Q8_0) once on this CPU, "
             "to run the faster; --wide on|off skips this", name)
    try:
        wide = models.resolve(f"{name}:{models.WIDE}")
    except OSError as e:  # a full disk, say: the pinned file serves, and the next start asks again
        log.warning("%s: could not make its wide copy (%s); running the pinned file", name, e)
        return _load(settings, pinned, state_root)
    loaded: dict[str, tuple[Engine, VerifyPlan]] = {}
    try:
        for which, f in (("pinned", pinned), ("wide", wide)):
            loaded[which] = _load(settings, f, state_root)
        times = _time({w: e for w, (e, _) in loaded.items()}, min(4, *(plan.max_batch for _, plan in loaded.values())))
        choice = "wide" if prefers_wide(times) else "pinned"
        keep = loaded.pop(choice)
    finally:
        for engine, _ in loaded.values():
            engine.close()
    ms = {w: {n: round(1e3 * t, 2) for n, t in v.items()} for w, v in times.items()}
    path = state_root / VERDICTS
    statefile.write(path, verdict_key(settings, pinned), {"choice": choice, "t_ms": ms})
    log.info("%s: the %s file serves faster here (T(n) ms: pinned %s, wide %s); remembered in %s", name, choice,
             ms["pinned"], ms["wide"], path)
    if choice == "pinned" and made:  # 1.4x the pinned file's disk, for nothing on this machine
        for f in (wide, wide.with_name(wide.name + ".from")):
            f.unlink(missing_ok=True)
    return keep
