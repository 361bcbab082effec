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
