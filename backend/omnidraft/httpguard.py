"""What every state-changing HTTP request must pass, for the server and the trainer alike.

A web page on any site can make the browser POST to 127.0.0.1 without a CORS preflight if the
request is "simple" (Content-Type text/plain, form or multipart, no custom header); it cannot read
the answer, but the generation or upload runs.  So a POST must declare a JSON body (else 415) and,
if the browser names the page's origin, that origin must be allowed (else 403).  Requests without
an Origin header (curl, SDKs, the uploader) are not browsers' cross-site requests and pass.

The trainer's API also takes a shared token (``Authorization: Bearer``), generated into its state
directory (mode 0600) when none is given; the server reads the same file to upload.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
TOKEN_FILE = "token"


def refusal(request, allowed_origins) -> tuple[int, str, str] | None:
    """(status, message, code) if this Flask request must be refused before it runs, else None."""
    if request.method in SAFE_METHODS:
        return None
    origin = request.headers.get("Origin")
    if origin is not None and not origin_allowed(origin, request, allowed_origins):
        return 403, f"origin {origin!r} is not allowed (see --cors-origin)", "origin_not_allowed"
    if request.mimetype != "application/json":
        got = request.headers.get("Content-Type") or "none"
        return 415, f"the body must be JSON (Content-Type: application/json), got {got!r}", "unsupported_media_type"
    return None


def origin_allowed(origin: str, request, allowed_origins) -> bool:
    """Listed origins ('*' = any), and the server's own origin (its phone web app)."""
    if origin in allowed_origins or "*" in allowed_origins:
        return True
    return origin == f"{request.scheme}://{request.host}"


def bearer_ok(request, key: str) -> bool:
    """Constant-time check of 'Authorization: Bearer KEY'."""
    got = request.headers.get("Authorization", "")
    token = got[7:] if got[:7].lower() == "bearer " else ""
    return hmac.compare_digest(token.encode(), key.encode())


def load_or_create_token(path: str | Path) -> str:
    """The shared token stored at ``path``; a new random one (file mode 0600) if there is none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        token = path.read_text().strip()
        if token:
            return token
        path.unlink()
        return load_or_create_token(path)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token


def read_token(path: str | Path) -> str:
    """The token in ``path``, or "" if there is no such file."""
    try:
        return Path(path).read_text().strip()
    except FileNotFoundError:
        return ""
