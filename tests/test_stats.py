"""One statistics type (speculative.stats.GenerationStats) for an answer and for totals over answers: the generator
counts each step into it, the benchmarks and the server sum answers with it, so acceptance and tau mean the
same everywhere (tau counts the end-of-generation token, issue 29).  Hand-made numbers, no model."""

import pytest

from omnidraft.bench.runner import Tally
from omnidraft.server.metrics import Metrics
from omnidraft.speculative.generator import Final
from omnidraft.speculative.stats import GenerationStats
from omnidraft.speculative.step import Draft, PhaseClock, StepRecord, Verdict
from omnidraft.vocab.translator import NGRAM, Candidates


def _step(proposed: int, accepted: int, drafted: int, redecoded: bool = False) -> StepRecord:
    """A step built as the generator builds it: from its Draft and Verdict, and its phases' seconds."""
    cands = Candidates()
    for i in range(proposed):  # candidates from the n-gram cache
        cands.add(7, NGRAM, (i, i + 1), 1.0)
    draft = Draft(cands, drafted=drafted, draft_s=0.01, translate_s=0.002)
    clock = PhaseClock()
    clock.s, clock.total = {"target": 0.02, "verify": 0.01}, 0.05
    return StepRecord.of(draft, Verdict.chain(cands.ids, accepted, 7, redecoded=redecoded), clock)


def _answers() -> list[Final]:
    """Two answers: one ends on the end-of-generation token (counted by tau), one runs to max_tokens."""
    out = []
    for steps, stop, n_out in (([_step(3, 2, 4), _step(3, 3, 3, True), _step(2, 0, 2)], 1, 7),
                               ([_step(0, 0, 0), _step(4, 4, 5)], 0, 6)):
        st = GenerationStats("omnidraft", prompt_tokens=11, completion_tokens=n_out, stop_tokens=stop,
                             prefill_s=0.5, total_s=2.0)
        for s in steps:
            st.add_step(s)
        out.append(Final("", list(range(n_out)), "stop" if stop else "length", st, steps))
    return out


def test_steps_are_counted_into_the_answer():
    a = _answers()[0].stats
    assert (a.target_passes, a.proposed, a.accepted, a.ngram_proposed, a.ngram_accepted) == (3, 8, 5, 8, 5)
    assert a.draft_lengths == [3, 3, 2] and a.guard_redecodes == 1
    assert a.draft_s == pytest.approx(0.03) and a.translate_s == pytest.approx(0.006)
    assert a.tau == (7 + 1) / 3 and a.acceptance_rate == 5 / 8


def test_totals_sum_counts_and_seconds_and_keep_the_definitions():
    a, b = (f.stats for f in _answers())
    t = GenerationStats("total").add(a).add(b)
    assert (t.completion_tokens, t.target_passes, t.stop_tokens, t.proposed, t.accepted) == (13, 5, 1, 12, 9)
    assert t.prompt_tokens == 22 and t.guard_redecodes == 1 and t.total_s == 4.0 and t.generation_s == 3.0
    assert t.tau == (13 + 1) / 5 and t.acceptance_rate == 9 / 12 and t.tokens_per_s == 13 / 3.0
    assert t.python_s == pytest.approx(3.0 - 5 * (0.01 + 0.002 + 0.03))
    assert t.method == "total" and t.draft_lengths == []  # per-answer fields are not summed


def test_bench_and_server_report_the_generators_acceptance_and_tau():
    answers = _answers()
    total = GenerationStats("total")
    tally, metrics = Tally(), Metrics()
    for f in answers:
        total.add(f.stats)
        tally.add(f)
        metrics.record_generation(f.stats, "omnidraft", "base", f.finish_reason, "/v1/completions", None)
    row = tally.summary(None, cost=None)
    view = metrics.stats_view()["totals"]
    assert row["tau"] == view["tau"] == total.tau == 14 / 5  # the bench used to leave the stop token out: 13 / 5
    assert row["acceptance_rate"] == view["acceptance_rate"] == total.acceptance_rate == 9 / 12
    # the bench JSON keeps its keys (and gains stop_tokens, the tau numerator's other part)
    assert (row["tokens"], row["steps"], row["stop_tokens"], row["proposed"], row["accepted"]) == (13, 5, 1, 12, 9)
    assert row["drafted"] == 14 and row["batch_hist"] == {4: 2, 3: 1, 1: 1, 5: 1} and row["prompts"] == 2
    assert row["gen_s"] == 3.0 and row["tokens_per_s"] == 13 / 3.0
    assert row["share"]["python"] == pytest.approx(total.python_s / 3.0)
    prom = metrics.prometheus(queue_depth=0)
    assert f"omnidraft_tokens_per_target_pass {14 / 5!r}" in prom and f"omnidraft_acceptance_rate {9 / 12!r}" in prom
    assert view["tokens_per_s"] == 13 / 4.0  # the server's: over the wall time, prompts included
