"""Hostile records and corrupted drafters against the trainer and the registry (issue items 4-7).

4 values: NaN / out-of-range probabilities, ids outside the trainer's own drafter vocabulary -> 400;
  a poisoned record that reaches the store anyway is quarantined (never retried) and the next good batch
  trains and publishes; a step that makes the loss, the gradient or the weights non-finite is discarded
5 types: strings where numbers go, a lone surrogate in an id -> 400 naming the record and the field, never 500
6 foreign vocabularies: refused at upload (draft_fp); an update that trained 0 steps publishes nothing
7 checksums: a published version carries the sha256 of its GGUF; a file changed after publishing is refused
  by every reader of the registry, and a session keeps the drafter it has
Connections (issue 45 row 3): the trainer's waitress has the server's limits (omnidraft.netlimits) and checks the
  token from the headers; a soak of 110 slow-header clients on 127.0.0.1 leaves /v1/status answering
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import zlib

import pytest

from omnidraft.errors import BadRequest, RegistryCorrupt
from omnidraft.online.records import SCHEMA
from omnidraft.online.registry import DrafterRegistry
from omnidraft.runtime.pair import Swaps

from tests.gguf_helpers import tiny_gguf


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_gguf(tmp_path_factory, "llama")


@pytest.fixture(scope="module")
def vocab(base):
    """(fingerprint, size) of the tiny drafter's vocabulary, read the way the server reads it."""
    from omnidraft.llama.engine import Engine, EngineConfig
    from omnidraft.vocab.bridge import vocab_fingerprint

    eng = Engine(base, EngineConfig(vocab_only=True))
    try:
        return vocab_fingerprint(eng.token_bytes), eng.n_vocab
    finally:
        eng.close()


def _trainer(base, tmp_path, **kw):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from omnidraft.trainer.service import Trainer, TrainerConfig

    cfg = dict(base=str(base), state_dir=str(tmp_path / "t"), interval=3, lora_rank=4, lr=1e-3, qtype="q8_0",
               keep=3, threads=2, epochs=1)  # one pass: a step per record
    return Trainer(TrainerConfig(**{**cfg, **kw}))


def _record(i: int, fp: str, n: int = 6) -> dict:
    out = [300 + 37 * i + 11 * j for j in range(n)]
    dm = [int(j % 3 != 2) for j in range(n)]
    return {"schema": SCHEMA, "id": f"r{i:010d}", "created": 0.0, "method": "omnidraft", "drafter_version": "base",
            "draft_fp": fp, "target_fp": "y", "k": 2, "prompt_ids": [1, 400, 500, 600],
            "output_ids": out, "dm": dm, "ngram": [1 - d for d in dm],
            "topk_ids": [[o, 400] if d else None for o, d in zip(out, dm)],
            "topk_probs": [[0.8, 0.1] if d else None for d in dm], "rest_mass": [0.1 if d else None for d in dm],
            "target_ids": list(range(n)), "n_sub": [1] * n, "from_draft": [0] * n, "stats": {}}


def _client(trainer):
    from omnidraft.trainer.app import create_app

    c = create_app(trainer).test_client()
    return lambda body: c.post("/v1/records", data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {trainer.token}"})


def _set(path, value):
    def mutate(r):
        *head, last = path
        obj = r
        for k in head:
            obj = obj[k]
        obj[last] = value
    return mutate


# (what the probe sends, the field the answer must name)
BAD = {
    "nan-prob": (_set(("topk_probs", 0, 0), float("nan")), "topk_probs"),
    "inf-prob": (_set(("topk_probs", 1, 1), float("inf")), "topk_probs"),
    "prob-above-1": (_set(("topk_probs", 0), [1.5, 0.0]), "topk_probs"),
    "probs-sum-above-1": (_set(("topk_probs", 0), [0.8, 0.7]), "topk_probs"),
    "negative-prob": (_set(("topk_probs", 0), [0.95, -0.05]), "topk_probs"),
    "nan-rest": (_set(("rest_mass", 0), float("nan")), "rest_mass"),
    "negative-output-id": (_set(("output_ids", 2), -1), "output_ids"),
    "output-id-past-vocab": (_set(("output_ids", 2), 32000), "output_ids"),
    "prompt-id-past-vocab": (_set(("prompt_ids", 0), 1 << 40), "prompt_ids"),
    "topk-id-past-vocab": (_set(("topk_ids", 0, 1), 99999), "topk_ids"),
    "mask-not-boolean": (_set(("dm", 0), 2), "dm"),
    "from-draft-short": (_set(("from_draft",), [0]), "from_draft"),
    "topk-lengths-differ": (_set(("topk_probs", 0), [0.8]), "topk_probs"),
    # item 5: types
    "n_sub-strings": (_set(("n_sub",), ["1"] * 6), "n_sub"),
    "topk_probs-string": (_set(("topk_probs", 0), "0.8,0.1"), "topk_probs"),
    "topk_probs-string-items": (_set(("topk_probs", 0), ["0.8", "0.1"]), "topk_probs"),
    "rest_mass-string": (_set(("rest_mass", 0), "0.1"), "rest_mass"),
    "output-id-float": (_set(("output_ids", 1), 5.5), "output_ids"),
    "output-id-bool": (_set(("output_ids", 1), True), "output_ids"),
    "lone-surrogate-id": (_set(("id",), "r00000\ud800x1"), "id"),
    "stats-not-object": (_set(("stats",), [1, 2]), "stats"),
    "stats-lone-surrogate": (_set(("stats",), {"finish_reason": "\udc80"}), "stats"),
    # item 6: another drafter vocabulary's record
    "foreign-draft_fp": (_set(("draft_fp",), "0123456789abcdef"), "draft_fp"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_record_is_a_400_naming_record_and_field_and_nothing_is_stored(base, vocab, tmp_path, case):
    mutate, fld = BAD[case]
    trainer = _trainer(base, tmp_path)
    good, bad = _record(0, vocab[0]), _record(1, vocab[0])
    mutate(bad)
    r = _client(trainer)(json.dumps({"records": [good, bad]}))  # NaN / Infinity: Python's JSON, as a probe sends
    assert r.status_code == 400 and r.is_json, (r.status_code, r.get_data(as_text=True))
    body = r.get_json()
    assert body["index"] == 1 and body["field"] == fld, body
    assert "record 1" in body["error"] and fld in body["error"], body
    assert body["code"] == ("foreign_vocabulary" if fld == "draft_fp" else "invalid_record")
    assert trainer.inbox.counts()["records"] == 0  # a batch is taken whole or not at all


def test_records_that_are_not_objects_and_the_good_batch_after_them(base, vocab, tmp_path):
    trainer = _trainer(base, tmp_path)
    post = _client(trainer)
    r = post(json.dumps({"records": [_record(0, vocab[0]), [1, 2]]}))
    assert r.status_code == 400 and r.get_json()["index"] == 1 and r.get_json()["field"] == "record"
    ok = post(json.dumps({"records": [_record(0, vocab[0]), _record(1, vocab[0])]}))
    assert ok.status_code == 200 and ok.get_json()["accepted"] == 2


def _inject(trainer, records):
    """Put records straight into the inbox, as if they had got past validation (or predate it)."""
    trainer.inbox.add(records)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("poison", ["nan-prob", "negative-output-id"])
def test_a_poisoned_record_in_the_store_is_quarantined_and_the_good_batch_publishes(base, vocab, tmp_path, poison):
    from omnidraft.trainer.service import Trainer

    fp = vocab[0]
    trainer = _trainer(base, tmp_path)
    bad = _record(1, fp)
    BAD[poison][0](bad)
    _inject(trainer, [_record(0, fp), bad, _record(2, fp), _record(3, fp)])
    meta = trainer.maybe_update()
    assert meta is not None and meta["version"] == "v0001" and meta["steps"] == 3 and meta["check"]["ok"]
    counts = trainer.inbox.counts()
    assert counts["quarantined"] == 1 and counts["untrained"] == 0
    st = trainer.status()
    assert st["quarantined"] == 1 and st["quarantine"][0]["id"] == bad["id"]
    assert BAD[poison][1] in st["quarantine"][0]["reason"]
    assert trainer.maybe_update() is None  # never retried
    path = trainer.registry.current()[1]
    assert trainer.registry.meta("v0001")["sha256"] == _sha(path)
    again = Trainer(trainer.cfg)  # after a restart too
    assert again.inbox.counts()["quarantined"] == 1 and again.maybe_update() is None


@pytest.mark.parametrize("mode", ["loss", "gradient", "weights"])
def test_a_step_that_goes_non_finite_is_discarded_and_training_goes_on(base, vocab, tmp_path, monkeypatch, mode):
    """The record itself is clean: the step goes wrong inside training, past every validation."""
    import torch

    import omnidraft.trainer.loss as loss_mod

    fp = vocab[0]
    trainer = _trainer(base, tmp_path)
    poisoned = "r0000000001"
    real_batch, real_loss, real_adamw = loss_mod.batch_from_record, loss_mod.record_loss, torch.optim.AdamW
    armed = {"weights": False}

    def batch(rec, max_len=1024):
        b = real_batch(rec, max_len)
        b.poison = rec["id"] == poisoned
        if b.poison and mode == "loss":
            b.topk_probs = torch.full_like(b.topk_probs, float("nan"))
        return b

    def record_loss(model, b, lam=0.2, max_len=1024):
        loss, info = real_loss(model, b, lam)
        if getattr(b, "poison", False) and mode == "gradient":  # finite value, NaN gradient
            p = next(q for q in model.parameters() if q.requires_grad)
            loss = loss + torch.sqrt(p.sum() * 0.0) * 0.0
        armed["weights"] = getattr(b, "poison", False) and mode == "weights"
        return loss, info

    class AdamW(real_adamw):
        def step(self, closure=None):
            out = super().step(closure)
            if armed["weights"]:
                with torch.no_grad():
                    self.param_groups[0]["params"][0].fill_(float("inf"))
            return out

    monkeypatch.setattr(loss_mod, "batch_from_record", batch)
    monkeypatch.setattr(loss_mod, "record_loss", record_loss)
    monkeypatch.setattr(torch.optim, "AdamW", AdamW)
    _inject(trainer, [_record(i, fp) for i in range(4)])
    meta = trainer.maybe_update()
    assert meta is not None and meta["steps"] == 3 and meta["check"]["ok"], meta
    st = trainer.status()
    assert st["quarantined"] == 1 and st["quarantine"][0]["id"] == poisoned
    assert mode in st["quarantine"][0]["reason"] and "non-finite" in st["quarantine"][0]["reason"]
    assert st["discarded_updates"] == (1 if mode == "weights" else 0)
    assert st["untrained"] == 0 and trainer.maybe_update() is None
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


@pytest.mark.parametrize("kind", ["foreign", "empty"])
def test_an_update_that_trains_no_step_publishes_nothing(base, vocab, tmp_path, kind):
    trainer = _trainer(base, tmp_path)
    if kind == "foreign":  # stored before refusal existed: same ids, another vocabulary's fingerprint
        recs = [_record(i, "0123456789abcdef") for i in range(3)]
    else:  # valid records with no output position (a generation that stopped at once)
        recs = [_record(i, vocab[0], n=0) for i in range(3)]
    _inject(trainer, recs)
    assert trainer.maybe_update() is None
    assert trainer.registry.current() is None and trainer.registry.latest() is None
    counts = trainer.inbox.counts()
    assert counts["untrained"] == 0 and counts["quarantined"] == (3 if kind == "foreign" else 0)
    assert counts["skipped"] == (0 if kind == "foreign" else 3)
    if kind == "foreign":
        assert "draft_fp" in trainer.status()["quarantine"][0]["reason"]
    assert trainer.maybe_update() is None


def test_an_inbox_from_before_quarantine_opens_and_keeps_its_records(tmp_path):
    from omnidraft.trainer.store import Inbox

    db = tmp_path / "inbox.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY AUTOINCREMENT, rid TEXT UNIQUE NOT NULL, "
                "received REAL, trained INTEGER NOT NULL DEFAULT 0, body BLOB)")
    for i, trained in enumerate([0, 0, 1]):
        con.execute("INSERT INTO records (rid, received, trained, body) VALUES (?, 0, ?, ?)",
                    (f"r{i:010d}", trained, zlib.compress(json.dumps({"id": f"r{i:010d}"}).encode())))
    con.commit()
    con.close()
    inbox = Inbox(db)
    assert inbox.counts() == {"records": 3, "untrained": 2, "quarantined": 0, "skipped": 0}
    seq = inbox.untrained()[0][0]
    inbox.quarantine([(seq, "test")])
    assert inbox.counts()["quarantined"] == 1 and len(inbox.untrained()) == 1
    q = inbox.quarantined()
    assert [(x["id"], x["reason"]) for x in q] == [("r0000000000", "test")] and q[0]["at"] > 0


def test_failed_updates_back_off():
    from omnidraft.trainer.service import RETRY_MAX_S, retry_delay

    delays = [retry_delay(n) for n in range(1, 12)]
    assert delays[0] == 5.0 and delays == sorted(delays) and delays[-1] == RETRY_MAX_S


# ---------------------------------------------------------------- 7: checksums
def _blob(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _flip_a_byte(path, at: int = 40) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))  # same size: only the bytes differ


def test_versions_carry_a_sha256_and_a_changed_file_is_refused(tmp_path):
    reg = DrafterRegistry(tmp_path / "reg", keep=5)
    v1 = reg.publish(_blob(tmp_path, "a.gguf", b"GGUF" + b"a" * 100))
    v2 = reg.publish(_blob(tmp_path, "b.gguf", b"GGUF" + b"b" * 100))
    for v in (v1, v2):
        assert reg.meta(v)["sha256"] == _sha(reg.versions / v / "model.gguf")
    _flip_a_byte(reg.versions / v2 / "model.gguf")
    for reader in (reg, DrafterRegistry(tmp_path / "reg")):  # this process, and a fresh reader
        with pytest.raises(RegistryCorrupt, match="sha256"):
            reader.current()
    with pytest.raises(BadRequest, match="sha256"):
        reg.rollback(v2)
    reg.rollback(v1)  # the repair
    assert reg.current()[0] == v1
    reg.annotate(v1, {"sha256": "0" * 64, "acceptance": 0.5})  # annotations never replace the checksum
    assert reg.meta(v1)["sha256"] == _sha(reg.versions / v1 / "model.gguf") and reg.current()[0] == v1


def test_a_version_whose_checksum_was_edited_is_refused(tmp_path):
    reg = DrafterRegistry(tmp_path / "reg")
    v = reg.publish(_blob(tmp_path, "a.gguf", b"GGUF" + b"a" * 100))
    meta_path = reg.versions / v / "meta.json"
    m = json.loads(meta_path.read_text())
    m["sha256"] = "f" * 64
    meta_path.write_text(json.dumps(m))
    with pytest.raises(RegistryCorrupt, match="sha256"):
        DrafterRegistry(tmp_path / "reg").current()


def test_a_version_without_a_checksum_is_refused_like_a_mismatch(tmp_path):
    """Issue 45 row 4: a meta.json lacking sha256 (an older build's, or edited) with flipped tensor bytes
    was swapped in silently; docs/RECORDS.md says such versions are refused the same way."""
    reg = DrafterRegistry(tmp_path / "reg")
    v = reg.publish(_blob(tmp_path, "a.gguf", b"GGUF" + b"a" * 100))
    meta_path = reg.versions / v / "meta.json"
    m = json.loads(meta_path.read_text())
    del m["sha256"]  # as an older build wrote it
    meta_path.write_text(json.dumps(m))
    with open(reg.versions / v / "model.gguf", "r+b") as f:  # and a flipped byte nothing can see
        f.seek(50)
        f.write(b"b")
    with pytest.raises(RegistryCorrupt, match="no sha256") as e:
        DrafterRegistry(tmp_path / "reg").current()
    assert e.value.version == v and "\n" not in str(e.value)
    with pytest.raises(BadRequest, match="no sha256"):
        reg.rollback(v)
    reg.rollback("base") if reg.path_of("base") else None


class _SwapSession:
    """A session's swaps (runtime.pair.Swaps, as Session holds them); loading records what it was asked to load."""

    def __init__(self, registry):
        self.loaded = []
        self.swaps = Swaps(self.loaded.append, registry)

    def maybe_swap(self):
        return self.swaps.maybe_swap()

    @property
    def drafter_version(self):
        return self.swaps.version


def test_a_session_refuses_a_corrupted_version_and_keeps_its_drafter(tmp_path, caplog):
    reg = DrafterRegistry(tmp_path / "reg")
    session = _SwapSession(reg)
    v1 = reg.publish(_blob(tmp_path, "a.gguf", b"GGUF" + b"a" * 100))
    assert session.maybe_swap() and session.drafter_version == v1
    v2 = reg.publish(_blob(tmp_path, "b.gguf", b"GGUF" + b"b" * 100))
    _flip_a_byte(reg.versions / v2 / "model.gguf")
    caplog.set_level(logging.INFO)
    for _ in range(3):  # every request asks; the refusal is reported once
        assert not session.maybe_swap()
    assert session.drafter_version == v1 and len(session.loaded) == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and v2 in errors[0].getMessage() and "sha256" in errors[0].getMessage()
    v3 = reg.publish(_blob(tmp_path, "c.gguf", b"GGUF" + b"c" * 100))  # a good publish swaps in as usual
    assert session.maybe_swap() and session.drafter_version == v3


def test_the_trainer_does_not_train_on_a_corrupted_current_version(base, vocab, tmp_path):
    trainer = _trainer(base, tmp_path)
    _inject(trainer, [_record(i, vocab[0]) for i in range(3)])
    v1 = trainer.maybe_update()["version"]
    trainer.model = None  # as after a restart: the next update loads the current version from disk
    _flip_a_byte(trainer.registry.versions / v1 / "model.gguf", at=-100)
    _inject(trainer, [_record(i, vocab[0]) for i in range(3, 6)])
    with pytest.raises(RegistryCorrupt, match="sha256"):
        trainer.maybe_update()
    assert trainer.inbox.counts()["untrained"] == 3 and "sha256" in trainer.last_error
    assert trainer.registry.latest() == v1



# ------------------------------------------------- the trainer's connections (issue 45 row 3)
class _FakeTrainer:
    """What the trainer's HTTP face asks of a Trainer, without torch or a model."""

    token = "t" * 43

    def status(self) -> dict:
        return {"ok": True}

    def receive(self, records) -> dict:
        return {"accepted": len(records), "duplicates": 0, "rejected": 0}


@pytest.fixture
def trainer_port():
    from omnidraft.trainer.app import start_http

    server, port = start_http(_FakeTrainer())
    try:
        yield port
    finally:
        server.shutdown()


def _answer_within(sock, timeout: float) -> bytes:
    """The response's status line, or b'' if none came within ``timeout`` (the server waits for a body)."""
    import socket

    sock.settimeout(timeout)
    try:
        return sock.recv(4096).split(b"\r\n", 1)[0]
    except socket.timeout:
        return b""


def _big_post(port: int, token: str | None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST /v1/records HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {80 << 20}\r\n\r\n").encode()


def test_the_trainer_refuses_a_tokenless_or_oversized_body_from_its_headers(trainer_port):
    """An 80 MiB upload: 401 without the token, 413 with it, each before a byte of the body is sent (the
    trainer's waitress used to read up to 1 GiB before the app saw the request)."""
    import socket

    for token, status in ((None, b"401"), ("wrong", b"401"), (_FakeTrainer.token, b"413")):
        with socket.create_connection(("127.0.0.1", trainer_port), timeout=5) as s:
            s.sendall(_big_post(trainer_port, token))  # the headers only
            line = _answer_within(s, 2.0)
            assert line.split(b" ")[1:2] == [status], (token, line)


def test_soak_110_slow_header_clients_leave_the_trainer_status_answering(trainer_port):
    """110 connections that each send a header line every 0.5 s (more than waitress's default limit of 100,
    which the trainer had); GET /v1/status with the token answers in under 1 s throughout."""
    import socket
    import time

    import requests

    conns = []
    try:
        for _ in range(110):
            s = socket.create_connection(("127.0.0.1", trainer_port), timeout=5)
            s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            conns.append(s)
        lat = []
        for i in range(4):
            time.sleep(0.5)
            for s in conns:
                s.sendall(f"X-Slow-{i}: 1\r\n".encode())
            t0 = time.monotonic()
            try:
                r = requests.get(f"http://127.0.0.1:{trainer_port}/v1/status", timeout=3,
                                 headers={"Authorization": f"Bearer {_FakeTrainer.token}"})
                lat.append(time.monotonic() - t0 if r.status_code == 200 else float("inf"))
            except requests.RequestException:
                lat.append(float("inf"))
        assert max(lat) < 1.0, lat
    finally:
        for s in conns:
            s.close()
    assert all(s.fileno() == -1 for s in conns)
