"""The peer: Hugging Face transformers' universal assisted generation on the same models and prompts.

transformers loads the same GGUF files (dequantized to f32) and runs its own
cross-tokenizer assisted generation (``assistant_model`` + ``assistant_tokenizer``).
Wall time on CPU torch is not comparable with llama.cpp; tokens per target pass (tau)
is, so that is what this reports, at the same maximum draft length as ours.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class _CountingForward:
    """Counts forward passes of a torch module (one per verification step in assisted generation)."""

    def __init__(self, model):
        self.model, self.calls = model, 0
        self._orig = model.forward
        model.forward = self._forward

    def _forward(self, *args, **kwargs):
        self.calls += 1
        return self._orig(*args, **kwargs)


def load_hf(path):
    # lazy: torch and transformers cost ~6 s at start-up and are the optional 'train' extra
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, torch_dtype=torch.float32)
    model.eval()
    return tok, model


def run_peer(target_path, draft_path, prompts: list[str], max_new_tokens: int, k: int | None) -> dict:
    """HF UAG over ``prompts``; k=None keeps transformers' own heuristic draft-length schedule."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    ttok, tmodel = load_hf(target_path)
    dtok, dmodel = load_hf(draft_path)
    if k is not None:
        dmodel.generation_config.num_assistant_tokens = k
        dmodel.generation_config.num_assistant_tokens_schedule = "constant"
    counter = _CountingForward(tmodel)
    tokens, t0, texts = 0, time.perf_counter(), []
    for p in prompts:
        ids = ttok(p, return_tensors="pt")
        with torch.no_grad():
            out = tmodel.generate(**ids, assistant_model=dmodel, tokenizer=ttok, assistant_tokenizer=dtok,
                                  max_new_tokens=max_new_tokens, do_sample=False)
        new = out[0][ids["input_ids"].shape[1]:]
        tokens += int(new.shape[0])
        texts.append(ttok.decode(new))
    return {"tokens": tokens, "target_passes": counter.calls, "tau": tokens / max(counter.calls, 1),
            "wall_s": time.perf_counter() - t0, "k": k, "texts": texts}
