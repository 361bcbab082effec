"""The trainer's HTTP face (loopback): ``POST /v1/records`` (JSON, gzip allowed) and ``GET /v1/status``,
behind the trainer's token and the same request guards as the server (httpguard)."""

from __future__ import annotations

import json
import logging
import threading
import zlib

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException

from omnidraft import httpguard, netlimits
from omnidraft.errors import OmniDraftError

from .service import InvalidRecords, Trainer

log = logging.getLogger(__name__)

MAX_BODY = 64 << 20  # bytes on the wire, and bytes after gzip inflation


class _TooLarge(Exception):
    pass


def _inflate(raw: bytes, limit: int) -> bytes:
    """gzip -> bytes, refusing (``_TooLarge``) to produce more than ``limit`` bytes."""
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(raw, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        raise _TooLarge(f"the gzip body inflates past {limit} bytes")
    if not d.eof:
        raise ValueError("truncated gzip body")
    if d.unused_data:
        raise ValueError("data after the end of the gzip body")
    return out


def create_app(trainer: Trainer, max_body: int = MAX_BODY):
    """Flask app factory; the trainer is the app's only state (``app.config['TRAINER']``).

    Every /v1 route needs the trainer's token; posts must be JSON from no foreign origin (httpguard)."""
    app = Flask("omnidraft.trainer")
    app.config["TRAINER"] = trainer
    app.config["MAX_CONTENT_LENGTH"] = max_body

    @app.before_request
    def _guard():
        refused = httpguard.refusal(request, ())
        if refused is not None:
            status, msg, code = refused
            return jsonify(error=msg, code=code), status
        if request.path.startswith("/v1/") and not httpguard.bearer_ok(request, trainer.token):
            return jsonify(error=TOKEN_MISSING, code="invalid_token"), 401
        return None

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException):
        return jsonify(error=e.description or e.name, code=e.name.lower().replace(" ", "_")), e.code

    @app.errorhandler(InvalidRecords)
    def _invalid_records(e: InvalidRecords):
        first = e.errors[0]
        return jsonify(error=str(e), code=e.code, index=first["index"], id=first["id"], field=first["field"],
                       errors=[{k: x[k] for k in ("index", "id", "field", "message")} for x in e.errors]), 400

    @app.errorhandler(OmniDraftError)
    def _typed_error(e: OmniDraftError):
        return jsonify(error=str(e), code=type(e).__name__), e.http_status

    @app.errorhandler(Exception)
    def _internal(e: Exception):
        log.exception("trainer HTTP handler failed")
        return jsonify(error=f"internal error: {type(e).__name__}", code="internal_error"), 500

    @app.post("/v1/records")
    def records():
        raw = request.get_data()
        try:
            if request.headers.get("Content-Encoding") == "gzip":
                raw = _inflate(raw, max_body)
            body = json.loads(raw)
            recs = body["records"]
            if not isinstance(recs, list):
                raise ValueError("records must be a list")
        except _TooLarge as e:
            return jsonify(error=str(e), code="request_too_large"), 413
        except RecursionError:
            return jsonify(error="bad batch: JSON nested too deeply", code="invalid_json"), 400
        except (OSError, ValueError, KeyError, TypeError, zlib.error) as e:
            return jsonify(error=f"bad batch: {e}", code="invalid_json"), 400
        return jsonify(trainer.receive(recs))

    @app.get("/v1/status")
    def status():
        return jsonify(trainer.status())

    return app


TOKEN_MISSING = ("missing or invalid trainer token (send 'Authorization: Bearer TOKEN'; "
                 "see <state-dir>/token)")


def build_server(app, host: str = "127.0.0.1", port: int = 0, limits: netlimits.NetLimits | None = None,
                 threads: int = 4):
    """The waitress server for a trainer ``app``: the server's connection policy (``omnidraft.netlimits``),
    bodies over the app's MAX_CONTENT_LENGTH refused from their Content-Length, and the token checked from the
    headers, so a /v1 request without it gets 401 before a byte of its body is read."""
    token = app.config["TRAINER"].token

    def admit(path: str, headers: dict):
        if path.startswith("/v1/") and not httpguard.authorization_ok(headers.get("AUTHORIZATION", ""), token):
            return netlimits.Refused(401, "Unauthorized", TOKEN_MISSING, "invalid_token")
        return None

    return netlimits.build(app, host, port, threads, app.config["MAX_CONTENT_LENGTH"], limits, admit=admit)


def start_http(trainer: Trainer, host: str = "127.0.0.1", port: int = 0, limits: netlimits.NetLimits | None = None):
    """Serve the app on a background thread (``build_server``); return (server, actual port).
    ``server.shutdown()`` stops it."""
    server = build_server(create_app(trainer), host, port, limits)

    def shutdown():
        server.close()
        server.task_dispatcher.shutdown(timeout=5)

    server.shutdown = shutdown
    threading.Thread(target=server.run, name="omnidraft-trainer-http", daemon=True).start()
    return server, server.effective_port
