"""Pinned or wide, measured (runtime.wideprobe): where no rule decides, ``--wide auto`` times a mostly-Q5_0 target's
pinned file against its exact wide copy once per machine, runs the faster and remembers which."""

from __future__ import annotations

import json
import types

import pytest

from omnidraft import statefile
from omnidraft.assets import models
from omnidraft.llama import cpuid, hostmem
from omnidraft.runtime import formats, wideprobe
from omnidraft.runtime.settings import Settings

ZEN4 = ("avx2", "avx512f", "avx512_vnni")
ZEN3 = ("avx2",)
PHONE = ("asimddp", "i8mm")


def test_only_a_mostly_q5_0_registry_target_on_a_cpu_no_rule_covers_is_timed(tmp_path):
    name = models.QWEN_05B
    assert formats.measures_wide(name, "auto", 0, ZEN4) and formats.measures_wide(name, "auto", 0, PHONE)
    assert formats.measures_wide(name.upper(), "auto", 0, ZEN4)
    assert not formats.measures_wide(name, "auto", 0, ZEN3)  # the rule: the wide copy, untimed
    assert not formats.measures_wide(name, "on", 0, ZEN4) and not formats.measures_wide(name, "off", 0, ZEN4)
    assert not formats.measures_wide(name, "auto", -1, ZEN4)  # on a GPU the CPU's question does not arise
    assert not formats.measures_wide(models.QWEN_15B, "auto", 0, ZEN4)  # K-quants only
    assert not formats.measures_wide(f"{name}:q4_0_pure", "auto", 0, ZEN4)  # a format named is run as named
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"x")
    assert not formats.measures_wide(str(own), "auto", 0, ZEN4)


def test_the_files_are_scored_as_the_kernel_modes_are():
    """Tokens a second at a nominal acceptance over the timed passes; within 3 % of each other the faster
    one-token pass wins, and the pinned file keeps a tie."""
    def times(p1, p4, w1, w4):
        return {"pinned": {1: p1, 4: p4}, "wide": {1: w1, 4: w4}}

    assert wideprobe.prefers_wide(times(10.4, 17.9, 9.3, 13.0))  # the Zen 5's figures (ms) in one run
    assert wideprobe.prefers_wide(times(10.91, 17.46, 11.25, 12.88))  # and in another: verification decides
    assert not wideprobe.prefers_wide(times(10.0, 14.0, 10.1, 13.8))  # a tie: the faster decode, pinned
    assert wideprobe.prefers_wide(times(10.1, 14.0, 10.0, 13.9))
    assert not wideprobe.prefers_wide(times(10.0, 14.0, 10.0, 14.0))
    assert not wideprobe.prefers_wide(times(9.0, 12.0, 11.0, 13.0))


PLAN = types.SimpleNamespace(max_batch=8)


class FakeEngine:
    def __init__(self, path):
        self.path, self.closed = path, False

    def close(self):
        self.closed = True


@pytest.fixture
def probe(monkeypatch, tmp_path):
    """wideprobe.measured with files in tmp_path, loads recorded, and timings given by the test."""
    pinned, wide = tmp_path / "pinned.gguf", tmp_path / "wide.gguf"
    pinned.write_bytes(b"p")
    made, loads, timed = [], [], []

    def resolve(name, fetch=True):
        if str(name).endswith(":wide"):
            if not wide.is_file():
                wide.write_bytes(b"w"), (tmp_path / "wide.gguf.from").write_text("sha\n"), made.append(wide)
            return wide
        return pinned

    def load(settings, path, root):
        loads.append(path)
        return FakeEngine(path), PLAN

    state = {"times": {"pinned": {1: 0.0104, 4: 0.0179}, "wide": {1: 0.0093, 4: 0.0130}}}

    def time_them(engines, max_n):
        timed.append(sorted(engines))
        return state["times"]

    monkeypatch.setattr(models, "resolve", resolve)
    monkeypatch.setattr(models, "derived_path", lambda name, qtype: wide)
    monkeypatch.setattr(wideprobe, "_load", load)
    monkeypatch.setattr(wideprobe, "_time", time_them)
    monkeypatch.setattr(wideprobe, "verdict_key", lambda settings, path: "this machine")
    state.update(settings=Settings(target=models.QWEN_05B), root=tmp_path / "state", pinned=pinned, wide=wide,
                 made=made, loads=loads, timed=timed)
    return state


def test_the_faster_file_serves_and_the_verdict_is_kept(probe):
    engine, plan = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["wide"] and not engine.closed and plan is PLAN
    assert probe["timed"] == [["pinned", "wide"]] and probe["loads"] == [probe["pinned"], probe["wide"]]
    kept = statefile.read(probe["root"] / wideprobe.VERDICTS, "this machine")
    assert kept == {"choice": "wide", "t_ms": {"pinned": {"1": 10.4, "4": 17.9}, "wide": {"1": 9.3, "4": 13.0}}}
    # the next start reads the verdict: one load, nothing timed
    probe["loads"].clear()
    engine, _ = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["wide"] and probe["loads"] == [probe["wide"]] and len(probe["timed"]) == 1


def test_a_slower_wide_copy_is_closed_and_removed_if_the_probe_made_it(probe):
    probe["times"] = {"pinned": {1: 0.0100, 4: 0.0130}, "wide": {1: 0.0110, 4: 0.0135}}
    engine, _ = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["pinned"] and probe["made"] == [probe["wide"]]
    assert not probe["wide"].exists() and not (probe["wide"].parent / "wide.gguf.from").exists()
    assert statefile.read(probe["root"] / wideprobe.VERDICTS, "this machine")["choice"] == "pinned"


def test_a_wide_copy_the_user_had_is_kept_when_the_pinned_file_wins(probe):
    probe["wide"].write_bytes(b"w")
    probe["times"] = {"pinned": {1: 0.0100, 4: 0.0130}, "wide": {1: 0.0110, 4: 0.0140}}
    engine, _ = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["pinned"] and probe["wide"].is_file() and probe["made"] == []


def test_a_wide_copy_that_cannot_be_made_leaves_the_pinned_file_serving(probe, monkeypatch):
    def full_disk(name, fetch=True):
        if str(name).endswith(":wide"):
            raise OSError(28, "No space left on device")
        return probe["pinned"]

    monkeypatch.setattr(models, "resolve", full_disk)
    engine, _ = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["pinned"] and probe["timed"] == []
    assert statefile.read(probe["root"] / wideprobe.VERDICTS, "this machine") is None  # asked again next start


def test_the_real_pair_runs_the_file_its_probe_timed_faster(tmp_path, monkeypatch):
    """The 0.5B as downloaded, on this machine: both files load and are timed; the engine serving is the file the
    verdict names, and a second start loads it without timing."""
    if not models.is_verified(models.get_spec(models.QWEN_05B)):
        pytest.skip("the 0.5B is not downloaded here")
    from tests.serve_helpers import seed_state

    settings = Settings(target=models.QWEN_05B, threads=2, n_ctx=512)
    # what this machine measured already (each file's kernel modes) spares 20 s; the verdict is this test's subject
    root = seed_state(tmp_path / "state")
    (root / wideprobe.VERDICTS).unlink(missing_ok=True)
    engine, plan = wideprobe.measured(settings, root)
    try:
        (verdict,) = json.loads((root / wideprobe.VERDICTS).read_text()).values()
        want = models.derived_path(models.QWEN_05B, models.WIDE) if verdict["choice"] == "wide" \
            else models.resolve(models.QWEN_05B)
        assert engine.path == want and plan.max_batch >= 1
        assert set(verdict["t_ms"]) == {"pinned", "wide"} and all(v["1"] > 0 for v in verdict["t_ms"].values())
    finally:
        engine.close()
    monkeypatch.setattr(wideprobe, "_time", lambda *a: pytest.fail("timed again"))
    again, _ = wideprobe.measured(settings, root)
    assert again.path == engine.path
    again.close()


def test_doctor_names_the_verdicts_kept_for_this_machine_and_build(tmp_path):
    pinned = tmp_path / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    pinned.write_bytes(b"p")
    key = wideprobe.verdict_key(Settings(target=models.QWEN_05B, threads=2), pinned)
    t_ms = {"pinned": {"1": 11.07, "4": 17.59}, "wide": {"1": 11.34, "4": 13.19}}
    statefile.write(tmp_path / wideprobe.VERDICTS, key, {"choice": "wide", "t_ms": t_ms})
    statefile.write(tmp_path / wideprobe.VERDICTS, "another-host" + key[key.index("|"):], {"choice": "pinned",
                                                                                           "t_ms": t_ms})
    assert wideprobe.describe(tmp_path) == [
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (threads 2, kernels auto): the wide file (T(1) pinned 11.07 / wide "
        "11.34 ms, T(4) 17.59 / 13.19 ms)"]
    (tmp_path / wideprobe.VERDICTS).write_text("{not json")
    assert wideprobe.describe(tmp_path) == []


def test_the_hosts_free_memory_is_read_where_the_kernel_says():
    text = "MemTotal:       24683724 kB\nMemFree:        20216236 kB\nMemAvailable:   23619884 kB\n"
    assert hostmem.available_bytes(text) == 23619884 * 1024
    assert hostmem.available_bytes("MemTotal: 1 kB\n") is None  # a kernel before 3.14: go on as if it fits
    assert hostmem.available_bytes() is None or hostmem.available_bytes() > 0


def _free(monkeypatch, mb):
    monkeypatch.setattr(hostmem, "available_bytes", lambda meminfo=None: mb << 20)


def test_a_host_short_of_memory_serves_the_pinned_file_untimed_and_asks_again(probe, monkeypatch):
    """Timing holds both files' engines at once: 2 x (file, 96 MiB; these files' headers give no cache) here, so
    150 MB free is short and nothing is copied, loaded twice or remembered; with the memory back, the next start
    times."""
    probe["pinned"].write_bytes(b"p" * (3 << 20))
    _free(monkeypatch, 150)
    engine, _ = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["pinned"] and probe["loads"] == [probe["pinned"]]
    assert probe["timed"] == [] and probe["made"] == [] and not probe["wide"].exists()
    assert statefile.read(probe["root"] / wideprobe.VERDICTS, "this machine") is None
    _free(monkeypatch, 400)
    engine, _ = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["wide"] and probe["timed"] == [["pinned", "wide"]]


def test_a_kept_wide_verdict_yields_to_the_pinned_file_where_the_copy_does_not_fit_now(probe, monkeypatch):
    wideprobe.measured(probe["settings"], probe["root"])  # times: the wide copy wins and is remembered
    probe["loads"].clear()
    probe["wide"].write_bytes(b"w" * (100 << 20))
    _free(monkeypatch, 150)  # the copy alone needs 100 + 96 MiB
    engine, _ = wideprobe.measured(probe["settings"], probe["root"])
    assert engine.path == probe["pinned"] and probe["loads"] == [probe["pinned"]] and len(probe["timed"]) == 1
    assert statefile.read(probe["root"] / wideprobe.VERDICTS, "this machine")["choice"] == "wide"  # kept


def test_the_rules_wide_copy_also_yields_where_it_does_not_fit(monkeypatch, tmp_path):
    """On an AVX2 CPU without VNNI the rule names the wide copy untimed; a host short of memory runs the pinned."""
    pinned, wide, loads = tmp_path / "pinned.gguf", tmp_path / "wide.gguf", []
    pinned.write_bytes(b"p"), wide.write_bytes(b"w" * (100 << 20))
    monkeypatch.setattr(cpuid, "cpu_identity", lambda cpuinfo=None: {"flags": list(ZEN3)})
    monkeypatch.setattr(models, "resolve", lambda name, fetch=True: wide if str(name).endswith(":wide") else pinned)
    monkeypatch.setattr(wideprobe, "_load", lambda settings, path, root: loads.append(path) or (FakeEngine(path), PLAN))
    settings = Settings(target=models.QWEN_05B)
    wideprobe.load(settings, tmp_path)
    _free(monkeypatch, 150)
    wideprobe.load(settings, tmp_path)
    wideprobe.load(Settings(target=models.QWEN_05B, wide="on"), tmp_path)  # asked for: served as asked
    assert loads == [wide, pinned, wide]
