"""The trainer: receive records over loopback HTTP, train the drafter every I prompts, publish versions.

One worker thread owns the torch model (training, export and the check run there, one at a time);
HTTP handlers only validate and store records, so an upload never waits for training.  Each update:

    untrained records (>= interval) -> one pass, one AdamW step per record, L = L_DM + lambda L_N-gram
    -> LoRA merged into the weights -> GGUF (tokenizer copied from the base) -> quantized -> checked in
    llama.cpp against the torch model -> published to the registry (atomic) -> records marked trained

With LoRA, each update trains a fresh adapter on top of the previous update's merged float32 weights
(the adapter and its AdamW state start again each update; the float weights never go through the
quantized file, so quantization error does not accumulate across updates).

One bad record never stops training.  Uploads are checked whole (``records.validate`` against this
trainer's own drafter vocabulary: fingerprint and size) and refused with a 400 naming the record and the
field.  Records that reach the inbox anyway (stored by an older build, or a check that missed something)
are checked again before each update; a step whose loss or gradient is non-finite is not taken, and a
step that leaves non-finite weights discards the update (the model is reloaded from the last published
version) -- either way that record is quarantined with the reason (never retried, counted in
/v1/status) and training goes on with the others.  An update that trained no step publishes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from omnidraft import httpguard, statefile
from omnidraft.assets import models
from omnidraft.errors import BadRequest, OmniDraftError, RegistryCorrupt
from omnidraft.online.records import RecordError, validate
from omnidraft.online.registry import DrafterRegistry
from omnidraft.llama.engine import Engine, EngineConfig
from omnidraft.vocab.bridge import vocab_fingerprint

from .export import check_gguf, export_gguf
from .model import load_gguf_model, merged, model_file_type
from .store import Inbox
from .update import finite, load_replay, train_pass

log = logging.getLogger(__name__)


# the settings that shape an update, recorded with each published version
_UPDATE_FIELDS = ("lam", "lr", "lora_rank", "max_len", "epochs", "prompt_lam", "train_embeddings", "replay_ratio",
                  "recent", "recent_ratio", "micro_batch")
HISTORY = 100  # updates kept in memory for /v1/status
MAX_ERRORS = 20  # record errors listed in one 400 answer
RETRY_MIN_S, RETRY_MAX_S = 5.0, 600.0  # a failing update is tried again after 5 s, 10 s, ... at most 10 min


class InvalidRecords(BadRequest):
    """An upload holds records the trainer cannot use; none of the batch was stored."""

    def __init__(self, errors: list[dict]):
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"record {first['index']}{first['at']}: {first['message']}{more}")
        self.errors = errors
        self.code = "foreign_vocabulary" if first["field"] == "draft_fp" else "invalid_record"


class DrafterUnavailable(OmniDraftError):
    """The trainer cannot read its own drafter, so it cannot check records against its vocabulary."""

    http_status = 503


@dataclass(frozen=True)
class DrafterVocab:
    fp: str  # vocab_bridge.vocab_fingerprint of the drafter's token bytes: the records' draft_fp
    n_vocab: int


def read_vocab(path: Path) -> DrafterVocab:
    """The drafter vocabulary a GGUF holds (llama.cpp, vocabulary only: no weights are read)."""
    eng = Engine(path, EngineConfig(vocab_only=True))
    try:
        return DrafterVocab(vocab_fingerprint(eng.token_bytes), eng.n_vocab)
    finally:
        eng.close()


def retry_delay(failures: int) -> float:
    """Seconds before trying again after ``failures`` failed updates in a row (doubling, capped)."""
    return min(RETRY_MAX_S, RETRY_MIN_S * 2.0 ** min(max(failures - 1, 0), 30))


@dataclass
class TrainerConfig:
    """Settings of the trainer process (the CLI flags are generated from these fields)."""

    base: str = field(default=models.DEFAULT_DRAFT, metadata={"help": "base drafter: short name or .gguf path"})
    state_dir: str = field(default="", metadata={"help": "inbox + registry directory (default: <cache>/trainer)"})
    interval: int = field(default=8, metadata={"help": "train once every this many new prompts (records)"})
    lam: float = field(default=0.2, metadata={"help": "lambda: weight of the n-gram NLL term"})
    # LoRA of rank 16 at lr 1e-3 by default (issue 43, 2026-12-02): on 256-512-request streams full fine-tuning at lr 1e-4
    # forgot what it did not stream (old domains -4 to -9 points by 512, a not-yet-streamed set -7.6 by 256) where
    # LoRA kept them within 1.5, for the same gain on the new domain (+6.2 points at 256); on 64 requests the two are
    # within noise of each other, LoRA's CPU updates the faster (BENCHMARKS.md, Adaptation, "512 requests")
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank; 0 = full fine-tuning of the layers"})
    max_len: int = field(default=1024, metadata={"help": "tokens per training sequence (prompt cut from the left)"})
    epochs: int = field(default=3, metadata={"help": "passes over each update's new records"})
    prompt_lam: float = field(default=0.5, metadata={"help": "weight of the prompt's teacher-forced NLL (0 = the "
                                                             "paper's loss: outputs only)"})
    train_embeddings: bool = field(default=False, metadata={"help": "full fine-tuning: train the token embedding "
                                                                    "(and tied head) too, not only the layers"})
    replay: str = field(default="", metadata={"help": "records of the old domains (JSON lines) replayed in every "
                                                      "update so that they are not forgotten ('' = none)"})
    replay_ratio: float = field(default=0.5, metadata={"help": "replay steps per new record in an update"})
    recent: int = field(default=0, metadata={"help": "records of earlier updates (the newest) drawn from in "
                                                   "each update"})
    recent_ratio: float = field(default=1.0, metadata={"help": "steps on those per new record in an update"})
    micro_batch: int = field(default=1, metadata={"help": "records per optimizer step, in one padded forward (1 = "
                                                      "a step per record)"})
    precision: str = field(default="auto", metadata={"help": "training products: auto (bf16 where the CPU has it "
                                                             "natively, else f32) | bf16 | f32"})
    qtype: str = field(default="", metadata={"help": "quantization of published drafters (default: the base's)"})
    keep: int = field(default=5, metadata={"help": "published versions kept on disk"})
    check_tokens: int = field(default=16, metadata={"help": "tokens compared torch vs llama.cpp before publishing"})
    threads: int = field(default=0, metadata={"help": "CPU threads for torch and llama.cpp (0 = all)"})
    device: str = field(default="cpu", metadata={"help": "torch device of the training steps (cpu | cuda): the "
                                                         "weights come back to the CPU to be exported and checked"})
    host: str = field(default="127.0.0.1", metadata={"help": "HTTP bind address (loopback only by default)"})
    port: int = field(default=8765, metadata={"help": "HTTP port (0 = any free port)"})
    token: str = field(default="", metadata={"help": "shared token clients must send (default: generated into "
                                                     "<state-dir>/token, mode 0600, where `serve` finds it)"})

    def root(self) -> Path:
        return Path(self.state_dir) if self.state_dir else models.cache_dir() / "trainer"


class Trainer:
    def __init__(self, cfg: TrainerConfig):
        self.cfg = cfg
        self.base_path = models.resolve(cfg.base)
        root = cfg.root()
        statefile.check_dir(root, "--state-dir")  # one line, not a traceback from the token or the inbox
        self.token = cfg.token or httpguard.load_or_create_token(root / httpguard.TOKEN_FILE)
        self.inbox = Inbox(root / "inbox.sqlite")
        self.registry = DrafterRegistry(root / "registry", keep=cfg.keep, base_path=self.base_path)
        self.model = None
        self.model_version: str | None = None
        self.qtype = cfg.qtype
        self.updates = 0
        self.steps_total = 0
        self.history: list[dict] = []  # the last HISTORY updates' metadata (published ones: also in the registry)
        self.busy = False
        self.last_error: str | None = None
        self.discarded = 0  # updates thrown away because a step made the weights non-finite
        self.replay: list[dict] = []  # the old domains' records, replayed in every update (read at start())
        self._vocab: DrafterVocab | None = None
        self._vocab_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --------------------------------------------------------------- intake
    def vocab(self) -> DrafterVocab:
        """This trainer's drafter vocabulary (read from the base once; every published version shares it)."""
        with self._vocab_lock:
            if self._vocab is None:
                try:
                    self._vocab = read_vocab(self.base_path)
                except Exception as e:  # noqa: BLE001 - whatever llama.cpp says, records cannot be checked
                    raise DrafterUnavailable(f"the trainer's drafter {self.base_path} cannot be read ({e}); "
                                             f"records cannot be checked against its vocabulary") from None
            return self._vocab

    def receive(self, records: list) -> dict:
        """Store a batch of records if every one is valid for this drafter; else raise InvalidRecords."""
        vocab = self.vocab()
        errors = []
        for i, r in enumerate(records):
            try:
                validate(r, vocab.n_vocab, vocab.fp)
            except RecordError as e:
                rid = r["id"] if e.field not in ("record", "schema", "id") else None  # an id checked sound
                errors.append({"index": i, "id": rid, "field": e.field, "message": str(e),
                               "at": f" ({rid})" if rid else ""})
        if errors:
            log.warning("refused a batch of %d records: %d invalid (first: record %d: %s)", len(records),
                        len(errors), errors[0]["index"], errors[0]["message"])
            raise InvalidRecords(errors[:MAX_ERRORS])
        new, dup = self.inbox.add(records) if records else (0, 0)
        if new:
            self._wake.set()
        return {"accepted": new, "duplicates": dup, "rejected": 0}

    def status(self) -> dict:
        """Counts, quarantine and history.  A registry that cannot be read (a corrupt CURRENT, a version whose
        file fails its check) shows in "registry_problem" (and "current" is the version CURRENT names, or
        None), never as a failed status."""
        try:
            cur = self.registry.current()
            current, problem = cur[0] if cur else "base", None
        except RegistryCorrupt as e:
            current, problem = getattr(e, "version", None), str(e)
        return {**self.inbox.counts(), "updates": self.updates, "steps": self.steps_total, "busy": self.busy,
                "current": current, "registry_problem": problem, "interval": self.cfg.interval,
                "last_error": self.last_error,
                "discarded_updates": self.discarded, "quarantine": self.inbox.quarantined(5),
                "history": self.history[-5:]}

    # -------------------------------------------------------------- training
    def load_replay(self) -> int:
        """Read ``cfg.replay`` (records checked against this drafter's vocabulary); the pool's size."""
        if self.cfg.replay:
            vocab = self.vocab()
            self.replay = load_replay(self.cfg.replay, vocab.n_vocab, vocab.fp)
        return len(self.replay)

    def _load(self) -> None:
        # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
        import torch

        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        cur = self.registry.current()
        version, path = cur if cur else ("base", self.base_path)
        t0 = time.perf_counter()
        self.model = load_gguf_model(path)
        self.model_version = version
        self.qtype = self.cfg.qtype or model_file_type(self.base_path)
        log.info("trainer: loaded drafter %s (%s) into torch in %.1f s; publishing as %s",
                 version, path.name, time.perf_counter() - t0, self.qtype)

    def maybe_update(self) -> dict | None:
        """Train and publish if at least ``interval`` untrained records are stored."""
        if self.inbox.counts()["untrained"] < self.cfg.interval:
            return None
        return self.update(min_records=self.cfg.interval)

    def update(self, min_records: int = 1) -> dict | None:
        """Train on the untrained records and publish; None if nothing was published.

        Records training cannot use are quarantined first; with fewer than ``min_records`` usable ones
        left, nothing is trained.  A pass whose step left non-finite weights is discarded and run again
        without that record, from the last published weights."""
        rows = self.inbox.untrained()
        if not rows:
            return None
        self.busy = True
        try:
            rows = self._screen(rows)
            if len(rows) < min_records:
                return None
            while True:
                if self.model is None:
                    self._load()
                t0 = time.perf_counter()
                self.model.to(self.cfg.device)
                done = self._train_pass(rows)
                self._quarantine(done.bad)
                bad = {seq for seq, _, _ in done.bad}
                rows = [r for r in rows if r[0] not in bad]
                if not done.discard:
                    break
                self.discarded += 1
                self.model = None  # the adapter (or the fully trained weights) went non-finite: start over
                log.error("update %d discarded (non-finite weights); training again on %d records from %s",
                          self.updates + 1, len(rows), self.model_version or "base")
            self.model = merged(done.model).to("cpu")  # exported and checked from the CPU
            train_s = time.perf_counter() - t0
            if not done.losses:
                # nothing learned: publishing would be an identical drafter under a new name
                self.inbox.skip([(seq, "no position to train on") for seq, _ in rows])
                log.warning("update trained 0 steps on %d records: nothing published", len(rows))
                self.last_error = None
                return None
            if not _finite(self.model.parameters()):
                raise FloatingPointError("the merged weights are non-finite: not published")
            self.steps_total += len(done.losses)
            meta = self._publish(export_gguf, check_gguf, done, train_s, len(rows))
            self.inbox.mark_trained([s for s, _ in rows], self.updates + 1)
            self.updates += 1
            self.history.append(meta)
            del self.history[:-HISTORY]  # a trainer serves for months: keep its memory flat
            self.last_error = None
            return meta
        except Exception as e:
            self.last_error = f"{type(e).__name__}: {e}"
            self.model = None  # half-trained or unpublished weights: the next try starts from the last published
            log.exception("trainer update failed; records stay untrained")
            raise
        finally:
            self.busy = False

    def _screen(self, rows: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
        """The rows that are valid records of this drafter's vocabulary; the others are quarantined."""
        vocab = self.vocab()
        good, bad = [], []
        for seq, rec in rows:
            try:
                good.append((seq, validate(rec, vocab.n_vocab, vocab.fp)))
            except RecordError as e:
                rid = rec.get("id") if isinstance(rec, dict) else None
                name = rid if isinstance(rid, str) and rid.isascii() and len(rid) <= 64 else f"at seq {seq}"
                bad.append((seq, name, f"invalid record: {e}"))
        self._quarantine(bad)
        return good

    def _train_pass(self, rows: list[tuple[int, dict]]):
        """This update's steps (``update.train_pass``); replay records that failed a step leave the pool."""
        recent = [r for _, r in self.inbox.recent_trained(self.cfg.recent)] if self.cfg.recent > 0 else []
        done = train_pass(self.model, rows, self.replay, self.cfg, seed=self.updates + 1, recent=recent)
        for j in sorted({j for j in done.bad_replay if j < len(self.replay)}, reverse=True):
            del self.replay[j]  # (a recent record that fails is only skipped: it trained once already)
        return done

    def _quarantine(self, bad: list[tuple[int, str, str]]) -> None:
        if not bad:
            return
        self.inbox.quarantine([(seq, reason) for seq, _, reason in bad])
        for _, rid, reason in bad:
            log.error("record %s quarantined (never retried): %s", rid, reason)

    def _publish(self, export_gguf, check_gguf, done, train_s: float, n_records: int) -> dict:
        """Export, check and publish the trained model; its metadata.  Losses are the new records' steps'."""
        cfg, losses = self.cfg, done.new_losses
        t0 = time.perf_counter()
        tmp = self.registry.root / f".export-{time.time_ns()}.gguf"
        try:
            export_gguf(self.model, tmp, self.base_path, self.qtype, threads=cfg.threads)
            check = check_gguf(tmp, self.model, self.qtype, cfg.check_tokens, threads=cfg.threads)
            if not check.ok:
                raise BadRequest(f"exported drafter fails the logits check: {check.as_dict()}")
            meta = {"parent": self.model_version or "base", "update": self.updates + 1, "steps": len(done.losses),
                    "steps_total": self.steps_total, "records_seen": self.inbox.counts()["records"],
                    "records_in_update": n_records, "replayed": done.replayed, "loss_first": losses[0] if losses else None,
                    "loss_last": losses[-1] if losses else None,
                    "loss_mean": sum(losses) / len(losses) if losses else None, "train_s": round(train_s, 2),
                    "export_s": round(time.perf_counter() - t0, 2), "qtype": self.qtype, "check": check.as_dict(),
                    "config": {k: v for k, v in asdict(cfg).items() if k in _UPDATE_FIELDS}}
            version = self.registry.publish(tmp, meta, move=True)
        finally:
            tmp.unlink(missing_ok=True)
        self.model_version = version
        meta.update(version=version, publish_s=round(time.perf_counter() - t0, 2))  # export + check + publish
        log.info("update %d published as %s: loss %.4f -> %.4f, %d steps in %.1f s, export+check %.1f s",
                 meta["update"], version, meta["loss_first"] or 0, meta["loss_last"] or 0, len(done.losses), train_s,
                 meta["export_s"])
        return meta

    # --------------------------------------------------------------- worker
    def start(self) -> "Trainer":
        self.vocab()  # a drafter that cannot be read fails here, at start-up, not at the first upload
        self.load_replay()
        self._thread = threading.Thread(target=self._run, name="omnidraft-trainer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(600)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wake.wait(2.0)
            self._wake.clear()
            try:
                self.maybe_update()
                failures = 0
            except Exception:  # noqa: BLE001 - logged in update(); the worker goes on, more slowly each time
                failures += 1
                self._stop.wait(retry_delay(failures))


def _finite(params) -> bool:
    return finite(params)
