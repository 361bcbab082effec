"""Local OpenAI-compatible HTTP server: Flask app factory, one engine worker, metrics.

    create_app(session, config)  -> Flask app (state on ``app.extensions["omnidraft"]``)
    omnidraft serve ...          -> the same app run by waitress (see ``server.cli``)
"""

from .app import create_app
from .config import ServerConfig

__all__ = ["create_app", "ServerConfig"]
