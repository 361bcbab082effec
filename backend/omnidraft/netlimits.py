"""One connection policy for both HTTP servers (``omnidraft serve`` and ``omnidraft trainer serve``): waitress
with the limits a hostile local page or process meets.

waitress reads every connection on one thread (asyncore) and answers with ``threads`` handler threads.
Its defaults suit a server behind a proxy, not one a hostile local page or process talks to directly:
a 1 GiB body is read before anyone refuses it, 256 KiB of headers are accepted, and a client that
sends a header line every few seconds holds one of only 100 connections for ever (waitress's
``channel_timeout`` only closes *idle* connections).  ``NetLimits`` sets each bound, and
``GuardedChannel`` adds the one waitress lacks: a deadline to receive a whole request.  ``build`` can also
refuse a request from its headers alone (``admit``: the trainer's token), before any body byte is read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

import waitress
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher
from waitress.utilities import Error

FD_RESERVE = 128  # descriptors kept for model files, logs, the outbox and waitress's own trigger


@dataclass(frozen=True)
class NetLimits:
    """waitress settings of both servers; the request body limit is each server's own (``build``'s max_body)."""

    header_timeout_s: float = field(default=10.0, metadata={
        "help": "a request line and headers must arrive within this many seconds of the connection (or the "
                "previous request); a slow-header client is dropped, not left to hold a connection"})
    body_timeout_s: float = field(default=60.0, metadata={
        "help": "the whole request within this many seconds: the 1 MiB default body needs ~17 KiB/s"})
    idle_timeout_s: int = field(default=60, metadata={
        "help": "close a keep-alive connection idle this long (waitress channel_timeout; default 120)"})
    max_header_bytes: int = field(default=64 * 1024, metadata={
        "help": "request line + headers; more gets 431 (an OpenAI request needs ~1 KiB; waitress allows 256)"})
    connection_limit: int = field(default=1000, metadata={
        "help": "open connections; 10x waitress's 100, so a hundred slow clients leave room for /health. "
                "Each costs one descriptor and a few KiB; clamped below the process's descriptor limit"})
    cleanup_interval_s: int = field(default=5, metadata={
        "help": "how often idle connections are looked for (waitress's default 30 would let them overstay)"})


class Refused(Error):
    """A request refused from its headers (``admit``), answered without reading its body."""

    def __init__(self, code: int, reason: str, message: str, slug: str):
        super().__init__(message)
        self.code, self.reason, self.slug = code, reason, slug


# (path, headers as waitress names them: "AUTHORIZATION") -> a refusal, or None to read the request
Admit = Callable[[str, dict], "Refused | None"]


class JsonErrorTask(ErrorTask):
    """waitress's own refusals (413, 431, 400) and ``Refused`` as JSON errors, so clients parse one format.
    ``error_body`` is each server's error shape; this one is the trainer's."""

    CODES = {413: "request_too_large", 431: "request_header_too_large"}

    @staticmethod
    def error_body(status: int, message: str, code: str) -> dict:
        return {"error": message, "code": code}

    def execute(self):
        e = self.request.error
        msg, code = f"{e.reason}: {e.body}", getattr(e, "slug", None) or self.CODES.get(e.code, "bad_request")
        if isinstance(e, Refused):
            msg = e.body
        elif e.code == 413:  # the apps' own wording; waitress's limit is that + 1 byte
            msg = f"request body larger than {(self.channel.adj.max_request_body_size - 1) // 1024} KiB"
        body = json.dumps(self.error_body(e.code, msg, code)).encode()
        self.status = f"{e.code} {e.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class GuardedParser(HTTPRequestParser):
    """waitress's parser, asking ``admit`` about a request as soon as its headers are in: before the body,
    and before the size check (a tokenless client learns only that it needs the token)."""

    admit: Admit | None = None

    def received(self, data):
        before = self.headers_finished
        n = super().received(data)
        parsed = self.error is None or self.error.code == 413  # the headers were read whole
        if not before and self.headers_finished and parsed and not self.empty and self.admit:
            refused = type(self).admit(self.path, self.headers)
            if refused is not None:
                self.error, self.completed = refused, True  # the body is never read
        return n


class GuardedChannel(HTTPChannel):
    """An HTTP connection that must deliver each request within the limits' deadlines.

    All of it runs on waitress's asyncore thread, which asks ``readable()`` of every connection at
    least once a second (asyncore_loop_timeout): that is where an overdue request is dropped."""

    error_task_class = JsonErrorTask
    parser_class = GuardedParser
    limits: NetLimits = NetLimits()

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.read_started: float | None = time.monotonic()  # a new connection owes its first request now

    def received(self, data):
        if self.request is None and self.read_started is None:
            self.read_started = time.monotonic()  # the first byte of the next request
        done = super().received(data)
        if self.request is None:
            self.read_started = None  # nothing partial left: idle, waitress's channel_timeout takes over
        return done

    def send_continue(self):
        """waitress sent '100 Continue' to a request its headers had already refused (a Content-Length over
        the limit) and then reopened it to wait for the body: the 413 came only after body bytes.  A refused
        request gets its answer now, without the 100."""
        if self.request is not None and self.request.error is not None:
            self.request.expect_continue = False
            return
        super().send_continue()

    def readable(self):
        if self.overdue(time.monotonic()):
            self.will_close = True  # writable() now turns true, and waitress closes the socket
            return False
        return super().readable()

    def overdue(self, now: float) -> bool:
        if self.read_started is None or self.requests:  # a running request is the app's to time out
            return False
        headers_done = self.request is not None and self.request.headers_finished
        limit = self.limits.body_timeout_s if headers_done else self.limits.header_timeout_s
        return now - self.read_started > limit


class ArrivalDispatcher(ThreadedTaskDispatcher):
    """Stamps when a connection's request was queued, so its timeout counts from arrival (server.app._arrived)."""

    def add_task(self, task):
        task.omnidraft_arrived = time.monotonic()
        super().add_task(task)


def connection_limit(wanted: int) -> int:
    """``wanted``, below the descriptor limit: past it accept() fails and waitress's loop spins on it."""
    try:
        import resource  # lazy: guarded, POSIX only
    except ImportError:  # not POSIX: no descriptor limit to read
        return wanted
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(16, min(wanted, soft - FD_RESERVE))


def build(app, host: str, port: int, threads: int, max_body: int, limits: NetLimits | None = None,
          error_task: type[JsonErrorTask] = JsonErrorTask, admit: Admit | None = None):
    """The waitress server for ``app``: ``threads`` threads, arrival times stamped, NetLimits applied, bodies
    over ``max_body`` bytes refused from their Content-Length, and ``admit`` asked before any body byte.

    channel_request_lookahead lets waitress notice a client that hangs up mid-request, so the app can
    stop its work and the HTTP thread is freed."""
    limits = limits or NetLimits()
    dispatcher = ArrivalDispatcher()
    dispatcher.set_thread_count(threads)
    sockets: dict = {}
    server = waitress.create_server(
        app, map=sockets, host=host, port=port, threads=threads, _dispatcher=dispatcher,
        channel_request_lookahead=1, ident="omnidraft",
        # +1: waitress refuses a Content-Length >= its limit, Flask one > MAX_CONTENT_LENGTH; both now agree,
        # and waitress refuses from the headers, before reading the body
        max_request_body_size=max_body + 1,
        max_request_header_size=limits.max_header_bytes,
        channel_timeout=limits.idle_timeout_s, cleanup_interval=limits.cleanup_interval_s,
        connection_limit=connection_limit(limits.connection_limit),
        asyncore_use_poll=True)  # select() cannot watch descriptors past 1024 (FD_SETSIZE)
    parser = type("Parser", (GuardedParser,), {"admit": staticmethod(admit) if admit else None})
    channel = type("Channel", (GuardedChannel,), {"limits": limits, "error_task_class": error_task,
                                                  "parser_class": parser})
    for listener in list(sockets.values()):  # one per address the host name resolves to
        if isinstance(listener, BaseWSGIServer):
            listener.channel_class = channel
    return server
