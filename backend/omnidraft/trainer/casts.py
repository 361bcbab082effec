"""The casts a bf16-autocast training step would redo at every step, done once per update instead.

Under ``torch.autocast(bfloat16)`` each matmul rounds its float32 operands to bf16 when it is called.  For a frozen
weight (every base projection under LoRA, the tied embedding head always) that gives the same bf16 tensor at every
step of an update: on this 2-core EPYC the head's alone took 20 ms a step (49,152 x 576 floats), the 30 layers'
projections about as much again.  ``frozen_in_bf16`` casts them once for the pass and puts the float32 weights back
after it (the merge, the export and the next update read those); the products are the same bits, since autocast
would have rounded the same float32 values the same way.  peft's LoRA layers also cast their input to the
adapter's float32 before autocast rounds it back to bf16, an exact round trip: ``no_input_casts`` skips it.
"""

from __future__ import annotations

import contextlib


def autocasts_bf16(name: str, device: str = "cpu") -> bool:
    """Whether training products run in bf16 under ``precision`` ``name``: bf16 where the CPU computes it natively
    (AVX512-BF16, AMX) or on a GPU, else float32."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    if name not in ("auto", "bf16", "f32"):
        raise ValueError(f"precision must be auto, bf16 or f32, not {name!r}")
    return name == "bf16" or (name == "auto" and (torch.device(device).type == "cuda" or bf16_native()))


def bf16_native() -> bool:
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@contextlib.contextmanager
def frozen_in_bf16(model):
    """Within: every frozen float32 ``nn.Linear`` weight of ``model`` (the head tied to the embedding included: the
    embedding itself keeps its float32 table) replaced by its bf16 copy; after: the float32 weights back, ties and
    all."""
    # lazy: torch costs ~4.5 s at start-up and is the optional 'train' extra
    import torch

    swapped = []
    try:
        for mod in model.modules():
            w = getattr(mod, "weight", None)
            if isinstance(mod, torch.nn.Linear) and w is not None and w.dtype == torch.float32 and not w.requires_grad:
                swapped.append((mod, w))
                mod.weight = torch.nn.Parameter(w.detach().to(torch.bfloat16), requires_grad=False)
        yield model
    finally:
        for mod, w in swapped:
            mod.weight = w


@contextlib.contextmanager
def no_input_casts(model):
    """Within: peft's LoRA layers pass their input on as it comes (autocast rounds it to bf16 either way)."""
    try:  # lazy: peft pulls torch and transformers (~6 s at start-up), the optional 'train' extra
        from peft.helpers import disable_input_dtype_casting
    except ImportError:  # no peft, or one without the switch: its casts stay, the same bits
        yield model
        return
    with disable_input_dtype_casting(model):
        yield model


@contextlib.contextmanager
def step_casts(model, precision: str, device: str = "cpu"):
    """The context of an update's steps: both of the above where its products are bf16, nothing otherwise."""
    if not autocasts_bf16(precision, device):
        yield model
        return
    with frozen_in_bf16(model), no_input_casts(model):
        yield model
