"""Offline distillation of a shallow drafter (omnidraft.distill): alignment by hand, one training
run on a tiny model lowering the hybrid loss, and the cut model exporting to a GGUF the Engine loads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from omnidraft.distill.cut import save_trained
from omnidraft.distill.data import PAD, slots
from omnidraft.distill.export import export
from omnidraft.distill.teacher import continuation_alignment, map_topk
from omnidraft.distill.dist import Dist
from omnidraft.distill.train import Data, TrainConfig, _progress, parse_layers, train
from tests.gguf_helpers import tiny_gguf


def test_slots_by_hand():
    # target: "def" " foo" "(x)"   drafter: "def" " f" "oo" "(x)";  only def and (x) are shared
    t_ids, t_p = [10, 11, 12], [b"def", b" foo", b"(x)"]
    d_ids, d_p = [0, 1, 2, 3], [b"def", b" f", b"oo", b"(x)"]
    d2t = np.array([10, -1, -1, 12])
    # d_3 "(x)" starts where target token 2 starts: its distribution is target row 1
    assert slots(d_ids, d_p, t_ids, t_p, d2t).tolist() == [-2, -1, -1, 1]
    # same bytes at the same place but the bridge does not map them: an N-gram position
    assert slots(d_ids, d_p, t_ids, t_p, np.array([10, -1, -1, -1])).tolist() == [-2, -1, -1, -1]


def test_continuation_alignment_reads_target_tokens():
    # target vocab of 3: token 0 maps to drafter 5, token 1 is read as drafter [6, 7], token 2 maps to 8
    enc_ids, enc_off = np.array([5, 6, 7, 8]), np.array([0, 1, 3, 4])
    direct = np.array([True, False, True])
    d, s = continuation_alignment(np.array([1, 2]), [0, 1, 2], 4, enc_ids, enc_off, direct)
    assert d.tolist() == [1, 2, 5, 6, 7, 8]
    # output token j sits at target index 4 + j, predicted by row 3 + j
    assert s.tolist() == [-2, -1, 3, -1, -1, 5]


def test_parse_layers():
    assert parse_layers("first4") == [0, 1, 2, 3]
    assert parse_layers("spread4") == [0, 10, 19, 29]
    assert parse_layers("0,5") == [0, 5]


def _tiny_data(path, n_vocab: int, seed: int = 0, n_ex: int = 12, length: int = 40, k: int = 4):
    """Data in the teacher's format: a fixed 'teacher' that prefers token (prev + 1) % 50."""
    rng = np.random.default_rng(seed)
    arr = {key: [] for key in ("ids", "kind", "top", "prob", "rest", "t1m")}
    for _ in range(n_ex):
        ids = rng.integers(0, 50, length)
        for j in range(1, length):
            ids[j] = (ids[j - 1] + 1) % 50 if rng.random() < 0.8 else ids[j]
        kind = np.where(rng.random(length) < 0.7, 1, 2).astype(np.uint8)
        kind[0] = 0
        top = np.full((length, k), PAD, dtype=np.uint16)
        top[:, 0] = np.r_[0, (ids[:-1] + 1) % 50]
        top[:, 1] = np.r_[0, (ids[:-1] + 2) % 50]
        prob = np.zeros((length, k), dtype=np.float16)
        prob[:, 0], prob[:, 1] = 0.8, 0.1
        for key, v in (("ids", ids.astype(np.uint16)), ("kind", kind), ("top", top), ("prob", prob),
                       ("rest", np.full(length, 0.1, dtype=np.float16)), ("t1m", np.ones(length, bool))):
            arr[key].append(v)
    out = {key: np.concatenate(v) for key, v in arr.items()}
    out.update(ex_len=np.full(n_ex, length, dtype=np.int32), val=np.arange(n_ex) % 4 == 0,
               ex_src=np.zeros(n_ex, np.uint8), meta=np.frombuffer(json.dumps({"n_vocab": n_vocab}).encode(),
                                                                    dtype=np.uint8))
    np.savez(path, **out)
    return path


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return tiny_gguf(tmp_path_factory, "llama")


def test_training_lowers_loss_and_cut_model_exports(tiny_llama, tmp_path):
    data = _tiny_data(tmp_path / "data.npz", 32000)
    assert Data(str(data)).examples(True).size == 3
    cfg = TrainConfig(data=str(data), draft_gguf=str(tiny_llama), layers="first1", out=str(tmp_path / "tr"),
                      epochs=30, batch_tokens=160, lr=3e-3, eval_every=1000, train_embeddings=True)
    hist = train(cfg, progress=False)
    assert hist["layers"] == [0]
    before, after = hist["val"][0]["val_loss"], hist["val"][-1]["val_loss"]
    assert after < 0.8 * before, (before, after)
    res = export(str(tiny_llama), [0], tmp_path / "tr" / "first1", tmp_path / "cut.gguf", qtype="f32")
    assert res["check"]["ok"] and res["check"]["top1_agreement"] == 1.0

    from omnidraft.llama.engine import Engine, EngineConfig

    with Engine(res["path"], EngineConfig(n_ctx=64, n_threads=1)) as eng:
        assert eng.meta("llama.block_count") == "1"


def test_map_topk_keeps_mapped_entries_in_rank_order():
    # target vocab of 6; ids 1 and 4 have no drafter token
    t2d = np.array([10, -1, 12, 13, -1, 15])
    slot = np.array([-2, 0, -1, 1])  # position 2 is an N-gram position
    rows = np.array([0, 1])
    idx = np.array([[1, 2, 0], [3, 4, 5]])
    p = np.array([[0.5, 0.3, 0.1], [0.6, 0.2, 0.1]], dtype=np.float32)
    top, prob, rest, t1m = map_topk(slot, rows, idx, p, t2d, 3)
    assert top[1].tolist() == [12, 10, PAD] and top[3].tolist() == [13, 15, PAD]
    assert (top[[0, 2]] == PAD).all() and (prob[[0, 2]] == 0).all()
    assert prob[1].tolist() == pytest.approx([0.3, 0.1, 0.0], abs=1e-3)
    assert rest.tolist() == pytest.approx([1.0, 0.6, 1.0, 0.3], abs=1e-3)
    assert t1m.tolist() == [False, False, False, True]  # row 0's top-1 (id 1) does not map


def test_trained_matrix_larger_than_a_file_round_trips(tmp_path):
    import torch

    from omnidraft.distill import cut as distill

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3000, 64))
            self.b = torch.nn.Parameter(torch.randn(64))

    m = M()
    files = save_trained(m, {"w", "b"}, tmp_path, max_bytes=50_000)
    assert len(files) > 3 and all(f.stat().st_size < 60_000 for f in files)
    orig = distill.load_cut
    try:
        distill.load_cut = lambda *_: M()
        back = distill.load_trained("unused", [0], tmp_path)
    finally:
        distill.load_cut = orig
    with torch.no_grad():
        assert torch.equal(back.b, m.b)
        err = (back.w - m.w).abs().max() / m.w.abs().max()
    assert float(err) < 1 / 127  # int8 per row, nothing lost between blocks


def test_training_stops_at_max_steps(tiny_llama, tmp_path):
    data = _tiny_data(tmp_path / "data.npz", 32000)
    cfg = TrainConfig(data=str(data), draft_gguf=str(tiny_llama), layers="first1", out=str(tmp_path / "tr"),
                      epochs=30, batch_tokens=160, max_steps=7, eval_every=1000, train_embeddings=False)
    hist = train(cfg, progress=False)
    assert hist["steps"] > 7 and hist["train"][-1]["step"] == 7 and hist["val"][-1]["step"] == 7


def test_time_limit_anneals_the_learning_rate_to_zero():
    """Under max_minutes the cosine runs on the larger of the step share and the time share: a run cut by its
    time limit ends at rate 0 instead of stopping mid-schedule."""
    import time

    now = time.perf_counter()
    assert _progress(TrainConfig(), 25, 100, now - 1e6, Dist()) == 0.25  # no limit: the steps alone
    timed = TrainConfig(max_minutes=1.0)
    assert _progress(timed, 25, 100, now - 45, Dist()) == pytest.approx(0.75, abs=0.01)  # time ahead of steps
    assert _progress(timed, 90, 100, now - 6, Dist()) == pytest.approx(0.9)  # steps ahead of time
    assert _progress(timed, 1, 100, now - 120, Dist()) == 1.0  # out of time: the loop stops, rate 0


def test_grow_appends_the_donors_layers_after_the_drafters_own(tiny_llama, tmp_path):
    """`distill grow`: a 1-layer cut of the tiny model, its layer 1 appended again from the full model, is a
    2-layer GGUF the Engine loads, whose layer 0 is the cut's (here: the tiny model's layer 0) and layer 1
    the donor's, tensor for tensor, as the torch models say."""
    from omnidraft.distill.export import grow
    from omnidraft.trainer.model import load_gguf_model

    cut = export(str(tiny_llama), [0], None, tmp_path / "cut.gguf", qtype="f32")
    res = grow(cut["path"], str(tiny_llama), [1], tmp_path / "grown.gguf", qtype="f32")
    assert res["check"]["ok"]
    full, grown = load_gguf_model(tiny_llama), load_gguf_model(res["path"])
    assert len(grown.model.layers) == 2
    for i in (0, 1):
        a, b = full.model.layers[i].state_dict(), grown.model.layers[i].state_dict()
        assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a), i
    with pytest.raises(ValueError, match="not a layer 7"):
        grow(cut["path"], str(tiny_llama), [7], tmp_path / "bad.gguf", qtype="f32")

    from omnidraft.llama.engine import Engine, EngineConfig

    with Engine(res["path"], EngineConfig(n_ctx=64, n_threads=1)) as eng:
        assert eng.meta("llama.block_count") == "2"
