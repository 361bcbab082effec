"""The end-to-end sweep's pieces that need no model (issue 28): prompt-set snapshots load as the sets they were
cut from, and bench.e2e folds each place's runs (and its upstream build's peer run) into one row."""

import json

from omnidraft.assets import prompts, snapshot
from omnidraft.bench import e2e


def test_a_snapshot_is_the_sets_first_held_out_items(tmp_path):
    path = snapshot.export("humaneval", 3, tmp_path)
    snap, full = snapshot.load_set(str(path)), prompts.load("humaneval")
    assert snap.name == "humaneval" and snap.split("heldout") == full.split("heldout")[:3]
    assert "snapshot humaneval.json" in snap.source and snap.licence == full.licence


def _result(tok_s, **kw):
    return {"tokens_per_s": tok_s, "tau": kw.pop("tau", 1.0), "method": kw.pop("method", "target"),
            "policy": kw.pop("policy", "fixed"), "k": kw.pop("k", 0), **kw}


def _write(path, target, results, machine="xeon", llamafile=None, **run_kw):
    path.parent.mkdir(parents=True, exist_ok=True)
    run = {"target": target, "set": {"name": "humaneval"}, "kernels": {"mode": "fast"}, "max_verify_batch": 8,
           "threads": 4, "gpu_layers": 0, "results": results, **run_kw}
    m = {"cpu": machine} if llamafile is None else {"cpu": machine, "llamafile_kernels": llamafile}
    path.write_text(json.dumps({"machine": m, "runs": [run]}))


def test_the_summary_takes_the_peer_from_the_upstream_build_of_the_same_place(tmp_path):
    step = {"ms": {"draft": 1.0, "translate": 0.5, "target": 6.0, "sample": 0.3, "bookkeeping": 0.2, "step": 8.0},
            "share": {"draft": 0.125, "translate": 0.0625, "target": 0.75, "sample": 0.0375, "bookkeeping": 0.025}}
    _write(tmp_path / "cpu4" / "a.json", "t", {
        "target": _result(40.0, same_output_as_target=True),
        "omnidraft k=2": _result(50.0, method="omnidraft", k=2, speedup=1.25, tau=1.8, same_output_as_target=True),
        "omnidraft adaptive": _result(60.0, method="omnidraft", k=4, policy="cost", speedup=1.5, tau=2.1,
                                      predicted_speedup=1.4, same_output_as_target=True, step_ms=step["ms"],
                                      step_share=step["share"], policy_stats={"draft_lengths": {"0": 2, "3": 9}})},
           draft_threads=2)  # the drafter's own (auto-tuned) thread count shows beside the target's
    _write(tmp_path / "cpu4-upstream" / "b.json", "t", {
        "target": _result(30.0, same_output_as_target=True),
        "llama-cpp-python": _result(20.0, method="llama-cpp-python", same_output_as_target=None)})
    md, js = e2e.summarize(tmp_path)
    rows = json.loads(js.read_text())["rows"]
    assert len(rows) == 1  # the upstream place is folded into its base place
    r = rows[0]
    assert (r["place"], r["peer_tok_s"], r["peer_build"], r["upstream_target_tok_s"]) == ("cpu4", 20.0, "upstream", 30.0)
    assert r["default_speedup"] == 1.5 and r["default_vs_peer"] == 3.0 and r["fixed"]["2"]["speedup"] == 1.25
    assert r["cost_choices"] == {"0": 2, "3": 9} and r["same_output"] is True
    text = md.read_text()
    assert "| cpu4 | t | humaneval | 4 (2) | 20.0 | 40.0 | 60.0 | 1.50x | 3.00x | 1.40x | 1.25x | 2.10 | 0: 2, 3: 9 |" in text
    assert "8.00: 1.00 / 0.50 / 6.00 / 0.30 / 0.20" in text


def test_a_peer_run_on_the_projects_own_build_is_not_called_upstream(tmp_path):
    """Where the upstream build was not made, the script's "-upstream" runs use the project's build: their
    llamafile flag (off in ours, on in pip's default) keeps the summary from calling them upstream."""
    _write(tmp_path / "cpu8" / "a.json", "t", {"target": _result(50.0), "hybrid adaptive": _result(
        60.0, method="hybrid", k=4, policy="cost", speedup=1.2)}, llamafile=False)
    for flag, label in ((False, "this build"), (True, "upstream")):
        _write(tmp_path / "cpu8-upstream" / "b.json", "t", {"target": _result(50.0), "llama-cpp-python": _result(
            40.0, method="llama-cpp-python")}, llamafile=flag)
        md, js = e2e.summarize(tmp_path)
        row = json.loads(js.read_text())["rows"][0]
        assert row["peer_build"] == label and row["peer_tok_s"] == 40.0
        assert ("40.0 (this build)" in md.read_text()) == (label == "this build")


def test_the_default_is_the_products_default_method_where_the_run_has_it(tmp_path):
    """Since 2026-11-28 the default generation is hybrid's: a run with both methods reads hybrid's adaptive row
    and fixed k; a run from before (omnidraft only) still reads omnidraft's."""
    _write(tmp_path / "gpu" / "a.json", "t", {
        "target": _result(100.0),
        "omnidraft k=2": _result(90.0, method="omnidraft", k=2, speedup=0.9),
        "omnidraft adaptive": _result(95.0, method="omnidraft", k=4, policy="cost", speedup=0.95),
        "hybrid k=2": _result(110.0, method="hybrid", k=2, speedup=1.1),
        "hybrid adaptive": _result(120.0, method="hybrid", k=4, policy="cost", speedup=1.2)})
    _write(tmp_path / "cpu8" / "b.json", "t", {
        "target": _result(50.0),
        "omnidraft adaptive": _result(60.0, method="omnidraft", k=4, policy="cost", speedup=1.2)})
    rows = {r["place"]: r for r in json.loads(e2e.summarize(tmp_path)[1].read_text())["rows"]}
    assert rows["gpu"]["default"] == "hybrid adaptive" and rows["gpu"]["default_speedup"] == 1.2
    assert rows["gpu"]["fixed"] == {"2": {"speedup": 1.1, "tau": 1.0, "predicted": None}}
    assert rows["cpu8"]["default"] == "omnidraft adaptive" and rows["cpu8"]["default_speedup"] == 1.2
