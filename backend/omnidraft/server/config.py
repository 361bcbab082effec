"""Server settings: one typed object; the ``serve`` flags are generated from it."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from pathlib import Path

SPARE_THREADS = 4


def _default_app_dir() -> Path:
    """The phone web app: package data omnidraft/webapp when installed from a wheel, else the checkout's
    android_demo/app (its source; pyproject.toml maps one to the other)."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "webapp"
    return packaged if (packaged / "index.html").is_file() else package.parents[1] / "android_demo" / "app"


DEFAULT_APP_DIR = _default_app_dir()


@dataclass
class ServerConfig:
    host: str = field(default="127.0.0.1", metadata={"help": "address to bind; non-loopback needs --api-key"})
    port: int = field(default=8080, metadata={"help": "TCP port"})
    api_key: str = field(default="", metadata={"help": "require 'Authorization: Bearer KEY' on /v1 and /metrics"})
    cors_origin: list[str] = field(default_factory=list,
                                   metadata={"help": "allow this browser origin (repeatable); none = no CORS"})
    queue_size: int = field(default=16, metadata={"help": "requests waiting for the engine; more get HTTP 429"})
    request_timeout_s: float = field(default=300.0,
                                     metadata={"help": "queue wait + generation wall time per request (s)"})
    max_body_kb: int = field(default=1024, metadata={"help": "largest request body (KiB); larger gets 413"})
    http_threads: int = field(default=0, metadata={"help": "waitress worker threads; 0 = queue size + 1 + "
                                                          f"{SPARE_THREADS} (every waiting request holds one)"})
    trainer_url: str = field(default="", metadata={"help": "send generation records to this trainer (via outbox)"})
    trainer_token: str = field(default="", metadata={"help": "the trainer's shared token (default: the one "
                                                             "`trainer serve` wrote to <cache>/trainer/token)"})
    registry: str = field(default="", metadata={"help": "drafter registry directory: hot-swap published versions"})
    app_dir: str = field(default="", metadata={"help": "phone web app directory served at /app/ (default: "
                                                       "the one installed with omnidraft)"})
    save_every: int = field(default=50, metadata={"help": "persist the n-gram cache every N requests"})
    history: int = field(default=500, metadata={"help": "requests kept for /v1/omnidraft/stats"})

    def threads(self) -> int:
        """HTTP threads: one per request the engine queue admits, the running one, and spares for
        /health, /metrics and the 429 answers, so requests wait in the engine queue (which answers
        429 and counts the timeout), never unseen in waitress's own queue."""
        return self.http_threads or self.queue_size + 1 + SPARE_THREADS

    def app_path(self) -> Path:
        return Path(self.app_dir) if self.app_dir else DEFAULT_APP_DIR

    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


def is_loopback_host(host: str) -> bool:
    """True if every address ``host`` resolves to is a loopback address.

    A name is resolved, not matched as text: '127.evil.example' is whatever DNS says it is,
    and a name that does not resolve is not loopback."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    addrs = {info[4][0].split("%", 1)[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)
