"""The trainer's faster update learns what the plain one learned (issue 43, nineteenth session).

``update.train_pass`` builds each record's tensors once per update, indexes the loss terms' rows by position lists
made on the CPU, steps AdamW over all tensors at once (``foreach``) and checks the weights' finiteness in one
comparison.  None of that may change the arithmetic: the same seed and records must give the same losses and the
same weights as the plain loop written out here (a batch built at every step, boolean masks, AdamW's per-tensor
loop, one ``bool`` per tensor), which is the update as it was before those changes.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from omnidraft.trainer import loss as L  # noqa: E402
from omnidraft.trainer.model import load_gguf_model  # noqa: E402
from omnidraft.trainer.service import TrainerConfig  # noqa: E402
from omnidraft.trainer.update import finite, precision, schedule, train_pass, trainable  # noqa: E402

from tests.gguf_helpers import tiny_gguf  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # qwen2: a head tied to the embedding, q/k/v biases.  Both with the 32,000-token SPM vocabulary: the update's
    # arithmetic does not depend on which vocabulary, and Qwen's own 151,936-row head in bf16 took 60 s a case on
    # a 2-core AVX2-only EPYC (no native bf16) against 4.5 s for the llama one
    return lambda arch: tiny_gguf(tmp_path_factory, arch, vocab_name="llama-spm")


def _record(rng, n_vocab: int, i: int, n_prompt: int, n_out: int) -> dict:
    """A record with both terms: most outputs directly mapped (top-k of 3 or 4, some padded), the rest n-gram."""
    out = rng.integers(100, n_vocab, n_out).tolist()
    dm = (rng.random(n_out) < 0.7).astype(int).tolist()
    tk_ids, tk_p, rest = [], [], []
    for j in range(n_out):
        if dm[j]:
            k = int(rng.integers(3, 5))
            tk_ids.append([out[j]] + rng.integers(100, n_vocab, k - 1).tolist())
            tk_p.append([0.6] + [0.3 / (k - 1)] * (k - 1))
            rest.append(0.1)
        else:
            tk_ids.append(None), tk_p.append(None), rest.append(None)
    return {"id": f"r{i:010d}", "prompt_ids": rng.integers(100, n_vocab, n_prompt).tolist(), "output_ids": out,
            "dm": dm, "ngram": [1 - d for d in dm], "topk_ids": tk_ids, "topk_probs": tk_p, "rest_mass": rest}


def _plain_loss(model, b, lam: float, prompt_lam: float):
    """``loss.record_loss`` as it was: boolean masks over the output rows."""
    n_p = b.n_prompt - 1 if prompt_lam > 0 and b.n_prompt >= 2 else 0
    keep = torch.cat([torch.arange(n_p), b.pos]) if n_p else b.pos
    rows = model(input_ids=b.input_ids[None], logits_to_keep=keep).logits[0]
    out = rows[n_p:]
    zero = out.sum() * 0.0
    l_dm = L.dm_reverse_kl(out[b.dm], b.topk_ids[b.dm], b.topk_probs[b.dm], b.rest[b.dm]).mean() \
        if b.dm.any() else zero
    l_ng = L.ngram_nll(out[b.ngram], b.labels[b.ngram]).mean() if b.ngram.any() else zero
    loss = l_dm + lam * l_ng
    if n_p:
        loss = loss + prompt_lam * L.ngram_nll(rows[:n_p], b.input_ids[1:n_p + 1]).mean()
    return loss


def _plain_pass(model, rows, recent, cfg, seed: int):
    """``update.train_pass`` without its speed-ups, for records that train cleanly."""
    model, params = trainable(model, cfg.lora_rank, cfg.train_embeddings)
    model.train()
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=False)
    losses = []
    for _, rec in schedule(rows, [([], cfg.replay_ratio), (list(recent), cfg.recent_ratio)], cfg.epochs, seed):
        b = L.batch_from_record(rec, cfg.max_len)
        with precision(cfg.precision):
            loss = _plain_loss(model, b, cfg.lam, cfg.prompt_lam)
        assert bool(torch.isfinite(loss))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        assert bool(torch.isfinite(torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)))
        opt.step()
        assert all(bool(torch.isfinite(p).all()) for p in params)
        losses.append(loss.item())
    return model, losses


def _trained(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("arch,lora_rank,prec", [("llama", 8, "f32"), ("llama", 8, "bf16"), ("qwen2", 8, "bf16"),
                                                  ("llama", 0, "f32"), ("qwen2", 0, "bf16")])
def test_the_fast_update_computes_what_the_plain_one_did(tiny, arch, lora_rank, prec):
    tiny_llama = tiny(arch)
    rng = np.random.default_rng(7)
    n_vocab = load_gguf_model(tiny_llama).get_input_embeddings().weight.shape[0]
    recs = [_record(rng, n_vocab, i, int(rng.integers(2, 20)), int(rng.integers(3, 16))) for i in range(7)]
    recs.append({**_record(rng, n_vocab, 7, 6, 5), "dm": [0] * 5, "ngram": [1] * 5})  # one term only
    rows, recent = [(i + 1, r) for i, r in enumerate(recs[:5])], recs[5:]
    cfg = TrainerConfig(lora_rank=lora_rank, lr=1e-2 if lora_rank else 1e-3, epochs=2, precision=prec,
                        prompt_lam=0.5, recent_ratio=0.5)
    torch.manual_seed(0)  # the LoRA adapter's initialisation
    done = train_pass(load_gguf_model(tiny_llama), rows, [], cfg, seed=3, recent=recent)
    torch.manual_seed(0)
    plain, losses = _plain_pass(load_gguf_model(tiny_llama), rows, recent, cfg, seed=3)
    assert not done.bad and not done.discard and len(done.losses) == len(losses) == 2 * (5 + 2)
    assert done.losses == losses  # bit for bit
    fast, want = _trained(done.model), _trained(plain)
    assert fast.keys() == want.keys() and len(want) > 0
    torch.manual_seed(0)
    start = _trained(trainable(load_gguf_model(tiny_llama), lora_rank, False)[0])
    assert any(not torch.equal(start[n], want[n]) for n in want), "nothing trained: an empty comparison"
    for n in want:
        assert torch.equal(fast[n], want[n]), n


def test_finite_finds_one_bad_value_among_many_tensors():
    ts = [torch.zeros(3, 4), torch.ones(7), torch.zeros(2, 2, dtype=torch.bfloat16), torch.tensor(5.0)]
    assert finite(ts) and finite([]) and finite(p for p in ts)  # any iterable, as model.parameters() is
    for bad in (float("nan"), float("inf"), float("-inf")):
        for i in range(len(ts)):
            copy = [t.clone() for t in ts]
            copy[i].view(-1)[-1] = bad
            assert not finite(copy), (bad, i)
    big = [torch.full((4,), 3e38)]  # finite, however large: not mistaken for an overflow
    assert finite(big)


def test_the_frozen_weights_come_back_in_float32_and_tied(tiny):
    from omnidraft.trainer.casts import frozen_in_bf16

    model = trainable(load_gguf_model(tiny("qwen2")), 8, False)[0]
    before = {n: p for n, p in model.named_parameters()}
    with frozen_in_bf16(model):
        head = model.get_output_embeddings().weight
        assert head.dtype == torch.bfloat16 and model.get_input_embeddings().weight.dtype == torch.float32
    after = dict(model.named_parameters())
    assert after.keys() == before.keys() and all(after[n] is before[n] for n in before)  # the same tensors
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_batch_rows_of_each_term_and_their_device():
    rng = np.random.default_rng(1)
    b = L.batch_from_record(_record(rng, 500, 0, 6, 9), 64)
    assert b.dm_rows.tolist() == b.dm.nonzero()[:, 0].tolist() and b.dm_rows.dtype == torch.long
    assert b.ngram_rows.tolist() == b.ngram.nonzero()[:, 0].tolist()
    moved = b.to("cpu")
    assert torch.equal(moved.dm_rows, b.dm_rows) and torch.equal(moved.ngram_rows, b.ngram_rows)
