"""Adaptive drafting: the acceptance predictor and the stopping policies (no model needed)."""

import json

import numpy as np
import pytest

from omnidraft.speculative.guard import GuardConfig, RateGuard
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig, StepOutcome
from omnidraft.speculative.predictor import AcceptancePredictor, DraftFeatures


def synthetic_feats(rng, n):
    """Drafts whose acceptance truly depends on confidence and on the token id, not on depth."""
    out = []
    for depth in range(n):
        p = float(rng.uniform(0.05, 0.99))
        tok = int(rng.integers(0, 20))
        out.append(DraftFeatures(tok, depth, p, entropy=float(-np.log(p)), margin=p / 2))
    return out


def true_accept(f: DraftFeatures) -> float:
    # confident drafts are accepted more, and even token ids are "easy" for this target
    z = 5.0 * (f.p_top1 - 0.5) + (1.5 if f.token % 2 == 0 else -1.5)
    return 1.0 / (1.0 + np.exp(-z))


def test_predictor_learns_a_synthetic_acceptance_pattern():
    rng = np.random.default_rng(0)
    pred = AcceptancePredictor()
    for _ in range(3000):
        feats = synthetic_feats(rng, 4)
        n_acc = 0
        for f in feats:
            if rng.random() < true_accept(f):
                n_acc += 1
            else:
                break
        pred.update(feats, n_acc)
    test = synthetic_feats(np.random.default_rng(1), 400)
    err = np.mean([abs(pred.predict(f) - true_accept(f)) for f in test])
    base = np.mean([abs(np.mean([true_accept(g) for g in test]) - true_accept(f)) for f in test])
    assert err < 0.06 and err < base / 3, (err, base)
    cal = pred.calibration()
    assert cal["examples"] > 3000 and cal["ece"] < 0.08


def test_predictor_round_trips_and_survives_a_bad_file(tmp_path):
    pred = AcceptancePredictor()
    f = DraftFeatures(3, 0, 0.9, 0.3, 0.8)
    pred.update([f], 1)
    pred.save(tmp_path / "p.json")
    again = AcceptancePredictor.load(tmp_path / "p.json")
    assert again.predict(f) == pytest.approx(pred.predict(f))
    (tmp_path / "bad.json").write_text("{not json")
    assert AcceptancePredictor.load(tmp_path / "bad.json").updates == 0


@pytest.mark.parametrize("name", ["fixed", "threshold", "gamma", "cost"])
def test_policy_never_drafts_past_the_maximum(name):
    pol = DraftPolicy(PolicyConfig(name=name, k=3))
    pol.seed_costs({n: 0.02 * n ** 0.3 for n in range(1, 6)}, 0.001)  # cheap verification: drafting pays
    for limit in (0, 1, 2, 3, 10):
        k = pol.choose_k(limit)
        assert 0 <= k <= min(3, limit)


def test_cost_policy_stops_drafting_when_speculation_cannot_pay():
    # verification of n tokens costs n single decodes and drafting is not free: never worth it
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs({n: 0.02 * n for n in range(1, 7)}, 0.008)
    assert pol.ceiling(4) < 1.0
    assert all(pol.choose_k(10) == 0 for _ in range(200))  # not even probes: it cannot pay at 100 %
    # the live single-token pass gets slower as the context grows; untimed batch sizes follow it
    for _ in range(50):
        pol.observe(StepOutcome(0, 0, verify_s=0.025))
    assert pol.t_verify[3] == pytest.approx(0.06 * pol.t_verify[1] / 0.02)
    assert pol.ceiling(4) < 1.0 and pol.choose_k(10) == 0
    # cheap verification but a drafter that is never accepted: only back-off probes
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs({n: 0.02 + 0.004 * n for n in range(1, 7)}, 0.004)
    for _ in range(300):
        k = pol.choose_k(10)
        if k:
            pol.observe(StepOutcome(k, 0, drafted=k, verify_s=0.02 + 0.004 * (k + 1), draft_s=0.004 * k))
    probes = sum(1 for k in pol.chosen if k > 0)
    assert 0 < probes <= 16
    # ... and drafts when verification is nearly free (a GPU- or phone-like cost model)
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs({n: 0.02 + 0.001 * n for n in range(1, 7)}, 0.002)
    ks = [pol.choose_k(10) for _ in range(20)]  # every step but the guard's one run of the target alone
    assert sum(k == 0 for k in ks) == pol.guard.stats.alone_steps == pol.guard.cfg.run


def test_cost_policy_weighs_the_drafters_catching_up_against_the_tokens_left():
    """After a pause the drafter first reads what the target wrote meanwhile: paid once, whatever the draft length.
    Where drafting one token barely pays (the AVX2 code path on chat: T(2) = 1.32 decodes, 45 % of first drafted
    tokens kept), resuming pays where the request has tokens enough left to repay that reading, and not at its end.
    Charged to every step's predicted speed instead, as it was, the debt grew with each idle step and a pause kept
    itself going (issue 43's 30-layer drafter stopped for the rest of a request)."""
    from omnidraft.speculative.step import CATCHUP_MIN

    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.guard = RateGuard(GuardConfig(first=10 ** 9))  # no runs of the target alone: only the model decides
    t_pass = {1: 0.0339, 2: 0.0447, 3: 0.0595, 4: 0.0758, 5: 0.0876, 6: 0.1031}
    pol.seed_costs(t_pass, 0.0019)
    pol.begin_request(0, 400)
    pol.acc = [0.45, 0.2, 0.1, 0.05, 0.05, 0.05]
    pol.acc_long = list(pol.acc)
    assert pol.choose_k(10) == 1  # caught up: one drafted token is predicted to gain ~5 %
    for _ in range(CATCHUP_MIN):  # a short pause is read inside the first drafting pass: no separate price
        pol.observe(StepOutcome(0, 0, verify_s=t_pass[1]))
    assert pol.catchup_cost() == 0.0 and pol.choose_k(10) == 1
    for _ in range(12):
        pol.observe(StepOutcome(0, 0, verify_s=t_pass[1]))
    assert pol.lag == 20 and pol.catchup_cost() > 0 and pol.left == 380
    gain = pol.expected_speed(1)  # the steady state's, the debt apart
    assert pol.choose_k(10) == 1 and pol.expected_speed(1) == gain  # 380 tokens left repay reading the 20
    pol.left = 4
    assert pol.choose_k(10) == 0  # four do not: the target alone until the request ends
    pol.left = 380
    # a drafting step reads them (timed apart): the lag is gone and the price per token is now measured
    pol.observe(StepOutcome(1, 1, drafted=1, verify_s=t_pass[2], draft_s=0.0019, catchup_s=20 * 0.0004))
    assert pol.lag == 0 and pol.price.t_catchup == pytest.approx(0.0004)
    assert pol.choose_k(10) == 1
    for _ in range(20):
        pol.observe(StepOutcome(0, 0, verify_s=t_pass[1]))
    assert pol.catchup_cost() == pytest.approx(20 * 0.0004)
    pol.begin_request()  # a new request: the drafter reads the prompt as it begins, nothing is owed
    assert pol.lag == 0


def test_gamma_policy_stops_when_cumulative_rejection_risk_exceeds_gamma():
    pol = DraftPolicy(PolicyConfig(name="gamma", k=8, gamma=0.5))
    pol.choose_k(8)
    stop = pol.stop_rule()  # this step's
    confident = DraftFeatures(0, 0, 0.99, 0.05, 0.98)
    unsure = DraftFeatures(1, 1, 0.2, 2.0, 0.05)
    assert stop.keep_going(0, confident)
    assert not stop.keep_going(1, unsure)


def test_cost_stop_rule_looks_past_a_costly_batch_size_to_a_cheaper_larger_one():
    # T_verify(n) as measured for the 1.5B Q4_0 here: a 4-token pass is cheaper than a 3-token one
    t = {1: 0.074, 2: 0.112, 3: 0.152, 4: 0.127, 5: 0.167, 6: 0.206}
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    for n, s in t.items():  # timed by this session, as after a few steps
        for _ in range(3):
            pol.observe(StepOutcome(n - 1, 0, drafted=max(n - 1, 1), verify_s=s, draft_s=0.005 * max(n - 1, 1)))
    f = DraftFeatures(0, 0, 0.9, 0.1, 0.8)
    p = pol.predictor.predict(f)
    assert 0.3 < p < 0.85, p  # the untrained predictor's prior, where the costly 3-token pass matters
    stop = pol.stop_rule()
    # one more token alone (2 drafts, a 3-token pass) loses to stopping at 1 ...
    one_more = (1 + p + p * p) / (t[3] + 2 * 0.005)
    assert one_more < (1 + p) / (t[2] + 0.005)
    # ... but 3 drafts (a 4-token pass) win, so the rule keeps drafting through depth 1 to reach them
    assert stop.keep_going(0, f) and stop.keep_going(1, f)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_draft_features_equal_their_definition(seed):
    """The two-pass features (exp and a dot product, the top token found once) equal the textbook ones on a
    drafter-sized row: p of the drafted token, entropy in nats, and the top-1 minus top-2 probability."""
    rng = np.random.default_rng(seed)
    row = (rng.standard_normal(49152) * 3).astype(np.float32)
    row[7] = row.max() + 0.5 if seed == 2 else row[7]  # a clear winner, and a drafted token that is not it
    row[1000:1010] = -np.inf  # tokens the drafter may not propose (its bias)
    ref = np.exp(row.astype(np.float64) - row.max())
    ref /= ref.sum()
    top2 = np.sort(ref)[-2:]
    for token in (int(np.argmax(row)), 7, 123):
        f = DraftFeatures.from_row(row, token, 2)
        assert f.p_top1 == pytest.approx(ref[token], rel=1e-5)
        assert f.entropy == pytest.approx(float(-(ref * np.log(np.where(ref > 0, ref, 1.0))).sum()), rel=1e-5)
        assert f.margin == pytest.approx(top2[1] - top2[0], rel=1e-5, abs=1e-9)
        assert (f.token, f.depth) == (token, 2)


def _simulate(pol: DraftPolicy, steps: int, accept, t_draft: float, t_pass, t_lone: float, seed: int = 0):
    """Drive the policy as the generator does, on a simulated machine: ``t_pass(n)`` seconds for a target pass
    of n tokens, ``t_lone`` for a one-token pass right after a batched one; ``accept`` a per-token acceptance
    or a function of the step.  Returns (tokens, seconds, ks)."""
    rng = np.random.default_rng(seed)
    tokens = seconds = 0.0
    ks, prev_batched = [], False
    for i in range(steps):
        k = pol.choose_k(4)
        a = accept(i) if callable(accept) else accept
        if k:
            acc = 0
            while acc < k and rng.random() < a:
                acc += 1
            v = t_pass(k + 1)
            pol.observe(StepOutcome(k, acc, drafted=k, verify_s=v, draft_s=k * t_draft))
            got, s = acc + 1, v + k * t_draft
        else:
            v = t_lone if prev_batched else t_pass(1)
            pol.observe(StepOutcome(0, 0, verify_s=v))
            got, s = 1, v
        pol.observe_lap(k > 0, got, s)
        prev_batched = k > 0
        tokens, seconds = tokens + got, seconds + s
        ks.append(k)
    return tokens, seconds, ks


def test_cost_policy_stops_drafting_when_measured_slower_than_the_target_alone_despite_its_model():
    # issue 28 on an H100: start-up timed a one-token pass at 4.85 ms (after batched ones), the target alone
    # runs at 2.15 ms a pass; the model then predicts a gain that the loop never sees
    seeded = {1: 0.00485, 2: 0.00603, 3: 0.0061}
    gpu = dict(accept=0.6, t_draft=0.0009, t_pass=lambda n: 0.00215 if n == 1 else 0.00293, t_lone=0.0048)
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs(seeded, 0.0016)
    tokens, seconds, ks = _simulate(pol, 1500, **gpu)
    alone = 1 / 0.00215
    assert tokens / seconds >= 0.93 * alone, (tokens / seconds, alone)
    assert sum(k > 0 for k in ks[300:]) < 0.1 * len(ks[300:])
    g = pol.stats()["guard"]
    assert g["last_ratio"] < 0.97 and g["alone_tok_s"] == pytest.approx(alone, rel=0.02)
    assert "stopped drafting" in pol.note(4)
    # without the guard's measurements the same model drafts nearly every step, and loses
    blind = DraftPolicy(PolicyConfig(name="cost", k=4))
    blind.seed_costs(seeded, 0.0016)
    blind.guard.allows_drafting = lambda: True
    b_tokens, b_seconds, b_ks = _simulate(blind, 1500, **gpu)
    assert b_tokens / b_seconds < 0.9 * alone and sum(k > 0 for k in b_ks) > 0.9 * len(b_ks)


def test_cost_policy_keeps_drafting_where_drafting_is_measured_faster():
    # a CPU-like machine: a pass of n tokens costs 1 + 0.15 (n - 1) single passes, a cheap drafter
    cpu = dict(accept=0.7, t_draft=0.001, t_pass=lambda n: 0.02 * (1 + 0.15 * (n - 1)), t_lone=0.02)
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs({n: 0.02 * (1 + 0.15 * (n - 1)) for n in range(1, 6)}, 0.001)
    tokens, seconds, ks = _simulate(pol, 1500, **cpu)
    g = pol.stats()["guard"]
    assert g["spells"] == 0 and g["last_ratio"] > 1.3
    # only its measuring runs go without drafts: 4 steps every 256
    assert sum(k == 0 for k in ks) == g["alone_steps"] <= 4 * (1500 // 256 + 1)
    assert tokens / seconds > 1.3 / 0.02


def _stretches(seed: int, easy: float = 0.85, hard: float = 0.15, mean: int = 12):
    """Acceptance as text gives it: stretches the drafter knows (85 %) and ones it does not (15 %), about
    ``mean`` steps each (a function of the step, for _simulate)."""
    rng = np.random.default_rng(1000 + seed)
    ends = np.cumsum(rng.geometric(1 / mean, size=1000))
    return lambda i: easy if int(np.searchsorted(ends, i, side="right")) % 2 == 0 else hard


def test_the_guard_waits_for_evidence_before_calling_a_close_loss():
    """A few drafting steps at 0.9x the target alone's pace (a hard stretch of text) stop nothing; the same pace
    held over ``settle`` steps does, once the target alone is timed afresh (one more drafting step: its last run
    was 32 steps back); a clear loss (0.6x) stops drafting after one trial."""
    for share, stops_after in ((0.9, GuardConfig().settle + 1), (0.6, GuardConfig().trial)):
        g, steps = RateGuard(), 0
        while g.stats.spells == 0 and steps < 100:
            if g.allows_drafting():
                g.observe(True, 3, 0.03 / share)
                steps += 1
            else:  # its runs of target-alone steps: 100 tokens/s
                g.observe(False, 1, 0.01)
        assert steps == stops_after, (share, steps)
        assert not g.allows_drafting()


def test_a_machine_that_slowed_since_the_target_alone_was_timed_is_not_read_as_drafting_losing():
    """Drafting runs 1.08x the target alone at any one speed, but the machine slows 12 % right after the guard's
    first run of target-alone steps (a laptop or phone throttling; this VM's drift gave two such spells in 64
    requests). Against that run's pace drafting reads 0.95x, a close loss; re-timed before the verdict, the
    target alone reads as slow as drafting got, and drafting goes on. A true close loss (0.9x) still stops it."""
    def run(share: float, cfg: GuardConfig | None = None) -> RateGuard:
        g = RateGuard(cfg)
        for step in range(400):
            slow = 1 / 0.88 if step >= 10 else 1.0
            if g.allows_drafting():
                g.observe(True, 3, 0.03 / share * slow)
            else:
                g.observe(False, 1, 0.01 * slow)
        return g

    won, lost = run(1.08), run(0.9)
    assert won.stats.spells == won.stats.blocked_steps == 0, won.stats
    assert won.stats.last_ratio == pytest.approx(1.08, abs=0.01)
    assert lost.stats.spells >= 1 and lost.stats.last_ratio == pytest.approx(0.9, abs=0.01), lost.stats
    stale = run(1.08, GuardConfig(fresh=10 ** 9))  # judged against the first run's pace, as before: 64 steps lost
    assert stale.stats.spells == 1 and stale.stats.blocked_steps == GuardConfig().spell, stale.stats


def test_hard_stretches_of_text_do_not_stop_drafting_where_it_wins_on_the_whole():
    """Issue 28 on the device Xeon at 4 threads: the default lost to fixed k = 4 on HumanEval (0.96x against
    1.21x) because the guard stopped drafting for 64-73 of about 100 steps after a short stretch where drafting
    lost.  Simulated with stretches of easy and hard text on those costs: a guard judging the tokens the steps
    got, after six steps (``settle=0``), loses 3 % or more against no guard; crediting each drafting step the
    long-run acceptance (``DraftPolicy.observe_lap``), the same hasty guard and the default keep within 1 %."""
    cpu = dict(t_draft=0.0016, t_pass=lambda n: 0.026 * (1 + 0.15 * (n - 1)), t_lone=0.026)
    speeds = {}
    for name, guard in (("guard", None), ("hasty", GuardConfig(settle=0)), ("hasty-got", GuardConfig(settle=0)),
                        ("none", "off")):
        total = []
        for seed in range(12):
            pol = DraftPolicy(PolicyConfig(name="cost", k=4))
            pol.seed_costs({n: cpu["t_pass"](n) for n in range(1, 6)}, 0.0016)
            if guard == "off":
                pol.guard.allows_drafting = lambda: True
            elif guard is not None:
                pol.guard = RateGuard(guard)
            if name == "hasty-got":  # the tokens each step got, as the guard was fed before
                pol.observe_lap = pol.guard.observe
            tokens, seconds, _ = _simulate(pol, 130, _stretches(seed), **cpu, seed=seed)
            total.append(tokens / seconds * 0.026)
        speeds[name] = float(np.mean(total))
    assert speeds["guard"] >= 0.99 * speeds["none"] and speeds["hasty"] >= 0.99 * speeds["none"], speeds
    assert speeds["hasty-got"] < 0.97 * speeds["none"], speeds


def test_a_losing_verdict_kept_from_an_earlier_process_spares_a_short_run_the_measuring():
    """The H100 case again, as short runs of 100 steps in new processes: the first one pays to find out that
    drafting loses; one that resumes from its verdict starts its spell at once and runs nearer the target alone."""
    seeded = {1: 0.00485, 2: 0.00603, 3: 0.0061}
    gpu = dict(accept=0.6, t_draft=0.0009, t_pass=lambda n: 0.00215 if n == 1 else 0.00293, t_lone=0.0048)
    alone = 1 / 0.00215

    def fresh() -> DraftPolicy:
        pol = DraftPolicy(PolicyConfig(name="cost", k=4))
        pol.seed_costs(seeded, 0.0016)
        return pol

    first = fresh()
    t1, s1, ks1 = _simulate(first, 100, **gpu)
    verdict = first.guard.verdict()
    assert verdict["ratio"] < 0.97 and verdict["spell"] >= 64
    later = fresh()
    later.guard.resume(json.loads(json.dumps(verdict)))  # as read back from guard.json
    t2, s2, ks2 = _simulate(later, 100, **gpu, seed=1)
    assert sum(k > 0 for k in ks2[:40]) == 0 < sum(k > 0 for k in ks1[:40])
    assert t2 / s2 > t1 / s1 and t2 / s2 >= 0.98 * alone, (t1 / s1 / alone, t2 / s2 / alone)
    assert later.stats()["guard"]["resumed"] and "stopped drafting" in later.note(4)
    # the notes quote the paces the verdict came from (the drafting pace itself is reset by a losing verdict)
    drafting, alone_seen = verdict["rates"]
    assert 0 < drafting < alone_seen and f"({drafting:.0f} against {alone_seen:.0f} tokens/s)" in first.note(4)
    assert f"({drafting:.0f} against {alone_seen:.0f} tokens/s, kept from an earlier process)" in later.note(4)


def test_a_resumed_losing_verdict_is_judged_again_where_drafting_now_pays():
    """On a CPU where drafting wins (1.45x), an old losing verdict costs one spell: the trial after it finds
    drafting faster, and drafting goes on from there.  A winning verdict or a malformed one changes nothing."""
    cpu = dict(accept=0.7, t_draft=0.002, t_pass=lambda n: 0.016 + 0.002 * (n - 1), t_lone=0.016)
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs({n: 0.016 + 0.002 * (n - 1) for n in range(1, 6)}, 0.002)
    pol.guard.resume({"ratio": 0.5, "spell": 64})
    _, _, ks = _simulate(pol, 400, **cpu)
    assert sum(k > 0 for k in ks[:60]) == 0 and sum(k > 0 for k in ks[100:]) > 0.9 * len(ks[100:])
    assert pol.guard.verdict()["ratio"] >= 0.97
    for v in ({"ratio": 1.2, "spell": 64}, None, {"ratio": "x"}, {"spell": 3},
              {"ratio": 0.5, "spell": 64, "rates": "x"}):
        g = DraftPolicy(PolicyConfig(name="cost", k=4)).guard
        g.resume(v)
        assert [g.allows_drafting() for _ in range(3)] == [True] * 3 and g.verdict() is None


def test_a_new_request_lets_the_cost_policy_draft_again_after_one_where_drafting_lost():
    """After a request where the first drafted token was seldom kept (man pages in a language the drafter barely
    knows), the acceptance estimate sits where no draft length pays and probing has backed off to 1,024 steps.
    A new request (``begin_request``) leans the estimates back to the prior and probes again: on a CPU where the
    next request's drafts are kept 60 % of the time, drafting resumes (1.27x) instead of never (1.00x)."""
    cpu = dict(t_draft=0.002, t_pass=lambda n: 0.016 + 0.002 * (n - 1), t_lone=0.016)
    speeds = {}
    for begin in (False, True):
        pol = DraftPolicy(PolicyConfig(name="cost", k=4))
        pol.seed_costs({n: 0.016 + 0.002 * (n - 1) for n in range(1, 6)}, 0.002)
        _simulate(pol, 40, accept=0.6, **cpu)
        pol.acc[:4] = [0.15, 0.87, 0.7, 0.56]  # as the nl run left it
        pol.credit, pol._last_probe = -1.0, pol.steps  # the probes' budget spent: no probe for 100 steps
        if begin:
            pol.begin_request()
        tokens, seconds, ks = _simulate(pol, 100, accept=0.6, **cpu, seed=1)
        speeds[begin] = (tokens / seconds * 0.016, sum(k > 0 for k in ks))
    assert speeds[False] == (pytest.approx(1.0), 0)
    assert speeds[True][0] > 1.2 and speeds[True][1] > 90, speeds


def _requests(pol: DraftPolicy, n: int, tokens: int, accept: float, t_pass: dict[int, float], t_draft: float,
              t_catchup: float, seed: int = 0, prompt: int = 0) -> tuple[float, int]:
    """``n`` requests of ``tokens`` tokens on a simulated machine where the drafter, before drafting, reads what
    the target wrote since its last draft (``t_catchup`` seconds a token), and a ``prompt`` of that many tokens
    (read at the request's start where the policy asks for it, else caught up on by the first draft).
    Returns (seconds, probes)."""
    rng = np.random.default_rng(seed)
    seconds, probes = 0.0, 0
    for _ in range(n):
        read = pol.begin_request(prompt, tokens)
        lag, written = (0, 0) if read else (prompt, 0)
        seconds += prompt * t_catchup if read else 0.0
        while written < tokens:
            k = pol.choose_k(4)
            if k:
                acc = 0
                while acc < k and rng.random() < accept:
                    acc += 1
                catchup = lag * t_catchup if lag > 8 else 0.0
                out = StepOutcome(k, acc, drafted=k, verify_s=t_pass[k + 1], draft_s=k * t_draft, catchup_s=catchup)
                probes, lag = probes + 1, 0
            else:
                out, lag = StepOutcome(0, 0, verify_s=t_pass[1]), lag + 1
            pol.observe(out)
            s = out.verify_s + out.draft_s + out.catchup_s
            pol.observe_lap(k > 0, out.accepted + 1, s)
            seconds, written = seconds + s, written + out.accepted + 1
    return seconds, probes


def test_probes_lose_at_most_their_budget_where_one_more_row_is_dear():
    """The AVX2 code path on the Zen 5 (bench run, 1.5B Q4_K_M, HumanEval): T(2) = 1.63 decodes, 56 % of probed
    tokens kept, a drafter pass after a pause ~3 ms, the drafter reading ~0.3 ms a token it missed.  Probing
    again at every request's start (the back-off reset to 16 steps) probed 18 times in 6 requests of 64 tokens
    there and ran 0.977x the target alone, 0.7-1.1 % slower in this simulation; under the budget the probes
    lose about ``probe_budget`` of the time (0.46-0.53 % over six seeds), and still come now and then."""
    t_pass = {1: 0.0199, 2: 0.0325, 3: 0.0449, 4: 0.0561, 5: 0.0684}
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs(t_pass, 0.00118)
    seconds, probes = _requests(pol, 30, 64, 0.56, t_pass, 0.003, 0.0003)
    alone = 30 * 64 * t_pass[1]  # what the target alone takes
    assert probes > 5 and seconds / alone < 1 + 1.3 * pol.cfg.probe_budget, (probes, seconds / alone)
    # the text turns easy (95 % kept): probes find it and drafting resumes, after 1-17 requests in five seeds
    # (the old back-off's losing probes made the rate guard block drafting for 12 requests in 5 seeds of 6)
    drafted = [_requests(pol, 1, 64, 0.95, t_pass, 0.003, 0.0003, seed=1000 + r)[1] for r in range(30)]
    assert sum(drafted[-5:]) >= 120, drafted


def test_a_prompt_is_read_only_where_drafting_would_repay_it():
    """A 2-core Zen 1 EPYC (family 23 model 1, AVX2 without VNNI; the 1.5B Q4_K_M in the fast mode): T(2) = 1.51
    decodes, a drafter token 4.4 % of one, and on held-out JavaScript 38 % of the first drafted tokens kept.  The
    default there read each prompt at the request's start (the estimates leaned back to the prior predicted a
    gain) or in its probes: 1.0 s of a 46.8 s run of 6 requests of 64 tokens, 0.96x the target alone.  Here
    prompts of 200 tokens, read at 0.8 ms a token: weighed against what drafting saves at the long-run acceptance,
    and probes priced with the prompt they would read, the default loses no more than the probes' budget
    (before: 3.5-4.4 %); the short-prompt case above still probes and still finds easy text."""
    t_pass = {1: 0.0788, 2: 0.1192, 3: 0.1586, 4: 0.2018, 5: 0.2406}
    lone = 12 * 64 * t_pass[1]
    for accept in (0.38, 0.5):
        pol = DraftPolicy(PolicyConfig(name="cost", k=4))
        pol.seed_costs(t_pass, 0.00345)
        seconds, probes = _requests(pol, 12, 64, accept, t_pass, 0.0035, 0.0008, prompt=200)
        assert seconds / lone < 1 + 1.3 * pol.cfg.probe_budget, (accept, probes, seconds / lone)


def test_the_session_keeps_the_guards_verdict_for_its_next_start(tmp_path):
    """The state dir (runtime.state) keeps each policy's verdict under its machine/models/drafter/method key, and
    a new policy of that method (runtime.policies) resumes from it; another method's, or a damaged file, starts
    fresh."""
    from omnidraft import statefile
    from omnidraft.runtime.policies import PolicyCache
    from omnidraft.runtime.state import StateDir, guard_key

    state, key = StateDir(str(tmp_path)), "machine|build|models"
    pair = type("Pair", (), {"cache": type("C", (), {"save": lambda self, p: None})(),
                             "bridge": type("B", (), {"draft_fp": "d", "target_fp": "t"})()})()
    cost = type("CM", (), {"t_verify": {1: 0.002}, "t_draft": 0.001, "t_draft_n": {1: 0.001}})()

    def policies():  # as a session makes its cache (a new one: a new process, or a swap)
        return PolicyCache(lambda: cost, lambda method: None, lambda m: state.verdict(guard_key(key, "base", m)))

    def save(cache):  # as Session.save_state does
        state.save(pair, "base", key, cache.predictors(), cache.policies())

    cache = policies()
    pol = cache.get("omnidraft", PolicyConfig(name="cost", k=4))
    pol.guard.resume({"ratio": 0.8, "spell": 128, "rates": [40.0, 50.0]})
    save(cache)
    kept = {"ratio": 0.8, "spell": 128, "rates": [40.0, 50.0]}
    assert statefile.read(tmp_path / "guard.json", "machine|build|models|base|omnidraft") == kept
    cache = policies()
    resumed = cache.get("omnidraft", PolicyConfig(name="cost", k=4)).guard
    assert resumed.stats.resumed and resumed.stats.last_rates == (40.0, 50.0)
    assert not cache.get("hybrid", PolicyConfig(name="cost", k=4)).guard.stats.resumed
    (tmp_path / "guard.json").unlink()
    save(cache)  # a server saves after every request: a verdict it wrote already is not written again
    assert not (tmp_path / "guard.json").exists()
    resumed.resume({"ratio": 0.7, "spell": 256})
    save(cache)
    assert statefile.read(tmp_path / "guard.json", "machine|build|models|base|omnidraft")["ratio"] == 0.7
    (tmp_path / "guard.json").write_text("{not json")
    assert not policies().get("omnidraft", PolicyConfig(name="cost", k=4)).guard.stats.resumed


def test_greedy_and_sampled_requests_keep_apart_predictors_policies_and_verdicts(tmp_path):
    """A server with greedy and sampled clients: each kind's policy learns with its own predictor, saved to its
    own file, and resumes only its own guard verdict; greedy keeps the files named before the split."""
    from omnidraft import statefile
    from omnidraft.runtime.policies import PolicyCache
    from omnidraft.runtime.state import StateDir, guard_key

    state, key = StateDir(str(tmp_path)), "machine|build|models"
    bridge = type("B", (), {"draft_fp": "d", "target_fp": "t"})()
    pair = type("Pair", (), {"cache": type("C", (), {"save": lambda self, p: None})(), "bridge": bridge})()
    cost = type("CM", (), {"t_verify": {1: 0.002}, "t_draft": 0.001, "t_draft_n": {1: 0.001}})()

    def policies():
        return PolicyCache(lambda: cost, lambda who: state.predictor(who, "base", bridge),
                           lambda who: state.verdict(guard_key(key, "base", who)))

    cache, cfg = policies(), PolicyConfig(name="cost", k=4)
    greedy, sampled = cache.get("hybrid", cfg), cache.get("hybrid", cfg, sampled=True)
    assert greedy is not sampled and greedy.predictor is not sampled.predictor
    assert cache.get("hybrid", cfg) is greedy and cache.get("hybrid", cfg, sampled=True) is sampled
    feats = [DraftFeatures(token=5, depth=0, p_top1=0.9, entropy=0.3, margin=0.8)]
    for _ in range(20):
        sampled.predictor.update(feats, 0)  # sampled drafts rejected: greedy's estimate must not move
    assert greedy.predictor.predict(feats[0]) > sampled.predictor.predict(feats[0]) + 0.1
    sampled.guard.resume({"ratio": 0.8, "spell": 128, "rates": [40.0, 50.0]})
    state.save(pair, "base", key, cache.predictors(), cache.policies())
    assert (tmp_path / "predictor-hybrid@sampled-base-d-t.json").exists()
    assert not (tmp_path / "predictor-hybrid-base-d-t.json").exists()  # greedy learned nothing
    assert statefile.read(tmp_path / "guard.json", f"{key}|base|hybrid@sampled")["ratio"] == 0.8
    assert statefile.read(tmp_path / "guard.json", f"{key}|base|hybrid") is None
    fresh = policies()  # the next process: the sampled learner resumes, the greedy one starts fresh
    assert fresh.get("hybrid", cfg, sampled=True).guard.stats.resumed
    assert not fresh.get("hybrid", cfg).guard.stats.resumed
    assert fresh.get("hybrid", cfg, sampled=True).predictor.predict(feats[0]) < greedy.predictor.predict(feats[0])


def test_the_generator_feeds_the_guard_and_an_unpriced_drafter_cost_stops_drafting(default_session,
                                                                                   target_reference):
    """A real generation where each draft call costs more than the drafter's own timing shows (as a GPU's
    per-call overheads did): the cost model never sees it, the guard does from the steps' wall time.  The extra
    cost is 6 times the target's last pass, so that no step can pay for it (k = 4 yields at most 5 tokens)
    however fast or loaded the machine is: a fixed 60 ms was cheap beside a decode slowed by other processes."""
    import time

    from omnidraft.speculative.generator import GenerationParams

    s = default_session
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.guard.cfg.first, pol.guard.cfg.every = 8, 10_000
    # a cost model that always predicts a gain and learns nothing, so that only the guard can stop drafting
    # (left to learn, the model itself stops on some machines, and the guard would have nothing to judge)
    pol.seed_costs({n: 0.02 + 0.0001 * n for n in range(1, 7)}, 0.0001)
    pol.observe = lambda step: None
    gen = s.compose("omnidraft", s.pair, pol)
    real, decode, last = gen.drafter.draft, s.target.decode, [0.05]

    def timed(ids, logits_for="last"):
        t0 = time.perf_counter()
        out = decode(ids, logits_for)
        last[0] = time.perf_counter() - t0
        return out

    def slow(k, stop):
        time.sleep(6 * last[0])
        return real(k, stop)

    gen.drafter.draft = slow
    prompt = gen.prompt_from_text("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
    params = GenerationParams(max_tokens=160)
    assert gen.target is s.target
    s.target.decode = timed
    try:
        final = gen.generate(prompt, params)
    finally:
        del s.target.decode  # the session's engine is shared with other tests
    g = pol.stats()["guard"]
    assert g["spells"] >= 1 and g["last_ratio"] < 0.97 and g["blocked_steps"] >= 16, \
        (g, len(final.token_ids), [r.proposed for r in final.steps])
    assert final.token_ids == target_reference(s.target, prompt, params)  # the guard only chooses lengths


def test_the_drafters_catching_up_after_a_pause_is_priced_apart(default_session, target_reference):
    """Text the target wrote while the policy ran it alone is read by the drafter in a pass of its own, timed as
    catching up: the drafting passes stay the 1..4-token ones the cost model prices, and the guard is handed the
    step's time without it.  Before, one probe after a pause priced a drafted token at the whole catch-up."""
    from omnidraft.speculative.generator import GenerationParams
    from omnidraft.speculative.step import CATCHUP_MIN

    s = default_session
    pol = DraftPolicy(PolicyConfig(name="fixed", k=2))
    every = 3 * CATCHUP_MIN  # draft on one step in every 24: the target writes >= 23 tokens in between
    real_choose = pol.choose_k

    def choose(limit: int) -> int:  # the fixed policy's k on one step in ``every``, the target alone between
        if pol.steps % every == 0:
            return real_choose(limit)
        pol.steps += 1
        return 0

    pol.choose_k = choose
    gen = s.compose("omnidraft", s.pair, pol)
    prompt = gen.prompt_from_text("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
    params = GenerationParams(max_tokens=100)
    final = gen.generate(prompt, params)
    drafting = [r for r in final.steps if r.drafted]
    assert len(drafting) >= 3
    assert drafting[0].catchup_s == 0.0  # right after the prompt: nothing to catch up on
    assert all(r.catchup_s > 0 and r.draft_s > r.catchup_s for r in drafting[1:])
    assert all(r.catchup_s == 0.0 for r in final.steps if not r.drafted)
    assert max(gen.drafter.counters.pass_hist) <= CATCHUP_MIN  # no drafting pass ingested the pause
    assert gen.drafter.counters.catchup_s == pytest.approx(sum(r.catchup_s for r in drafting))
    # the policy learnt what catching up costs per token written meanwhile (it prices the next pause with it)
    assert pol.price.n_catchup == len(drafting) - 1 and pol.price.t_catchup > 0
    assert final.token_ids == target_reference(s.target, prompt, params)


def test_the_cost_rule_reads_the_prompt_only_where_some_length_pays():
    """``Rule.reads_prompt``: a request starts with the drafter reading its prompt where a draft length is
    predicted to beat the target alone by the margin, or nothing is timed yet; not where none does, where
    drafting could never pay, or where the guard has stopped it."""
    from omnidraft.speculative.rules import RULES, Outlook

    cost, timed = RULES["cost"], (True, True, True)
    assert cost.reads_prompt(Outlook(2))  # nothing timed yet: it drafts to measure, so it reads
    assert cost.reads_prompt(Outlook(2, True, True, 1.5, (50.0, 56.0, 54.0), timed, margin=0.02))
    assert not cost.reads_prompt(Outlook(2, True, True, 1.5, (50.0, 50.5, 49.0), timed, margin=0.02))
    assert not cost.reads_prompt(Outlook(2, True, True, 0.9, (50.0, 0.0, 0.0), timed))
    assert not cost.reads_prompt(Outlook(2, False, True, 1.5, (50.0, 56.0, 54.0), timed, margin=0.02))
    assert RULES["fixed"].reads_prompt(Outlook(2)) and not RULES["fixed"].reads_prompt(Outlook(0))


def test_a_request_where_drafting_does_not_pay_leaves_the_prompt_to_a_probe(default_session, target_reference):
    """Where the cost model predicts no draft length to pay (one more row costs 0.8 of a decode, as on the AVX2
    path), the drafter does not read the prompt at the request's start; the first probe reads it, timed as
    catching up (and charged to the probes' budget), and the output is the target alone's.  Before, every request
    paid the drafter's prompt reading (34 ms for a 110-token prompt there) though no step drafted."""
    from omnidraft.speculative.generator import GenerationParams

    s = default_session
    pol = DraftPolicy(PolicyConfig(name="cost", k=2))
    pol.seed_costs({1: 0.02, 2: 0.036, 3: 0.052}, 0.0001)  # k = 1 at 70 %: 0.94x; a probe's ceiling 1.1x
    pol.credit = 10.0  # a probe is due once ``probe_every`` steps have passed
    gen = s.compose("omnidraft", s.pair, pol)
    eng, decode, read = gen.drafter.engine, gen.drafter.engine.decode, []

    def counted(ids, logits_for="last"):
        read.append((len(pol.chosen), len(ids)))  # (steps so far, tokens read)
        return decode(ids, logits_for)

    prompt = gen.prompt_from_text("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n" * 2)
    params = GenerationParams(max_tokens=48)
    eng.decode = counted
    try:
        final = gen.generate(prompt, params)
    finally:
        del eng.decode  # the session's engine is shared with other tests
    drafting = [i for i, r in enumerate(final.steps) if r.proposed]
    assert drafting and drafting[0] >= pol.cfg.probe_every - 1, [r.proposed for r in final.steps]
    assert all(step >= drafting[0] for step, _ in read)  # nothing read before the first probe
    first = final.steps[drafting[0]]
    assert first.catchup_s > 0 and read[0][1] >= len(prompt.target_ids) // 2  # the prompt, read as catching up
    assert final.token_ids == target_reference(s.target, prompt, params)


def test_a_length_is_paid_for_only_where_the_long_run_acceptance_also_gains():
    """Zen 1 costs (T(2) 1.51 decodes, one drafted token breaks even at 56 % kept): a lucky run that lifts the
    recent estimate to 75 % does not make drafting pay while the long run says 50 %; with both at 75 % it does."""
    t_pass = {1: 0.0788, 2: 0.1192, 3: 0.1586, 4: 0.2018, 5: 0.2406}
    chosen = {}
    for long_run in (0.5, 0.75):
        pol = DraftPolicy(PolicyConfig(name="cost", k=4, probe_budget=0.0))
        pol.seed_costs(t_pass, 0.00345)
        pol.acc = [0.75] * len(pol.acc)
        pol.acc_long = [long_run] * len(pol.acc_long)
        chosen[long_run] = pol.choose_k(4)
    assert chosen == {0.5: 0, 0.75: chosen[0.75]} and chosen[0.75] >= 1, chosen



def test_a_slow_spell_does_not_leave_the_target_alone_looking_slow():
    """A slow spell of the VM lifted the live T(1) to 150 ms on a 2-core Zen 1 EPYC, the 0.5B's two-token passes,
    timed live, then ran at 83 ms again: drafting looked cheap against the stale T(1), the policy drafted every step
    and, drafting, never timed a one-token pass again (0.77x the target alone on held-out HumanEval).  A freshly
    timed two-token pass holds T(1) to start-up's ratio once T(1) has gone 16 steps unmeasured, and the policy stops
    drafting where it loses (40 % kept)."""
    t_pass = {1: 0.050, 2: 0.0735, 3: 0.096, 4: 0.120, 5: 0.142}
    pol = DraftPolicy(PolicyConfig(name="cost", k=4, probe_budget=0.0))
    pol.seed_costs(t_pass, 0.0035)
    for _ in range(3):  # drafting at first: T(2) timed live
        pol.observe(StepOutcome(1, 0, drafted=1, verify_s=t_pass[2], draft_s=0.0035))
    for _ in range(12):  # the slow spell, not drafting
        pol.observe(StepOutcome(0, 0, verify_s=3 * t_pass[1]))
    assert pol.t_verify[1] > 2 * t_pass[1]
    for _ in range(16):  # drafting again, every step: two-token passes timed, no one-token pass
        pol.observe(StepOutcome(1, 0, drafted=1, verify_s=t_pass[2], draft_s=0.0035))
    pol.acc = pol.acc_long = [0.4] * len(pol.acc)
    # within 6 %: the spell's T(1) also rescaled T(2) (by its timed ratio), and 16 fresh timings bring it back
    assert pol.t_verify[1] <= t_pass[1] * 1.06
    assert pol.choose_k(4) == 0


def _one_token_drafts_after_pauses(pol: DraftPolicy, report_first: bool, t_pass: dict[int, float], t_one: float,
                                   t_per: float, n: int = 20):
    """``n`` rounds of four target-alone steps, then a one-token draft whose first (only) pass reads the 4 tokens
    written meanwhile and its own (5 in all): ``t_one`` for a one-token pass, ``t_per`` each further token read."""
    first = t_one + 4 * t_per
    for _ in range(n):
        for _ in range(4):
            pol.observe(StepOutcome(0, 0, verify_s=t_pass[1]))
        out = StepOutcome(1, 1, drafted=1, verify_s=t_pass[2], draft_s=first,
                          first_read=5 if report_first else 0, first_s=first if report_first else 0.0)
        pol.observe(out)


def test_a_draft_is_priced_as_one_first_pass_and_one_token_passes():
    """The drafter's first pass of a step also reads the target's tokens it has not seen; later passes read one.
    Priced at one rate per drafted token learnt from one-token drafts after pauses (the 30-layer drafter on a
    2-core Zen 4: 7.5-9.5 ms a token that way, 6.8-7.8 ms inside three-token drafts), a longer draft looked k
    times too dear and the default drafted one token at a time.  Seeded from the cost model's pass of n tokens,
    then learnt from the first pass's own time, a three-token draft costs three one-token passes plus what its
    first pass reads."""
    t_pass = {n: 0.020 + 0.001 * (n - 1) for n in range(1, 6)}
    pol = DraftPolicy(PolicyConfig(name="cost", k=4))
    pol.seed_costs(t_pass, 0.0015, {1: 0.0015, 2: 0.0018, 3: 0.0021, 4: 0.0024})
    assert pol.price.t_read == pytest.approx(0.0003)
    assert pol.passes_s(3, lag=0) == pytest.approx(3 * 0.0015 + 0.5 * 0.0003)
    assert pol.passes_s(3, lag=4) == pytest.approx(3 * 0.0015 + 4.5 * 0.0003)
    assert pol.passes_s(3, lag=20) == pytest.approx(3 * 0.0015)  # a long lag is caught up on apart (catchup_cost)
    priced = {}
    for report in (True, False):
        pol = DraftPolicy(PolicyConfig(name="cost", k=4))
        pol.seed_costs(t_pass, 0.0065, {1: 0.0065, 4: 0.008})
        _one_token_drafts_after_pauses(pol, report, t_pass, t_one=0.0065, t_per=0.0006)
        priced[report] = pol.passes_s(3, lag=0)
    # learnt apart: a one-token pass stays at 6.5 ms and a token read costs 0.6 ms
    assert priced[True] == pytest.approx(3 * 0.0065 + 0.5 * 0.0006, rel=0.02)
    # a drafter that does not time its first pass is priced as before: every token at the first pass's 8.9 ms
    assert priced[False] == pytest.approx(3 * (0.0065 + 4 * 0.0006), rel=0.02)


def test_the_first_pass_price_lets_the_default_draft_longer_where_it_pays():
    """Where the target's extra rows are cheap (0.1 decode) but the drafter is not (a 30-layer drafter, 6.5 ms a
    pass, 0.6 ms more for each token its first pass reads), three-token drafts at 80 % kept are the fastest (about
    1.5x the target alone); priced per token from one-token drafts after pauses (8.9 ms), two tokens looked best."""
    t_pass = {n: 0.030 + 0.003 * (n - 1) for n in range(1, 7)}
    chosen = {}
    for report in (True, False):
        pol = DraftPolicy(PolicyConfig(name="cost", k=4))
        pol.seed_costs(t_pass, 0.0065, {1: 0.0065, 4: 0.008})
        _one_token_drafts_after_pauses(pol, report, t_pass, t_one=0.0065, t_per=0.0006)
        pol.acc = [0.8] * len(pol.acc)
        pol.acc_long = [0.8] * len(pol.acc_long)
        chosen[report] = pol.choose_k(4), [round(pol.expected_speed(k) * t_pass[1], 3) for k in range(5)]
    assert chosen[True][0] == 3 and chosen[True][1][3] > 1.45, chosen
    assert chosen[False][0] <= 2, chosen


def test_the_model_drafter_times_its_first_pass(default_session):
    """Each draft reports what its first pass read and took (Draft.first_read, first_s), and the policy learns a
    one-token pass and the reading from them: the real pair, fixed three-token drafts."""
    from omnidraft.speculative.generator import GenerationParams

    s = default_session
    pol = DraftPolicy(PolicyConfig(name="fixed", k=3))
    gen = s.compose("omnidraft", s.pair, pol)
    drafts = []
    real_draft = gen.drafter.draft
    gen.drafter.draft = lambda k, stop: drafts.append(real_draft(k, stop)) or drafts[-1]
    gen.generate(gen.prompt_from_text("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"),
                 GenerationParams(max_tokens=40))
    made = [d for d in drafts if d.drafted]
    assert len(made) >= 5
    assert all(1 <= d.first_read <= 8 and 0 < d.first_s <= d.draft_s for d in made)
    assert any(d.first_read > 1 for d in made)  # after a full acceptance: the last drafted token and the next
    assert pol.price.n_read0 > 0 and 1.0 <= pol.price.read0 <= 4.0 and 0 < pol.t_draft < max(d.draft_s for d in made)


def test_a_size_timed_in_a_slow_spell_follows_the_one_token_pass_back():
    """A two-token pass timed in a slow spell of the VM (T(1) 36 ms, T(2) 37.5) and not again, since drafting then
    stopped: once the spell ends (T(1) 29 ms) it follows T(1) back at its timed ratio, and drafting one token at
    50 % kept pays again (the 30-layer drafter, 6.5 ms a pass).  Held at 37.5 ms, it never did."""
    t_pass = {1: 0.030, 2: 0.032, 3: 0.037, 4: 0.042, 5: 0.048}
    pol = DraftPolicy(PolicyConfig(name="cost", k=4, probe_budget=0.0))
    pol.guard = RateGuard(GuardConfig(first=10 ** 9))
    pol.seed_costs(t_pass, 0.0065, {1: 0.0065, 4: 0.008})
    for _ in range(5):  # the spell: the target alone, then drafting
        pol.observe(StepOutcome(0, 0, verify_s=0.036))
    for _ in range(5):
        pol.observe(StepOutcome(1, 1, drafted=1, verify_s=0.0375, draft_s=0.0065, first_read=1, first_s=0.0065))
    ratio = pol.t_verify[2] / pol.t_verify[1]
    for _ in range(30):  # the spell is over; nothing drafted
        pol.observe(StepOutcome(0, 0, verify_s=0.029))
    assert pol.t_verify[2] == pytest.approx(ratio * pol.t_verify[1]) and pol.t_verify[2] < 0.033
    pol.acc = pol.acc_long = [0.5] * len(pol.acc)
    assert pol.choose_k(4) >= 1


# the 1.5B Q4_K_M's target passes and the shipped drafter's passes on a 2-core Zen 4 (priced_policy.py's table)
ZEN4_PASS = {1: 0.0347, 2: 0.0372, 3: 0.0425, 4: 0.0482, 5: 0.0534}
ZEN4_DRAFT = {1: 0.0017, 2: 0.0019, 3: 0.0023, 4: 0.0027}


def _model_policy(scale: float = 1.0) -> DraftPolicy:
    """A cost policy seeded with the Zen 4 table times ``scale``, its guard off: only the cost model decides."""
    pol = DraftPolicy(PolicyConfig(name="cost", k=4, probe_budget=0.0))
    pol.guard = RateGuard(GuardConfig(first=10 ** 9))
    pol.seed_costs({n: scale * t for n, t in ZEN4_PASS.items()}, scale * ZEN4_DRAFT[1],
                   {n: scale * t for n, t in ZEN4_DRAFT.items()})
    return pol


@pytest.mark.parametrize("pace", [1.15, 0.87])
def test_a_pace_change_while_only_drafting_keeps_the_draft_lengths_where_the_true_costs_put_them(pace):
    """Drafting one token every step, only two-token passes are timed; the VM's pace then moves by 13-15 % and stays
    (a 2-core Zen 4 wanders by 10 % over ~50 steps).  T(1) was only ever held down, and the other sizes kept their
    old times: slower, a two-token pass looked dear against a stale three-token one and the policy drafted two
    tokens at 40-50 % kept; faster, T(1) fell with T(2) while T(3) stayed and it drafted one token at 55-70 %.  Now
    T(1) and the sizes not timed follow the live size at their ratios, and each acceptance gets the length a policy
    seeded with the true costs at the new pace picks."""
    t_pass, passes = ZEN4_PASS, ZEN4_DRAFT

    def length(pol: DraftPolicy, acc: float) -> int:
        pol.acc = [acc] * len(pol.acc)
        pol.acc_long = [acc] * len(pol.acc_long)
        return pol.choose_k(4)

    drifted = _model_policy()
    for _ in range(8):
        drifted.observe(StepOutcome(0, 0, verify_s=t_pass[1]))
    for p in [1.0] * 20 + [pace] * 60:
        drifted.observe(StepOutcome(1, 1, drafted=1, verify_s=p * t_pass[2], draft_s=p * passes[1], first_read=2,
                                    first_s=p * passes[1]))
    assert drifted.t_verify[1] == pytest.approx(pace * t_pass[1], rel=0.02)
    grid = [0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]
    truth = [length(_model_policy(pace), a) for a in grid]
    assert len(set(truth)) >= 3, truth  # the grid spans several lengths
    assert [length(drifted, a) for a in grid] == truth


def test_a_length_not_drafted_is_tried_again_where_it_pays():
    """The per-position estimates learn only from positions a draft reaches.  After a few misses at the second
    token, two-token drafts looked slower than one and stopped, so that estimate never moved again within a request:
    at 65 % kept at every position, where two tokens a step are the fastest, the policy drafted one on 53 % of 400
    steps (1.51x the target alone, 1.57x for fixed two-token drafts; a priced run of held-out HumanEval on a 2-core
    Zen 4 showed the same, one-token drafts on 122 of 163 steps with T(1) already re-derived).  Positions a draft
    stops short of now lean back towards the prior, as at a new request, and the length is tried again."""
    t_pass, passes = ZEN4_PASS, ZEN4_DRAFT
    one, speed = [], []
    for seed in range(8):
        pol = _model_policy()
        rng = np.random.default_rng(seed)
        ks, tokens, seconds = [], 0, 0.0
        for _ in range(400):
            k = pol.choose_k(4)
            kept = 0
            while kept < k and rng.random() < 0.65:
                kept += 1
            ks.append(k)
            tokens += kept + 1
            seconds += t_pass[k + 1] + k * passes[1]
            pol.observe(StepOutcome(k, kept, drafted=k, verify_s=t_pass[k + 1], draft_s=k * passes[1],
                                    first_read=1 if k else 0, first_s=passes[1] if k else 0.0))
        one.append(ks.count(1) / len(ks))
        speed.append(tokens / seconds * t_pass[1])
    fixed = max(sum(0.65 ** i for i in range(k + 1)) * t_pass[1] / (t_pass[k + 1] + k * passes[1]) for k in range(5))
    shares = (np.mean(one), np.mean(speed) / fixed)  # 0.53 and 0.963 of the best fixed length (two tokens) before
    assert shares[0] < 0.25, shares
    assert shares[1] > 0.975, shares
