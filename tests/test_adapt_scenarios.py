"""``omnidraft adapt --scenario NAME`` (issue 43): each scenario resolves to its settings, flags given on the command
line win over it, a flag left out keeps its default; checkpoints and the drift split the stream as they say.  No
model runs."""

from __future__ import annotations

import pytest

from omnidraft.apps import adapt_scenarios
from omnidraft.apps.adapt import load_items
from omnidraft.apps.adapt_config import AdaptConfig
from omnidraft.apps.cli import build_parser
from omnidraft.assets import models
from omnidraft.cliutil import dataclass_from_args
from omnidraft.errors import BadRequest
from omnidraft.runtime.session import Settings


def resolved(*argv: str) -> tuple[AdaptConfig, Settings]:
    args = build_parser().parse_args(["adapt", *argv])
    adapt_scenarios.apply(args)
    return dataclass_from_args(AdaptConfig, args), dataclass_from_args(Settings, args)


def test_no_scenario_keeps_every_default():
    cfg, settings = resolved()
    assert cfg == AdaptConfig()
    assert settings.target == "qwen2.5-coder-0.5b:q4_0_pure" and settings.method == "omnidraft"
    assert settings.draft == Settings().draft and settings.k == Settings().k


@pytest.mark.parametrize("name", sorted(adapt_scenarios.SCENARIOS))
def test_each_scenario_sets_what_it_names(name):
    cfg, settings = resolved("--scenario", name)
    sc = adapt_scenarios.SCENARIOS[name]
    for key, value in sc.values.items():
        assert getattr(settings if key in ("draft", "target") else cfg, key) == value, key
    assert cfg.scenario == name
    assert cfg.n_train in (512, 1000) and cfg.evaluates_at(cfg.n_train) and cfg.evaluates_at(64)
    if "lr" not in sc.values:
        assert cfg.lr == AdaptConfig().lr  # what the scenario leaves alone stays the default
    assert cfg.epochs == AdaptConfig().epochs


def test_unseen_code_is_the_papers_regime():
    cfg, settings = resolved("--scenario", "unseen-code")
    assert settings.draft == models.SMOLLM2 and settings.target.startswith(models.QWEN_15B)
    assert (cfg.stream_set, cfg.eval_set, cfg.old_sets) == ("stdlib-code", "humaneval", "")
    assert [i for i in range(1, 1001) if cfg.evaluates_at(i)] == [64, 128, 256, 512, 1000]
    # the update that learned fastest from the never-distilled drafter, the global default since issue 43's long
    # streams of the shipped drafter
    assert (cfg.lora_rank, cfg.lr) == (16, 1e-3) == (AdaptConfig().lora_rank, AdaptConfig().lr)
    cfg, _ = resolved("--scenario", "unseen-code", "--lora-rank", "0", "--lr", "1e-4")
    assert (cfg.lora_rank, cfg.lr) == (0, 1e-4)


def test_flags_given_win_over_the_scenario():
    cfg, settings = resolved("--scenario", "unseen-code", "--n-train", "16", "--lam", "0", "--target",
                             "qwen2.5-coder-0.5b:q4_0_pure", "--checkpoints", "8", "--no-control")
    assert (cfg.n_train, cfg.lam, cfg.checkpoints, cfg.control) == (16, 0.0, "8", False)
    assert settings.target == "qwen2.5-coder-0.5b:q4_0_pure" and settings.draft == models.SMOLLM2
    assert cfg.stream_set == "stdlib-code"  # not given: the scenario's
    # a flag given with its default's value still wins over the scenario
    cfg, _ = resolved("--scenario", "unseen-code", "--n-train", "64")
    assert cfg.n_train == 64


def test_unknown_scenario_is_refused():
    with pytest.raises(SystemExit, match="unknown scenario"):
        resolved("--scenario", "nope")


def test_drift_switches_the_stream_at_its_point(monkeypatch):
    from omnidraft.assets.prompts import Item, PromptSet

    def fake(name, seed=0):
        return PromptSet(name, "1", "test", "none", [Item(f"{name}{i}", f"{name} {split} {i}", False, split)
                                                    for split in ("stream", "heldout") for i in range(3)])

    monkeypatch.setattr("omnidraft.apps.adapt_items.load_set", fake)
    cfg = AdaptConfig(stream_set="a", drift_set="b", n_train=8, n_heldout=2)
    stream, held = load_items(cfg)
    assert cfg.drift_point() == 4
    assert [p[0].split()[0] for p in stream] == ["a"] * 4 + ["b"] * 4
    assert held == [("a heldout 0", False), ("a heldout 1", False)]
    assert AdaptConfig(n_train=8).drift_point() == 8  # no drift
    assert AdaptConfig(drift_set="b", drift_at=6, n_train=8).drift_point() == 6
    with pytest.raises(BadRequest, match="--prompts"):
        load_items(AdaptConfig(prompts="p.txt", drift_set="b"))
