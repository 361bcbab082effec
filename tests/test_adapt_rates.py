"""Rates with their counts (omnidraft.online.rates), in the server's learning stats and in adapt's plot; no models."""

from __future__ import annotations

import pytest

from omnidraft.speculative.generator import GenerationStats
from omnidraft.online.rates import MIN_DRAFTED, acceptance_text
from omnidraft.server.metrics import Metrics


def test_small_counts_are_not_rates():
    assert acceptance_text(1, 2) == f"not measured (1/2 drafted, < {MIN_DRAFTED})"
    assert acceptance_text(0, 0) == f"not measured (0/0 drafted, < {MIN_DRAFTED})"
    assert acceptance_text(84, 200) == "42.0 % (84/200 drafted)"


def test_learning_stats_carry_counts():
    m = Metrics()
    m.record_generation(GenerationStats("omnidraft", completion_tokens=20, target_passes=19, proposed=2, accepted=1),
                        "omnidraft", "base", "length", "chat", None)
    v = m.stats_view()
    assert (v["history"][-1]["proposed"], v["history"][-1]["accepted"]) == (2, 1)
    assert v["totals"]["acceptance"].startswith("not measured (1/2 drafted")
    assert v["totals"]["min_drafted"] == MIN_DRAFTED
    m.record_generation(GenerationStats("omnidraft", completion_tokens=90, target_passes=40, proposed=198,
                                        accepted=83), "omnidraft", "v0001", "length", "chat", None)
    assert m.stats_view()["totals"]["acceptance"] == "42.0 % (84/200 drafted)"


def test_adapt_plot_leaves_unmeasured_points_out(tmp_path):
    pytest.importorskip("matplotlib")
    from omnidraft.apps.adapt import _plot

    pt = {"k": 4, "tau": 1.5, "tokens": 10, "target_passes": 7, "seconds": 1}
    curve = [{"prompts": 0, "version": "base", "acceptance": 0.4, "accepted": 40, "proposed": 100, "measured": True,
              **pt}, {"prompts": 4, "version": "v0001", "acceptance": 1.0, "accepted": 2, "proposed": 2,
                      "measured": False, **pt}]
    control = {"acceptance": 0.41, "accepted": 41, "proposed": 100, "measured": True, "tau": 1.5, "qtype": "q8_0"}
    assert _plot(curve, control, tmp_path / "a.png").is_file()
