"""What a figure names about the CPU that gave it: model name, vendor family/model, the core where it is known,
and the flags its speed hangs on (doctor's CPU line, every result file's machine record)."""

from __future__ import annotations

import platform

# The instruction sets a figure's speed hangs on, in the order a reader compares machines by.
SPEED_FLAGS = ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "amx_int8", "asimddp", "i8mm")
# AMD (family, first model, last model) -> core: Zen 3 and Zen 4 share family 25, so the model decides.
_AMD_CORES = ((23, 0x00, 0xff, "Zen/Zen 2"), (25, 0x00, 0x0f, "Zen 3"), (25, 0x10, 0x1f, "Zen 4"),
              (25, 0x20, 0x5f, "Zen 3"), (25, 0x60, 0xaf, "Zen 4"), (26, 0x00, 0xff, "Zen 5"))


def _first_processor(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines of a /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def amd_core(family: int, model: int) -> str:
    """The Zen generation of an AMD family/model pair ("" where unknown)."""
    return next((c for f, lo, hi, c in _AMD_CORES if f == family and lo <= model <= hi), "")


def cpu_identity(cpuinfo: str | None = None) -> dict:
    """What a figure names about the CPU that gave it: model name, vendor family/model, the core where it is
    known (VMs often report only "AMD EPYC", and a Zen 3 and a Zen 4 of that name differ by a factor), the
    speed-relevant flags.  ``cpuinfo``: a /proc/cpuinfo text (this machine's by default)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    info = _first_processor(cpuinfo)
    name = info.get("model name") or platform.processor() or platform.machine()
    family, model = info.get("cpu family", ""), info.get("model", "")
    amd = info.get("vendor_id") == "AuthenticAMD" and family.isdigit() and model.isdigit()
    flags = set((info.get("flags") or info.get("Features", "")).split())  # aarch64 names them "Features"
    return {"name": name, "family": family, "model": model, "core": amd_core(int(family), int(model)) if amd else "",
            "flags": [f for f in SPEED_FLAGS if f in flags]}


def cpu_summary() -> str:
    """One line for reports and doctor: "AMD EPYC (family 26 model 2, Zen 5; avx2 avx512_vnni ...)"."""
    c = cpu_identity()
    where = ", ".join(x for x in (f"family {c['family']} model {c['model']}" if c["family"] else "", c["core"]) if x)
    return f"{c['name']} ({'; '.join(x for x in (where, ' '.join(c['flags'])) if x)})"
