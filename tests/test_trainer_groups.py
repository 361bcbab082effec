"""Several records a trainer step (``micro_batch``, issue 43): one padded forward gives each record the loss a forward
of its own gives, the step trains on their mean, and a bad record in a group is still told from the good ones."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from omnidraft.trainer import loss as L  # noqa: E402
from omnidraft.trainer.model import load_gguf_model  # noqa: E402
from omnidraft.trainer.service import TrainerConfig  # noqa: E402
from omnidraft.trainer.update import micro_batch, train_pass, trainable  # noqa: E402

from tests.gguf_helpers import tiny_gguf  # noqa: E402
from tests.test_trainer_speed import _record  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return lambda arch: tiny_gguf(tmp_path_factory, arch)


def _records(model, n: int, seed: int = 5) -> list[dict]:
    rng = np.random.default_rng(seed)
    n_vocab = model.get_input_embeddings().weight.shape[0]
    # lengths that differ, so that every group is padded; one record without a prompt term's rows
    return [_record(rng, n_vocab, i, int(rng.integers(1, 24)), int(rng.integers(2, 14))) for i in range(n)]


@pytest.mark.parametrize("arch,lora_rank", [("llama", 8), ("qwen2", 8), ("llama", 0)])
@pytest.mark.parametrize("prompt_lam", [0.0, 0.5])
def test_a_padded_group_gives_each_record_its_own_loss(tiny, arch, lora_rank, prompt_lam):
    model = trainable(load_gguf_model(tiny(arch)), lora_rank, False)[0]
    batches = [L.batch_from_record(r) for r in _records(model, 5)]
    alone = torch.stack([L.record_loss(model, b, 0.2, prompt_lam)[0] for b in batches])
    mean, each = L.group_loss(model, batches, 0.2, prompt_lam)
    assert each.shape == (5,) and len({round(float(x), 3) for x in alone.detach()}) > 1  # records that differ
    torch.testing.assert_close(each, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean, alone.mean(), rtol=1e-5, atol=1e-5)
    # and the gradient of the mean is the mean of the records' gradients
    params = [p for p in model.parameters() if p.requires_grad]
    g_group = torch.autograd.grad(mean, params)
    g_alone = torch.autograd.grad(torch.stack([L.record_loss(model, b, 0.2, prompt_lam)[0]
                                               for b in batches]).mean(), params)
    for a, b in zip(g_group, g_alone):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_groups_take_fewer_steps_and_still_learn(tiny):
    path = tiny("llama")
    recs = _records(load_gguf_model(path), 8)
    rows = [(i + 1, r) for i, r in enumerate(recs)]
    cfg = TrainerConfig(lora_rank=8, lr=1e-2, epochs=2, precision="f32", micro_batch=4, prompt_lam=0.5)
    steps = []

    class Counted(torch.optim.AdamW):
        def step(self, *a, **k):
            steps.append(1)
            return super().step(*a, **k)

    torch.manual_seed(0)
    orig, torch.optim.AdamW = torch.optim.AdamW, Counted
    try:
        done = train_pass(load_gguf_model(path), rows, [], cfg, seed=1)
    finally:
        torch.optim.AdamW = orig
    assert not done.bad and not done.discard
    assert len(done.losses) == 16 and len(steps) == 4  # 2 epochs x 8 records, 4 a step
    model = done.model
    after = [L.record_loss(model, L.batch_from_record(r), 0.2, 0.5)[0].item() for r in recs]
    assert sum(after) / 8 < sum(done.losses[:8]) / 8  # the records' loss fell


def test_a_bad_record_in_a_group_is_told_from_the_good_ones(tiny, monkeypatch):
    path = tiny("llama")
    recs = _records(load_gguf_model(path), 6)
    poisoned = recs[2]["id"]
    real = L.batch_from_record

    def batch(rec, max_len=1024):
        b = real(rec, max_len)
        if rec["id"] == poisoned:
            b.topk_probs = torch.full_like(b.topk_probs, float("nan"))
            b.rest = torch.full_like(b.rest, float("nan"))
        return b

    monkeypatch.setattr(L, "batch_from_record", batch)
    cfg = TrainerConfig(lora_rank=8, lr=1e-2, epochs=1, precision="f32", micro_batch=3, lam=0.2)
    done = train_pass(load_gguf_model(path), [(i + 1, r) for i, r in enumerate(recs)], [], cfg, seed=2)
    assert [b[1] for b in done.bad] == [poisoned] and not done.discard
    assert len(done.losses) == 5 and all(np.isfinite(done.losses))


def test_a_head_capped_after_the_projection_trains_one_record_a_step(tiny):
    model = load_gguf_model(tiny("llama"))
    cfg = TrainerConfig(micro_batch=4)
    assert micro_batch(model, cfg, L) == 4
    model.config.final_logit_softcapping = 30.0
    assert not L.plain_head(model) and micro_batch(model, cfg, L) == 1
