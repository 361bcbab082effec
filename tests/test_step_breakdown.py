"""Where a speculative step's time goes (issue 28): draft, translate, target pass, sample/accept and
bookkeeping, timed at the loop's boundaries on a real generation.  The parts are laps of one clock, so they
must add up to each step with no part negative (a negative part means an interval counted twice), and the
steps must cover the generation time that the generator measures on its own (total less prefill)."""

import pytest

from omnidraft.speculative.generator import GenerationParams
from omnidraft.speculative.stats import STEP_PARTS

PROMPT = "def is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"\n"


def _parts(rec) -> list[float]:
    return [getattr(rec, f"{p}_s") for p in STEP_PARTS]


@pytest.mark.parametrize("method,k", [("omnidraft", 4), ("target", 0)])
def test_step_parts_add_up_to_each_step_and_the_steps_to_the_generation(default_session, method, k):
    gen = default_session.generator(method, k=k or None, policy="fixed")
    final = gen.generate(gen.prompt_from_text(PROMPT), GenerationParams(max_tokens=40))
    st, steps = final.stats, final.steps
    assert st.target_passes == len(steps) > 1
    for rec in steps:
        assert min(_parts(rec)) >= -1e-6, rec  # every part a real interval, none counted twice
        assert sum(_parts(rec)) == pytest.approx(rec.total_s, abs=1e-6)
        assert rec.verify_s == pytest.approx(rec.target_s + rec.sample_s, abs=1e-9)
        assert rec.target_s > 0
    for p in STEP_PARTS:  # the answer's sums are the records' sums
        assert getattr(st, f"{p}_s") == pytest.approx(sum(getattr(r, f"{p}_s") for r in steps), abs=1e-9)
    assert st.step_s == pytest.approx(sum(r.total_s for r in steps), abs=1e-9)
    # the steps cover the loop: all that lies outside them is the set-up after the prompt and the text's end
    gap = st.generation_s - st.step_s
    assert -1e-6 <= gap <= max(0.003, 0.03 * st.generation_s), (gap, st.generation_s)
    bd = st.step_breakdown()
    assert sum(bd["share"].values()) == pytest.approx(1.0, abs=1e-6)
    assert bd["ms"]["step"] == pytest.approx(st.step_s * 1e3 / st.target_passes)
    if method == "target":
        assert st.draft_s == 0.0 and st.translate_s == 0.0
    else:
        assert st.draft_s > 0 and st.translate_s > 0 and st.proposed > 0


def test_bench_rows_and_table_carry_the_breakdown(default_session):
    from omnidraft.bench import report
    from omnidraft.bench.runner import Tally

    gen = default_session.generator("omnidraft", k=3, policy="fixed")
    tally = Tally()
    tally.add(gen.generate(gen.prompt_from_text(PROMPT), GenerationParams(max_tokens=24)))
    row = tally.summary(None, cost=None)
    assert set(row["step_ms"]) == {*STEP_PARTS, "step"} and set(row["step_share"]) == set(STEP_PARTS)
    assert sum(row["step_ms"][p] for p in STEP_PARTS) == pytest.approx(row["step_ms"]["step"])
    table = report.step_table({"omnidraft k=3": row, "llama-cpp-python": {"step_ms": {"step": 0.0}}})
    lines = table.splitlines()
    assert len(lines) == 3 and lines[2].startswith("| omnidraft k=3 | ") and "target pass" in lines[0]
