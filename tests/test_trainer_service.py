"""Trainer service on a tiny drafter: HTTP intake with dedup, train every I records, publish, CLI list/rollback."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from omnidraft.apps.cli import main as cli_main  # noqa: E402
from omnidraft.online.outbox import Outbox, Uploader  # noqa: E402
from omnidraft.online.records import SCHEMA  # noqa: E402
from omnidraft.trainer.app import start_http  # noqa: E402
from omnidraft.trainer.service import Trainer, TrainerConfig  # noqa: E402

from tests.gguf_helpers import tiny_gguf  # noqa: E402


def _record(i: int, rng, draft_fp: str) -> dict:
    n = 10
    out = rng.integers(300, 30000, n).tolist()
    dm = [int(j % 3 != 2) for j in range(n)]
    return {"schema": SCHEMA, "id": f"r{i:010d}", "created": 0.0, "method": "omnidraft", "drafter_version": "base",
            "draft_fp": draft_fp, "target_fp": "y", "k": 2, "prompt_ids": rng.integers(300, 30000, 6).tolist(),
            "output_ids": out, "dm": dm, "ngram": [1 - d for d in dm],
            "topk_ids": [[o, 400] if d else None for o, d in zip(out, dm)],
            "topk_probs": [[0.8, 0.1] if d else None for d in dm], "rest_mass": [0.1 if d else None for d in dm],
            "target_ids": list(range(n)), "n_sub": [1] * n, "from_draft": [0] * n, "stats": {}}


def _post(port: int, recs: list, token: str, gz: bool = True) -> dict:
    body = json.dumps({"records": recs}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    if gz:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/records", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_serve_dedups_trains_publishes_and_rolls_back(tmp_path_factory, tmp_path, capsys):
    base = tiny_gguf(tmp_path_factory, "llama")
    trainer = Trainer(TrainerConfig(base=str(base), state_dir=str(tmp_path / "t"), interval=3, lora_rank=4,
                                    lr=1e-3, qtype="q8_0", keep=2, threads=2, epochs=1))  # one step per record
    server, port = start_http(trainer)
    rng = np.random.default_rng(0)
    fp = trainer.vocab().fp  # records of this drafter's vocabulary (another's are refused)
    recs = [_record(i, rng, fp) for i in range(4)]
    try:
        tok = trainer.token
        assert _post(port, recs[:2], tok) == {"accepted": 2, "duplicates": 0, "rejected": 0}
        assert _post(port, recs[:2], tok, gz=False) == {"accepted": 0, "duplicates": 2, "rejected": 0}  # at-least-once
        with pytest.raises(urllib.error.HTTPError) as refused:
            _post(port, [recs[2], {"schema": "nope"}], tok)
        body = json.loads(refused.value.read())
        assert refused.value.code == 400 and body["index"] == 1 and body["field"] == "schema"
        assert trainer.inbox.counts()["records"] == 2  # the batch is refused whole: recs[2] comes again below
        assert trainer.maybe_update() is None  # 2 < interval
        # the client side: outbox + uploader deliver the rest (one duplicate among them)
        ob = Outbox(tmp_path / "ob.sqlite")
        for r in recs[1:]:
            ob.put(r)
        up = Uploader(ob, f"http://127.0.0.1:{port}", interval_s=0.05, token=tok).start()
        assert up.flush(10.0)
        up.stop()
        assert trainer.inbox.counts() == {"records": 4, "untrained": 4, "quarantined": 0, "skipped": 0}
        meta = trainer.maybe_update()
        assert meta["version"] == "v0001" and meta["steps"] == 4 and meta["check"]["ok"]
        assert trainer.inbox.counts()["untrained"] == 0
        assert trainer.registry.current()[0] == "v0001"
        for i in range(4, 7):  # a second update continues from the first
            _post(port, [_record(i, rng, fp)], tok)
        assert trainer.maybe_update()["parent"] == "v0001"
    finally:
        server.shutdown()
    state = str(tmp_path / "t")
    assert cli_main(["drafter", "list", "--state-dir", state]) == 0
    listing = capsys.readouterr().out
    assert "v0001" in listing and "* v0002" in listing.replace("*v", "* v")
    assert cli_main(["drafter", "rollback", "v0001", "--state-dir", state]) == 0
    assert trainer.registry.current()[0] == "v0001"
    assert cli_main(["drafter", "rollback", "v0009", "--state-dir", state]) == 2
