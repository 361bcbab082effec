"""The Flask app: routes, auth, CORS, error rendering.  All state hangs off the app object.

Design (STYLE.md #8): HTTP threads (waitress) only parse, submit a job to the single
``EngineWorker`` that owns the Session, and format its events as OpenAI JSON or SSE.

Timeouts: a request's budget (queue wait + generation, ``request_timeout_s``, counted from its
arrival) is enforced by the worker between chunks.  If nothing was generated yet the answer is HTTP 504; otherwise the
text so far is returned (or the stream finished) with ``finish_reason: "length"`` and
``omnidraft.timed_out: true``.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from flask import Flask, Response, jsonify, redirect, request, send_from_directory
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from .. import httpguard
from omnidraft.vocab.textstream import Chunk
from .config import ServerConfig
from .metrics import Metrics
from .protocol import ApiError, Request, chunk, draft_spans, full_response, parse_request, usage, usage_chunk
from .serving import ServingSession
from .worker import ClientGone, Done, EngineWorker, Job, TimedOut

log = logging.getLogger(__name__)

STATE_KEY = "omnidraft"


class HeldOut(Protocol):
    """The drafter registry as /v1/omnidraft/stats reads it (``server.cli.WatchedRegistry``)."""

    def evaluations(self) -> list[dict]:
        """Held-out measurements of the drafter versions (``omnidraft adapt`` writes them); never raises."""


@dataclass
class ServerState:
    session: ServingSession
    config: ServerConfig
    metrics: Metrics
    worker: EngineWorker
    model_ids: tuple[str, ...]
    n_ctx: int
    uploader: object = None
    outbox: object = None
    hosts: httpguard.HostPolicy = field(default_factory=httpguard.HostPolicy)  # DNS rebinding: httpguard
    registry: HeldOut | None = None  # the drafter registry the session swaps from, if any


def state(app: Flask) -> ServerState:
    return app.extensions[STATE_KEY]


def model_ids(session: ServingSession) -> tuple[str, ...]:
    """The served model's id (the target's short name or file stem), then accepted aliases."""
    target = session.settings.target
    main = Path(target).stem if target.endswith(".gguf") else target
    return tuple(dict.fromkeys([main, target, "omnidraft"]))


def create_app(session: ServingSession, config: ServerConfig | None = None, outbox=None, uploader=None,
               start_worker: bool = True, metrics: Metrics | None = None, registry: HeldOut | None = None) -> Flask:
    """Build the app around a loaded session; starts the engine worker thread.  ``outbox``: where training
    records go; ``metrics``: the server's (made here if None; ``server.cli`` makes them first, for the
    registry's problems); ``registry``: the drafter registry whose held-out measurements the stats show."""
    config = config or ServerConfig()
    app = Flask("omnidraft.server")
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_kb * 1024
    app.json.sort_keys = False
    metrics = metrics or Metrics(config.history)
    worker = EngineWorker(session, metrics, config.queue_size, config.save_every, outbox)
    hosts = httpguard.HostPolicy.for_server(config.host, config.allowed_host, config.cors_origin)
    app.extensions[STATE_KEY] = ServerState(session, config, metrics, worker, model_ids(session), session.n_ctx,
                                            uploader, outbox, hosts, registry)
    _install_hooks(app)
    _install_routes(app)
    if start_worker:
        worker.start()
    return app


def shutdown(app: Flask) -> None:
    """Stop the worker (finishing nothing new), persist the n-gram cache, stop the uploader."""
    st = state(app)
    st.worker.stop()
    st.worker.save_now()
    if st.uploader is not None:
        try:
            st.uploader.stop()
        except Exception:  # noqa: BLE001
            log.exception("stopping the uploader failed")
    if st.outbox is not None:
        try:
            st.outbox.close()
        except Exception:  # noqa: BLE001
            log.exception("closing the outbox failed")


# ---------------------------------------------------------------- hooks
# On every answer: no MIME sniffing, no framing by other pages (clickjacking the web app), no referrer.
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}
# The phone web app's own files only; it may talk to any server the user names in its settings (connect-src).
APP_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self' http: https:; "
           "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")


def _endpoint_label() -> str:
    return request.url_rule.rule if request.url_rule is not None else "other"


def _install_hooks(app: Flask) -> None:
    @app.before_request
    def _guard():  # DNS rebinding, cross-site "simple" POSTs from web pages: see omnidraft.httpguard
        st = state(app)
        if request.path == "/health" and request.method in ("GET", "HEAD") and not st.hosts.allows(
                request.environ.get("HTTP_HOST")):
            # Liveness stays open to monitors that know the server by a name nobody listed (a container's
            # service name); it says only "ok", which a rebinding page knew once its connection succeeded.
            return jsonify({"status": "ok"})
        if isinstance(request.routing_exception, MethodNotAllowed) and st.hosts.allows(request.environ.get("HTTP_HOST")):
            raise request.routing_exception  # 405 naming the allowed methods, before the body's type is judged
        refused = httpguard.refusal(request, st.config.cors_origin, st.hosts)
        if refused is not None:
            status, msg, code = refused
            raise ApiError(status, msg, code=code)

    @app.before_request
    def _auth():
        keys = state(app).config.api_keys()
        if not keys or request.method == "OPTIONS":
            return None
        if not (request.path.startswith("/v1/") or request.path == "/metrics"):
            return None
        matches = [httpguard.bearer_ok(request, k) for k in keys]  # every key compared: no early exit to time
        request.environ["omnidraft.client"] = matches.index(True) if any(matches) else None
        if not any(matches):
            raise ApiError(401, "missing or invalid API key (send 'Authorization: Bearer KEY')",
                           code="invalid_api_key")
        return None

    @app.after_request
    def _after(resp: Response):
        st = state(app)
        origin = request.headers.get("Origin")
        allowed = st.config.cors_origin
        if origin and (origin in allowed or "*" in allowed):
            resp.headers["Access-Control-Allow-Origin"] = origin
            resp.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            resp.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            resp.headers["Access-Control-Max-Age"] = "600"
            resp.headers.add("Vary", "Origin")
        resp.headers.update(SECURITY_HEADERS)
        if request.path.startswith("/app/"):
            resp.headers["Content-Security-Policy"] = APP_CSP
        st.metrics.count_request(_endpoint_label(), resp.status_code)
        return resp

    @app.errorhandler(ApiError)
    def _api_error(e: ApiError):
        return jsonify(e.body()), e.status, e.headers

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(e.code, None)
        msg = e.description or e.name
        if e.code == 413:
            msg = f"request body larger than {state(app).config.max_body_kb} KiB"
        allow = {"Allow": ", ".join(e.valid_methods)} if isinstance(e, MethodNotAllowed) and e.valid_methods else {}
        return jsonify(ApiError(e.code or 500, msg, code=code).body()), e.code, allow

    @app.errorhandler(Exception)
    def _internal(e: Exception):
        log.exception("unhandled error")
        return jsonify(ApiError(500, f"internal error: {type(e).__name__}", code="internal_error").body()), 500


# --------------------------------------------------------------- routes
def _json_body():
    raw = request.get_data(cache=False)  # raises 413 past MAX_CONTENT_LENGTH
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"malformed JSON body: {e}", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "malformed JSON body: nested too deeply", code="invalid_json") from None


def _arrived(disconnected) -> float:
    """When waitress queued this request (stamped on its channel by server.cli.build_server), else now.

    The stamp is taken once: a request pipelined behind it on the same connection counts from now."""
    channel = disconnected.__self__ if inspect.ismethod(disconnected) else None  # waitress's channel
    stamp = vars(channel).pop("omnidraft_arrived", None) if channel is not None else None
    return min(stamp, time.monotonic()) if isinstance(stamp, float) else time.monotonic()


def _sse(obj) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


def _install_routes(app: Flask) -> None:
    def complete(kind: str):
        st = state(app)
        req = parse_request(_json_body(), kind, st.n_ctx, st.model_ids)
        disconnected = request.environ.get("waitress.client_disconnected")
        job = Job(req, _endpoint_label(), _arrived(disconnected) + st.config.request_timeout_s, disconnected,
                  client=request.environ.get("omnidraft.client"))
        st.worker.submit(job)
        try:
            first = _checked(job.next_event())
            if isinstance(first, TimedOut) and not first.text:
                raise ApiError(504, f"no output within the request timeout of {st.config.request_timeout_s} s",
                               code="timeout")
        except BaseException:
            job.cancel()
            raise
        if req.stream:
            return Response(_stream(req, job, first), mimetype="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return jsonify(_collect(req, job, first))

    @app.post("/v1/completions")
    def completions():
        return complete("completion")

    @app.post("/v1/chat/completions")
    def chat_completions():
        return complete("chat")

    @app.get("/v1/models")
    def list_models():
        st = state(app)
        created = int(st.metrics.started)
        return jsonify({"object": "list", "data": [
            {"id": m, "object": "model", "created": created, "owned_by": "omnidraft"} for m in st.model_ids]})

    @app.get("/health")
    def health():
        st = state(app)
        return jsonify({"status": "ok", "model": st.model_ids[0], "method": st.session.settings.method,
                        "drafter_version": st.metrics.drafter_version, "queue_depth": st.worker.depth(),
                        "n_ctx": st.n_ctx})

    @app.get("/metrics")
    def metrics():
        st = state(app)
        return Response(st.metrics.prometheus(st.worker.depth()),
                        mimetype="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/omnidraft/stats")
    def omnidraft_stats():
        limit = request.args.get("limit", type=int)
        st = state(app)
        view = st.metrics.stats_view(limit if limit and limit > 0 else None)
        s = st.session.settings  # the pair, for the app's header
        # the held-out measurements of the drafter versions (``omnidraft adapt`` writes them into the registry
        # the server swaps from): the Learning tab's held-out curve
        view.update(target=s.target, draft=s.draft, method=s.method,
                    heldout=st.registry.evaluations() if st.registry is not None else [])
        return jsonify(view)

    @app.get("/")
    @app.get("/app")
    def root():
        return redirect("/app/")

    @app.get("/app/")
    @app.get("/app/<path:path>")
    def web_app(path: str = "index.html"):
        root_dir = state(app).config.app_path()
        if not root_dir.is_dir():
            raise ApiError(404, "the phone web app is not installed on this server", code="not_found")
        return send_from_directory(root_dir, path)  # safe_join: refuses paths outside root_dir


def _checked(ev):
    """``ev``, unless it ends the request: an ApiError is raised, and so is a hang-up (499, nginx's "client
    closed request": nobody reads it, but the handler returns and its thread serves the next request)."""
    if isinstance(ev, ClientGone):
        raise ApiError(499, "the client closed the connection", code="client_gone")
    if isinstance(ev, ApiError):
        raise ev
    return ev


def _collect(req: Request, job: Job, ev) -> dict:
    chunks: list[Chunk] = []
    while isinstance(ev, Chunk):
        chunks.append(ev)
        ev = _checked(job.next_event())
    text = "".join(c.text for c in chunks)
    if isinstance(ev, Done):
        text, finish, stats = ev.final.text, ev.final.finish_reason, ev.final.stats
    else:  # TimedOut after some text
        finish, stats = "length", ev.stats
    ext = ev.ext()
    ext["draft_spans"] = draft_spans(chunks)
    return full_response(req, text, finish, stats, ext, [m for c in chunks for m in c.marks])


def _stream(req: Request, job: Job, ev):
    try:
        if req.kind == "chat":
            yield _sse(chunk(req, None, role=True))
        while True:
            if isinstance(ev, Chunk):
                if ev.text or ev.marks:
                    marks = ev.marks if req.params.logprobs is not None else None
                    yield _sse(chunk(req, ev.text, ext={"from_draft": ev.from_draft}, marks=marks))
            elif isinstance(ev, (Done, TimedOut)):
                stats = ev.final.stats if isinstance(ev, Done) else ev.stats
                finish = ev.final.finish_reason if isinstance(ev, Done) else "length"
                yield _sse(chunk(req, None, finish, ext=ev.ext()))
                if req.include_usage:
                    yield _sse(usage_chunk(req, stats))
                yield "data: [DONE]\n\n"
                return
            elif isinstance(ev, ClientGone):  # nobody is reading: end the response, free the thread
                return
            else:  # ApiError after the stream started: OpenAI-style error event, then end
                yield _sse(ev.body())
                yield "data: [DONE]\n\n"
                return
            ev = job.next_event()
    finally:
        job.cancel()  # client gone (GeneratorExit) or finished: either way the worker may drop it


__all__ = ["create_app", "shutdown", "state", "usage"]
