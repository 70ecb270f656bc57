"""One warning per topic per process: the one way kiln warns about something that repeats.

A job may read a bad variable or meet a dead kilnd on every graph and every cache lookup; its
log should say so once. A leaf module importing nothing of kiln's, so that :mod:`kiln.settings`,
which every module reads, can warn through it too.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("kiln")

_lock = threading.Lock()
#: The topics already warned about in this process.
_warned: set[str] = set()


def warn_once(topic: str, message: str, *args: object, exc_info: BaseException | None = None) -> None:
    """``message`` logged as a warning, the first time ``topic`` comes up in this process."""
    with _lock:
        if topic in _warned:
            return
        _warned.add(topic)
    log.warning(message, *args, exc_info=exc_info)


def forget() -> None:
    """Every topic may warn again: a forked child's (its log is its own) and a test's."""
    with _lock:
        _warned.clear()
