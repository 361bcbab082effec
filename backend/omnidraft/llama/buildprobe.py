"""Does the installed llama.cpp build compute right on this machine?  Checked in a child process.

A build can compile and import fine and still die with SIGILL in the first matrix product (an
instruction set the CPU advertises but the OS does not enable, such as AMX tiles on worker threads),
or, worse, compute wrong numbers.  So setup and ``omnidraft doctor`` run this probe before anyone
relies on the build:

1. write a tiny random Llama GGUF (Q4_0 weights, so the repacked-weight kernels of the fast mode run
   too; byte-level SentencePiece vocabulary), a few hundred kB, with ``gguf`` and numpy;
2. in a child process, through the product's own ``Engine``, for both engine configurations
   (``exact``: batch-invariant, f32 KV, plain weights; ``fast``: repacked weights, f16 KV), on all
   cores: decode a prefix, then 8 tokens one at a time, then batches of 1..8 tokens over the same
   positions;
3. check that every row is finite, that each batch row agrees with one-token decoding, that the two
   modes agree, and that one-token logits agree with a numpy reference forward pass of the same weights.

A child that dies by a signal, hangs, or returns numbers outside the tolerances fails the probe with one
line naming what failed.  ``OMNIDRAFT_PROBE_FAULT=sigill|wrong|drift`` makes the child fail on purpose (an
illegal instruction on a worker thread; perturbed logits; one batch row off by 1e-3 of the spread, which
only the small-batch kernel's bit-identity check catches) so that tests can show the probe catches them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import dequantize, quantize

from . import log as llama_log  # noqa: F401 - routes llama.cpp's log lines (the child's) off stderr
from .build import sbq4_active
from .engine import Engine, EngineConfig, KernelMode
from .loadcheck import CHILD_ENV

# tiny Llama: 2 layers, GQA 4/2 heads; rows are multiples of 8 and columns of 32 so that Q4_0 repacks
N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_LAYER = 256, 4, 2, 512, 2
N_VOCAB = 3 + 256 + 61  # <unk> <s> </s>, 256 byte tokens, padding to a multiple of 8
EPS, ROPE_BASE = 1e-5, 10000.0
MAX_BATCH, PREFIX = 8, 24
# Differences are RMS over all logits, relative to the logits' spread.  Q4_0 products quantize the
# activations to 8 bits, so a right build sits near 0.02 against the float64 reference and between
# modes (measured on AVX-512 and AVX2); a wrong kernel is off by about the spread itself (1.0).
REL_TOL_REFERENCE = 0.15
REL_TOL_BATCH = 0.15
PROBE_FAULT_ENV = "OMNIDRAFT_PROBE_FAULT"


# ------------------------------------------------------------------ the model
def _weights(seed: int) -> dict[str, np.ndarray]:
    """f32 weights in numpy order (rows = ne1), before quantization."""
    rng = np.random.default_rng(seed)
    hd = N_EMBD // N_HEAD

    def mat(rows, cols, std=0.08):
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    w = {"token_embd.weight": mat(N_VOCAB, N_EMBD, 1.0), "output_norm.weight": np.ones(N_EMBD, np.float32),
         "output.weight": mat(N_VOCAB, N_EMBD)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.update({p + "attn_norm.weight": (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32),
                  p + "attn_q.weight": mat(N_EMBD, N_EMBD), p + "attn_k.weight": mat(N_HEAD_KV * hd, N_EMBD),
                  p + "attn_v.weight": mat(N_HEAD_KV * hd, N_EMBD), p + "attn_output.weight": mat(N_EMBD, N_EMBD),
                  p + "ffn_norm.weight": (1 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32),
                  p + "ffn_gate.weight": mat(N_FF, N_EMBD), p + "ffn_up.weight": mat(N_FF, N_EMBD),
                  p + "ffn_down.weight": mat(N_EMBD, N_FF)})
    return w


def write_probe_model(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the probe GGUF; return the weights as llama.cpp will see them (Q4_0 round-tripped)."""
    logging.getLogger("gguf").setLevel(logging.WARNING)  # its 'writing file' lines are noise here

    Q4 = gguf.GGMLQuantizationType.Q4_0
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(512)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(EPS)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    w.add_tokenizer_model("llama")
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)] + \
             [f"<pad{i}>".encode() for i in range(N_VOCAB - 259)]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([2, 3, 3] + [6] * 256 + [5] * (N_VOCAB - 259))  # unknown, control, byte, unused
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    seen = {}
    for name, arr in _weights(seed).items():
        if arr.ndim == 2:
            q = quantize(arr, Q4)
            w.add_tensor(name, q, raw_dtype=Q4)
            seen[name] = dequantize(q, Q4).reshape(arr.shape).astype(np.float32)
        else:
            w.add_tensor(name, arr)
            seen[name] = arr
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return seen


def reference_logits(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """Logits for every position of ``ids`` from a plain numpy Llama forward pass (float64)."""
    hd, rep = N_EMBD // N_HEAD, N_HEAD // N_HEAD_KV
    n = len(ids)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * g

    def rope(x):  # x: (n, heads, hd); llama.cpp's normal mode rotates adjacent pairs
        pos = np.arange(n)[:, None]
        theta = pos * ROPE_BASE ** (-np.arange(0, hd, 2) / hd)[None, :]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
        return out

    h = w["token_embd.weight"][ids].astype(np.float64)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        x = rms(h, w[p + "attn_norm.weight"])
        q = rope((x @ w[p + "attn_q.weight"].T).reshape(n, N_HEAD, hd))
        k = rope((x @ w[p + "attn_k.weight"].T).reshape(n, N_HEAD_KV, hd))
        v = (x @ w[p + "attn_v.weight"].T).reshape(n, N_HEAD_KV, hd)
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        att = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        h = h + np.einsum("hqk,khd->qhd", att, v).reshape(n, N_EMBD) @ w[p + "attn_output.weight"].T
        x = rms(h, w[p + "ffn_norm.weight"])
        g, u = x @ w[p + "ffn_gate.weight"].T, x @ w[p + "ffn_up.weight"].T
        h = h + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    return rms(h, w["output_norm.weight"]) @ w["output.weight"].T


# ------------------------------------------------------------------ the child
def _token_ids(seed: int) -> list[int]:
    rng = np.random.default_rng(seed + 1)
    return [1] + [int(t) for t in rng.integers(3, 259, PREFIX + MAX_BATCH - 1)]


def _inject_fault(kind: str) -> None:
    if kind == "sigill":
        # a real illegal instruction (ud2) on a worker thread, like AMX tiles the OS did not grant
        buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        buf.write(b"\x0f\x0b")
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        t = threading.Thread(target=ctypes.CFUNCTYPE(None)(addr))
        t.start()
        t.join()


def run_modes(model: Path, threads: int, n_gpu_layers: int = 0) -> dict:
    """In this process: logits of one-token and batched decoding in both modes (what the child does)."""
    fault = os.environ.get(PROBE_FAULT_ENV, "")
    ids = _token_ids(0)
    prefix, seq = ids[:PREFIX], ids[PREFIX:PREFIX + MAX_BATCH]
    out: dict = {"threads": threads, "gpu_layers": n_gpu_layers, "modes": {},
                 "sbq4": sbq4_active() if not n_gpu_layers else 0}
    for mode in KernelMode:
        eng = Engine(model, EngineConfig(n_ctx=256, n_threads=threads, batch_invariant=mode.batch_invariant,
                                         n_gpu_layers=n_gpu_layers))
        try:
            if fault == "sigill" and mode is KernelMode.FAST:
                _inject_fault(fault)
            eng.decode(prefix, "none")
            single = np.stack([eng.decode([t], "last")[0].copy() for t in seq])
            batches = []
            for n in range(1, MAX_BATCH + 1):
                eng.rollback(PREFIX)
                batches.append(np.asarray(eng.decode(seq[:n], "all"), dtype=np.float32).copy())
        finally:
            eng.close()
        if fault == "wrong" and mode is KernelMode.FAST:
            batches[-1][3] += 5.0 * batches[-1][3].std()
        if fault == "drift" and mode is KernelMode.FAST:  # within tolerance, but no longer bit-identical
            batches[-1][3] += 1e-3 * batches[-1][3].std()
        out["modes"][mode] = {"single": single.tolist(), "batches": [b.tolist() for b in batches]}
    return out


# ------------------------------------------------------------------ the parent
@dataclass
class ProbeResult:
    ok: bool
    line: str                      # one line for a person: what passed or what failed
    threads: int = 0
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)  # max relative differences, by check

    def as_dict(self) -> dict:
        return asdict(self)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    spread = float(np.std(b)) or 1.0
    return float(np.sqrt(np.mean((a - b) ** 2))) / spread


def judge(data: dict, weights: dict[str, np.ndarray]) -> tuple[bool, str, dict]:
    """Compare the child's logits with each other and with the numpy reference."""
    ids = _token_ids(0)
    ref = reference_logits(weights, ids[:PREFIX + MAX_BATCH])[PREFIX:]  # rows of the 8 one-token decodes
    fig: dict = {}
    for mode, d in data["modes"].items():
        single = np.asarray(d["single"])
        if not np.isfinite(single).all() or not all(np.isfinite(np.asarray(b)).all() for b in d["batches"]):
            return False, f"{mode} mode returned NaN or infinite logits", fig
        fig[f"{mode}_vs_reference"] = _rel(single, ref)
        fig[f"{mode}_batch_vs_single"] = max(_rel(np.asarray(b), single[:len(b)]) for b in d["batches"])
        fig[f"{mode}_bit_identical_batches"] = max(
            (len(b) for b in d["batches"] if np.array_equal(np.asarray(b, np.float32),
                                                           single[:len(b)].astype(np.float32))), default=0)
    fig["fast_vs_exact"] = _rel(np.asarray(data["modes"]["fast"]["single"]),
                                np.asarray(data["modes"]["exact"]["single"]))
    for key, tol in (("exact_vs_reference", REL_TOL_REFERENCE), ("fast_vs_reference", REL_TOL_REFERENCE),
                     ("exact_batch_vs_single", REL_TOL_BATCH), ("fast_batch_vs_single", REL_TOL_BATCH),
                     ("fast_vs_exact", REL_TOL_BATCH)):
        if fig[key] > tol:
            return False, f"wrong numbers: {key.replace('_', ' ')} differs by {fig[key]:.3g} of the logits' " \
                          f"spread (tolerance {tol})", fig
    if data.get("sbq4") and fig["fast_bit_identical_batches"] < MAX_BATCH:
        # the small-batch kernel computes every row alike whatever the batch: anything else is a bug
        return False, (f"small-batch Q4_0 kernel: fast-mode batches beyond "
                       f"{fig['fast_bit_identical_batches']} rows are not bit-identical to one-token decoding"), fig
    return True, "", fig


def _signal_name(rc: int) -> str:
    try:
        sig = signal.Signals(-rc)
    except ValueError:
        return f"signal {-rc}"
    return {"SIGILL": "SIGILL (illegal instruction)", "SIGSEGV": "SIGSEGV (segmentation fault)",
            "SIGBUS": "SIGBUS (bus error)", "SIGFPE": "SIGFPE"}.get(sig.name, sig.name)


def probe(threads: int = 0, timeout: float = 180.0, workdir: Path | None = None, n_gpu_layers: int = 0) -> ProbeResult:
    """Run the check in a child process on ``threads`` threads (0 = every core), offloading
    ``n_gpu_layers`` layers (-1 = all) where the build has a GPU backend."""
    threads = threads or os.cpu_count() or 1
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=workdir, prefix="omnidraft-probe-") as tmp:
        model, result = Path(tmp) / "probe.gguf", Path(tmp) / "result.json"
        weights = write_probe_model(model)
        cmd = [sys.executable, "-m", "omnidraft.llama.buildprobe", "--child", str(model), "--out", str(result),
               "--threads", str(threads), "--gpu-layers", str(n_gpu_layers)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return ProbeResult(False, f"llama.cpp build check FAILED: the engine hung for {timeout:.0f} s "
                                      f"decoding a tiny model on {threads} threads", threads)
        secs = time.perf_counter() - t0
        if proc.returncode < 0:
            why = ("this build uses CPU instructions this machine does not run" if -proc.returncode == signal.SIGILL
                   else "the build is broken here (a compiler or C++ runtime mismatch, or a bad kernel)")
            return ProbeResult(False, f"llama.cpp build check FAILED: the engine died with "
                                      f"{_signal_name(proc.returncode)} on {threads} threads: {why}", threads, secs)
        if proc.returncode != 0 or not result.exists():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return ProbeResult(False, f"llama.cpp build check FAILED: the probe exited {proc.returncode}: {tail}",
                               threads, secs)
        data = json.loads(result.read_text())
        ok, why, fig = judge(data, weights)
        fig["sbq4"] = data.get("sbq4", 0)
    if not ok:
        return ProbeResult(False, f"llama.cpp build check FAILED: {why}", threads, secs, fig)
    where = f"{threads} threads" + (" + GPU offload" if n_gpu_layers else "")
    line = (f"llama.cpp build check passed: both engine modes on {where} match a numpy reference "
            f"(max {max(fig['exact_vs_reference'], fig['fast_vs_reference']):.2g} of the logits' spread), "
            f"batches of 1-{MAX_BATCH} agree with one-token decoding")
    if fig.get("sbq4"):
        line += f"; small-batch Q4_0 kernel on, fast batches of 1-{MAX_BATCH} bit-identical"
    return ProbeResult(True, line, threads, secs, fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omnidraft.llama.buildprobe",
                                description="Check, in a child process, that this llama.cpp build decodes "
                                            "right on this machine (exit 0) or say in one line what failed (1).")
    p.add_argument("--threads", type=int, default=0, help="threads (default: every core)")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to a GPU build (-1 = all)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--child", metavar="GGUF", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        # this process is the crash isolation (the parent reports how it ended): no load check in a further
        # child, whose refusal would also hide a SIGILL the parent names, and no verdicts kept for a temp file
        os.environ[CHILD_ENV] = "1"
        Path(args.out).write_text(json.dumps(run_modes(Path(args.child), args.threads, args.gpu_layers)))
        return 0
    res = probe(args.threads, n_gpu_layers=args.gpu_layers)
    print(json.dumps(res.as_dict(), indent=1) if args.json else res.line)
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
