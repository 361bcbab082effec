"""Outbox durability (SIGKILL mid-write), disk bound, and the uploader's retry-until-delivered."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from omnidraft.online.outbox import Outbox, Uploader


def rec(i: int, pad: int = 0) -> dict:
    return {"schema": "omnidraft.record/1", "id": f"rec{i:08d}", "n": i, "pad": os.urandom(pad).hex()}


def test_put_peek_ack_fifo_and_dedup(tmp_path):
    ob = Outbox(tmp_path / "ob.sqlite")
    ids = [ob.put(rec(i)) for i in range(5)]
    assert ob.put(rec(2)) == ids[2]  # same record id: not queued twice
    assert len(ob) == 5 and ob.size_bytes() > 0
    batch = ob.peek_batch(3)
    assert [r["n"] for _, r in batch] == [0, 1, 2]
    ob.ack([s for s, _ in batch])
    assert [r["n"] for _, r in ob.peek_batch(10)] == [3, 4]
    ob.close()
    ob2 = Outbox(tmp_path / "ob.sqlite")  # reopened: same queue, same byte count
    assert len(ob2) == 2 and ob2.stats()["sent"] == 3
    ob2.ack([s for s, _ in ob2.peek_batch(10)])
    assert len(ob2) == 0 and ob2.size_bytes() == 0


def test_bound_drops_oldest_unsent(tmp_path):
    ob = Outbox(tmp_path / "ob.sqlite", max_bytes=20_000)
    for i in range(40):
        ob.put(rec(i, pad=1000))  # random hex: ~2 kB compressed each
    assert ob.size_bytes() <= 20_000
    kept = [r["n"] for _, r in ob.peek_batch(100)]
    assert kept == list(range(40 - len(kept), 40))  # newest kept, in order
    assert ob.dropped == 40 - len(kept) > 0
    assert ob.put(rec(99, pad=30_000)) == 0 and ob.dropped == 40 - len(kept) + 1  # too big alone
    assert os.path.getsize(tmp_path / "ob.sqlite") < 200_000


_WRITER = textwrap.dedent("""
    import sys
    from omnidraft.online.outbox import Outbox
    ob = Outbox(sys.argv[1])
    i = 0
    while True:
        ob.put({"id": "w%08d" % i, "n": i, "pad": "x" * 500})
        print(i, flush=True)  # printed only after put returned: acknowledged
        i += 1
""")


def test_sigkill_mid_write_loses_nothing_acknowledged(tmp_path):
    path = tmp_path / "ob.sqlite"
    p = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    acked = []
    for line in p.stdout:
        acked.append(int(line))
        if len(acked) >= 150:
            break
    os.kill(p.pid, signal.SIGKILL)  # almost surely inside a put
    p.wait()
    ob = Outbox(path)
    got = [r["n"] for _, r in ob.peek_batch(100_000)]
    assert got[: len(acked)] == acked  # every acknowledged record, in order
    assert got == list(range(len(got)))  # no duplicates, no holes; at most one unacknowledged extra
    ob.put(rec(1))  # the file is usable after the crash
    assert len(ob) == len(got) + 1


class _Trainer:
    """A stand-in trainer endpoint that stores record ids (dedup on its side)."""

    def __init__(self, port: int = 0, refuse=None, named: bool = True):
        """``refuse(record)``: records answered like the trainer's 400 for invalid ones (the batch refused
        whole, the bad ones listed by index when ``named``)."""
        seen, lock = self.seen, self.lock = [], threading.Lock()

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                recs = json.loads(body)["records"]
                bad = [i for i, r in enumerate(recs) if refuse and refuse(r)]
                if bad:
                    errs = [{"index": i, "id": recs[i]["id"], "field": "topk_probs", "message": "not finite"}
                            for i in bad] if named else []
                    return self._answer(400, {"error": "bad", "code": "invalid_record", "errors": errs})
                with lock:
                    seen.extend(r["id"] for r in recs)
                self._answer(200, {})

            def _answer(self, status, obj):
                out = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_uploader_delivers_after_trainer_comes_back(tmp_path):
    probe = _Trainer()  # reserve a free port, then close it: the trainer is "down"
    port = probe.port
    probe.close()
    ob = Outbox(tmp_path / "ob.sqlite")
    up = Uploader(ob, f"http://127.0.0.1:{port}", batch_size=4, interval_s=0.05, timeout_s=1.0,
                  max_backoff_s=0.2).start()
    t0 = time.perf_counter()
    for i in range(10):
        ob.put(rec(i))
    assert time.perf_counter() - t0 < 2.0  # puts never wait for the network
    time.sleep(0.5)
    assert up.failures >= 1 and len(ob) == 10  # nothing lost while down
    trainer = _Trainer(port)
    try:
        assert up.flush(timeout=10.0)
        up.stop()
        assert sorted(set(trainer.seen)) == [f"rec{i:08d}" for i in range(10)]
        assert up.delivered == 10
    finally:
        trainer.close()


def test_records_the_trainer_refuses_by_name_leave_the_outbox_and_the_rest_is_delivered(tmp_path):
    """One invalid record must not block a device's queue forever: the trainer's 400 lists it, the uploader
    drops it (counted) and delivers the others; a 400 that names nothing is retried like any failure."""
    poisoned = {3, 7}
    trainer = _Trainer(refuse=lambda r: r["n"] in poisoned)
    ob = Outbox(tmp_path / "ob.sqlite")
    up = Uploader(ob, f"http://127.0.0.1:{trainer.port}", batch_size=4, interval_s=0.05, timeout_s=1.0,
                  max_backoff_s=0.2).start()
    try:
        for i in range(10):
            ob.put(rec(i))
        assert up.flush(timeout=10.0)
        up.stop()
        assert sorted(set(trainer.seen)) == [f"rec{i:08d}" for i in range(10) if i not in poisoned]
        assert up.refused == 2 and up.delivered == 8
    finally:
        trainer.close()
    mute = _Trainer(refuse=lambda r: r["n"] == 0, named=False)
    ob2 = Outbox(tmp_path / "ob2.sqlite")
    ob2.put(rec(0))
    up2 = Uploader(ob2, f"http://127.0.0.1:{mute.port}", interval_s=0.05, timeout_s=1.0, max_backoff_s=0.1).start()
    try:
        time.sleep(0.6)
        assert len(ob2) == 1 and up2.failures >= 2 and up2.refused == 0
    finally:
        up2.stop()
        mute.close()
