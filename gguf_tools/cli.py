"""``omnidraft-gguf`` (also ``omnidraft gguf``): inspect, quantize, widen, convert and compare GGUF models.

Results go to stdout; diagnostics go through logging to stderr.  Typed errors
(bad file, unknown type, ...) print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any, Callable

from .errors import BadArgument, GGUFToolError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Host:
    """What a program running these tools lends them (omnidraft: ``omnidraft.apps.gguf``).  Standalone,
    every model is a path, and vocab-overlap, which needs llama.cpp's tokenizers, is refused."""

    resolve: Callable[[str], Any] = str  # a short model name -> a .gguf path
    names: tuple[str, ...] = ()  # the short names ``resolve`` knows, for --help
    open_vocab: Callable[[str], Any] | None = None  # path -> vocab-only tokenizer (context manager)
    log_tail: Callable[[], str] | None = None  # llama.cpp's last error lines: why a quantize was refused
    llama_logger: str = ""  # the logger the host sends llama.cpp's lines to: quiet unless -v
    errors: tuple[type[BaseException], ...] = ()  # the host's typed errors: one line and exit 2, as ours
    check_flags: Callable[[argparse.ArgumentParser], Any] | None = None  # the host's flag ranges, applied to
    # the parser (omnidraft: cliutil.apply_ranges); standalone, --threads and --seed must not be negative


def _model_help(host: Host) -> str:
    if not host.names:
        return "a .gguf path"
    return f"a .gguf path or a short model name ({', '.join(host.names)}); short names are downloaded on first use"


def _parser(host: Host) -> argparse.ArgumentParser:
    model_help = _model_help(host)
    p = argparse.ArgumentParser(
        prog="omnidraft-gguf", description="Inspect, quantize, widen, convert and compare GGUF models.",
        epilog="Example: omnidraft-gguf inspect smollm2-135m")
    p.add_argument("-v", "--verbose", action="store_true", help="show debug logging (incl. llama.cpp's)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("inspect", help="summarise a GGUF file",
                       description="Print architecture, parameter count, tensor types, vocabulary, special "
                                   "tokens, chat template and hyper-parameters of a GGUF file. Corrupt or "
                                   "truncated files are reported as such.",
                       epilog="Example: omnidraft-gguf inspect model.gguf --json")
    s.add_argument("file", help=model_help)
    s.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")

    from .quantize import QUANT_TYPES

    s = sub.add_parser("quantize", help="quantize a GGUF file with llama.cpp",
                       description="Write IN quantized to --type at OUT (atomically: a temp file is renamed "
                                   "into place). Input may be f32/f16/bf16 or already quantized.",
                       epilog="Example: omnidraft-gguf quantize model-f16.gguf model-q4_k_m.gguf --type q4_k_m")
    s.add_argument("input", metavar="IN", help=model_help)
    s.add_argument("output", metavar="OUT", help="path of the .gguf file to write")
    s.add_argument("--type", "-t", required=True, metavar="T",
                   help=f"target type, one of: {', '.join(QUANT_TYPES)} (q4_k_m is a good default for CPUs)")
    s.add_argument("--threads", type=int, default=0, help="worker threads (default 0 = all cores)")
    s.add_argument("--no-requantize", action="store_true",
                   help="refuse an input that is already quantized (re-quantizing loses quality twice)")

    s = sub.add_parser("convert", help="convert a Hugging Face Llama/Qwen2 checkpoint to GGUF",
                       description="Convert a Hugging Face model directory (config.json, *.safetensors, "
                                   "tokenizer files) of a LlamaForCausalLM or Qwen2ForCausalLM to GGUF. "
                                   "Quantize the result with the quantize command.",
                       epilog="Example: omnidraft-gguf convert ./my-drafter drafter-f16.gguf --outtype f16 "
                              "--vocab-from smollm2-135m")
    s.add_argument("hf_dir", metavar="HF_DIR", help="directory holding config.json and *.safetensors")
    s.add_argument("output", metavar="OUT.gguf", help="path of the .gguf file to write")
    s.add_argument("--outtype", choices=("f32", "f16", "bf16"), default="f16",
                   help="precision of the 2-D weights (norms stay f32); default f16")
    s.add_argument("--vocab-from", metavar="G", type=lambda v: str(host.resolve(v)),
                   help="copy the tokenizer (and chat template) from this GGUF instead of the HF files; "
                        "use it when the tokenizer is unchanged, e.g. re-exporting a fine-tuned drafter")

    s = sub.add_parser("synth", help="random-weight copy of a model: same metadata, shapes and quantization",
                       description="Write a skeleton of IN (all metadata and the tensor list, no weights; a few "
                                   "MB, gzip if OUT ends in .gz), or with --from-skeleton build a random-weight "
                                   "model from one: f16 from N(0, 0.02), norms 1, then quantized to the real "
                                   "file's type. Timing does not depend on the weights.",
                       epilog="Example: omnidraft-gguf synth qwen2.5-coder-1.5b q15.gguf.gz && "
                              "omnidraft-gguf synth q15.gguf.gz q15-random.gguf --from-skeleton")
    s.add_argument("input", metavar="IN", help=model_help + "; or a skeleton")
    s.add_argument("output", metavar="OUT", help="skeleton (.gguf/.gguf.gz) or, with --from-skeleton, model")
    s.add_argument("--from-skeleton", action="store_true", help="IN is a skeleton: build the random model")
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.add_argument("--type", "-t", default=None, metavar="T", help="quantize to T instead of the real file's type")

    s = sub.add_parser("widen", help="re-encode Q5_0/Q4_0 tensors as Q8_0, exactly (faster on some CPUs)",
                       description="Copy IN to OUT (atomically) with every Q5_0 tensor (and Q4_0 with --types) "
                                   "re-encoded as Q8_0. This is not a requantization: each Q5_0/Q4_0 block holds integers that "
                                   "fit in a Q8_0 block with the same scale, so every weight keeps its value bit "
                                   "for bit and the model's output is the same (up to the order of float sums). "
                                   "Other tensors and all metadata are copied unchanged. The widened tensors "
                                   "grow 1.55x (Q5_0) or 1.9x (Q4_0); Qwen2.5-Coder-0.5B Q4_K_M (55 % Q5_0) "
                                   "grows 1.3x. It pays where decoding is bound by instructions rather than "
                                   "memory bandwidth, as on AVX2 CPUs without VNNI, where unpacking Q5_0's fifth "
                                   "bit dominates (the 0.5B: 48.1 -> 39.8 ms a token on 2 threads); measure "
                                   "before keeping it. omnidraft also makes it on first use as NAME:wide "
                                   "(e.g. qwen2.5-coder-0.5b:wide).",
                       epilog="Example: omnidraft-gguf widen qwen2.5-coder-0.5b q05-wide.gguf")
    s.add_argument("input", metavar="IN", help=model_help)
    s.add_argument("output", metavar="OUT", help="path of the .gguf file to write")
    s.add_argument("--types", default="q5_0", metavar="T[,T]",
                   help="the tensor types to re-encode, comma-separated: q5_0, q4_0 (default q5_0: Q4_0 "
                        "matrices already run through a repacked fast kernel on x86, which a Q8_0 copy loses)")

    s = sub.add_parser("vocab-overlap", help="compare the vocabularies of two GGUF models",
                       description="Count tokens A and B share (same raw bytes, special tokens excluded), "
                                   "the share of each vocabulary that is shared, and how many of B's tokens "
                                   "A's tokenizer splits into several tokens.",
                       epilog="Example: omnidraft-gguf vocab-overlap smollm2-135m qwen2.5-coder-0.5b")
    s.add_argument("a", metavar="A", help=model_help)
    s.add_argument("b", metavar="B", help="second model, same forms as A")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    (host.check_flags or _non_negative)(p)
    return p


def _non_negative(parser: argparse.ArgumentParser) -> None:
    """Standalone: every integer flag (--threads, --seed) refused below 0 at parse time, naming the flag."""
    def nonneg(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
        return v

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _non_negative(sub)
        elif action.type is int:
            action.type = nonneg


def _run(args: argparse.Namespace, host: Host) -> None:
    def _model_arg(value: str) -> str:
        return str(host.resolve(value))

    if args.cmd == "inspect":
        from .inspect import format_report, inspect

        info = inspect(_model_arg(args.file))
        print(json.dumps(info, indent=2) if args.json else format_report(info))
    elif args.cmd == "quantize":
        from .quantize import quantize

        out = quantize(_model_arg(args.input), args.output, args.type,
                       allow_requantize=not args.no_requantize, nthreads=args.threads, log_tail=host.log_tail)
        print(out)
    elif args.cmd == "convert":
        from .convert import convert

        print(convert(args.hf_dir, args.output, args.outtype, vocab_from=args.vocab_from))
    elif args.cmd == "synth":
        from .synth import build, skeleton

        if args.from_skeleton:
            print(build(args.input, args.output, seed=args.seed, qtype=args.type, log_tail=host.log_tail))
        else:
            print(skeleton(_model_arg(args.input), args.output))
    elif args.cmd == "widen":
        from .widen import widen

        print(widen(_model_arg(args.input), args.output, args.types))
    elif args.cmd == "vocab-overlap":
        from .vocab import format_overlap, vocab_overlap

        if host.open_vocab is None:
            raise BadArgument("vocab-overlap needs llama.cpp's tokenizers: run it as `omnidraft gguf vocab-overlap`")
        r = vocab_overlap(_model_arg(args.a), _model_arg(args.b), host.open_vocab)
        print(json.dumps(r, indent=2) if args.json else format_overlap(r))


def main(argv: list[str] | None = None, host: Host = Host()) -> int:
    """Entry point; returns the exit code (0 ok, 2 typed error or bad usage)."""
    typed = (GGUFToolError, *host.errors)
    parser = _parser(host)
    try:
        args = parser.parse_args(argv)
    except typed as e:  # raised by a type= converter such as --vocab-from
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose and host.llama_logger:
        logging.getLogger(host.llama_logger).setLevel(logging.ERROR)
    try:
        _run(args, host)
    except typed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
