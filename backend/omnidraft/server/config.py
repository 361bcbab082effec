"""Server settings: one typed object; the ``serve`` flags are generated from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..cliutil import TRAINER_TOKEN_ENV, is_loopback_host

SPARE_THREADS = 4
API_KEY_ENV = "OMNIDRAFT_API_KEY"


def _default_app_dir() -> Path:
    """The phone web app: package data omnidraft/webapp when installed from a wheel, else the checkout's
    android_demo/app (its source; pyproject.toml maps one to the other)."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "webapp"
    return packaged if (packaged / "index.html").is_file() else package.parents[1] / "android_demo" / "app"


DEFAULT_APP_DIR = _default_app_dir()


@dataclass
class ServerConfig:
    """Each numeric field's "range" is checked when the flags are parsed, before any model loads."""

    host: str = field(default="127.0.0.1", metadata={"help": "address to bind; non-loopback needs an API key"})
    port: int = field(default=8080, metadata={"help": "TCP port; 0 = any free port (printed at start-up)",
                                              "range": (0, 65535)})
    api_key: str = field(default="", metadata={"help": "require 'Authorization: Bearer KEY' on /v1 and /metrics; "
                                                       "several keys, one per client, separated by whitespace (one "
                                                       "a line in the file) "
                                                       f"(visible in ps: prefer --api-key-file or ${API_KEY_ENV})"})
    api_key_file: str = field(default="", metadata={"help": "read the API key from this file"})
    cors_origin: list[str] = field(default_factory=list,
                                   metadata={"help": "allow this browser origin (repeatable); none = no CORS"})
    allowed_host: list[str] = field(default_factory=list, metadata={"help": "also answer requests whose Host "
                                    "header names NAME (repeatable; loopback names, the bound address and "
                                    "--cors-origin hosts always pass; '*' = any). Others get 421: DNS rebinding"})
    queue_size: int = field(default=16, metadata={"help": "requests waiting for the engine; more get HTTP 429",
                                                  "range": (1, 4096)})
    request_timeout_s: float = field(default=300.0,
                                     metadata={"help": "queue wait + generation wall time per request (s)",
                                               "range": (1.0, 86400.0)})
    max_body_kb: int = field(default=1024, metadata={"help": "largest request body (KiB); larger gets 413",
                                                     "range": (1, 1 << 20)})
    http_threads: int = field(default=0, metadata={"help": "waitress worker threads; 0 = queue size + 1 + "
                                                          f"{SPARE_THREADS} (every waiting request holds one)",
                                                   "range": (0, 8192)})
    trainer_url: str = field(default="", metadata={"help": "send generation records to this trainer (via outbox)"})
    trainer_token: str = field(default="", metadata={"help": "the trainer's shared token (default: "
                                                             f"--trainer-token-file, ${TRAINER_TOKEN_ENV}, else the "
                                                             "one `trainer serve` wrote to <cache>/trainer/token; "
                                                             "this flag is visible in ps)"})
    trainer_token_file: str = field(default="", metadata={"help": "read the trainer's token from this file"})
    registry: str = field(default="", metadata={"help": "drafter registry directory: hot-swap published versions"})
    app_dir: str = field(default="", metadata={"help": "phone web app directory served at /app/ (default: "
                                                       "the one installed with omnidraft)"})
    save_every: int = field(default=50, metadata={"help": "persist the n-gram cache every N requests (0 = only "
                                                          "at shutdown)", "range": (0, 10 ** 9)})
    history: int = field(default=500, metadata={"help": "requests kept for /v1/omnidraft/stats",
                                                "range": (1, 1_000_000)})

    def threads(self) -> int:
        """HTTP threads: one per request the engine queue admits, the running one, and spares for
        /health, /metrics and the 429 answers, so requests wait in the engine queue (which answers
        429 and counts the timeout), never unseen in waitress's own queue."""
        return self.http_threads or self.queue_size + 1 + SPARE_THREADS

    def app_path(self) -> Path:
        return Path(self.app_dir) if self.app_dir else DEFAULT_APP_DIR

    def api_keys(self) -> list[str]:
        """The accepted keys: each client its own, so none learns another's prompts from the prompt cache."""
        return self.api_key.split()

    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


__all__ = ["ServerConfig", "is_loopback_host", "API_KEY_ENV", "TRAINER_TOKEN_ENV", "DEFAULT_APP_DIR",
           "SPARE_THREADS"]
