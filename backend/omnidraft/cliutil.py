"""Helpers every sub-CLI shares: flags generated from a typed settings dataclass (range-checked at parse
time), secrets read from the environment or a file, and the loopback test for bind addresses.

Its own module so that the sub-CLIs (server, bench, trainer) need not import ``omnidraft.apps.cli``,
which imports them.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import os
import socket
import sys
import typing
from pathlib import Path
from typing import Callable

from .errors import BadRequest

log = logging.getLogger("omnidraft")

Range = tuple[float | None, float | None]  # inclusive bounds; None: unbounded on that side
# where the trainer's shared token may come from, for `trainer serve` and for the server that uploads to it
TRAINER_TOKEN_ENV = "OMNIDRAFT_TRAINER_TOKEN"
# characters a secret needs when a server binds beyond loopback (the API key, the trainer's token): shorter
# ones could be guessed from the network
MIN_NETWORK_SECRET = 16


# The one bound on a sampling temperature (OpenAI's), wherever one is given: the generator's parameters
# (speculative.generator.GenerationParams.check), the server's requests and every command's flags (below)
TEMPERATURE: Range = (0.0, 2.0)
_BIG = 10 ** 9  # counts with no natural ceiling: large enough for any real run, small enough to refuse typos
_THREADS, _SEED = (0, 1024), (0, 2 ** 64 - 1)
_SHARE = (0.0, 1.0)
_LR = (1e-12, 10.0)
# The one flag-range table: inclusive bounds of every numeric flag of every command, by the flag's name
# (its dest); "COMMAND:name" (the command path, e.g. "bench peer:n") overrides for one command.  Checked
# while the command line is parsed (``apply_ranges``, run by omnidraft.apps.cli.build_parser on every
# parser and by ``omnidraft gguf``), so a bad value stops the command, naming the flag, before anything
# loads.  A numeric flag missing here fails tests/test_hardening_probe3.py; a dataclass field may carry
# its own "range" in its metadata instead (ServerConfig's do).
FLAG_RANGES: dict[str, Range] = {
    # model settings (omnidraft.runtime.session.Settings: generate, serve, adapt)
    "k": (1, 32), "p_min": _SHARE, "n_ctx": (64, 1 << 20), "draft_n_ctx": (64, 1 << 20),
    "draft_window": (0, 1 << 20), "threads": _THREADS, "draft_threads": _THREADS, "gpu_layers": (-1, 100_000), "ngram_budget_kb": (0, 1 << 24),
    # sampling (generate)
    "max_tokens": (1, 1 << 20), "temp": TEMPERATURE, "temperature": TEMPERATURE, "top_p": _SHARE,
    "top_k": (0, 1 << 20), "seed": _SEED, "budget": (1, 1 << 34),  # distill head-rank: characters a source
    # the trainer (trainer serve, adapt, distill train)
    "port": (0, 65535), "interval": (1, _BIG), "lam": (0.0, 100.0), "prompt_lam": (0.0, 100.0), "lr": _LR,
    "weight_decay": (0.0, 10.0), "lora_rank": (0, 4096), "max_len": (8, 1 << 20), "epochs": (1, 100_000),
    "replay_ratio": (0.0, 1000.0), "recent": (0, _BIG), "recent_ratio": (0.0, 1000.0), "keep": (1, 100_000),
    "micro_batch": (1, 4096),
    "check_tokens": (1, 4096),
    # adapt
    "n_train": (1, _BIG), "n_heldout": (1, _BIG), "n_old": (0, _BIG), "eval_every": (1, _BIG),
    "eval_max_tokens": (1, 1 << 20), "eval_k": (1, 32), "record_topk": (0, 1024), "n_replay": (0, _BIG),
    # bench
    "n": (1, _BIG), "verify_batch": (0, 4096), "adaptive_k": (0, 32), "rounds": (1, 100_000),
    "max_n": (1, 4096), "repeats": (1, 100_000),
    # distill
    "code": (0, _BIG), "code_other": (0, _BIG), "nl": (0, _BIG), "chat": (0, _BIG), "gen_code": (0, _BIG),
    "gen_code_other": (0, _BIG), "gen_nl": (0, _BIG), "gen_chat": (0, _BIG), "man": (0, _BIG),
    "gen_man": (0, _BIG), "windows_per_file": (1, _BIG), "val_share": _SHARE, "workers": _THREADS,
    "topk": (1, 4096), "gen_tokens": (1, 1 << 20), "gen_batch": (1, 1 << 20), "batch_tokens": (1, 1 << 30),
    "distill train:epochs": (1e-6, 100_000.0), "max_minutes": (0.0, 1e7), "max_steps": (0, _BIG),
    "accum": (1, 1 << 20),
}


def apply_ranges(parser: argparse.ArgumentParser, command: str = "") -> list[str]:
    """Give every plain ``int`` / ``float`` flag of ``parser`` and its subcommands its FLAG_RANGES bounds.

    Returns the flags (as "command:name") that are numeric and have no range: a test keeps it empty."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += apply_ranges(sub, f"{command} {name}".strip())
        elif action.type in (int, float):
            bounds = FLAG_RANGES.get(f"{command}:{action.dest}") or FLAG_RANGES.get(action.dest)
            if bounds is None:
                missing.append(f"{command}:{action.dest}")
            else:
                action.type = bounded(action.type, *bounds)
    return missing


def bounded(kind: type, lo: float | None = None, hi: float | None = None) -> Callable[[str], int | float]:
    """An argparse ``type``: a ``kind`` (int or float) within [lo, hi].

    Checked while the command line is parsed, so a bad size stops the command before it loads a model;
    argparse prefixes the message with the flag ('argument --port: ...')."""
    words = {int: "an integer", float: "a number"}[kind]
    span = (f"within {lo}..{hi}" if lo is not None and hi is not None
            else f">= {lo}" if lo is not None else f"<= {hi}")

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {words} {span}, got {text!r}") from None
        if (lo is not None and v < lo) or (hi is not None and v > hi) or v != v:  # v != v: NaN
            raise argparse.ArgumentTypeError(f"must be {words} {span}, got {text}")
        return v

    parse.range = (lo, hi)  # type: ignore[attr-defined]  # what apply_ranges and its test look for
    return parse


def field_type(f: dataclasses.Field, kind: type, ranges: dict[str, Range] | None = None):
    """The argparse type of a numeric field: range-checked where the field (metadata "range") or
    ``ranges`` gives bounds, else plain ``kind``."""
    lo, hi = (ranges or {}).get(f.name) or f.metadata.get("range") or (None, None)
    if kind in (int, float) and (lo is not None or hi is not None):
        return bounded(kind, lo, hi)
    return kind


def add_dataclass_args(parser: argparse.ArgumentParser, cls, ranges: dict[str, Range] | None = None) -> None:
    """One --flag per dataclass field, with the field's help text and default.

    ``ranges``: bounds by field name, for a dataclass whose fields carry none in their metadata.  Field
    metadata: "help"; "short" (a second flag, e.g. "-k"); "range" (bounds); "choices"; "default_text" (what
    the help says of the default, e.g. "from the preset" for a field whose None means "not given")."""
    for f in dataclasses.fields(cls):
        flags = ["--" + f.name.replace("_", "-")] + ([f.metadata["short"]] if "short" in f.metadata else [])
        default = f.default if f.default is not dataclasses.MISSING else None
        kind = type(default) if default is not None else _optional_type(cls, f.name) if f.default is None else str
        helptext = f"{f.metadata.get('help', '')} (default: {f.metadata.get('default_text', repr(default))})"
        if kind is bool:
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, default=default, help=helptext)
        else:
            choices = {"choices": f.metadata["choices"]} if "choices" in f.metadata else {}
            parser.add_argument(*flags, type=field_type(f, kind, ranges), default=default, help=helptext,
                                dest=f.name, **choices)


def _optional_type(cls, name: str) -> type:
    """The flag type of a field that defaults to None: X of ``X | None`` for int and float, else str."""
    kinds = [a for a in typing.get_args(typing.get_type_hints(cls)[name]) if a is not type(None)]
    return kinds[0] if len(kinds) == 1 and kinds[0] in (int, float) else str


def dataclass_from_args(cls, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def read_secret(what: str, flag_value: str, flag: str, path: str, file_flag: str, env: str) -> str:
    """A secret from ``--x-file PATH`` or the ``--x`` flag, else the environment variable ``env`` ("" if none).

    The flag still works but is warned about: a command line is visible to every user of the machine
    (``ps``, /proc/PID/cmdline), a file (mode 0600) or the environment is not.  Raises BadRequest on a
    missing or empty file, or when two sources are given (which one wins would be a guess)."""
    if flag_value and path:
        raise BadRequest(f"give {what} once: {flag} or {file_flag}, not both")
    if path:
        try:
            value = Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise BadRequest(f"{file_flag} {path}: cannot read {what} ({e})") from None
        if not value:
            raise BadRequest(f"{file_flag} {path}: the file is empty")
        return value
    if flag_value:
        warn(f"{flag} puts {what} on the command line, where every user of this machine can read it "
             f"(ps, /proc/PID/cmdline); use {file_flag} PATH or the {env} environment variable instead")
        return flag_value
    return os.environ.get(env, "").strip()


def warn(message: str) -> None:
    """A warning the person at the terminal must see even when logging is filtered: the log and stderr."""
    log.warning("%s", message)
    if not _logs_to_stderr():
        print(f"WARNING: {message}", file=sys.stderr, flush=True)


def _logs_to_stderr() -> bool:
    """Whether the root logger already writes warnings to stderr (then printing it again doubles it)."""
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is sys.stderr \
                and h.level <= logging.WARNING:
            return log.isEnabledFor(logging.WARNING)
    return False


def is_loopback_host(host: str) -> bool:
    """True if every address ``host`` resolves to is a loopback address.

    A name is resolved, not matched as text: '127.evil.example' is whatever DNS says it is,
    and a name that does not resolve is not loopback."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    addrs = {info[4][0].split("%", 1)[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)
