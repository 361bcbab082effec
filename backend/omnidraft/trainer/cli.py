"""Subcommands ``trainer serve|export`` and ``drafter list|rollback`` (registered by omnidraft.apps.cli).

The trainer side of the system: nothing here imports serving code.  ``omnidraft adapt``, which drives
both sides, runs these commands as child processes and meets them through records and the registry."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from omnidraft.assets import models
from omnidraft.cliutil import MIN_NETWORK_SECRET as MIN_NETWORK_TOKEN  # one minimum, serve's too
from omnidraft.cliutil import (TRAINER_TOKEN_ENV, add_dataclass_args, dataclass_from_args, is_loopback_host,
                               read_secret, warn)
from omnidraft.errors import BadRequest
from omnidraft.online.rates import acceptance_text
from omnidraft.online.registry import DrafterRegistry

from .app import build_server, create_app
from .export import check_gguf, export_gguf
from .model import load_gguf_model, model_file_type
from . import service
from .service import TrainerConfig

log = logging.getLogger(__name__)


def register(sub) -> None:
    t = sub.add_parser("trainer", help="the online trainer process (receives records, publishes drafters)",
                       description="Stores training records posted by generators, trains the drafter every "
                                   "--interval prompts with L = L_DM + lambda*L_N-gram, and publishes each update "
                                   "as a new drafter version that generators swap in between requests.")
    ts = t.add_subparsers(dest="trainer_cmd", required=True, metavar="ACTION")
    serve = ts.add_parser("serve", help="run the trainer HTTP service on loopback",
                          epilog="Example: omnidraft trainer serve --interval 8 --port 8765")
    add_dataclass_args(serve, TrainerConfig)
    serve.add_argument("--token-file", default="", help=f"read the shared token from this file (or set "
                       f"${TRAINER_TOKEN_ENV}; --token shows in ps)")
    serve.set_defaults(func=_cmd_serve)
    exp = ts.add_parser("export", help="re-export a drafter the way updates are published (no training)",
                        description="GGUF -> torch -> GGUF at --qtype -> the logits check against torch, as each "
                                    "published update goes; prints one JSON line (path, qtype, check, export_s). "
                                    "omnidraft adapt uses it for its control: the untrained drafter, re-exported.")
    exp.add_argument("--base", required=True, help="drafter: short name or .gguf path")
    exp.add_argument("--out", required=True, help="where to write the GGUF")
    exp.add_argument("--qtype", default="", help="quantization (default: the base's)")
    exp.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all)")
    exp.set_defaults(func=_cmd_export)

    d = sub.add_parser("drafter", help="list or roll back published drafter versions",
                       description="Versions live in <state-dir>/registry; generators load the current one.")
    d.add_argument("action", choices=["list", "rollback"], help="list versions, or make VERSION current")
    d.add_argument("version", nargs="?", help="rollback: a version id (e.g. v0003) or 'base'")
    d.add_argument("--state-dir", default="", help="trainer state directory (default: <cache>/trainer)")
    d.add_argument("--json", action="store_true", help="list: print JSON")
    d.set_defaults(func=_cmd_drafter)


def _cmd_serve(args: argparse.Namespace) -> int:
    cfg = dataclass_from_args(TrainerConfig, args)
    cfg.token = read_secret("the trainer token", cfg.token, "--token", args.token_file, "--token-file",
                            TRAINER_TOKEN_ENV)
    token_at = (args.token_file or ("--token" if args.token else f"${TRAINER_TOKEN_ENV}")) if cfg.token \
        else cfg.root() / "token"  # where the token is, for the start-up line: never the token itself
    _check_bind(cfg.host, cfg.port, cfg.token, token_at)  # before anything loads
    trainer = service.Trainer(cfg).start()
    server = build_server(create_app(trainer), cfg.host, cfg.port)  # the server's connection limits
    port, run = server.effective_port, server.run
    # the port bound (--port 0: any free one): a parent process reads it from this line
    print(f"trainer on http://{cfg.host}:{port}  (state {cfg.root()}, interval {cfg.interval}, "
          f"token in {token_at})", flush=True)
    try:
        run()
    finally:
        trainer.stop()
    return 0




def _check_bind(host: str, port: int, token: str, token_at) -> None:
    """A bind beyond loopback is said loudly, and refused with a guessable token.

    Every /v1 route needs the token (generated, 43 random characters, when none is given), but whoever
    holds it posts the records every published drafter is trained on: the person starting the trainer
    must know it listens beyond this machine."""
    if is_loopback_host(host):
        return
    if token and len(token) < MIN_NETWORK_TOKEN:
        raise BadRequest(f"refusing to bind {host!r} (not loopback) with a {len(token)}-character token: give "
                         f"one of at least {MIN_NETWORK_TOKEN} characters, or none (one is generated), "
                         f"or bind 127.0.0.1")
    warn(f"the trainer binds {host!r}, not loopback: it is reachable from the network on port {port}. Anyone "
         f"with the token (in {token_at}) can post the records published drafters are trained on; keep it "
         f"secret, firewall the port, or bind 127.0.0.1")


def _cmd_export(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    base = models.resolve(args.base)
    qtype = args.qtype or model_file_type(base)
    model = load_gguf_model(base)
    path = export_gguf(model, Path(args.out), base, qtype, threads=args.threads)
    check = check_gguf(path, model, qtype, threads=args.threads)
    print(json.dumps({"path": str(path), "qtype": qtype, "check": check.as_dict(),
                      "export_s": round(time.perf_counter() - t0, 2)}), flush=True)
    return 0


def _cmd_drafter(args: argparse.Namespace) -> int:
    reg = DrafterRegistry(TrainerConfig(state_dir=args.state_dir).root() / "registry")
    if args.action == "rollback":
        if not args.version:
            print("rollback needs a VERSION (see: omnidraft drafter list)")
            return 2
        reg.rollback(args.version)
        print(f"current drafter: {args.version}")
        return 0
    versions = reg.list()
    if args.json:
        print(json.dumps(versions, indent=1))
        return 0
    cur = reg.current()
    print(f"{'':2}{'version':8} {'parent':8} {'steps':>6} {'records':>8} {'loss':>8} {'check':>8}  held-out acceptance")
    for m in versions:
        ho = m.get("heldout", {})
        acc = acceptance_text(ho["accepted"], ho["proposed"]) if "proposed" in ho else ""
        print(f"{'*' if m['current'] else ' ':2}{m['version']:8} {m.get('parent', ''):8} {m.get('steps', 0):6d} "
              f"{m.get('records_seen', 0):8d} {m.get('loss_mean') or 0:8.4f} "
              f"{m.get('check', {}).get('rel_error', 0):8.4f}  {acc}")
    print(f"current: {cur[0] if cur else 'base (nothing published)'}  registry: {reg.root}")
    return 0
