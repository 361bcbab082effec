"""Route llama.cpp's own log lines into Python logging and keep the last errors.

llama.cpp explains *why* a load failed only on its log stream; we keep a short
ring of recent warning/error lines so a failed load can say it in the exception.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import threading

import llama_cpp

log = logging.getLogger("omnidraft.llama_cpp")

# ggml_log_level: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the previous line
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


class _Sink:
    """Holds the ctypes callback (it must outlive every call llama.cpp makes into it)."""

    def __init__(self) -> None:
        self.recent: collections.deque[str] = collections.deque(maxlen=8)
        self.lock = threading.Lock()
        self.callback = llama_cpp.llama_log_callback(self._on_log)
        self._last = logging.DEBUG

    def _on_log(self, level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        msg = text.decode("utf-8", "replace").rstrip()
        if not msg:
            return
        lvl = self._last if level == 5 else _LEVELS.get(level, logging.DEBUG)
        self._last = lvl
        if lvl >= logging.WARNING:
            with self.lock:
                self.recent.append(msg)
        # llama.cpp is chatty at INFO (every tensor, every kv); keep it at DEBUG here
        log.log(logging.DEBUG if lvl <= logging.INFO else lvl, "%s", msg)

    def take_recent(self) -> str:
        with self.lock:
            out = " | ".join(self.recent)
            self.recent.clear()
        return out


SINK = _Sink()
llama_cpp.llama_log_set(SINK.callback, ctypes.c_void_p(0))
