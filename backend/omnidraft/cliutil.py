"""Helpers every sub-CLI shares: flags generated from a typed settings dataclass, and back.

Its own module so that the sub-CLIs (server, bench, trainer) need not import ``omnidraft.cli``,
which imports them.
"""

from __future__ import annotations

import argparse
import dataclasses


def add_dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    """One --flag per dataclass field, with the field's help text and default."""
    for f in dataclasses.fields(cls):
        flags = ["--" + f.name.replace("_", "-")] + ([f.metadata["short"]] if "short" in f.metadata else [])
        default = f.default if f.default is not dataclasses.MISSING else None
        kind = type(default) if default is not None else str
        helptext = f"{f.metadata.get('help', '')} (default: {default!r})"
        if kind is bool:
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, default=default, help=helptext)
        else:
            parser.add_argument(*flags, type=kind, default=default, help=helptext, dest=f.name)


def dataclass_from_args(cls, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
