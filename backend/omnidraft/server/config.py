"""Server settings: one typed object; the ``serve`` flags are generated from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


def _default_app_dir() -> Path:
    """The phone web app: package data omnidraft/webapp when installed from a wheel, else the checkout's
    android_demo/app (its source; pyproject.toml maps one to the other)."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "webapp"
    return packaged if (packaged / "index.html").is_file() else package.parents[1] / "android_demo" / "app"


DEFAULT_APP_DIR = _default_app_dir()
LOOPBACK = ("127.0.0.1", "localhost", "::1")


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
    http_threads: int = field(default=8, metadata={"help": "waitress worker threads (HTTP connections served at once)"})
    trainer_url: str = field(default="", metadata={"help": "send generation records to this trainer (via outbox)"})
    registry: str = field(default="", metadata={"help": "drafter registry directory: hot-swap published versions"})
    app_dir: str = field(default="", metadata={"help": "phone web app directory served at /app/ (default: "
                                                       "the one installed with omnidraft)"})
    save_every: int = field(default=50, metadata={"help": "persist the n-gram cache every N requests"})
    history: int = field(default=500, metadata={"help": "requests kept for /v1/omnidraft/stats"})

    def app_path(self) -> Path:
        return Path(self.app_dir) if self.app_dir else DEFAULT_APP_DIR

    def is_loopback(self) -> bool:
        return self.host in LOOPBACK or self.host.startswith("127.")
