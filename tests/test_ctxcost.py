"""Pass prices by context length (llama.ctxcost): the ratios' interpolation, the policy following them, and a real
long prompt timed once, rolled back, kept, and still generating exactly the target alone's tokens."""

import inspect
import json
import textwrap
import types

import pytest

from omnidraft.llama.ctxcost import BASE_CONTEXT, MIN_CONTEXT, ContextRatios
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig


def _ratios() -> ContextRatios:
    r = ContextRatios.from_startup({1: 0.020, 2: 0.022, 3: 0.025})  # ratios 1.1 and 1.25 at 128 cells
    r.add(1128, {2: 1.3, 3: 1.75})
    r.add(2128, {2: 1.5, 3: 2.0})
    return r


def test_growth_is_linear_between_timed_contexts_and_extended_past_the_longest():
    assert ContextRatios.from_startup({1: 0.02, 2: 0.022}).growth(3000) == {}  # only start-up's: nothing to follow
    r = _ratios()
    assert r.growth(BASE_CONTEXT) == pytest.approx({2: 1.0, 3: 1.0})
    assert r.growth(10) == pytest.approx({2: 1.0, 3: 1.0})  # shorter than start-up's: its ratios
    assert r.growth(628) == pytest.approx({2: 1.2 / 1.1, 3: 1.5 / 1.25})  # half-way to 1,128 cells
    assert r.growth(1628) == pytest.approx({2: 1.4 / 1.1, 3: 1.875 / 1.25})
    assert r.growth(3128) == pytest.approx({2: 1.7 / 1.1, 3: 2.25 / 1.25})  # the last segment's slope
    # a longer context timed cheaper (a VM's noise) never prices a pass below start-up's, nor falls further
    r.add(4128, {2: 1.0, 3: 1.2})
    assert r.growth(6000) == pytest.approx({2: 1.0, 3: 1.0})


def test_a_context_is_timed_once_long_enough_and_well_past_every_one_timed():
    r = ContextRatios.from_startup({1: 0.02, 2: 0.022})
    assert not r.needs(MIN_CONTEXT - 1) and r.needs(MIN_CONTEXT)
    r.add(1000, {2: 1.3})
    assert not r.needs(1400) and r.needs(1600)


def test_points_round_trip_and_anything_else_reads_as_none():
    r = _ratios()
    back = ContextRatios.from_dict(json.loads(json.dumps(r.as_dict())))
    assert _same(back.points, r.points) and back.growth(1628) == pytest.approx(r.growth(1628))
    for bad in (None, {}, {"points": []}, {"points": {"x": {}}}, {"points": {"512": {"2": "fast"}}},
                {"points": {"512": {"1": 1.0}}}, {"points": {"512": {"2": -1.0}}}):
        assert ContextRatios.from_dict(bad) is None, bad


def test_the_policy_prices_passes_by_the_context_and_goes_back_for_a_short_one():
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs({n: 0.02 * (1 + 0.1 * (n - 1)) for n in range(1, 7)}, 0.001)
    short = pol.expected_speed(4)
    assert short > pol.expected_speed(0)  # at start-up's context four drafted tokens pay
    growth = {n: 1 + 0.4 * (n - 1) for n in range(2, 6)}  # T(5) / T(1) 1.4 -> 3.64: every row attends 2k cells
    pol.follow_context(growth)
    assert pol.t_verify[5] / pol.t_verify[1] == pytest.approx(1.4 * 2.6)
    assert pol.t_verify[6] / pol.t_verify[1] == pytest.approx(1.5 * 2.6)  # not timed there: as the largest below
    assert pol.expected_speed(4) < pol.expected_speed(0)  # there they lose
    pol.follow_context({})  # the next request's prompt is short again
    assert pol.t_verify[5] / pol.t_verify[1] == pytest.approx(1.4)
    assert pol.expected_speed(4) == pytest.approx(short)


def test_a_live_ratio_moves_with_the_context():
    pol = DraftPolicy(PolicyConfig(name="cost", k=2))
    pol.seed_costs({1: 0.02, 2: 0.022, 3: 0.024, 4: 0.026}, 0.001)
    pol.observe(_step(0, 0.02))  # a fresh T(1), then a two-token draft's pass timed dearer than seeded
    pol.observe(_step(2, 0.030))
    live = pol.t_verify[3] / pol.t_verify[1]
    assert live > 1.2
    pol.follow_context({3: 1.5})
    assert pol.t_verify[3] / pol.t_verify[1] == pytest.approx(live * 1.5)
    pol.follow_context({})
    assert pol.t_verify[3] / pol.t_verify[1] == pytest.approx(live)


def _same(a: dict, b: dict) -> bool:
    """Points equal to the 4 decimals they are kept with."""
    return a.keys() == b.keys() and all(a[c] == pytest.approx(b[c], abs=1e-4) for c in a)


def _step(k: int, verify_s: float):
    from omnidraft.speculative.policy import StepOutcome
    return StepOutcome(k, 0, drafted=k, verify_s=verify_s, draft_s=0.001 * k)


def _long_prompt(tokens: int) -> str:
    """Stdlib source (held apart from nothing: only its cost is measured), about ``tokens`` long."""
    return textwrap.dedent(inspect.getsource(textwrap))[: tokens * 3]


def test_a_long_prompt_is_timed_once_rolled_back_and_kept(default_session, target_reference, tmp_path):
    from omnidraft.runtime.costs import CostStore
    from omnidraft.speculative.generator import GenerationParams

    s = default_session
    store = CostStore(s.models, tmp_path)  # its own ctxcost.json: the shared session's prices stay as they are
    store.model = s.costs.warm()
    contexts = store.contexts()
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs(store.model.t_verify, store.model.t_draft, store.model.t_draft_n)
    gen = s.compose("omnidraft", s.pair, pol)
    gen.contexts = contexts
    prompt = gen.prompt_from_text(_long_prompt(900))
    cells = len(prompt.target_ids) - 1  # the prefill leaves the last prompt token to the first step
    assert MIN_CONTEXT <= cells <= s.n_ctx - 64, cells
    params = GenerationParams(max_tokens=24)
    final = gen.generate(prompt, params)
    assert final.token_ids == target_reference(s.target, prompt, params)  # the timed passes left no trace
    # the policy knew its context: none of its one-token passes counts towards the cost model's drift check
    assert cells + len(final.token_ids) <= pol.cells <= cells + len(final.token_ids) + 5 and pol.n_t1_short == 0
    assert set(contexts.ratios.points) == {BASE_CONTEXT, cells}
    ratios = contexts.ratios.points[cells]
    assert sorted(ratios) == [2, 3, 4, 5] and all(r > 0.5 for r in ratios.values()), ratios
    growth = contexts.ratios.growth(cells)
    assert pol._startup_ratio[5] == pytest.approx(pol._seed_ratio[5] * growth[5])
    timed = contexts.timed_s
    assert timed > 0
    contexts.growth(s.target, 5)  # the context the request left (prompt and output) is within the band timed
    assert contexts.timed_s == timed  # timed once: this context is known now
    # kept for the next process, under the same key as the cost model
    again = CostStore(s.models, tmp_path)
    again.model = store.model
    assert _same(again.contexts().ratios.points, contexts.ratios.points)
    again.forget()  # a drifted cost model takes the context ratios with it
    assert json.loads((tmp_path / "ctxcost.json").read_text()) == {}


def test_a_context_is_not_timed_where_no_draft_can_pay():
    from omnidraft.llama.ctxcost import ContextCosts
    from omnidraft.speculative.generator import Generator

    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs({n: 0.02 * n for n in range(1, 7)}, 0.004)  # n rows cost n decodes: nothing can pay
    assert pol.ceiling(4) < 1.0
    contexts = ContextCosts(ContextRatios.from_startup({n: 0.02 * n for n in range(1, 7)}))
    target = _Long()  # 1,500 cells, room to time in; any decode fails the test
    assert contexts.ratios.needs(target.n_past)
    gen = Generator(target, types.SimpleNamespace(window=0), pol, "omnidraft", 8, contexts=contexts)
    gen._price_context(timing=True)
    assert contexts.timed_s == 0 and list(contexts.ratios.points) == [BASE_CONTEXT]


class _Full:
    """An engine whose context is nearly full: no pass may be timed in it."""

    n_ctx, n_past, tokens = 2048, 2045, list(range(2045))
    config = types.SimpleNamespace(n_gpu_layers=0)

    def decode(self, ids, logits_for="last"):
        raise AssertionError("no room: nothing may be decoded")


class _Long(_Full):
    n_past, tokens = 1500, list(range(1500))


class _Failing(_Long):
    def decode(self, ids, logits_for="last"):
        from omnidraft.errors import EngineError
        raise EngineError("llama_decode returned 1 (no KV slot)")

    def rollback(self, n):
        pass


def test_a_full_context_or_a_failing_pass_leaves_the_request_priced_from_the_points_known():
    from omnidraft.llama.ctxcost import ContextCosts

    saved = []
    costs = ContextCosts(ContextRatios.from_startup({1: 0.020, 2: 0.022, 3: 0.025}), saved.append)
    assert costs.ratios.needs(1500) and costs.ratios.needs(2045)  # both would be timed, room and passes allowing
    assert costs.growth(_Full(), 5) == {}  # start-up's prices, not timed
    assert costs.growth(_Failing(), 5) == {}  # the error is logged, the request goes on
    assert list(costs.ratios.points) == [BASE_CONTEXT] and not saved


def test_the_drift_check_weighs_only_one_token_passes_at_short_contexts(tmp_path):
    """A decode after 2,262 tokens took 1.3-1.5x one after 128 (the 1.5B, 2-core Zen 4), and the drift check read
    every one-token pass: each process after a long prompt dropped the cached cost model (measured again at the
    next start) and the context prices with it.  Passes at MIN_CONTEXT cells or more no longer count; passes as
    slow at a short context still drop both."""
    from omnidraft.llama import costmodel
    from omnidraft.llama.costmodel import CostModel
    from omnidraft.runtime.costs import DRIFT_SAMPLES, CostStore
    from omnidraft.speculative.step import StepOutcome

    store = CostStore(None, tmp_path)
    store.key = lambda: "this machine"
    store.model = CostModel({1: 0.030, 2: 0.033}, 0.002)
    ctx_path = tmp_path / "ctxcost.json"

    def kept() -> tuple[bool, bool]:
        return (costmodel.cached("this machine", tmp_path / "costmodel.json") is not None,
                "this machine" in json.loads(ctx_path.read_text()))

    costmodel.store("this machine", tmp_path / "costmodel.json", store.model)
    ctx_path.write_text(json.dumps({"this machine": _ratios().as_dict()}))
    pol = DraftPolicy(PolicyConfig(k=4))
    pol.at_context(2262)
    for _ in range(2 * DRIFT_SAMPLES):  # 1.5x the cached T(1), at a long context
        pol.observe(StepOutcome(0, 0, verify_s=0.045))
    assert pol.cells == 2262 + 2 * DRIFT_SAMPLES and pol.n_t1_short == 0 and pol.n_verify[1] == 2 * DRIFT_SAMPLES
    store.check_drift([pol])
    assert kept() == (True, True)
    pol.at_context(MIN_CONTEXT - DRIFT_SAMPLES)  # the same pace at a short context: the machine did slow down
    for _ in range(2 * DRIFT_SAMPLES):
        pol.observe(StepOutcome(0, 0, verify_s=0.045))
    assert pol.n_t1_short == DRIFT_SAMPLES  # the passes from MIN_CONTEXT cells on do not count
    store.check_drift([pol])
    assert kept() == (False, False)
