"""The step as values (issue 44, part 1): a Draft (a chain is the simplest tree), a Verdict, the StepRecord and
the policy's StepOutcome built from the two, a phase clock, and rules that choose from values handed to them.
Hand-made numbers, no model."""

import pytest

from omnidraft.cliutil import FLAG_RANGES, TEMPERATURE
from omnidraft.errors import BadRequest
from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.rules import RULES, Drafted, Outlook, PolicyConfig, StepCosts, best_length, drafting_pays
from omnidraft.speculative.predictor import DraftFeatures
from omnidraft.speculative.step import ROOT, Draft, PhaseClock, StepOutcome, StepRecord, Verdict
from omnidraft.vocab.translator import DIRECT, NGRAM, Candidates


def _draft(kinds: str) -> Draft:
    """A chain of candidates 10, 11, ...; 'n' = from the n-gram cache (two drafter tokens), 'd' = direct."""
    c, at = Candidates(), 0
    for i, k in enumerate(kinds):
        width = 2 if k == "n" else 1
        c.add(10 + i, NGRAM if k == "n" else DIRECT, (at, at + width), 0.5)
        at += width
    feats = tuple(DraftFeatures.from_row(_row(), 0, d) for d in range(at))
    return Draft(c, feats, drafted=at, draft_s=0.004, translate_s=0.001)


def _row():
    import numpy as np

    return np.array([3.0, 1.0, 0.0], dtype=np.float32)


def test_a_draft_is_a_chain_unless_told_its_parents():
    d = _draft("dnd")
    assert d.parents == (ROOT, 0, 1) and d.is_chain and len(d) == 3
    tree = Draft(d.candidates, parents=(ROOT, ROOT, 1))  # two first tokens, the third after the second
    assert not tree.is_chain
    with pytest.raises(ValueError):
        Draft(d.candidates, parents=(ROOT,))
    cut = d.cut(2)
    assert cut.candidates.ids == [10, 11] and cut.parents == (ROOT, 0) and cut.features == d.features
    assert d.cut(5) is d and len(Draft().cut(-1)) == 0


def test_verdict_on_a_chain_names_the_path_and_the_next_token():
    v = Verdict.chain([10, 11, 12], 2, 99)
    assert v.path == (0, 1) and v.tokens == (10, 11, 99) and v.accepted == 2 and v.next_token == 99
    assert Verdict.chain([], 0, 7).tokens == (7,)


def test_record_and_outcome_are_built_from_the_draft_and_the_verdict():
    d, v = _draft("dnd"), Verdict.chain([10, 11, 12], 2, 99, redecoded=True)
    clock = PhaseClock()
    clock.s, clock.total = {"plan": 0.001, "target": 0.02, "verify": 0.003}, 0.03
    r = StepRecord.of(d, v, clock)
    assert (r.proposed, r.accepted, r.drafted, r.ngram_proposed, r.ngram_accepted) == (3, 2, 4, 1, 1)
    assert r.new_tokens == [10, 11, 99] and r.redecoded
    assert r.verify_s == pytest.approx(0.023) and r.target_s == 0.02 and r.sample_s == 0.003
    assert r.bookkeeping_s == pytest.approx(0.03 - 0.023 - 0.004 - 0.001)  # the rest of the step's wall time
    o = StepOutcome.of(d, v, 0.023)
    # two candidates kept cover three drafter tokens; the fourth was judged (rejected) too
    assert (o.proposed, o.accepted, o.drafted, o.judged_accepted, len(o.judged)) == (3, 2, 4, 3, 4)
    all_kept = StepOutcome.of(d, Verdict.chain([10, 11, 12], 3, 5), 0.02)
    assert all_kept.judged_accepted == 4 and len(all_kept.judged) == 4


def test_the_phase_clock_times_each_phase_as_a_whole():
    clock = PhaseClock()
    with clock("target"):
        sum(range(10_000))
    with clock("target"):
        pass
    clock.stop()
    assert set(clock.s) == {"target"} and 0 < clock.s["target"] <= clock.total


def test_the_cost_rule_chooses_from_an_outlook_without_its_policy():
    cost = RULES["cost"]
    timed = (True, True, True, True)
    assert cost.choose(Outlook(3, allowed=False)).k == 0
    assert cost.choose(Outlook(3)).k == 3  # not calibrated: draft to measure
    assert cost.choose(Outlook(3, calibrated=True, ceiling=0.9, speeds=(1, 2, 3, 4), timed=timed)).k == 0
    best = cost.choose(Outlook(3, calibrated=True, ceiling=2.0, speeds=(1.0, 3.0, 2.0, 0.5), timed=timed))
    assert (best.k, best.paid, best.probe) == (1, True, False)
    losing = dict(calibrated=True, ceiling=2.0, speeds=(3.0, 1.0, 1.0, 1.0), timed=timed)
    assert cost.choose(Outlook(3, **losing)).k == 0
    probe = cost.choose(Outlook(3, probe_due=True, **losing))
    assert (probe.k, probe.probe) == (1, True)
    assert best_length((1.0, 0.0, 5.0), (True, False, True)) == 1  # never timed: tried first
    # the recent estimate's fastest (3) is not paid for at the long-run acceptance, one token is at both
    split = dict(calibrated=True, ceiling=2.0, speeds=(1.0, 1.2, 1.3, 1.5), timed=timed)
    assert cost.choose(Outlook(3, long_speeds=(1.0, 1.13, 1.0, 1.01), margin=0.02, **split)).k == 1
    assert cost.choose(Outlook(3, long_speeds=(1.0, 1.13, 1.05, 1.01), margin=0.02, **split)).k == 2
    assert cost.choose(Outlook(3, long_speeds=(1.0, 1.13, 1.05, 1.1), margin=0.02, **split)).k == 3
    assert cost.choose(Outlook(3, long_speeds=(1.0, 1.01, 1.0, 0.9), margin=0.02, **split)).k == 0
    assert RULES["fixed"].choose(Outlook(-1)).k == 0


def test_stop_rules_judge_values():
    cfg = PolicyConfig("threshold", p_min=0.5)
    sure, unsure = DraftFeatures.from_row(_row(), 0, 0), DraftFeatures.from_row(_row() * 0, 0, 0)
    costs = StepCosts((0.0,) * 4, (False,) * 4, 0.0)
    assert RULES["threshold"].keep_going(Drafted(0, sure), cfg, costs)
    assert not RULES["threshold"].keep_going(Drafted(0, unsure), cfg, costs)
    assert RULES["gamma"].keep_going(Drafted(0, sure, 0.9, 0.9, 1.9), PolicyConfig("gamma", gamma=0.2), costs)
    assert not RULES["gamma"].keep_going(Drafted(1, sure, 0.7, 0.63, 2.5), PolicyConfig("gamma", gamma=0.2), costs)
    # a 3-token pass as dear as a 4-token one and a cheap drafter: drafting on to depth 2 pays at p = 0.9
    timed = StepCosts((0.0, 0.010, 0.020, 0.030, 0.030, 0.031), (False,) + (True,) * 5, 0.0001)
    assert drafting_pays(Drafted(0, unsure, 0.9, 0.9, 1.9), 0.5, timed)
    assert not drafting_pays(Drafted(0, unsure, 0.1, 0.1, 1.1), 0.5, timed)


def test_the_temperature_bound_is_written_once():
    assert FLAG_RANGES["temp"] == FLAG_RANGES["temperature"] == TEMPERATURE == (0.0, 2.0)
    GenerationParams(temperature=TEMPERATURE[1]).check()
    with pytest.raises(BadRequest, match=r"within \[0, 2\]"):
        GenerationParams(temperature=2.5).check()
