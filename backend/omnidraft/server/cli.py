"""``omnidraft serve``: the OpenAI-compatible server on waitress (registered by ``omnidraft.cli``)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import time

from ..errors import OmniDraftError

log = logging.getLogger("omnidraft.server")

OUTBOX_MAX_BYTES = 256 * 1024 * 1024


def _add_config_args(parser: argparse.ArgumentParser, cls) -> None:
    """Like ``omnidraft.cli.add_dataclass_args``, plus repeatable flags for list fields."""
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "")
        if f.default_factory is not dataclasses.MISSING:  # list field
            parser.add_argument(flag, action="append", default=[], dest=f.name, help=helptext)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default, dest=f.name,
                                help=f"{helptext} (default: {f.default!r})")


def register(sub) -> None:
    from ..cliutil import add_dataclass_args
    from ..session import Settings
    from .config import ServerConfig

    p = sub.add_parser(
        "serve", help="OpenAI-compatible HTTP server (completions, chat, SSE, metrics, phone web app)",
        description="Serve the target, drafted by the drafter, behind an OpenAI-compatible API on waitress. "
                    "Binds 127.0.0.1 by default; any other address needs --api-key.",
        epilog="Example: omnidraft serve --port 8080, then point any OpenAI client at "
               "http://127.0.0.1:8080/v1 (or open http://127.0.0.1:8080/app/ on the phone).")
    _add_config_args(p, ServerConfig)
    add_dataclass_args(p, Settings)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from ..cliutil import dataclass_from_args
    from ..session import Session, Settings
    from .config import ServerConfig

    cfg = dataclass_from_args(ServerConfig, args)
    if not cfg.is_loopback() and not cfg.api_key:
        print(f"error: refusing to bind {cfg.host!r} (not loopback) without --api-key: anyone on the network "
              f"could use this machine's CPU. Pass --api-key KEY or bind 127.0.0.1.", file=sys.stderr)
        return 2
    if cfg.queue_size < 1 or cfg.http_threads < 0 or cfg.request_timeout_s <= 0:
        print("error: --queue-size and --request-timeout-s must be positive, --http-threads >= 0", file=sys.stderr)
        return 2
    if cfg.threads() < cfg.queue_size + 2:
        print(f"error: --http-threads {cfg.http_threads} cannot hold --queue-size {cfg.queue_size} waiting requests "
              f"plus the running one and /health: extra requests would wait in waitress's queue, where neither "
              f"429 nor the timeout reaches them. Use at least {cfg.queue_size + 2}, or 0 (auto).", file=sys.stderr)
        return 2
    from ..outbox import Outbox, Uploader
    from ..records import build_record
    from ..registry import DrafterRegistry

    registry_cls = DrafterRegistry if cfg.registry else None
    record_fns = (Outbox, Uploader, build_record) if cfg.trainer_url else None

    session = Session(dataclass_from_args(Settings, args))
    try:
        if registry_cls is not None:
            session.registry = registry_cls(cfg.registry)
        session.warm_up()  # load and time now, so the first request does not pay for it
        return _serve(session, cfg, record_fns)
    finally:
        session.close()


def _default_trainer_token() -> str:
    from .. import httpguard, models

    path = models.cache_dir() / "trainer" / httpguard.TOKEN_FILE
    token = httpguard.read_token(path)
    if not token:
        log.warning("no --trainer-token and no %s: uploads will be refused until the trainer's token is given", path)
    return token


def build_server(app, cfg):
    """The waitress server for ``app``: ``cfg.threads()`` threads, arrival times stamped.

    channel_request_lookahead lets waitress notice a client that hangs up mid-request, so the
    worker can stop that generation (Job.gone) instead of finishing it for nobody."""
    import waitress
    from waitress.task import ThreadedTaskDispatcher

    class ArrivalDispatcher(ThreadedTaskDispatcher):
        """Stamps when a connection's request was queued, so its timeout counts from arrival (app._arrived)."""

        def add_task(self, task):
            task.omnidraft_arrived = time.monotonic()
            super().add_task(task)

    dispatcher = ArrivalDispatcher()
    dispatcher.set_thread_count(cfg.threads())
    return waitress.create_server(app, host=cfg.host, port=cfg.port, threads=cfg.threads(), _dispatcher=dispatcher,
                                  channel_request_lookahead=1, ident="omnidraft")


def _serve(session, cfg, record_fns) -> int:
    from .app import create_app, shutdown

    outbox = uploader = build_record = None
    if record_fns is not None:
        outbox_cls, uploader_cls, build_record = record_fns
        session.state_dir.mkdir(parents=True, exist_ok=True)
        outbox = outbox_cls(session.state_dir / "outbox.sqlite", OUTBOX_MAX_BYTES)
        uploader = uploader_cls(outbox, cfg.trainer_url, token=cfg.trainer_token or _default_trainer_token())
        uploader.start()
    app = create_app(session, cfg, outbox=outbox, build_record=build_record, uploader=uploader)
    server = build_server(app, cfg)

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    print(f"omnidraft serving {session.settings.target} (drafter {session.settings.draft}, "
          f"method {session.settings.method}) on http://{cfg.host}:{server.effective_port}/v1", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        log.info("shutting down: saving the n-gram cache")
        shutdown(app)
        server.close()
    return 0


__all__ = ["register", "cmd_serve", "OmniDraftError"]
