"""Drafter registry: atomic publish, keep-last-N, rollback, and a crash mid-publish."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from omnidraft.errors import BadRequest
from omnidraft.online.registry import DrafterRegistry


def _blob(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_publish_list_rollback_keep_last_n(tmp_path):
    base = _blob(tmp_path, "base.gguf", b"base")
    reg = DrafterRegistry(tmp_path / "reg", keep=3, base_path=base)
    assert reg.current() is None
    ids = [reg.publish(_blob(tmp_path, f"m{i}.gguf", b"model%d" % i), {"steps": i}) for i in range(5)]
    assert ids == ["v0001", "v0002", "v0003", "v0004", "v0005"]
    cur = reg.current()
    assert cur[0] == "v0005" and cur[1].read_bytes() == b"model4"
    listed = reg.list()
    assert [m["version"] for m in listed] == ["v0003", "v0004", "v0005"]  # last 3 kept
    assert [m["current"] for m in listed] == [False, False, True]
    assert reg.meta("v0004")["parent"] == "v0003" and reg.meta("v0004")["steps"] == 3
    reg.rollback("v0003")
    assert reg.current()[0] == "v0003"
    assert DrafterRegistry(tmp_path / "reg").current()[0] == "v0003"  # read by another process
    reg.rollback("base")
    assert reg.current() == ("base", base.resolve())
    with pytest.raises(BadRequest):
        reg.rollback("v0001")  # pruned
    nxt = reg.publish(_blob(tmp_path, "m9.gguf", b"m9"))
    assert nxt == "v0006" and reg.meta(nxt)["parent"] == "base"


_CRASHER = textwrap.dedent("""
    import os, signal, sys
    import omnidraft.online.registry as r
    stage = sys.argv[3]
    real_rename, real_write = os.rename, r._atomic_write
    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
    if stage == "rename":          # version dir complete, not yet renamed
        r.os.rename = die
    elif stage == "pointer":       # version dir renamed, CURRENT not yet replaced
        def w(path, obj):
            if path.name == "CURRENT":
                die()
            real_write(path, obj)
        r._atomic_write = w
    r.DrafterRegistry(sys.argv[1]).publish(sys.argv[2], {"steps": 1})
""")


@pytest.mark.parametrize("stage", ["rename", "pointer"])
def test_crash_mid_publish_keeps_previous_current(tmp_path, stage):
    reg = DrafterRegistry(tmp_path / "reg")
    v1 = reg.publish(_blob(tmp_path, "a.gguf", b"a" * 1000))
    p = subprocess.run([sys.executable, "-c", _CRASHER, str(tmp_path / "reg"),
                        str(_blob(tmp_path, "b.gguf", b"b" * 1000)), stage])
    assert p.returncode == -signal.SIGKILL
    reg2 = DrafterRegistry(tmp_path / "reg")  # re-open cleans half-written temp dirs
    assert reg2.current() == (v1, reg.versions / v1 / "model.gguf")
    assert reg2.current()[1].read_bytes() == b"a" * 1000
    assert not [d for d in os.listdir(reg.versions) if d.startswith(".tmp-")]
    v3 = reg2.publish(_blob(tmp_path, "c.gguf", b"c"))  # publishing goes on after the crash
    assert reg2.current()[0] == v3


def test_heldout_measurements_append_in_order_and_a_bad_file_reads_as_none(tmp_path):
    """heldout.json (``omnidraft adapt`` writes it, the server shows it): points in the order taken; a file that
    cannot be read shows nothing rather than failing the stats endpoint."""
    reg = DrafterRegistry(tmp_path / "r")
    assert reg.evaluations() == []
    points = [{"kind": "curve", "set": "javascript", "prompts": 0, "version": "base", "accepted": 3, "proposed": 10},
              {"kind": "control", "set": "javascript", "prompts": 0, "version": "control", "accepted": 3,
               "proposed": 11},
              {"kind": "curve", "set": "javascript", "prompts": 16, "version": "v0002", "accepted": 5,
               "proposed": 10}]
    for p in points:
        reg.add_evaluation(p)
    assert reg.evaluations() == points
    assert DrafterRegistry(tmp_path / "r").evaluations() == points  # on disk, for another process
    (tmp_path / "r" / "heldout.json").write_text("{not json")
    assert reg.evaluations() == []
    (tmp_path / "r" / "heldout.json").write_text('[{"kind": "curve"}, 3, "x"]')
    assert reg.evaluations() == [{"kind": "curve"}]
