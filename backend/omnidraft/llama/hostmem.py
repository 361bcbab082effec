"""How much memory this host has, and can give a model now, read where the kernel says (Linux, Android/Termux).

A phone with 4 GB runs other apps beside Termux; a model load that does not fit there is ended by the
low-memory killer, not refused with a message, so what the product may load on its own initiative (a second
copy of a target, to time it) is weighed against what is available first."""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def _field(key: str, meminfo: str | None) -> int | None:
    """One /proc/meminfo field in bytes; None where there is no such file (macOS) or field."""
    try:
        text = MEMINFO.read_text() if meminfo is None else meminfo
    except OSError:
        return None
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == key:
            value, *unit = rest.split()
            return int(value) * (1024 if unit == ["kB"] else 1)
    return None


def available_bytes(meminfo: str | None = None) -> int | None:
    """``MemAvailable``: free memory plus the cache the kernel can drop. None where unknown (no /proc, or a kernel
    before 3.14): callers then go on as if it fits."""
    return _field("MemAvailable", meminfo)


def total_bytes(meminfo: str | None = None) -> int | None:
    return _field("MemTotal", meminfo)
