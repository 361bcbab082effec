"""Benchmark plumbing (not speed: tests never assert machine speed)."""

import json
import subprocess
import sys

import pytest

from omnidraft.assets import prompts


# tests/test_prompt_sets.py loads these twice and compares ids, prompts and splits: one load each here
CHECKED_THERE = {"stubs", "code-other", "nl", "chat-fresh"}


def test_prompt_sets_are_deterministic_and_split_by_module():
    for name in prompts.SETS:
        a = prompts.load(name, seed=0)
        if name not in CHECKED_THERE:  # code-other's second load was 2-5 s of this test
            b = prompts.load(name, seed=0)
            assert [i.id for i in a.items] == [i.id for i in b.items]
        assert a.split("stream") and a.split("heldout")
        assert a.licence and a.source
    code = prompts.load("stdlib-code")
    stream_mods = {i.id.split(":")[0].split(".")[0] for i in code.split("stream")}
    held_mods = {i.id.split(":")[0].split(".")[0] for i in code.split("heldout")}
    assert not stream_mods & held_mods
    he = prompts.load("humaneval")
    assert len(he.items) == 164 and all("def " in i.prompt for i in he.items)


def test_bench_run_writes_json_markdown_and_plots(tmp_path):
    # --kernels exact: a fresh llama.cpp build (every CI run) measures one kernel mode here, not both twice
    # (auto's choice is tested in tests/test_kernel_modes.py).  The shipped file, not the suite's q4_0_pure copy:
    # the exact mode measured here is half of what the first `auto` start on it needs later (test_cli's generate,
    # the servers); with the copy in fast mode this test took 16 s instead of 33 in CI and test_cli's 32 instead of 12
    r = subprocess.run([sys.executable, "-m", "omnidraft.apps.cli", "bench", "run", "--threads", "2",
                        "--targets", "qwen2.5-coder-0.5b", "--sets", "humaneval", "--n", "1", "--kernels", "exact",
                        "--max-tokens", "8", "--ks", "2", "--methods", "target,omnidraft,prompt-lookup",
                        "--out", str(tmp_path), "--no-progress"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    js = list(tmp_path.glob("*.json"))
    assert len(js) == 1 and list(tmp_path.glob("*.md")) and len(list(tmp_path.glob("*.png"))) == 2
    data = json.loads(js[0].read_text())
    run = data["runs"][0]
    res = run["results"]
    assert {"target", "omnidraft k=2", "omnidraft adaptive", "omnidraft gamma", "prompt-lookup k=2"} <= set(res)
    for label, v in res.items():
        assert v["same_output_as_target"], label  # every configuration wrote the target's text
        assert 0.0 <= v["acceptance_rate"] <= 1.0 and v["tau"] >= 1.0
        # the first token waits for the prompt's read and the first step (one prompt: the means are its own)
        assert v["prompt_ms"] < v["first_token_ms"] <= v["prompt_ms"] + 1e3 * v["gen_s"]
        assert v["prompt_tokens"] > 20  # one HumanEval prompt
    assert set(run["cost_model"]["t_verify"]) >= {"1", "2", "3"}
    assert run["cost_samples"] == 5 + 2  # start-up rounds + a short set before the one prompt
    omni = res["omnidraft k=2"]
    passes = {int(n): c for n, c in omni["draft_pass_hist"].items()}
    # every drafted token came from one drafter pass; each step's first pass also ingests the target's text
    assert sum(passes.values()) >= omni["drafted"] > 0 and max(passes) > 1
    assert omni["predicted_s"] > 0 and res["prompt-lookup k=2"]["draft_pass_hist"] == {}
    assert "cpu" in data["machine"] and data["machine"]["llamafile_kernels"] is False
    table = next(p for p in tmp_path.glob("*.md")).read_text()
    assert f"| {res['target']['first_token_ms']:.0f} ms |" in table


def test_bench_flags_are_generated_from_the_settings(monkeypatch):
    """Each `bench` command's flags come from its settings dataclass (names, defaults and choices as they were
    hand-written), and the command gets the settings object."""
    from omnidraft.apps.cli import build_parser
    from omnidraft.bench import cli as bc

    got = []
    for name in ("_cmd_run", "_cmd_kernels", "_cmd_costmodel", "_cmd_peer"):
        monkeypatch.setattr(bc, name, got.append)
    p = build_parser()
    a = p.parse_args(["bench", "run", "--targets", "t1,t2", "--n", "2", "--max-tokens", "8", "--kernels", "exact",
                      "--peer", "--no-progress"])
    assert a.func(a) is None and got[-1] == bc.RunSettings(targets="t1,t2", n=2, max_tokens=8, kernels="exact",
                                                          peer=True, progress=False)
    a = p.parse_args(["bench", "run"])
    a.func(a)
    assert got[-1] == bc.RunSettings() and got[-1].preset == "small" and got[-1].n is None  # the preset decides
    a = p.parse_args(["bench", "peer", "-k", "3", "--max-tokens", "16"])
    a.func(a)
    assert got[-1] == bc.PeerSettings(k=3, max_tokens=16) and got[-1].n == 4
    a = p.parse_args(["bench", "costmodel", "--threads-list", "1", "--max-n", "4"])
    a.func(a)
    assert got[-1] == bc.CostmodelSettings(threads_list="1", max_n=4) and got[-1].quants == "q4_k_m,q4_0,q8_0"
    a = p.parse_args(["bench", "kernels", "--threads", "2"])
    a.func(a)
    assert got[-1] == bc.KernelsSettings(threads=2)
    for bad in (["bench", "run", "--kernels", "nope"], ["bench", "run", "--preset", "huge"],
                ["bench", "run", "--n", "two"]):
        with pytest.raises(SystemExit):
            p.parse_args(bad)
