"""``omnidraft adapt``: the whole online loop in one process, measured on a fixed held-out slice.

    prompt stream -> speculative generation (record_topk) -> record -> outbox -> HTTP upload
    -> trainer (every I prompts: train, export, check, publish) -> Session.maybe_swap() -> held-out eval

The trainer runs in this process on its own thread behind a loopback HTTP server, so every piece is
the one a server deployment uses; the loop waits for each update before evaluating, which keeps the
measurements free of training load.  Held-out prompts are generated greedily (deterministic), so a
change in acceptance or tau is the drafter's doing.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from .generator import GenerationParams
from .outbox import Outbox, Uploader
from .records import build_record

log = logging.getLogger(__name__)

DEFAULT_PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Write a Python function that reverses a linked list.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python function that counts the words in a string.",
    "Write a Python function that computes the factorial of n recursively.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that finds the maximum value in a list without using max().",
    "Write a Python function that removes duplicates from a list while keeping order.",
    "Write a Python function that flattens a nested list.",
    "Write a Python function that computes the greatest common divisor of two integers.",
    "Write a Python function that sorts a list with bubble sort.",
    "Write a Python function that converts a binary string to an integer.",
    "Write a Python function that returns the transpose of a matrix given as a list of lists.",
    "Write a Python function that checks whether two strings are anagrams.",
]


@dataclass
class AdaptConfig:
    """Settings of ``omnidraft adapt`` (the CLI flags are generated from these fields)."""

    prompts: str = field(default="", metadata={"help": "prompt file: one per line, or a JSON list (default: built-in "
                                                          "Python tasks)"})
    stream_set: str = field(default="", metadata={"help": "train on this prompt set's stream split instead of "
                                                          "--prompts (humaneval | stdlib-code | docs)"})
    eval_set: str = field(default="", metadata={"help": "evaluate on this prompt set's held-out split "
                                                        "(default: the stream set's)"})
    n_train: int = field(default=12, metadata={"help": "training prompts to stream (cycled if the file is shorter)"})
    n_heldout: int = field(default=3, metadata={"help": "prompts held out for evaluation (taken from the end)"})
    interval: int = field(default=4, metadata={"help": "train and swap every this many prompts"})
    max_tokens: int = field(default=96, metadata={"help": "tokens generated per training prompt"})
    eval_max_tokens: int = field(default=96, metadata={"help": "tokens generated per held-out prompt"})
    record_topk: int = field(default=8, metadata={"help": "target top-k kept per position in records"})
    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate"})
    lam: float = field(default=0.2, metadata={"help": "lambda: weight of the n-gram NLL term"})
    lora_rank: int = field(default=32, metadata={"help": "LoRA rank; 0 = full fine-tuning"})
    qtype: str = field(default="", metadata={"help": "quantization of published drafters (default: the base's)"})
    out: str = field(default="adapt-out", metadata={"help": "directory for the trainer state, outbox, JSON and plot"})


Prompt = tuple[str, bool]  # (text, send through the chat template?)


def load_items(cfg: "AdaptConfig") -> tuple[list[Prompt], list[Prompt]]:
    """(training stream, held-out) prompts, from a prompt set or from --prompts (chat messages)."""
    if cfg.stream_set:
        from .bench import prompts as sets

        stream = [(i.prompt, i.chat) for i in sets.load(cfg.stream_set).split("stream")]
        held = [(i.prompt, i.chat) for i in sets.load(cfg.eval_set or cfg.stream_set).split("heldout")]
        return [stream[i % len(stream)] for i in range(cfg.n_train)], held[: cfg.n_heldout]
    prompts = load_prompts(cfg.prompts)
    if len(prompts) <= cfg.n_heldout:
        raise ValueError(f"need more than {cfg.n_heldout} prompts, have {len(prompts)}")
    heldout, pool = prompts[-cfg.n_heldout:], prompts[: -cfg.n_heldout]
    return [(pool[i % len(pool)], True) for i in range(cfg.n_train)], [(p, True) for p in heldout]


def _prompt(gen, item: Prompt):
    text, chat = item
    return gen.prompt_from_messages([{"role": "user", "content": text}]) if chat else gen.prompt_from_text(text)


def load_prompts(path: str) -> list[str]:
    if not path:
        return list(DEFAULT_PROMPTS)
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        return [str(p) for p in json.loads(text)]
    return [line.strip() for line in text.splitlines() if line.strip()]


def evaluate(session, prompts: list[Prompt], max_tokens: int) -> dict:
    """Acceptance and tokens per target pass over the held-out prompts (pooled), greedy."""
    gen = session.generator()
    acc = prop = toks = passes = 0
    t0 = time.perf_counter()
    for p in prompts:
        f = gen.generate(_prompt(gen, p), GenerationParams(max_tokens=max_tokens))
        acc, prop = acc + f.stats.accepted, prop + f.stats.proposed
        toks, passes = toks + f.stats.completion_tokens, passes + f.stats.target_passes
    return {"acceptance": acc / prop if prop else 0.0, "tau": toks / passes if passes else 0.0,
            "accepted": acc, "proposed": prop, "tokens": toks, "target_passes": passes,
            "seconds": round(time.perf_counter() - t0, 2)}


def run(cfg: AdaptConfig, settings, threads: int = 0) -> dict:
    from .session import Session
    from .trainer.service import Trainer, TrainerConfig, start_http

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    train, heldout = load_items(cfg)

    session = Session(settings)
    trainer = Trainer(TrainerConfig(base=settings.draft, state_dir=str(out / "trainer"), interval=cfg.interval,
                                    lam=cfg.lam, lr=cfg.lr, lora_rank=cfg.lora_rank, qtype=cfg.qtype,
                                    threads=threads)).start()
    server, port = start_http(trainer)
    outbox = Outbox(out / "outbox.sqlite")
    uploader = Uploader(outbox, f"http://127.0.0.1:{port}", interval_s=0.5).start()
    session.registry = trainer.registry
    session.maybe_swap()  # a previous run's latest version, if any
    curve: list[dict] = []
    try:
        ev = evaluate(session, heldout, cfg.eval_max_tokens)
        curve.append({"prompts": 0, "version": session.drafter_version, **ev})
        _show(curve[-1])
        for i, item in enumerate(train, 1):
            gen = session.generator()
            pin = _prompt(gen, item)
            final = gen.generate(pin, GenerationParams(max_tokens=cfg.max_tokens, record_topk=cfg.record_topk))
            outbox.put(build_record(final, pin, session.pair, gen.method, session.drafter_version))
            uploader.kick()
            s = final.stats
            print(f"prompt {i:3d} [{session.drafter_version}] acceptance {s.acceptance_rate:6.1%}  "
                  f"tau {s.tau:.2f}  ({s.completion_tokens} tokens)", flush=True)
            if i % cfg.interval == 0:
                uploader.flush(60.0)
                trainer.wait_idle()
                if session.maybe_swap():
                    ev = evaluate(session, heldout, cfg.eval_max_tokens)
                    curve.append({"prompts": i, "version": session.drafter_version, **ev})
                    trainer.registry.annotate(session.drafter_version, {"heldout": ev})
                    _show(curve[-1])
    finally:
        uploader.stop()
        server.shutdown()
        trainer.stop()
        session.save_state()
        session.close()
    result = {"curve": curve, "updates": trainer.history, "heldout": heldout, "config": cfg.__dict__}
    (out / "adapt.json").write_text(json.dumps(result, indent=1, default=str))
    plot = _plot(curve, out / "adapt.png")
    print(f"wrote {out / 'adapt.json'}" + (f" and {plot}" if plot else " (no plot: matplotlib missing)"))
    return result


def _show(pt: dict) -> None:
    print(f"held-out after {pt['prompts']:3d} prompts [{pt['version']}]: acceptance {pt['acceptance']:6.1%}  "
          f"tau {pt['tau']:.3f}  ({pt['accepted']}/{pt['proposed']} drafts, {pt['tokens']} tokens)", flush=True)


def _plot(curve: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    x = [p["prompts"] for p in curve]
    fig, ax1 = plt.subplots(figsize=(6, 3.5))
    ax1.plot(x, [100 * p["acceptance"] for p in curve], "o-", color="tab:blue", label="acceptance %")
    ax1.set_xlabel("training prompts seen")
    ax1.set_ylabel("held-out acceptance (%)", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(x, [p["tau"] for p in curve], "s--", color="tab:orange", label="tau")
    ax2.set_ylabel("tokens per target pass", color="tab:orange")
    ax1.set_title("omnidraft adapt: drafter on the held-out slice")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
