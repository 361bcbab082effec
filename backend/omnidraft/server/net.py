"""``omnidraft serve``'s waitress server: the package's one connection policy (``omnidraft.netlimits``, shared
with the trainer) with the server's body limit and the API's error shape."""

from __future__ import annotations

from omnidraft.netlimits import (FD_RESERVE, ArrivalDispatcher, GuardedChannel, NetLimits,  # noqa: F401 - re-exported
                                 connection_limit)
from omnidraft.netlimits import JsonErrorTask as _JsonErrorTask
from omnidraft.netlimits import build

from .config import ServerConfig
from .protocol import ApiError


class JsonErrorTask(_JsonErrorTask):
    """waitress's own refusals (413, 431, 400) as the API's JSON errors."""

    @staticmethod
    def error_body(status: int, message: str, code: str) -> dict:
        return ApiError(status, message, code=code).body()


def build_server(app, cfg: ServerConfig, limits: NetLimits | None = None):
    """The waitress server for ``app``: ``cfg.threads()`` threads, NetLimits applied, bodies up to max_body_kb."""
    return build(app, cfg.host, cfg.port, cfg.threads(), cfg.max_body_kb * 1024, limits, error_task=JsonErrorTask)
