"""``omnidraft serve``: the OpenAI-compatible server on waitress (registered by ``omnidraft.apps.cli``)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal

from omnidraft import httpguard
from omnidraft.assets import models
from omnidraft.online.outbox import Outbox, Uploader
from omnidraft.online.registry import DrafterRegistry
from omnidraft.runtime import session as runtime_session
from omnidraft.runtime.session import Settings

from ..cliutil import MIN_NETWORK_SECRET, add_dataclass_args, dataclass_from_args, field_type, read_secret
from ..errors import BadRequest, OmniDraftError
from .app import create_app, shutdown
from .config import API_KEY_ENV, ServerConfig, TRAINER_TOKEN_ENV
from .metrics import Metrics
from .net import build_server as build

log = logging.getLogger("omnidraft.server")

OUTBOX_MAX_BYTES = 256 * 1024 * 1024



def _add_config_args(parser: argparse.ArgumentParser, cls) -> None:
    """Like ``omnidraft.apps.cli.add_dataclass_args``, plus repeatable flags for list fields."""
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        helptext = f.metadata.get("help", "")
        if f.default_factory is not dataclasses.MISSING:  # list field
            parser.add_argument(flag, action="append", default=[], dest=f.name, help=helptext)
        else:
            parser.add_argument(flag, type=field_type(f, type(f.default)), default=f.default, dest=f.name,
                                help=f"{helptext} (default: {f.default!r})")


def register(sub) -> None:
    p = sub.add_parser(
        "serve", help="OpenAI-compatible HTTP server (completions, chat, SSE, metrics, phone web app)",
        description="Serve the target, drafted by the drafter, behind an OpenAI-compatible API on waitress. "
                    f"Binds 127.0.0.1 by default; any other address needs an API key (--api-key-file PATH, "
                    f"${API_KEY_ENV}, or --api-key KEY, which other users see in ps).",
        epilog="Example: omnidraft serve --port 8080, then point any OpenAI client at "
               "http://127.0.0.1:8080/v1 (or open http://127.0.0.1:8080/app/ on the phone).")
    _add_config_args(p, ServerConfig)
    add_dataclass_args(p, Settings)  # ranged by omnidraft.cliutil.FLAG_RANGES (build_parser)
    p.set_defaults(func=cmd_serve)


def checked_config(args: argparse.Namespace):
    """The ServerConfig of these flags with its secrets resolved, or an OmniDraftError naming what is wrong.

    Everything a bad start-up can be refused for is refused here, before a model loads."""
    cfg = dataclass_from_args(ServerConfig, args)
    cfg.api_key = read_secret("the API key", cfg.api_key, "--api-key", cfg.api_key_file, "--api-key-file",
                              API_KEY_ENV)
    cfg.trainer_token = read_secret("the trainer token", cfg.trainer_token, "--trainer-token",
                                    cfg.trainer_token_file, "--trainer-token-file", TRAINER_TOKEN_ENV)
    if not cfg.is_loopback() and not cfg.api_key:
        raise BadRequest(f"refusing to bind {cfg.host!r} (not loopback) without an API key: anyone on the network "
                         f"could use this machine's CPU. Give --api-key-file PATH, ${API_KEY_ENV} or --api-key KEY, "
                         f"or bind 127.0.0.1.")
    shortest = min(map(len, cfg.api_keys()), default=0)
    if not cfg.is_loopback() and shortest < MIN_NETWORK_SECRET:
        raise BadRequest(f"refusing to bind {cfg.host!r} (not loopback) with a {shortest}-character API key: "
                         f"give one of at least {MIN_NETWORK_SECRET} characters (the trainer's token's minimum), "
                         f"or bind 127.0.0.1")
    if cfg.threads() < cfg.queue_size + 2:
        raise BadRequest(f"--http-threads {cfg.http_threads} cannot hold --queue-size {cfg.queue_size} waiting "
                         f"requests plus the running one and /health: extra requests would wait in waitress's "
                         f"queue, where neither 429 nor the timeout reaches them. Use at least "
                         f"{cfg.queue_size + 2}, or 0 (auto).")
    return cfg


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = checked_config(args)  # a bad flag stops here (omnidraft.apps.cli.main prints it, exit 2), before loading

    record_fns = (Outbox, Uploader) if cfg.trainer_url else None
    metrics = Metrics(cfg.history)  # the registry's problems show in /v1/omnidraft/stats
    # a bad registry path stops here, before measuring
    registry = WatchedRegistry(DrafterRegistry(cfg.registry), metrics) if cfg.registry else None
    session = runtime_session.Session(dataclass_from_args(Settings, args), registry=registry)
    try:
        session.warm_up()  # load and time now, so the first request does not pay for it
        return _serve(session, cfg, record_fns, metrics, registry)
    finally:
        session.close()


class WatchedRegistry:
    """The drafter registry as the server reads it, between requests (``Session.maybe_swap``).

    A registry that cannot be read (a corrupt CURRENT) must not cost a traceback per request nor the
    request itself: the drafter in use keeps serving, each distinct error is logged once, and the
    problem shows in /v1/omnidraft/stats ("problems") until the registry reads again."""

    SOURCE = "drafter_registry"

    def __init__(self, registry, metrics=None):
        self.registry = registry
        self.metrics = metrics  # where problems show (/v1/omnidraft/stats "problems"); None: only logged
        self._logged: set[str] = set()

    @property
    def root(self):
        """The registry's folder: version names restart in every registry, so the session keys them by it."""
        return self.registry.root

    def current(self):
        try:
            cur = self.registry.current()
        except Exception as e:  # noqa: BLE001 - whatever the registry raises, the drafter in use is kept
            self._problem(f"{e or type(e).__name__}")
            return None
        if self._logged:
            log.info("drafter registry readable again: %s", cur[0] if cur else "nothing published")
            self._logged.clear()
        if self.metrics is not None:
            self.metrics.set_problem(self.SOURCE, None)
        return cur

    def refused(self, message: str | None) -> None:
        """The session refused the current version (it would not load, or abort llama.cpp: see
        omnidraft.llama.loadcheck), or None once one swapped in; shown as the "drafter_version" problem."""
        if self.metrics is not None:
            self.metrics.set_problem("drafter_version", message)

    def evaluations(self) -> list[dict]:
        """The registry's held-out measurements (shown by /v1/omnidraft/stats; never raises)."""
        return self.registry.evaluations()

    def _problem(self, message: str) -> None:
        if message not in self._logged:
            self._logged.add(message)
            log.warning("drafter registry unreadable, keeping the drafter in use: %s", message)
        if self.metrics is not None:
            self.metrics.set_problem(self.SOURCE, message)


def _default_trainer_token() -> str:
    path = models.cache_dir() / "trainer" / httpguard.TOKEN_FILE
    token = httpguard.read_token(path)
    if not token:
        log.warning("no trainer token given and no %s: uploads will be refused until the trainer's token is given",
                    path)
    return token


def build_server(app, cfg, limits=None):
    """The waitress server for ``app``, with its connection limits (``omnidraft.server.net``)."""
    return build(app, cfg, limits)


def _serve(session, cfg, record_fns, metrics, registry) -> int:
    outbox = uploader = None
    if record_fns is not None:
        outbox_cls, uploader_cls = record_fns
        session.state_dir.mkdir(parents=True, exist_ok=True)
        outbox = outbox_cls(session.state_dir / "outbox.sqlite", OUTBOX_MAX_BYTES)
        uploader = uploader_cls(outbox, cfg.trainer_url, token=cfg.trainer_token or _default_trainer_token())
        uploader.start()
    app = create_app(session, cfg, outbox=outbox, uploader=uploader, metrics=metrics, registry=registry)
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
