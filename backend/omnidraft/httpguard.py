"""What every state-changing HTTP request must pass, for the server and the trainer alike.

A web page on any site can make the browser POST to 127.0.0.1 without a CORS preflight if the
request is "simple" (Content-Type text/plain, form or multipart, no custom header); it cannot read
the answer, but the generation or upload runs.  So a POST must declare a JSON body (else 415) and,
if the browser names the page's origin, that origin must be allowed (else 403).  Requests without
an Origin header (curl, SDKs, the uploader) are not browsers' cross-site requests and pass.

DNS rebinding: a page on evil.example can make its name resolve to 127.0.0.1 after it loaded; its
requests then reach this server as same-origin ones (Host and Origin both "evil.example") and it
reads the answers.  So the server checks the Host header against the names it is known by
(``HostPolicy``): a rebinding name is not among them.  Origin is never compared with Host, which the
attacker chooses; the server's own origin is an allowed name at the port it listens on.

The trainer's API also takes a shared token (``Authorization: Bearer``), generated into its state
directory (mode 0600) when none is given; the server reads the same file to upload.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
TOKEN_FILE = "token"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
# A Host header as browsers send it: a DNS name or an IP literal, then maybe a port.  Anything else
# ("evil@127.0.0.1", spaces) is refused rather than parsed leniently into a name we would accept.
_HOST_RE = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::[0-9]{1,5})?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_name(value: str) -> str | None:
    """The name of a Host header or ``host[:port]`` (lower case, IPv6 without brackets); None if malformed."""
    m = _HOST_RE.fullmatch(value.strip().lower())
    return m.group(1).strip("[]") if m else None


@dataclass(frozen=True)
class HostPolicy:
    """The Host header names a server answers to.  The port is not checked: a port forward (adb,
    ssh -L) changes it, and a rebinding page can only change the name."""

    names: frozenset[str] = LOOPBACK_NAMES
    any_ip: bool = False  # bound to every interface: any IP literal (no DNS lookup, so nothing to rebind)
    any_name: bool = False  # --allowed-host '*': no check (a proxy in front already checks Host)

    @classmethod
    def for_server(cls, bind_host: str, allowed_hosts=(), cors_origins=()) -> "HostPolicy":
        """Loopback names, the bound address (unless a wildcard), ``--allowed-host`` names and the hosts of
        ``--cors-origin`` (a page served under that name through a proxy posts to it)."""
        names = set(LOOPBACK_NAMES)
        names |= {host_name(h) for h in allowed_hosts if h != "*"}
        names |= {host_name(urlsplit(o).netloc) for o in cors_origins if o != "*"}
        bind = host_name(bind_host)
        wildcard = bind in WILDCARD_BINDS
        if not wildcard:
            names.add(bind)
        names.discard(None)
        return cls(frozenset(names), any_ip=wildcard, any_name="*" in allowed_hosts)

    def allows(self, host: str | None) -> bool:
        """Whether a request with this Host header may be answered; no header at all (HTTP/1.0 tools)
        passes, as browsers always send one."""
        return host is None or self.any_name or self.known(host)

    def known(self, host: str) -> bool:
        """``host`` is one of this server's names ('*' aside: it opens Host, not the server's own origin)."""
        name = host_name(host)
        if name is None:
            return False
        if name in self.names:
            return True
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            return False
        return ip.is_loopback or self.any_ip


def host_refusal(request, hosts: HostPolicy) -> tuple[int, str, str] | None:
    """421 (Misdirected Request) if the Host header is not a name this server is known by."""
    host = request.environ.get("HTTP_HOST")
    if hosts.allows(host):
        return None
    return (421, f"host {host!r} is not a name this server answers to (a DNS rebinding page?); "
                 f"add it with --allowed-host NAME", "host_not_allowed")


def refusal(request, allowed_origins, hosts: HostPolicy | None = None) -> tuple[int, str, str] | None:
    """(status, message, code) if this Flask request must be refused before it runs, else None.

    ``hosts``: check the Host header too, and accept the server's own origin (see HostPolicy)."""
    if hosts is not None and (refused := host_refusal(request, hosts)) is not None:
        return refused
    if request.method in SAFE_METHODS:
        return None
    origin = request.headers.get("Origin")
    if origin is not None and not origin_allowed(origin, request, allowed_origins, hosts):
        return 403, f"origin {origin!r} is not allowed (see --cors-origin)", "origin_not_allowed"
    if request.mimetype != "application/json":
        got = request.headers.get("Content-Type") or "none"
        return 415, f"the body must be JSON (Content-Type: application/json), got {got!r}", "unsupported_media_type"
    return None


def origin_allowed(origin: str, request, allowed_origins, hosts: HostPolicy | None = None) -> bool:
    """Listed origins ('*' = any), and the server's own origin (its phone web app): an allowed name at
    the port this server listens on.  Never compared with Host, which a rebinding page chooses."""
    if origin in allowed_origins or "*" in allowed_origins:
        return True
    if hosts is None:
        return False
    try:
        parts = urlsplit(origin)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return False
    own_port = request.environ.get("SERVER_PORT")
    return (parts.scheme == request.scheme and parts.hostname is not None and parts.username is None
            and hosts.known(parts.netloc) and str(port) == own_port)


def bearer_ok(request, key: str) -> bool:
    """Constant-time check of 'Authorization: Bearer KEY'."""
    return authorization_ok(request.headers.get("Authorization", ""), key)


def authorization_ok(got: str, key: str) -> bool:
    """Constant-time check of an Authorization header's value ('Bearer KEY')."""
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
