"""Trainer: the hybrid loss on hand-made tensors, GGUF -> torch -> GGUF round trip, loss decreasing."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from omnidraft.trainer.export import check_gguf, export_gguf  # noqa: E402
from omnidraft.trainer.loss import Batch, batch_from_record, dm_reverse_kl, hybrid_loss, ngram_nll  # noqa: E402
from omnidraft.trainer.model import add_lora, load_gguf_model, merged, unpermute_qk  # noqa: E402

from tests.gguf_helpers import tiny_gguf  # noqa: E402


def test_reverse_kl_by_hand():
    # drafter over 4 tokens: q = softmax(log [0.5, 0.3, 0.1, 0.1]); target top-k maps to ids 0 and 2
    q = np.array([0.5, 0.3, 0.1, 0.1])
    logits = torch.tensor(np.log(q))[None]
    p0, p2 = 0.6, 0.3
    rest = 1 - p0 - p2
    want = 0.5 * math.log(0.5 / p0) + 0.1 * math.log(0.1 / p2) + 0.4 * math.log(0.4 / rest)
    got = dm_reverse_kl(logits, torch.tensor([[0, 2, -1]]), torch.tensor([[p0, p2, 0.0]]), torch.tensor([rest]))
    assert float(got[0]) == pytest.approx(want, rel=1e-6)
    # identical coarse distributions: zero; the rest bucket floored at eps, never infinite
    same = dm_reverse_kl(torch.log(torch.tensor([[0.6, 0.1, 0.3, 1e-30]])), torch.tensor([[0, 2]]),
                         torch.tensor([[0.6, 0.3]]), torch.tensor([0.1]))
    assert float(same[0]) == pytest.approx(0.0, abs=1e-6)
    assert math.isfinite(float(dm_reverse_kl(logits, torch.tensor([[0]]), torch.tensor([[1.0]]),
                                             torch.tensor([0.0]))[0]))
    assert float(ngram_nll(logits, torch.tensor([1]))[0]) == pytest.approx(-math.log(0.3))


def test_hybrid_loss_combines_means():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]))
    b = Batch(torch.zeros(3, dtype=torch.long), torch.arange(3), torch.tensor([0, 3, 1]),
              torch.tensor([True, False, False]), torch.tensor([False, True, True]),
              torch.tensor([[0, 2, -1], [-1, -1, -1], [-1, -1, -1]]), torch.tensor([[0.6, 0.3, 0], [0] * 3, [0] * 3]),
              torch.tensor([0.1, 1.0, 1.0]))
    loss, info = hybrid_loss(logits, b, lam=0.2)
    dm = 0.5 * math.log(0.5 / 0.6) + 0.1 * math.log(0.1 / 0.3) + 0.4 * math.log(0.4 / 0.1)
    ng = (-math.log(0.25) - math.log(0.1)) / 2
    assert float(loss) == pytest.approx(dm + 0.2 * ng, rel=1e-5)
    assert info["n_dm"] == 1 and info["n_ngram"] == 2


def _record(rng, n_vocab: int, n_prompt: int = 12, n_out: int = 24) -> dict:
    out = rng.integers(100, n_vocab, n_out).tolist()
    dm = (rng.random(n_out) < 0.7).astype(int).tolist()
    tk_ids, tk_p, rest = [], [], []
    for i in range(n_out):
        if dm[i]:
            others = rng.integers(100, n_vocab, 3).tolist()
            tk_ids.append([out[i]] + others)
            tk_p.append([0.7, 0.1, 0.05, 0.05])
            rest.append(0.1)
        else:
            tk_ids.append(None), tk_p.append(None), rest.append(None)
    return {"prompt_ids": rng.integers(100, n_vocab, n_prompt).tolist(), "output_ids": out, "dm": dm,
            "ngram": [1 - d for d in dm], "topk_ids": tk_ids, "topk_probs": tk_p, "rest_mass": rest}


def test_batch_alignment_and_truncation():
    rng = np.random.default_rng(0)
    rec = _record(rng, 500, n_prompt=10, n_out=6)
    b = batch_from_record(rec, max_len=64)
    assert b.input_ids.tolist() == (rec["prompt_ids"] + rec["output_ids"])[:-1]
    assert b.pos.tolist() == list(range(9, 15)) and b.labels.tolist() == rec["output_ids"]
    short = batch_from_record(rec, max_len=8)  # prompt cut from the left
    assert len(short.input_ids) == 8 and short.labels.tolist() == rec["output_ids"]
    assert short.input_ids[short.pos[0] + 1:].tolist() == rec["output_ids"][:-1]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return tiny_gguf(tmp_path_factory, "llama")


def test_gguf_loads_into_torch_and_exports_back(tiny_llama, tmp_path):
    model = load_gguf_model(tiny_llama)
    # the f32 GGUF round-trips exactly through torch; q8_0 / q4_1 stay within quantization tolerance
    for qtype in ("f32", "q8_0", "q4_1"):
        out = export_gguf(model, tmp_path / f"m-{qtype}.gguf", tiny_llama, qtype, threads=2)
        res = check_gguf(out, model, qtype, threads=2)
        print(qtype, res.as_dict())
        assert res.ok, res.as_dict()
    assert check_gguf(tiny_llama, model, "f32", threads=2).rel_error < 1e-3  # f16 KV cache noise


def test_unpermute_inverts_permute():
    from gguf_tools.convert import permute_qk

    w = np.random.default_rng(0).standard_normal((16, 5))
    assert np.array_equal(unpermute_qk(permute_qk(w, 4), 4), w)


def test_lora_training_decreases_loss_and_exports(tiny_llama, tmp_path):
    from omnidraft.trainer.loss import record_loss

    torch.manual_seed(0)
    model = add_lora(load_gguf_model(tiny_llama), rank=8)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    rng = np.random.default_rng(1)
    n_vocab = model.get_input_embeddings().weight.shape[0]
    batch = [batch_from_record(_record(rng, n_vocab), 256) for _ in range(2)]
    losses = []
    for _ in range(8):
        total = 0.0
        for b in batch:
            loss, _ = record_loss(model, b)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss)
        losses.append(total / len(batch))
    print("losses", [round(x, 3) for x in losses])
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.85 * losses[0]
    plain = merged(model)
    out = export_gguf(plain, tmp_path / "trained.gguf", tiny_llama, "q8_0", threads=2)
    assert check_gguf(out, plain, "q8_0", threads=2).ok


@pytest.mark.parametrize("device", ["cpu:0"] + (["cuda"] if torch.cuda.is_available() else []))
def test_train_pass_on_a_named_device(tiny_llama, device):
    """``TrainerConfig.device`` (issue 43: the trainer's steps on a GPU host): batches follow the model there, the
    prompt rows' index too, and the merged weights come back to the CPU for export."""
    from omnidraft.trainer.service import TrainerConfig
    from omnidraft.trainer.update import train_pass

    torch.manual_seed(0)
    model = load_gguf_model(tiny_llama).to(device)
    rng = np.random.default_rng(2)
    n_vocab = model.get_input_embeddings().weight.shape[0]
    rows = [(i, _record(rng, n_vocab)) for i in range(2)]
    b = batch_from_record(rows[0][1], 256).to(device)
    assert b.input_ids.device.type == torch.device(device).type and b.n_prompt == 12
    done = train_pass(model, rows, [], TrainerConfig(device=device, epochs=1, precision="f32", prompt_lam=0.5), seed=1)
    assert len(done.losses) == 2 and all(math.isfinite(x) for x in done.losses) and not done.bad
    assert merged(done.model).to("cpu").get_input_embeddings().weight.device.type == "cpu"


def test_lora_without_peft_says_what_to_install(tiny_llama, monkeypatch):
    """LoRA is the default update (issue 43): a machine without the 'train' extra's peft gets a clear error
    naming the fix, not an ImportError from inside an update."""
    import sys

    from omnidraft.errors import BadRequest

    monkeypatch.setitem(sys.modules, "peft", None)  # import peft now raises ImportError
    with pytest.raises(BadRequest, match=r"omnidraft\[train\].*--lora-rank 0"):
        add_lora(load_gguf_model(tiny_llama), rank=8)
