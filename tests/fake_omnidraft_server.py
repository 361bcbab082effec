"""A stand-in for `omnidraft serve` with canned streaming output, for the Android app's tests.

It implements exactly the API contract the app codes against (see android_demo/README.md):
`/v1/chat/completions` (SSE, `omnidraft.from_draft` per chunk, stats on the final chunk),
`/v1/models`, `/health`, `/v1/omnidraft/stats`, and serves the app at `/app/`.
Run it by hand to click through the app without models:

    .venv/bin/python tests/fake_omnidraft_server.py --port 8080   # then open http://127.0.0.1:8080/
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from flask import Flask, Response, abort, jsonify, redirect, request, send_from_directory
from werkzeug.serving import make_server

APP_DIR = Path(__file__).resolve().parents[1] / "android_demo" / "app"
MODEL_ID = "qwen2.5-coder-0.5b+smollm2-135m"

# (text, from_draft): what a speculative run looks like from the outside
CANNED = [
    ("Here", False), (" is a", True), (" simple", True), (" prime", False), (" checker", True), (":\n\n", True),
    ("```python\n", False), ("def is_prime", True), ("(n", True), ("):\n", True), ("    if n", False),
    (" < 2:\n", True), ("        return False\n", True), ("    for i", False), (" in range(2", True),
    (", int(n ** 0.5)", False), (" + 1):\n", True), ("        if n % i", True), (" == 0:\n", True),
    ("            return False\n", True), ("    return True\n", False), ("```", True),
    ("\n\nIt tries", False), (" every divisor", False), (" up to the square root.", True),
]


def canned_stats(i: int, method: str) -> dict:
    """Figures that drift upwards with each request, like a drafter that learns."""
    proposed, accepted = 60, min(57, 33 + 4 * i)  # >= 50 drafted: the Learning tab plots it as a rate
    # self-consistent counts: every target pass emitted the drafts it accepted plus one token of its own
    tokens = 64
    passes = tokens - accepted
    return {"completion_tokens": tokens, "proposed": proposed, "accepted": accepted,
            "acceptance_rate": accepted / proposed, "tau": tokens / passes, "target_passes": passes,
            "tokens_per_s": 18.0 + 4.5 * i, "draft_s": 0.4, "verify_s": 1.6, "method": method,
            "policy_note": "the cost policy drafted where it predicts a gain (predicted 1.60x at draft length 3)"}


def create_app(delay: float = 0.03, api_key: str | None = None, app_dir: Path = APP_DIR) -> Flask:
    app = Flask(__name__, static_folder=None)
    app.config.update(DELAY=delay, API_KEY=api_key, REQUESTS=[], HISTORY=[])
    lock = threading.Lock()

    def version() -> str:
        return f"v{len(app.config['HISTORY']) // 2}"  # a new drafter version every 2 answers

    @app.before_request
    def auth():
        key = app.config["API_KEY"]
        if key and request.path.startswith("/v1/") and request.headers.get("Authorization") != f"Bearer {key}":
            return jsonify(error={"message": "invalid API key", "type": "authentication_error"}), 401
        return None

    @app.after_request
    def cors(resp):
        resp.headers["Access-Control-Allow-Origin"] = "*"
        resp.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
        return resp

    @app.get("/")
    def root():
        return redirect("/app/")

    @app.get("/app")
    @app.get("/app/")
    @app.get("/app/<path:name>")
    def static_app(name: str = "index.html"):
        if request.path == "/app":
            return redirect("/app/")
        resp = send_from_directory(app_dir, name)
        resp.headers["Cache-Control"] = "no-cache"
        return resp

    @app.get("/health")
    def health():
        return jsonify(status="ok")

    @app.get("/v1/models")
    def list_models():
        return jsonify(object="list", data=[{"id": MODEL_ID, "object": "model", "owned_by": "omnidraft"}])

    @app.get("/v1/omnidraft/stats")
    def stats():
        hist = app.config["HISTORY"]
        totals = {"requests": len(hist), "completion_tokens": sum(h["completion_tokens"] for h in hist)}
        return jsonify(history=hist, totals=totals, drafter_version=version(),
                       target="qwen2.5-coder-0.5b", draft="smollm2-135m")

    @app.post("/v1/chat/completions")
    def chat():
        body = request.get_json(force=True)
        app.config["REQUESTS"].append({"body": body, "auth": request.headers.get("Authorization")})
        if not body.get("messages"):
            abort(400)
        if not body.get("stream"):
            return jsonify(error={"message": "the fake server only streams"}), 400
        method = (body.get("omnidraft") or {}).get("method", "omnidraft")
        delay = app.config["DELAY"]

        def events():
            cid, created = f"chatcmpl-fake{len(app.config['REQUESTS'])}", int(time.time())

            def chunk(delta: dict, finish=None, ext=None) -> str:
                c = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL_ID,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                if ext is not None:
                    c["omnidraft"] = ext
                return f"data: {json.dumps(c)}\n\n"

            yield chunk({"role": "assistant", "content": ""})
            for text, from_draft in CANNED:
                time.sleep(delay)
                yield chunk({"content": text}, ext={"from_draft": from_draft})
            with lock:
                hist = app.config["HISTORY"]
                s = canned_stats(len(hist), method)
                ver = version()
                hist.append({"t": time.time(), "completion_tokens": s["completion_tokens"],
                             "proposed": s["proposed"], "accepted": s["accepted"],
                             "tokens_per_s": s["tokens_per_s"], "acceptance_rate": s["acceptance_rate"],
                             "tau": s["tau"], "method": method, "drafter_version": ver})
            yield chunk({}, finish="stop", ext={"stats": s, "drafter_version": ver})
            yield "data: [DONE]\n\n"

        return Response(events(), mimetype="text/event-stream", headers={"Cache-Control": "no-cache"})

    return app


class ServerThread:
    """A WSGI server for an app on 127.0.0.1 in a background thread (port 0 = any free port)."""

    def __init__(self, app: Flask, port: int = 0):
        self.app = app
        self.server = make_server("127.0.0.1", port, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--delay", type=float, default=0.08, help="seconds between streamed chunks")
    ap.add_argument("--api-key", default=None)
    a = ap.parse_args()
    with ServerThread(create_app(a.delay, a.api_key), a.port) as s:
        print(f"fake omnidraft server on {s.url}/app/  (Ctrl-C stops)")
        try:
            s.thread.join()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
