"""The trainer: receive records over loopback HTTP, train the drafter every I prompts, publish versions.

One worker thread owns the torch model (training, export and the check run there, one at a time);
HTTP handlers only validate and store records, so an upload never waits for training.  Each update:

    untrained records (>= interval) -> one pass, one AdamW step per record, L = L_DM + lambda L_N-gram
    -> LoRA merged into the weights -> GGUF (tokenizer copied from the base) -> quantized -> checked in
    llama.cpp against the torch model -> published to the registry (atomic) -> records marked trained

With LoRA, each update trains a fresh adapter on top of the previous update's merged float32 weights
(the adapter and its AdamW state start again each update; the float weights never go through the
quantized file, so quantization error does not accumulate across updates).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from omnidraft import httpguard, models
from omnidraft.errors import BadRequest, OmniDraftError
from omnidraft.records import RecordError, validate
from omnidraft.registry import DrafterRegistry

from .store import Inbox

log = logging.getLogger(__name__)


HISTORY = 100  # updates kept in memory for /v1/status


@dataclass
class TrainerConfig:
    """Settings of the trainer process (the CLI flags are generated from these fields)."""

    base: str = field(default=models.DEFAULT_DRAFT, metadata={"help": "base drafter: short name or .gguf path"})
    state_dir: str = field(default="", metadata={"help": "inbox + registry directory (default: <cache>/trainer)"})
    interval: int = field(default=8, metadata={"help": "train once every this many new prompts (records)"})
    lam: float = field(default=0.2, metadata={"help": "lambda: weight of the n-gram NLL term"})
    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    lora_rank: int = field(default=32, metadata={"help": "LoRA rank; 0 = full fine-tuning"})
    max_len: int = field(default=1024, metadata={"help": "tokens per training sequence (prompt cut from the left)"})
    qtype: str = field(default="", metadata={"help": "quantization of published drafters (default: the base's)"})
    keep: int = field(default=5, metadata={"help": "published versions kept on disk"})
    check_tokens: int = field(default=16, metadata={"help": "tokens compared torch vs llama.cpp before publishing"})
    threads: int = field(default=0, metadata={"help": "CPU threads for torch and llama.cpp (0 = all)"})
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
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --------------------------------------------------------------- intake
    def receive(self, records: list) -> dict:
        ok, rejected = [], []
        for r in records:
            try:
                ok.append(validate(r))
            except RecordError as e:
                rejected.append(str(e))
        new, dup = self.inbox.add(ok) if ok else (0, 0)
        if rejected:
            log.warning("rejected %d records (first: %s)", len(rejected), rejected[0])
        if new:
            self._wake.set()
        return {"accepted": new, "duplicates": dup, "rejected": len(rejected)}

    def status(self) -> dict:
        cur = self.registry.current()
        return {**self.inbox.counts(), "updates": self.updates, "steps": self.steps_total, "busy": self.busy,
                "current": cur[0] if cur else "base", "interval": self.cfg.interval, "last_error": self.last_error,
                "history": self.history[-5:]}

    # -------------------------------------------------------------- training
    def _load(self) -> None:
        import torch

        from .model import load_gguf_model, model_file_type

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
        return self.update()

    def update(self) -> dict | None:
        import torch

        from .export import check_gguf, export_gguf
        from .loss import batch_from_record, record_loss
        from .model import add_lora, merged

        rows = self.inbox.untrained()
        if not rows:
            return None
        self.busy = True
        try:
            if self.model is None:
                self._load()
            cfg = self.cfg
            model = add_lora(self.model, cfg.lora_rank) if cfg.lora_rank > 0 else self.model
            model.train()
            params = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
            n_vocab = self.model.get_input_embeddings().weight.shape[0]
            t0, losses, infos = time.perf_counter(), [], []
            for i, (_, rec) in enumerate(rows):
                if max(rec["output_ids"] + rec["prompt_ids"], default=0) >= n_vocab:
                    log.warning("record %s has ids beyond the drafter vocabulary: skipped", rec["id"])
                    continue
                b = batch_from_record(rec, cfg.max_len)
                if b is None:
                    continue
                loss, info = record_loss(model, b, cfg.lam)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                losses.append(info["loss"])
                infos.append(info)
                log.info("update %d step %d/%d: loss %.4f (L_DM %.4f over %d, L_ngram %.4f over %d)",
                         self.updates + 1, i + 1, len(rows), info["loss"], info["l_dm"], info["n_dm"],
                         info["l_ngram"], info["n_ngram"])
            model.eval()
            self.model = merged(model)
            train_s = time.perf_counter() - t0
            self.steps_total += len(losses)
            meta = self._publish(export_gguf, check_gguf, losses, train_s, len(rows))
            self.inbox.mark_trained([s for s, _ in rows], self.updates + 1)
            self.updates += 1
            self.history.append(meta)
            del self.history[:-HISTORY]  # a trainer serves for months: keep its memory flat
            self.last_error = None
            return meta
        except Exception as e:
            self.last_error = f"{type(e).__name__}: {e}"
            log.exception("trainer update failed; records stay untrained")
            raise
        finally:
            self.busy = False

    def _publish(self, export_gguf, check_gguf, losses: list[float], train_s: float, n_records: int) -> dict:
        cfg = self.cfg
        t0 = time.perf_counter()
        tmp = self.registry.root / f".export-{time.time_ns()}.gguf"
        try:
            export_gguf(self.model, tmp, self.base_path, self.qtype, threads=cfg.threads)
            check = check_gguf(tmp, self.model, self.qtype, cfg.check_tokens, threads=cfg.threads)
            if not check.ok:
                raise BadRequest(f"exported drafter fails the logits check: {check.as_dict()}")
            meta = {"parent": self.model_version or "base", "update": self.updates + 1, "steps": len(losses),
                    "steps_total": self.steps_total, "records_seen": self.inbox.counts()["records"],
                    "records_in_update": n_records, "loss_first": losses[0] if losses else None,
                    "loss_last": losses[-1] if losses else None,
                    "loss_mean": sum(losses) / len(losses) if losses else None, "train_s": round(train_s, 2),
                    "export_s": round(time.perf_counter() - t0, 2), "qtype": self.qtype, "check": check.as_dict(),
                    "config": {k: v for k, v in asdict(cfg).items() if k in ("lam", "lr", "lora_rank", "max_len")}}
            version = self.registry.publish(tmp, meta, move=True)
        finally:
            tmp.unlink(missing_ok=True)
        self.model_version = version
        meta["version"] = version
        log.info("update %d published as %s: loss %.4f -> %.4f, %d steps in %.1f s, export+check %.1f s",
                 meta["update"], version, meta["loss_first"] or 0, meta["loss_last"] or 0, len(losses), train_s,
                 meta["export_s"])
        return meta

    # --------------------------------------------------------------- worker
    def start(self) -> "Trainer":
        self._thread = threading.Thread(target=self._run, name="omnidraft-trainer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(600)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(2.0)
            self._wake.clear()
            try:
                self.maybe_update()
            except Exception:  # noqa: BLE001 - logged in update(); the worker goes on
                time.sleep(5.0)


# ------------------------------------------------------------------ HTTP
MAX_BODY = 64 << 20  # bytes on the wire, and bytes after gzip inflation


class _TooLarge(Exception):
    pass


def _inflate(raw: bytes, limit: int) -> bytes:
    """gzip -> bytes, refusing (``_TooLarge``) to produce more than ``limit`` bytes."""
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(raw, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        raise _TooLarge(f"the gzip body inflates past {limit} bytes")
    if not d.eof:
        raise ValueError("truncated gzip body")
    if d.unused_data:
        raise ValueError("data after the end of the gzip body")
    return out


def create_app(trainer: Trainer, max_body: int = MAX_BODY):
    """Flask app factory; the trainer is the app's only state (``app.config['TRAINER']``).

    Every /v1 route needs the trainer's token; posts must be JSON from no foreign origin (httpguard)."""
    from flask import Flask, jsonify, request
    from werkzeug.exceptions import HTTPException

    app = Flask("omnidraft.trainer")
    app.config["TRAINER"] = trainer
    app.config["MAX_CONTENT_LENGTH"] = max_body

    @app.before_request
    def _guard():
        refused = httpguard.refusal(request, ())
        if refused is not None:
            status, msg, code = refused
            return jsonify(error=msg, code=code), status
        if request.path.startswith("/v1/") and not httpguard.bearer_ok(request, trainer.token):
            return jsonify(error="missing or invalid trainer token (send 'Authorization: Bearer TOKEN'; "
                                 "see <state-dir>/token)", code="invalid_token"), 401
        return None

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException):
        return jsonify(error=e.description or e.name, code=e.name.lower().replace(" ", "_")), e.code

    @app.errorhandler(OmniDraftError)
    def _typed_error(e: OmniDraftError):
        return jsonify(error=str(e), code=type(e).__name__), e.http_status

    @app.errorhandler(Exception)
    def _internal(e: Exception):
        log.exception("trainer HTTP handler failed")
        return jsonify(error=f"internal error: {type(e).__name__}", code="internal_error"), 500

    @app.post("/v1/records")
    def records():
        raw = request.get_data()
        try:
            if request.headers.get("Content-Encoding") == "gzip":
                raw = _inflate(raw, max_body)
            body = json.loads(raw)
            recs = body["records"]
            if not isinstance(recs, list):
                raise ValueError("records must be a list")
        except _TooLarge as e:
            return jsonify(error=str(e), code="request_too_large"), 413
        except RecursionError:
            return jsonify(error="bad batch: JSON nested too deeply", code="invalid_json"), 400
        except (OSError, ValueError, KeyError, TypeError, zlib.error) as e:
            return jsonify(error=f"bad batch: {e}", code="invalid_json"), 400
        return jsonify(trainer.receive(recs))

    @app.get("/v1/status")
    def status():
        return jsonify(trainer.status())

    return app


def start_http(trainer: Trainer, host: str = "127.0.0.1", port: int = 0):
    """Serve the app on a background thread; return (server, actual port).  ``server.shutdown()`` stops it."""
    from werkzeug.serving import make_server

    server = make_server(host, port, create_app(trainer), threaded=True)
    threading.Thread(target=server.serve_forever, name="omnidraft-trainer-http", daemon=True).start()
    return server, server.server_port
