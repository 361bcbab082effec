"""Timing on another machine with random-weight models of the real shapes (weights do not change timing).

    python scripts/device/device_kernels.py targets  --device cpu --threads 4,8 --skeletons DIR --out FILE
    python scripts/device/device_kernels.py drafters --device gpu --skeletons DIR --out FILE

``targets``: per Qwen target, quantization (Q4_K_M as shipped, Q4_0) and kernel mode, the fidelity of
batched logits and T(n)/T(1) (``invariance.measure``).  ``drafters``: T_draft, one drafted token after a
128-token context (``costmodel.time_passes``), for SmolLM2-135M cut to its first 2/4/6/8 layers and
whole (30), Q4_1 like the real file.
Run by scripts/device/device_check.sh; prints one JSON line per row and writes them all to --out.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from omnidraft.llama import costmodel, invariance  # first: libllama before numpy (see omnidraft/__init__.py)
from omnidraft.llama.engine import Engine, EngineConfig
from gguf_tools import synth

WORK = Path("/tmp/synthetic")


def _config(device: str, threads: int, **kw) -> EngineConfig:
    return EngineConfig(n_ctx=1024, n_threads=threads, n_gpu_layers=-1 if device == "gpu" else 0, **kw)


def targets(device: str, threads: list[int], skel: Path) -> list[dict]:
    rows = []
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        for q in ("q4_k_m", "q4_0"):
            path = WORK / f"{name}-{q}.gguf"
            if not path.exists():
                synth.build(skel / f"{name}.gguf.gz", path, seed=0, qtype=q)
            for th in threads:
                for mode in ("exact", "fast"):
                    with Engine(path, _config(device, th, batch_invariant=(mode == "exact"))) as e:
                        fid = invariance.measure(e)
                    t1 = fid.t(1)
                    rows.append(dict(model=name, qtype=q, device=device, threads=th, mode=mode, t1_ms=t1 * 1e3,
                                     ratio={n: fid.t(n) / t1 for n in (2, 4, 8)}, max_identical=fid.max_identical,
                                     bound=fid.bound, flips=fid.flips, positions=fid.positions))
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def drafters(device: str, threads: list[int], skel: Path) -> list[dict]:
    rows = []
    for layers in (2, 4, 6, 8, 30):
        path = WORK / f"smollm2-135m-l{layers}.gguf"
        if not path.exists():
            synth.build(skel / "smollm2-135m.gguf.gz", path, seed=0, layers=layers)
        for th in threads:
            with Engine(path, _config(device, th, batch_invariant=False)) as e:
                rows.append(dict(model="smollm2-135m", layers=layers, device=device, threads=th,
                                 t_draft_ms=costmodel.time_passes(e, range(1, 2), repeats=30)[1] * 1e3))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("targets", "drafters"))
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--threads", default="4,8", help="comma-separated CPU thread counts")
    ap.add_argument("--skeletons", type=Path, required=True, help="folder of <model>.gguf.gz skeletons")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    WORK.mkdir(exist_ok=True)
    threads = [int(t) for t in a.threads.split(",")]
    rows = (targets if a.what == "targets" else drafters)(a.device, threads, a.skeletons)
    a.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
