"""One llama.cpp model + context, through llama-cpp-python's low-level API.

The engine knows nothing of speculation.  It tokenizes, owns a byte table
(token id -> raw bytes), decodes batches at explicit positions returning logits
only for the rows asked for, and rolls the KV cache back.  It tracks exactly
which tokens sit in its KV cache (``self.tokens``), so callers can reuse a
shared prefix and every rollback ends in one ``llama_memory_seq_rm``.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Sequence

import numpy as np

import llama_cpp

from . import build as llama_build, loadcheck, log as llama_log
from .tokenbytes import VOCAB_TABLES, TokenBytes, VocabTables
from gguf_tools.header import IDS_KEY, ROWS_KEY, check_header, head_token_ids
from omnidraft.errors import ContextOverflow, EngineError, InvalidModelFile, from_gguf_tools
from omnidraft.seq import common_prefix

log = logging.getLogger(__name__)

_SPECIAL_ATTRS = (
    llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN | llama_cpp.LLAMA_TOKEN_ATTR_UNUSED
)


class KernelMode(StrEnum):
    """How llama.cpp computes the target's batches (a str: the names in caches, JSON and flags)."""

    EXACT = "exact"  # batch-invariant: plain weights, f32 KV cache
    FAST = "fast"    # repacked weights where the build has them, f16 KV cache

    @property
    def batch_invariant(self) -> bool:
        return self is KernelMode.EXACT


AUTO = "auto"  # the kernels setting that measures both modes and keeps the faster one allowed to verify
KERNEL_CHOICES = (AUTO, *KernelMode)


def flash_attn_default(n_gpu_layers: int = 0) -> tuple[bool, str]:
    """(on, why) for an engine without a ``flash_attn`` flag; why: "forced" (OMNIDRAFT_FLASH_ATTN=0/1, for A/B runs),
    "gpu" (off), "hook" (fa-hook.patch: rows bit-identical, on), "hook-off" (OMNIDRAFT_SBQ4=0) or "no-hook" (off)."""
    forced = os.environ.get("OMNIDRAFT_FLASH_ATTN", "")
    if forced in ("0", "1"):
        return forced == "1", "forced"
    if n_gpu_layers:
        return False, "gpu"
    if llama_build.fa_invariant_active():
        return True, "hook"
    return False, "hook-off" if llama_build.has_fa_invariant() else "no-hook"


@dataclass
class EngineConfig:
    """How to load one model.  Every field has a safe default for a 2-8 core CPU."""

    n_ctx: int = field(default=4096, metadata={"help": "context window (tokens) of the KV cache"})
    n_threads: int = field(default=0, metadata={"help": "decode threads; 0 = all cores"})
    n_threads_batch: int = field(default=0, metadata={"help": "prompt/verify threads; 0 = n_threads"})
    n_batch: int = field(default=512, metadata={"help": "max tokens per llama_decode call"})
    n_gpu_layers: int = field(default=0, metadata={"help": "layers to offload to a GPU build (-1 = all)"})
    vocab_only: bool = field(default=False, metadata={"help": "load only the tokenizer (no weights)"})
    flash_attn: bool | None = field(default=None, metadata={
        "help": "flash attention (None: OMNIDRAFT_FLASH_ATTN=0/1 if set, else on for CPU passes where setup's "
                "build keeps its rows bit-identical to decoding, fa-hook.patch; off on a GPU and on other builds)"})
    mmap: bool | None = field(default=None, metadata={
        "help": "map the file instead of reading it (None: map plain weights, read repacked ones, so that each "
                "weight is resident once)"})
    batch_invariant: bool = field(default=True, metadata={
        "help": "f32 KV cache and no repacked weights, so that small verification batches give bit-identical "
                "logits to one-token decoding (needed for exact speculative output; costs about 10 % speed)"})

    def threads(self) -> tuple[int, int]:
        n = self.n_threads or os.cpu_count() or 1
        return n, self.n_threads_batch or n

    def use_flash_attn(self) -> bool:
        """Whether passes run flash attention.  On a CPU it fuses the attention's products, softmax and copies
        (a 1.5B Q4_K_M at 100 tokens of context, 2-core Zen 5: a decode 14.2 against 15.6 ms, an 8-row pass 43.5
        against 47.0; BENCHMARKS "flash attention kept exact").  The patched build makes its rows bit-identical to
        decoding, which upstream's split of one row's KV cache over threads (from 512 cells up) is not, and its
        fa_rows.cpp keeps long contexts cheap to verify (BENCHMARKS "Long contexts")."""
        if self.flash_attn is not None:
            return self.flash_attn
        return flash_attn_default(self.n_gpu_layers)[0]

    @property
    def mode(self) -> "KernelMode":
        """Kernel mode: ``exact`` (batch-invariant) or ``fast`` (repacked weights, f16 KV)."""
        return KernelMode.EXACT if self.batch_invariant else KernelMode.FAST


def check_gguf_header(path: Path) -> None:
    """Cheap pre-flight so that obvious non-GGUFs fail with a clear message, not a llama.cpp log line."""
    with from_gguf_tools():
        check_header(path)


@functools.cache
def init_backend() -> None:
    """llama.cpp's one-time process set-up (ggml's tables, backend registry), as `llama_cpp.Llama` does.

    Skipping it works on a CPU build by luck; a CUDA build then dies in the first model load (SIGSEGV
    in print_info), which is what the device machine showed before this call existed."""
    llama_cpp.llama_backend_init()


class Engine:
    """A loaded model with one KV-cache sequence (seq 0)."""

    def __init__(self, path: str | os.PathLike, config: EngineConfig | None = None):
        self.path = Path(path)
        self.config = config or EngineConfig()
        self.mode = self.config.mode
        check_gguf_header(self.path)
        loadcheck.ensure_loadable(self.path, self.config)  # in a child first: some files abort llama.cpp
        init_backend()
        llama_log.SINK.take_recent()
        self._model = self._load_model()
        self._ctx = None
        self._batch = None
        try:
            self.vocab = llama_cpp.llama_model_get_vocab(self._model)
            self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
            self.head_ids = self._head_ids()
            self._read_vocab()
            if not self.config.vocab_only:
                self._init_context()
        except Exception:
            self.close()
            raise
        self.tokens: list[int] = []  # exactly what is in the KV cache, in position order
        self.live_threads = self.config.threads()[0]  # what passes run on now (set_threads changes it)

    # ---------------------------------------------------------------- loading
    def _load_model(self):
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = self.config.vocab_only
        params.n_gpu_layers = self.config.n_gpu_layers
        if self.config.batch_invariant and hasattr(params, "use_extra_bufts"):
            # repacked CPU weights switch from a gemv to a gemm kernel at 4+ rows: different rounding
            params.use_extra_bufts = False
        # Repacked weights are copies: a mapped file stays resident beside them (the 1.5B q4_0_pure pair
        # peaked at 1.98 GB for a 1.0 GB file), so the fast mode reads the file instead; plain weights are
        # used where they lie in the mapping, resident once and shared with other processes.
        mmap = self.config.mmap if self.config.mmap is not None else self.config.batch_invariant
        if not mmap and hasattr(params, "load_mode"):
            params.load_mode = 0  # LLAMA_LOAD_MODE_NONE: read into the buffers (the default maps)
        model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not model:
            why = llama_log.SINK.take_recent() or "llama.cpp gave no reason"
            raise InvalidModelFile(f"{self.path}: llama.cpp could not load this model ({why})")
        return model

    def _head_ids(self) -> np.ndarray | None:
        """A frequency-ranked head's token per logits column (``gguf_tools.frhead``); None for a full head.
        Columns from ``len(head_ids)`` on are padding: only a drafter that maps columns reads such a model."""
        rows = self.meta(ROWS_KEY)
        if rows is None:
            return None
        ids = head_token_ids(self.path)
        if ids is None or len(ids) != int(rows) or ids.max(initial=0) >= self.n_vocab:
            raise InvalidModelFile(f"{self.path}: {IDS_KEY} does not match {ROWS_KEY}")
        return ids

    def _init_context(self) -> None:
        cfg = self.config
        n_train = llama_cpp.llama_model_n_ctx_train(self._model)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = min(cfg.n_ctx, n_train) if n_train > 0 else cfg.n_ctx
        params.n_batch = params.n_ubatch = cfg.n_batch
        params.n_threads, params.n_threads_batch = cfg.threads()
        params.no_perf = True
        if cfg.batch_invariant:
            # an f16 KV cache rounds differently for tokens attended to inside one batch
            params.type_k = params.type_v = 0  # GGML_TYPE_F32
        if hasattr(params, "flash_attn_type"):
            params.flash_attn_type = 1 if cfg.use_flash_attn() else 0
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise InvalidModelFile(f"{self.path}: could not create a context ({llama_log.SINK.take_recent()})")
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx)
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(cfg.n_batch, 0, 1)
        # llama.cpp caps a batch at the context asked for (n_ctx 300: batches of 300 in a 512-token context);
        # a longer chunk aborts the process (GGML_ASSERT n_tokens_all <= n_batch), so chunks stay within it
        self.n_batch = min(cfg.n_batch, llama_cpp.llama_n_batch(self._ctx))
        self.read_rows = 0  # tokens a pass of a long decode takes (0: n_batch); see invariance.READ_ROWS

    def _read_vocab(self) -> None:
        v = self.vocab
        self.vocab_type = llama_cpp.llama_vocab_type(v)
        self.bos_id = llama_cpp.llama_vocab_bos(v)
        self.eos_id = llama_cpp.llama_vocab_eos(v)
        self.eot_id = llama_cpp.llama_vocab_eot(v)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(v))
        tables = VOCAB_TABLES.get(self.path, self._read_tables)
        self.token_bytes, self.is_special, self.eog_ids = tables.token_bytes, tables.is_special, tables.eog_ids

    def _read_tables(self) -> VocabTables:
        v, buf = self.vocab, ctypes.create_string_buffer(256)
        table: list[bytes] = []
        special = np.zeros(self.n_vocab, dtype=bool)
        eog: set[int] = set()
        for t in range(self.n_vocab):
            table.append(self._piece(t, buf, special=False))
            if llama_cpp.llama_vocab_get_attr(v, t) & _SPECIAL_ATTRS:
                special[t] = True
            if llama_cpp.llama_vocab_is_eog(v, t):
                eog.add(t)
        special.flags.writeable = False  # shared by every engine of this file
        return VocabTables(TokenBytes(table), special, frozenset(eog))

    def _piece(self, token: int, buf, special: bool) -> bytes:
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:  # buffer too small: retry with the size llama.cpp asked for
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]  # .raw[:n], not .value: pieces may contain NUL bytes

    def close(self) -> None:
        """Free native memory; safe to call twice."""
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # ------------------------------------------------------------- metadata
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.raw[:n].decode("utf-8", "replace") if n >= 0 else None

    @property
    def chat_template(self) -> str | None:
        ptr = llama_cpp.llama_model_chat_template(self._model, None)
        return ptr.decode("utf-8") if ptr else None

    @property
    def architecture(self) -> str:
        return self.meta("general.architecture") or "unknown"

    def special_text(self, token: int) -> bytes:
        """Text of a token including control tokens (e.g. b'<|im_end|>')."""
        return self._piece(token, ctypes.create_string_buffer(256), special=True)

    # ------------------------------------------------------------ tokenizer
    def tokenize(self, text: str | bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        """Tokenize; ``special=True`` parses control-token text such as '<|im_start|>'."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        cap = len(data) + 8
        arr = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), arr, cap, add_bos, special)
        if n < 0:
            cap = -n
            arr = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), arr, cap, add_bos, special)
            if n < 0:
                raise EngineError(f"tokenize failed ({n}) for {len(data)} bytes")
        return list(arr[:n])

    def detokenize(self, ids: Sequence[int], special: bool = False) -> bytes:
        """Raw bytes of a token sequence (may end inside a UTF-8 character)."""
        if special:
            return b"".join(self.special_text(t) if self.is_special[t] else self.token_bytes[t] for t in ids)
        return b"".join(self.token_bytes[t] for t in ids)

    def set_threads(self, n: int) -> None:
        """Run every later pass, one-token and batched, on ``n`` CPU threads (a drafter's auto count: a small
        model may run faster on fewer, with fewer threads to wake and synchronise per tiny matmul)."""
        if n < 1:
            raise EngineError(f"threads must be at least 1, not {n}")
        llama_cpp.llama_set_n_threads(self._ctx, n, n)
        self.live_threads = n

    # -------------------------------------------------------------- decoding
    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def rollback(self, n_keep: int) -> None:
        """Drop KV entries at positions >= n_keep."""
        if n_keep < len(self.tokens):
            if not llama_cpp.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
                raise EngineError(f"KV rollback to {n_keep} refused")
            del self.tokens[n_keep:]

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    def reuse_prefix(self, ids: Sequence[int]) -> int:
        """Keep the KV of the longest common prefix of the cache and ``ids``, short of ``ids``' last token
        (whoever wants its logits decodes it); drop the rest.  Returns how many tokens were kept."""
        keep = min(common_prefix(self.tokens, ids), len(ids) - 1)
        self.rollback(keep)
        return keep

    def prefill(self, ids: Sequence[int], reuse: bool = True) -> int:
        """Put all of ``ids`` but the last in the KV cache; return how many were kept from before
        (``reuse_prefix``).  Nothing kept (or ``reuse`` off): a fresh context, computed as on a cold start."""
        keep = self.reuse_prefix(ids) if reuse else 0
        if not keep:
            self.reset()
        if len(ids) - 1 > keep:
            self.decode(ids[keep:-1], "none")
        return keep

    def decode(self, ids: Sequence[int], logits_for: Sequence[int] | str = "last") -> np.ndarray:
        """Append ``ids`` to the KV cache; return logits rows for the chosen indices of ``ids``.
        ``logits_for`` is a list of indices into ``ids``, "last", "all" or "none".
        The returned array is a view into llama.cpp's buffer: valid until the next decode.
        """
        n = len(ids)
        if n == 0:
            raise EngineError("decode of zero tokens")
        if self.n_past + n > self.n_ctx:
            raise ContextOverflow(f"{self.n_past + n} tokens exceed the context window of {self.n_ctx}")
        rows = _rows(logits_for, n)
        parts: list[np.ndarray] = []
        done, step = 0, min(self.read_rows or self.n_batch, self.n_batch)
        while done < n:  # chunks of n_batch (or read_rows); only chunks holding wanted rows ask for logits
            chunk = ids[done: done + step]
            want = [r - done for r in rows if done <= r < done + len(chunk)]
            self._decode_chunk(chunk, want)
            if want:
                parts.append(self._logits_view(len(want)))
                if done + len(chunk) < n:  # a later chunk overwrites the buffer: keep a copy
                    parts[-1] = parts[-1].copy()
            done += len(chunk)
        if not parts:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _decode_chunk(self, chunk: Sequence[int], want: list[int]) -> None:
        b = self._batch
        start = self.n_past
        wanted = set(want)
        for i, t in enumerate(chunk):
            b.token[i] = t
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i in wanted
        b.n_tokens = len(chunk)
        rc = llama_cpp.llama_decode(self._ctx, b)
        if rc != 0:
            # rc 1: no KV slot; < 0: error.  llama.cpp restores the memory on rc 1 / -1.
            self._resync_after_error()
            raise EngineError(f"llama_decode returned {rc} ({llama_log.SINK.take_recent()})")
        self.tokens.extend(int(t) for t in chunk)

    def _resync_after_error(self) -> None:
        pos_max = llama_cpp.llama_memory_seq_pos_max(self._mem, 0)
        self.rollback(min(len(self.tokens), pos_max + 1))

    def _logits_view(self, n_rows: int) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))


def _rows(logits_for: Sequence[int] | str, n: int) -> list[int]:
    if logits_for == "last":
        return [n - 1]
    if logits_for == "all":
        return list(range(n))
    if logits_for == "none":
        return []
    rows = sorted(set(int(r) for r in logits_for))
    if rows and (rows[0] < 0 or rows[-1] >= n):
        raise EngineError(f"logit rows {rows} out of range for {n} tokens")
    return rows

