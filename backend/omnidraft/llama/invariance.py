"""How faithful is a verification batch to one-token decoding, per kernel mode?

Exact speculative decoding needs the target's logits for a verified row to equal the logits the
target alone computes one token at a time.  llama.cpp's CPU kernels switch algorithms with the batch
size, and the two engine modes differ:

* ``exact``: plain weights, f32 KV cache.  Bit-identical up to some batch size on every CPU build
  measured (7 rows on the 2-core Xeon), slowest batched products (2.2-3.2x a decode for 4 rows).
* ``fast``: repacked weights where the build has them (Q4_0, IQ4_NL, Q8_0 on x86 and ARM), f16 KV.
  A 4-row pass of a Q4_0 model costs about 1.5x a decode.  Bit-identical on some files (Qwen-0.5B
  Q4_0), a few 1e-6 off on others (Qwen-1.5B Q4_0), far off on others (Q4_K_M: argmax flips).

``measure`` answers, once per model file, build, thread count and mode (cached on disk): the largest
batch whose every row is bit-identical (``max_identical``), and, over batches of 2..8 rows recomputing
positions first decoded one at a time, the largest |logit difference| (``bound``) and the number of
argmax flips.  ``choose`` turns that into a verification plan (see ``VerifyPlan``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from . import build as llama_build, loadcheck
from .costmodel import sample_passes
from .engine import AUTO, Engine, EngineConfig, KernelMode

log = logging.getLogger(__name__)

PROBE_TEXT = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
              "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n")
GUARD_MAX_BOUND = 1e-3  # larger measured differences: the mode never verifies
GUARD_SAFETY = 100.0    # a guarded mode re-decodes decisions closer than this multiple of the bound
VERSION = 3             # of the cache entries below (3: pass times are the fastest of TIMING_ROUNDS)

# The target's llama.cpp batch (and ubatch) on a CPU.  Verification passes are a few rows; only prompts are long,
# and llama.cpp's working set for a prompt chunk grows with the ubatch (activations, attention scores).  With a
# 1,000-token prompt at 2k context (2-core Xeon VM, fast kernels, alternated runs): the 0.5B Q4_K_M peaked 35 MB
# lower at 128 than at 512 and read the prompt as fast (13.7-15.2 s against 15.3-16.3); the 1.5B Q4_K_M saved
# 52 MB but read it 7 % slower.  So small files (where the fixed costs weigh most) take the smaller batch: the
# 0.5B class (469 MiB at Q4_K_M, about 510 at Q8_0) lies under the line, the 1.5B class (900+ MiB at 4 bits)
# above it.  A GPU build keeps llama.cpp's 512, where large batches are what makes prompts fast.
SMALL_TARGET_BYTES = 640 << 20
SMALL_TARGET_BATCH = 128
# Pass times for the mode choice: the fastest of 5 samples per size, which other work on the machine can only
# slow down.  Medians of 3 once put exact's 3-row pass below its 2-row one (52.5 against 55.1 ms, 1.5B Q4_K_M,
# 2-core Zen 4) and chose exact, whose 4-row pass then cost 1.64 decodes in the run against fast's 1.34.
TIMING_ROUNDS = 5
# A first start with `auto` times both modes again in reverse order (exact, fast, fast, exact), each keeping its
# faster samples: on the 2-core Xeon VM the AVX-VNNI build once chose exact from a start-up whose fast timings ran
# 1.2-1.8x its later ones, and the choice is cached for good.  Three more rounds a mode: that build's first start
# of the 1.5B took 48 s instead of 37 (57-64 s with five; its two modes lie within this VM's noise of each other,
# and three starts chose exact, fast, fast).
RETIME_ROUNDS = 3
SCORE_TIE = 0.03  # modes scoring this close are a tie, kept by the faster one-token decode (what runs alone)
# How a prompt is read.  llama.cpp takes a long batch through ggml's large-batch products, but where the build's
# small-batch kernels do more per row, reading READ_ROWS tokens a pass is faster: 400 tokens of the 1.5B on the
# 2-core Zen 1 (AVX2 only, fast kernels) took 14.8 s in 8-row passes against 22.9 s in one batch (q4_0_pure) and
# 14.2-15.2 against 17.9-18.4 s (Q4_K_M); its exact kernels were slower so (20.8 against 18.4 s), the 0.5B
# about even (7.0 against 7.2 s).  So the mode that runs times READ_PROBE tokens both ways once (a 64-token batch
# reads at the 512-token one's rate there; ``with_reads``, after the mode choice, which does not need it) and reads
# in rows only where that is READ_MARGIN faster.  Rows of up to 8 are
# bit-identical to one-token decoding in the fast mode, so such a read also leaves the state a token-by-token read
# would.
READ_ROWS = 8
READ_PROBE = 64
READ_MARGIN = 0.05


@dataclass
class Fidelity:
    mode: str
    max_identical: int  # largest n whose batch rows are all bit-identical to one-token decoding
    bound: float        # largest |logit difference| seen over batches of 2..max_n rows
    flips: int          # rows whose argmax changed
    positions: int      # rows compared
    t_pass: dict = field(default_factory=dict)  # n rows -> median seconds of one pass (str keys in JSON)
    t_read: dict = field(default_factory=dict)  # READ_PROBE tokens read in one batch ("batch") / READ_ROWS a pass

    def t(self, n: int) -> float:
        return float(self.t_pass.get(str(n), self.t_pass.get(n, 0.0)))

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def read_rows(self) -> int:
        """Tokens a prompt pass takes: READ_ROWS where that read was measured READ_MARGIN faster, else 0 (the
        engine's whole batch)."""
        batch, rows = self.t_read.get("batch", 0.0), self.t_read.get("rows", 0.0)
        return READ_ROWS if 0 < rows < (1 - READ_MARGIN) * batch else 0


@dataclass
class VerifyPlan:
    """How the target verifies: batch size, and the guard for a mode that is only nearly identical.

    ``guard == 0``: every verified row is bit-identical to one-token decoding (exact output).
    ``guard > 0``: rows may differ by up to ``bound``; any decision (greedy top-2 margin, or a
    sampled token's inverse-CDF distance) within ``guard`` logits is re-decoded one token at a time.
    """

    mode: str
    max_batch: int
    bound: float = 0.0
    guard: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _key(path: Path, cfg, mode: str) -> str:
    st = path.stat()
    return "|".join(str(x) for x in (VERSION, path.resolve(), st.st_size, st.st_mtime_ns, cfg.threads(),
                                     mode, cfg.use_flash_attn(), cfg.n_gpu_layers, llama_build.build_id()))


def _read(cache_file: Path | None) -> dict:
    if cache_file is None or not cache_file.is_file():
        return {}
    try:
        table = json.loads(cache_file.read_text())
    except (ValueError, OSError):
        return {}
    return table if isinstance(table, dict) else {}


def lookup(path: Path, cfg, mode: str, cache_file: Path | None) -> Fidelity | None:
    """A fidelity measured earlier for this file, build, threads and mode, without loading the model."""
    entry = _read(cache_file).get(_key(path, cfg, mode))
    try:
        return Fidelity(**entry) if isinstance(entry, dict) else None
    except TypeError:
        return None


def measure(engine: Engine, max_n: int = 8, prefixes: tuple[int, ...] = (37, 250), timing: bool = True) -> Fidelity:
    """Compare batches of 1..max_n rows with one-token decoding after each prefix length (the default
    pair: a short one and one that straddles a 256-cell KV boundary), then time passes of 1..max_n."""
    ids = engine.tokenize(PROBE_TEXT)
    best, bound, flips, positions = max_n, 0.0, 0, 0
    for n_prefix in prefixes:
        prefix = (ids * (n_prefix // len(ids) + 1))[:n_prefix]
        n, b, f, p = _measure_at(engine, prefix, ids[:max_n])
        best, bound, flips, positions = min(best, n), max(bound, b), flips + f, positions + p
    t_pass = {str(n): min(v) for n, v in sample_passes(engine, range(1, max_n + 1), TIMING_ROUNDS).items()} \
        if timing else {}
    engine.reset()
    return Fidelity(engine.mode, best, bound, flips, positions, t_pass)


def time_reads(engine: Engine) -> dict:
    """Seconds to read READ_PROBE prompt tokens in one batch and READ_PROBE / READ_ROWS passes (READ_ROWS'
    comment); {} where the engine cannot take the whole probe in one batch, or runs on a GPU (where large
    batches are what makes prompts fast)."""
    if engine.n_batch < READ_PROBE or engine.config.n_gpu_layers:
        return {}
    ids = engine.tokenize(PROBE_TEXT)
    ids = (ids * (READ_PROBE // len(ids) + 1))[:READ_PROBE]
    out, kept = {}, engine.read_rows
    engine.read_rows = 0  # an engine already reading in rows would split the one batch too
    try:
        for way, step in (("batch", READ_PROBE), ("rows", READ_ROWS)):
            engine.reset()
            t0 = time.perf_counter()
            for i in range(0, READ_PROBE, step):
                engine.decode(ids[i:i + step], "none")
            out[way] = time.perf_counter() - t0
    finally:
        engine.read_rows = kept
    engine.reset()
    return out


def _measure_at(engine: Engine, prefix: list[int], seq: list[int]) -> tuple[int, float, int, int]:
    engine.reset()
    engine.decode(prefix, "none")
    single = [engine.decode([tok], "last")[0].copy() for tok in seq]
    best, identical, bound, flips, positions = 1, True, 0.0, 0, 0
    for n in range(2, len(seq) + 1):
        engine.rollback(len(prefix))
        rows = engine.decode(seq[:n], "all")
        same = all(np.array_equal(rows[i], single[i]) for i in range(n))
        identical = identical and same
        if identical:
            best = n
        for i in range(n):
            bound = max(bound, float(np.max(np.abs(rows[i] - single[i]))))
            flips += int(np.argmax(rows[i]) != np.argmax(single[i]))
        positions += n
    return best, bound, flips, positions


def cached_measure(engine: Engine, cache_file: Path | None, max_n: int = 8) -> Fidelity:
    known = lookup(engine.path, engine.config, engine.mode, cache_file)
    if known is not None:
        return known
    fid = measure(engine, max_n)
    log.info("%s (%s kernels): batches up to %d rows bit-identical; max |difference| %.3g over %d rows, "
             "%d argmax flips", engine.path.name, fid.mode, fid.max_identical, fid.bound, fid.positions, fid.flips)
    _store(engine, fid, cache_file)
    return fid


def retimed(engine: Engine, fid: Fidelity, cache_file: Path | None) -> Fidelity:
    """``fid`` with each pass time the faster of its own and a new sample (stored)."""
    again = sample_passes(engine, sorted(int(n) for n in fid.t_pass), RETIME_ROUNDS)
    engine.reset()
    fid = replace(fid, t_pass={str(n): min(fid.t(n), min(v)) for n, v in again.items()})
    _store(engine, fid, cache_file)
    return fid


def with_reads(engine: Engine, fid: Fidelity, cache_file: Path | None) -> Fidelity:
    """``fid`` with its prompt reads timed (``time_reads``) and stored where it has none yet: once per file, build
    and threads, for the mode that runs only (a fidelity cached before reads were timed gets them here too)."""
    if fid.t_read:
        return fid
    reads = time_reads(engine)
    if not reads:  # a GPU, or a batch too small to time the one-batch read
        return fid
    fid = replace(fid, t_read=reads)
    _store(engine, fid, cache_file)
    return fid


def _store(engine: Engine, fid: Fidelity, cache_file: Path | None) -> None:
    if cache_file is None:
        return
    table = _read(cache_file)
    table[_key(engine.path, engine.config, engine.mode)] = fid.as_dict()
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_name(cache_file.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table, indent=1))
    os.replace(tmp, cache_file)


def plan_for(fid: Fidelity, max_n: int = 8) -> VerifyPlan | None:
    """The verification plan a measured mode allows, or None if it must never verify."""
    if fid.max_identical >= 2 or fid.mode == KernelMode.EXACT:
        return VerifyPlan(fid.mode, max(1, fid.max_identical))
    if fid.flips == 0 and fid.bound <= GUARD_MAX_BOUND:
        return VerifyPlan(fid.mode, max_n, fid.bound, GUARD_SAFETY * max(fid.bound, 1e-7))
    return None


def score(fid: Fidelity, plan: VerifyPlan, acceptance: float = 0.6, draft_cost: float = 0.1) -> float:
    """Tokens per second a mode can reach at a nominal acceptance, relative to its own T(1) scale.

    Used to choose between kernel modes before anything is known about the drafter: the best draft
    length within the plan, each drafted token priced at ``draft_cost`` of a one-token decode."""
    t1 = fid.t(1)
    if t1 <= 0:
        return 0.0
    best = 1.0 / t1
    for k in range(1, plan.max_batch):
        tn = fid.t(k + 1)
        if tn > 0:
            tokens = sum(acceptance ** i for i in range(k + 1))
            best = max(best, tokens / (tn + k * draft_cost * t1))
    return best


def choose_mode(fids: dict[KernelMode, Fidelity], plans: dict[KernelMode, VerifyPlan]) -> KernelMode:
    """The best-scoring of the allowed modes; among those within ``SCORE_TIE`` of it, the fastest one-token
    decode, which is what the target alone runs at where drafting does not pay."""
    scores = {m: score(f, plans[m]) for m, f in fids.items()}
    best = max(scores.values())
    return min((m for m in fids if scores[m] >= (1 - SCORE_TIE) * best), key=lambda m: fids[m].t(1))


def probe(engine: Engine, max_n: int = 8) -> int:
    """Largest n <= max_n whose batch rows are all bit-identical to one-token decoding (no timing)."""
    return measure(engine, max_n, timing=False).max_identical


def target_batch(path: Path, gpu_layers: int) -> int:
    """The target's llama.cpp batch: smaller for a small file on a CPU (SMALL_TARGET_BATCH's comment)."""
    if gpu_layers == 0 and path.stat().st_size < SMALL_TARGET_BYTES:
        return SMALL_TARGET_BATCH
    return EngineConfig.n_batch


def _only(engines: dict, mode: KernelMode, path: Path, cfg: dict) -> None:
    """``engines`` holding ``mode``'s engine and no other: one model in memory at a time."""
    for other in [m for m in engines if m != mode]:
        engines.pop(other).close()
    if mode not in engines:
        engines[mode] = Engine(path, cfg[mode])


def load_target(path: Path, n_ctx: int, threads: int, kernels: str, cache: Path,
                gpu_layers: int = 0) -> tuple[Engine, VerifyPlan]:
    """The target in the kernel mode that serves fastest while verifying as allowed, and its plan.

    Each mode's fidelity and pass times are measured once per file, build and threads (cached in
    ``cache``).  ``auto`` keeps ``fast`` only where its plan is allowed (bit-identical rows, or
    a tiny bound with the near-tie guard; never Q4_K_M-like argmax flips) and it scores better than
    ``exact`` (``score``: tokens/s at a nominal acceptance); later starts load the chosen mode directly.
    ``gpu_layers`` layers go to a GPU build (-1 = all): measured and cached apart from the CPU's."""
    cfg = {m: EngineConfig(n_ctx=n_ctx, n_threads=threads, batch_invariant=m.batch_invariant, n_gpu_layers=gpu_layers,
                           n_batch=target_batch(path, gpu_layers)) for m in KernelMode}
    modes = list(KernelMode) if kernels == AUTO else [KernelMode(kernels)]
    fids = {m: lookup(path, cfg[m], m, cache) for m in modes}
    engines: dict[KernelMode, Engine] = {}
    # the modes about to be measured, load-checked in one child process rather than one each (llama.loadcheck)
    loadcheck.check_together(path, [cfg[m] for m in modes if fids[m] is None])
    try:
        fresh = [m for m in modes if fids[m] is None]
        for m in fresh:
            _only(engines, m, path, cfg)
            fids[m] = cached_measure(engines[m], cache)
        if len(fresh) > 1:  # A B, then B A: a slow phase of the machine during one timing decides nothing
            for m in reversed(fresh):
                _only(engines, m, path, cfg)
                fids[m] = retimed(engines[m], fids[m], cache)
            log.info("kernel modes timed twice, in both orders: T(1) %s", ", ".join(
                f"{m} {1e3 * fids[m].t(1):.1f} ms" for m in fresh))
        plans = {m: plan_for(fids[m]) for m in modes}
        allowed = [m for m in modes if plans[m] is not None]
        if allowed:
            mode = choose_mode({m: fids[m] for m in allowed}, plans)
        else:  # only 'fast' was asked for, and it may not verify
            fast = fids[KernelMode.FAST]
            log.warning("fast kernels change %s's decisions (%d argmax flips, max |difference| %.3g): using exact",
                        path.name, fast.flips, fast.bound)
            mode = KernelMode.EXACT
        _only(engines, mode, path, cfg)
        engine = engines.pop(mode)
        fid = with_reads(engine, fids.get(mode) or cached_measure(engine, cache), cache)
        plan = plans.get(mode) or plan_for(fid)
    finally:
        for e in engines.values():
            e.close()
    engine.read_rows = fid.read_rows
    log.info("target %s: %s kernels, verification batches of up to %d%s%s", path.name, mode, plan.max_batch,
             f", near-tie guard {plan.guard:.2g}" if plan.guard else " (bit-identical)", _read_note(fid))
    return engine, plan


def _read_note(fid: Fidelity) -> str:
    if not fid.t_read:
        return ""
    how = f"{READ_ROWS} tokens a pass" if fid.read_rows else "in whole batches"
    return (f"; prompts read {how} ({READ_PROBE} tokens: {fid.t_read['rows']:.2f} s {READ_ROWS} a pass, "
            f"{fid.t_read['batch']:.2f} s in one)")
