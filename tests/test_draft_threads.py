"""Drafter threads: auto (timed once per machine against fewer, kept in threads.json) or given."""

import json

import pytest

from omnidraft.llama import costmodel
from omnidraft.runtime.session import Session, Settings
from tests.gguf_helpers import tiny_gguf


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return (tiny_gguf(tmp_path_factory, "qwen2"),  # target: Qwen's vocabulary
            tiny_gguf(tmp_path_factory, "llama"))  # drafter: another vocabulary, bridged


def _session(pair, state, **kw) -> Session:
    target, draft = pair
    return Session(Settings(target=str(target), draft=str(draft), threads=4, n_ctx=1024, draft_n_ctx=512,
                            method="omnidraft", policy="fixed", state_dir=str(state), **kw))


def test_thread_candidates_halve_down_to_an_eighth():
    assert costmodel.thread_candidates(16) == [16, 8, 4, 2]
    assert costmodel.thread_candidates(8) == [8, 4, 2, 1]
    assert costmodel.thread_candidates(4) == [4, 2, 1]
    assert costmodel.thread_candidates(2) == [2, 1]
    assert costmodel.thread_candidates(1) == [1]


def test_fewer_threads_are_kept_only_past_the_noise_margin():
    assert costmodel.pick_threads({8: 1.00, 4: 0.97, 2: 1.2}, default=8) == 8  # 3 %: noise
    assert costmodel.pick_threads({8: 1.00, 4: 0.80, 2: 0.85}, default=8) == 4
    assert costmodel.pick_threads({2: 1.00, 1: 1.50}, default=2) == 2


def test_auto_threads_are_timed_once_kept_and_survive_a_drafter_swap(pair, tmp_path, monkeypatch):
    timed = []

    def fake_timing(draft, target, candidates, rounds=5):
        timed.append(candidates)
        real = costmodel_time(draft, target, candidates, rounds=1)  # the real timing runs on these engines
        assert set(real) == set(candidates) and all(t > 0 for t in real.values())
        return {n: (0.5 if n == 2 else 1.0) for n in candidates}  # 2 threads clearly fastest

    costmodel_time = costmodel.time_draft_threads
    monkeypatch.setattr(costmodel, "time_draft_threads", fake_timing)
    s = _session(pair, tmp_path)
    try:
        assert s.tune_drafter() == 2 and s.draft.live_threads == 2
        assert timed == [[4, 2, 1]]
        s.target.decode(s.target.tokenize("x = 1"), "last")  # the engines still decode after the timing
        entry = next(iter(json.loads((tmp_path / "threads.json").read_text()).values()))
        assert entry["draft_threads"] == 2 and set(entry["step_ms"]) == {"4", "2", "1"}
        s.load_drafter(str(pair[1]))  # a swapped-in version keeps the count, untimed
        assert s.draft.live_threads == 2 and len(timed) == 1
    finally:
        s.close()

    s = _session(pair, tmp_path)  # a new process: read, not timed
    try:
        assert s.tune_drafter() == 2 and s.draft.live_threads == 2 and len(timed) == 1
    finally:
        s.close()


def test_given_drafter_threads_are_used_as_given(pair, tmp_path, monkeypatch):
    monkeypatch.setattr(costmodel, "time_draft_threads", lambda *a, **k: pytest.fail("timed despite a given count"))
    s = _session(pair, tmp_path, draft_threads=3)
    try:
        assert s.tune_drafter() is None
        assert s.draft.live_threads == 3 and s.target.live_threads == 4
        assert not (tmp_path / "threads.json").exists()
    finally:
        s.close()


def test_drafter_passes_are_timed_after_a_target_pass_as_in_the_loop(pair):
    """The cost model times each drafter pass right after a one-token pass of the target (the loop's order),
    and leaves both engines empty."""
    from omnidraft.llama.engine import Engine, EngineConfig

    class Counting(Engine):
        passes: list[int] = []

        def decode(self, ids, logits_for="last"):
            self.passes.append(len(ids))
            return super().decode(ids, logits_for)

    with Counting(pair[0], EngineConfig(n_ctx=512, n_threads=2)) as target, \
            Engine(pair[1], EngineConfig(n_ctx=512, n_threads=2, batch_invariant=False)) as draft:
        times = costmodel.sample_passes(draft, range(1, 3), rounds=2, after=target)
        assert set(times) == {1, 2} and all(len(v) == 2 and min(v) > 0 for v in times.values())
        assert Counting.passes == [16] + [1] * 6  # its prefix, then one pass before each of 3 rounds x 2 sizes
        assert target.n_past == 0 and draft.n_past == 0
