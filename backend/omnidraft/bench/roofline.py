"""The roofline of a target pass on this CPU: memory read bandwidth and int8 multiply-add peak.

A pass over n <= 8 tokens reads every weight once and does n multiply-adds per weight, so its floor is
``max(weight bytes / bandwidth, n * weights / int8 peak)``.  Both ceilings come from roofline.c, compiled
here with the system C compiler for the widest int8 dot product this CPU advertises.  They are measured
anew beside every set of timings: on a shared VM the read bandwidth alone was seen anywhere from 45 to
78 GB/s (2 cores) within an hour.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gguf_tools.inspect import read
from omnidraft.errors import from_gguf_tools
from omnidraft.llama import build as llama_build

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("roofline.c")


@dataclass
class Ceiling:
    threads: int
    read_gbps: float
    int8_gmacs: float | None
    int8_isa: str | None

    def floor_ms(self, weight_bytes: float, weights: float, n: int) -> float:
        """The shortest possible pass over n rows: memory-bound or int8-bound, whichever is longer."""
        mem = weight_bytes / (self.read_gbps * 1e9)
        mac = n * weights / (self.int8_gmacs * 1e9) if self.int8_gmacs else 0.0
        return 1e3 * max(mem, mac)


def _isa_flags() -> list[str]:
    flags = llama_build.cpu_flags()
    if not llama_build.is_x86():
        return []
    if {"avx512f", "avx512bw", "avx512_vnni"} <= flags:
        return ["-mavx2", "-mavx512f", "-mavx512bw", "-mavx512vnni"]
    if {"avx2", "avx_vnni"} <= flags:
        return ["-mavx2", "-mavxvnni"]
    return ["-mavx2"] if "avx2" in flags else []


def _binary(workdir: Path) -> Path:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) to build the roofline benchmark")
    out = workdir / "roofline"
    subprocess.run([cc, "-O2", *_isa_flags(), str(SOURCE), "-o", str(out), "-lpthread"], check=True,
                   capture_output=True)
    return out


def measure(threads: list[int]) -> dict[int, Ceiling]:
    """Ceilings at each thread count (a few seconds each)."""
    with tempfile.TemporaryDirectory(prefix="omnidraft-roofline-") as tmp:
        exe = _binary(Path(tmp))
        out = {}
        for t in threads:
            line = subprocess.run([str(exe), str(t)], check=True, capture_output=True, text=True).stdout
            out[t] = Ceiling(**json.loads(line))
            log.info("roofline, %d thread(s): %s", t, out[t])
    return out


def model_weights(path: Path) -> tuple[int, int]:
    """(bytes, parameters) of the weights a decode streams: every matrix but the token embedding (read one
    row at a time), unless the model ties its output head to it."""
    with from_gguf_tools():
        tensors = read(path).tensors
    names = {t.name for t in tensors}
    nbytes = params = 0
    for t in tensors:
        if len(t.shape) < 2 or (t.name == "token_embd.weight" and "output.weight" in names):
            continue
        nbytes += int(t.n_bytes)
        params += int(t.n_elements)
    return nbytes, params
