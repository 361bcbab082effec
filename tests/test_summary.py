"""The one-line summary: tokens drafted and accepted out of those produced, and why the policy drafted or not."""

import re
import subprocess
import sys

import pytest

from omnidraft.speculative.generator import GenerationStats
from omnidraft.speculative.policy import DraftPolicy, PolicyConfig
from omnidraft.speculative.rules import RULES, Outlook

from tests.serve_helpers import seed_state


def cost_policy(t1: float, tn: float, t_draft: float, acc: float) -> DraftPolicy:
    """A cost policy with a measured T(1), T(n) = tn for n = 2..5, drafter time per token and acceptance."""
    p = DraftPolicy(PolicyConfig("cost", k=4))
    p.seed_costs({1: t1, **{n: tn for n in range(2, 6)}}, t_draft)
    p.acc = [acc] * len(p.acc)
    return p


def test_note_says_the_target_alone_is_faster_when_even_full_acceptance_loses():
    # a pass of 2..5 tokens costs 5x one token: on this machine drafting can never pay
    note = cost_policy(0.01, 0.05, 0.01, acc=1.0).note(6)
    assert note.startswith("the cost policy ran the target alone, it is faster on this machine")
    assert "predicted 0.56x at best" in note  # best at k = 4: 5 tokens in T(5) + 4 T_draft = 0.09 s vs 0.05 s


def test_note_says_when_drafting_pays_and_when_acceptance_is_too_low():
    # verifying 5 tokens costs 1.2x one token, drafting is cheap: pays at high acceptance, not at low
    assert "predicts a gain" in cost_policy(0.01, 0.012, 0.001, acc=0.9).note(6)
    low = cost_policy(0.01, 0.012, 0.001, acc=0.05)
    assert low.note(6) == ("the cost policy mostly ran the target alone, drafting is predicted to be slower here "
                           "(0.81x at best, assuming 5% acceptance, none measured yet); it probes now and then")
    low.chosen = [1, 0, 0, 1]                     # drafts were judged: the rate is a measured one
    assert "(0.81x at best, first drafted token accepted 5% of the time)" in low.note(6)

    # a gain under the margin (the AVX2 path's one drafted token at break-even) is not called a loss
    rule, timed = RULES["cost"], (True,) * 5
    near = Outlook(4, True, True, 1.3, (50.0, 50.4, 49.0, 48.0, 47.0), timed, gains=(1.0, 1.008, 0.98, 0.96, 0.94),
                   first_acceptance=0.7, measured=True, margin=0.02)
    assert rule.choose(near).k == 0
    assert "drafting is predicted to gain too little here (1.01x at best, under its 2% margin" in rule.note(near)


def test_note_for_other_policies_and_no_timings():
    assert DraftPolicy(PolicyConfig("fixed", k=3)).note(6) == "the fixed policy drafts up to 3 tokens every step"
    assert "no timings yet" in DraftPolicy(PolicyConfig("cost", k=4)).note(6)


def test_summary_line_counts_drafted_accepted_produced_and_says_why():
    s = GenerationStats("omnidraft", completion_tokens=160, target_passes=159, proposed=1, accepted=1,
                        policy_note="the cost policy ran the target alone, it is faster on this machine")
    line = s.summary()
    assert line.startswith("[omnidraft] drafted 1 and accepted 1 of 160 tokens: the cost policy ran the target alone")
    assert "acceptance 100.0%" in line and "1.01 tokens/target pass" in line and "\n" not in line
    assert s.as_dict()["policy_note"] == s.policy_note  # the server's final chunk carries it to the app
    alone = GenerationStats("omnidraft", completion_tokens=24, target_passes=24).summary()
    assert alone.startswith("[omnidraft] drafted 0 and accepted 0 of 24 tokens;") and "acceptance" not in alone


@pytest.mark.slow
def test_generate_prints_how_many_tokens_were_drafted_and_why(tmp_path):
    """The real default pair under the default cost policy."""
    prompt = "Write a Python function that adds two numbers."
    r = subprocess.run([sys.executable, "-m", "omnidraft.apps.cli", "generate", "--chat", "--max-tokens", "24",
                        "--threads", "2", "--state-dir", str(seed_state(tmp_path)), prompt],
                       capture_output=True, text=True, timeout=600)  # start-up measures the machine
    assert r.returncode == 0, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("[hybrid] drafted "), line
    m = re.match(r"\[hybrid\] drafted (\d+) and accepted (\d+) of (\d+) tokens: the cost policy ", line)
    assert m, line
    drafted, accepted, produced = map(int, m.groups())
    assert 0 <= accepted <= drafted and 0 < produced <= 24


def test_an_answer_ended_by_the_target_counts_its_end_token_so_tau_is_at_least_one(default_session):
    """The probe's 0.98 tokens per pass: the target alone makes one token a pass, and the last pass of an
    answer that ends on its own made the end-of-generation token, which is not text but was produced."""
    from omnidraft.speculative.generator import GenerationParams

    gen = default_session.generator("target")
    f = gen.generate(gen.prompt_from_messages([{"role": "user", "content": "Say yes."}]),
                     GenerationParams(max_tokens=64))
    assert f.finish_reason == "stop" and f.stats.stop_tokens == 1
    assert f.stats.target_passes == f.stats.completion_tokens + 1
    assert f.stats.tau == 1.0 and f.stats.as_dict()["stop_tokens"] == 1
    cut = gen.generate(gen.prompt_from_messages([{"role": "user", "content": "Count to fifty."}]),
                       GenerationParams(max_tokens=4))
    assert cut.finish_reason == "length" and cut.stats.stop_tokens == 0 and cut.stats.tau == 1.0
