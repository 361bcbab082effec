"""A shallow drafter distilled offline from the target: SmolLM2's vocabulary, tied embedding/head and final
norm with a few of its layers, trained (the embedding too, by default) with the project's hybrid loss
(:mod:`omnidraft.trainer.loss`).

    omnidraft distill data     texts -> token ids of both vocabularies + alignment   (CPU, llama.cpp tokenizers)
    omnidraft distill teacher  + the target's continuations and top-k at every aligned position  (torch)
    omnidraft distill train    cut the drafter, train the chosen layers, save the trained tensors  (torch)
    omnidraft distill export   rebuild the model, write the quantized GGUF, check it in llama.cpp  (CPU)
    omnidraft distill grow     a distilled drafter + more layers of its source, as a start for a deeper one  (CPU)
    omnidraft distill all      the four in a row (``--device cuda`` where there is a GPU)

``teacher`` and ``train`` import neither llama.cpp nor the server: they run on a GPU machine with torch,
transformers and gguf (docs/DISTILL.md gives the commands used on the lent GPU).  The teacher is the target's
own GGUF dequantized into transformers (:func:`omnidraft.trainer.model.load_gguf_model`).  Under torchrun
both run on every rank, one GPU each (:mod:`omnidraft.distill.dist`; docs/DISTILL.md, "Many GPUs"):
``python -m omnidraft.distill teacher|train --set KEY=VALUE ...``.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from omnidraft.assets import models
from omnidraft.cliutil import add_dataclass_args, dataclass_from_args

from . import dist
from .data import PrepConfig, prepare
from .export import export, grow
from .headrank import HeadRankConfig, build as build_head_rank
from .plot import plot
from .teacher import TeacherConfig, run_teacher
from .train import TrainConfig, train

log = logging.getLogger(__name__)


@dataclass
class ExportConfig:
    """GGUF + llama.cpp check of trained layer choices, and the plot."""

    trained: str = field(default=".distill/trained", metadata={"help": "directory of `distill train` outputs"})
    draft_gguf: str = field(default=models.SMOLLM2, metadata={"help": "the drafter that was cut"})
    choices: str = field(default="first8", metadata={"help": "comma-separated layer choices to export"})
    qtype: str = field(default="q8_0", metadata={"help": "quantization of the trained layers"})
    embed_type: str = field(default="q4_1", metadata={"help": "quantization of the embedding/head ('' = qtype)"})
    out: str = field(default="models", metadata={"help": "directory for the GGUFs"})
    results: str = field(default="results", metadata={"help": "directory for the plot and JSON"})


@dataclass
class GrowConfig:
    """A deeper drafter to train from: a distilled drafter with layers of the model it was cut from appended."""

    base: str = field(default="smollm2-135m-d8-qwen", metadata={"help": "the distilled drafter (name or GGUF)"})
    donor: str = field(default=models.SMOLLM2, metadata={"help": "the model it was cut from (name or GGUF)"})
    add: str = field(default="8,9,10,11", metadata={"help": "comma-separated donor layers appended, in order"})
    qtype: str = field(default="q8_0", metadata={"help": "quantization of the layers"})
    embed_type: str = field(default="q4_1", metadata={"help": "quantization of the embedding/head ('' = qtype)"})
    out: str = field(default=".distill/grown.gguf", metadata={"help": "the GGUF written"})


def grow_drafter(cfg: GrowConfig) -> dict:
    extra = [int(i) for i in cfg.add.split(",") if i.strip()]
    return grow(cfg.base, cfg.donor, extra, Path(cfg.out), cfg.qtype, cfg.embed_type or None)


@dataclass
class AllConfig:
    """data, teacher, train and export in a row."""

    device: str = field(default="cpu", metadata={"help": "torch device for teacher and training"})
    choices: str = field(default="first8", metadata={"help": "comma-separated layer choices"})
    seed: int = field(default=0, metadata={"help": "seed of every step"})
    small: bool = field(default=False, metadata={"help": "a CPU-sized run (fewer examples, one epoch)"})
    out: str = field(default="models", metadata={"help": "directory for the GGUFs"})


def export_choices(cfg: ExportConfig) -> None:
    """Export every trained layer choice, then the plot and the JSON of exports and histories."""
    hists, rows = {}, {}
    for choice in [c for c in cfg.choices.split(",") if c]:
        d = Path(cfg.trained) / choice
        hists[choice] = json.loads((d / "history.json").read_text())
        out = Path(cfg.out) / f"{models.SMOLLM2}-{choice}-qwen.gguf"
        rows[choice] = export(cfg.draft_gguf, hists[choice]["layers"], d, out, cfg.qtype, cfg.embed_type or None)
        print(choice, json.dumps(rows[choice]))
    res = Path(cfg.results)
    plot(hists, res / "distill.png")
    (res / "distill.json").write_text(json.dumps({"exports": rows, "histories": hists}, indent=1))
    print(f"wrote {res / 'distill.png'} and {res / 'distill.json'}")


def run_all(cfg: AllConfig) -> None:
    small = dict(code=300, code_other=150, nl=60, chat=150, gen_code=60, gen_code_other=30, gen_nl=10,
                 gen_chat=30) if cfg.small else {}
    prepare(PrepConfig(seed=cfg.seed, **small))
    run_teacher(TeacherConfig(device=cfg.device, seed=cfg.seed))
    for c in cfg.choices.split(","):
        train(TrainConfig(layers=c, device=cfg.device, seed=cfg.seed, **({"epochs": 1.0} if cfg.small else {})))
    export_choices(ExportConfig(choices=cfg.choices, out=cfg.out))


@dataclass(frozen=True)
class Step:
    """One ``distill`` subcommand: its settings (the flags are generated from them) and what runs them."""

    name: str
    config: type
    run: Callable[..., dict | None]  # a dict is printed as JSON (without the long histories)
    help: str
    epilog: str = ""


STEPS = {s.name: s for s in (
    Step("data", PrepConfig, prepare, "tokenise and align the local corpora"),
    Step("teacher", TeacherConfig, run_teacher, "the target's continuations and top-k"),
    Step("train", TrainConfig, train, "train one layer choice"),
    Step("export", ExportConfig, export_choices, "GGUF + llama.cpp check of trained layer choices, and the plot"),
    Step("grow", GrowConfig, grow_drafter, "a distilled drafter with more of its source's layers, to train from",
         "Example: omnidraft distill grow --add 8,9,10,11 --out .distill/d12.gguf, then on the GPU "
         "`distill train --set draft_gguf=.distill/d12.gguf layers=first12 ...` (docs/DISTILL.md)"),
    Step("head-rank", HeadRankConfig, build_head_rank, "rank the drafter's tokens by frequency in the training "
         "texts (FR-Spec: the heads of the ':fr' drafter formats keep the most frequent)"),
    Step("all", AllConfig, run_all, "data, teacher, train and export in a row",
         "Example: omnidraft distill all --device cuda --choices first4,first8"),
)}


def register(sub) -> None:
    p = sub.add_parser("distill", help="distil a shallow drafter offline from the target (issue 14)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = p.add_subparsers(dest="distill_cmd", required=True, metavar="STEP")
    for step in STEPS.values():
        s = ps.add_parser(step.name, help=step.help, epilog=step.epilog or None)
        add_dataclass_args(s, step.config)
        s.set_defaults(func=_cmd_step, distill_step=step)


def _cmd_step(args) -> int:
    step = args.distill_step
    res = step.run(dataclass_from_args(step.config, args))
    if res is not None:
        print(json.dumps({k: v for k, v in res.items() if k not in ("train", "val", "texts_meta")}, indent=1))
    return 0


def _parse_sets(cls, sets: list[str]):
    """``KEY=VALUE`` strings as a ``cls`` (each value of its field's type; booleans as 1/true/yes)."""
    kw = {}
    for kv in sets:
        k, v = kv.split("=", 1)
        typ = type(getattr(cls(), k))
        kw[k] = (v.lower() in ("1", "true", "yes")) if typ is bool else typ(v)
    return cls(**kw)


def gpu_main(argv: list[str] | None = None) -> int:
    """``python -m omnidraft.distill teacher|train --set KEY=VALUE ...``: the GPU machine runs these steps
    without the omnidraft CLI (no llama.cpp there), under torchrun on all its ranks."""
    main = dist.from_env().is_main  # under torchrun, rank 0 speaks for all
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1` prints every thread's stack: a silent rank shows where it is
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=logging.INFO if main else logging.WARNING, format="%(asctime)s %(message)s")
    ap = argparse.ArgumentParser(description="distill teacher|train on a machine without llama.cpp; "
                                 "under torchrun on all its ranks")
    ap.add_argument("step", choices=["teacher", "train"])
    ap.add_argument("--set", nargs="*", default=[], help="KEY=VALUE fields of the step's config")
    a = ap.parse_args(argv)
    step = STEPS[a.step]
    res = step.run(_parse_sets(step.config, a.set))
    if main:
        print(json.dumps({k: v for k, v in res.items() if k not in ("train", "texts_meta")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(gpu_main())
