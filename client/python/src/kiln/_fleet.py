"""One connection to kilnd per process, for the integrations (Triton's cache, Inductor's).

The integrations run inside a user's job, where kiln must never be the reason it fails: every
call goes through :func:`call`, which turns any failure into "no answer" (a miss, or a dropped
put). When kilnd does not answer, the job gets ONE warning per process, and kiln stays quiet and
out of the way for :data:`RETRY_SECS` before it asks again, so a job with kilnd down pays one
failed connect per half minute, not one per cache lookup.

The client is created lazily and again after a fork (gRPC channels do not survive one); the
parent's channel is kept referenced in the child, never closed there, because closing it in
the child would act on the parent's connection state.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from . import _warn, errors
from .client import Client

log = logging.getLogger("kiln")

#: How long kiln leaves kilnd alone after it failed to answer.
RETRY_SECS = 30.0

#: Codes that mean "kilnd is not there (or not usable)": back off. Any other error is one
#: request's problem (a file too large, say): that call is a miss, and the next one is tried.
_DOWN_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED}

T = TypeVar("T")


class _State:
    """The process's connection and its health. A plain lock, not a condition: nothing waits
    on it, and it is held only to swap fields."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.client: Client | None = None
        self.down_until = 0.0
        self.warned_down = False
        #: Clients of a parent process, inherited by fork: kept alive, never used or closed.
        self.orphans: list[Client] = []
        #: A forked child whose new client has not answered yet (see :func:`_retry_after_fork`).
        self.unproven_after_fork = False


_state = _State()


def _check_fork() -> None:
    if _state.pid != os.getpid():
        with _state.lock:
            if _state.pid != os.getpid():
                if _state.client is not None:
                    _state.orphans.append(_state.client)
                _state.client = None
                _state.unproven_after_fork = True
                _state.pid = os.getpid()
                _state.down_until = 0.0
                _state.warned_down = False
                _warn.forget()


def client() -> Client:
    """The process's client (``KILN_DAEMON``, else the default socket)."""
    _check_fork()
    c = _state.client
    if c is None:
        with _state.lock:
            if _state.client is None:
                _state.client = Client()
            c = _state.client
    return c


def available() -> bool:
    """False while kiln is backing off after kilnd failed to answer."""
    _check_fork()
    return time.monotonic() >= _state.down_until


def retry_in() -> float:
    """Seconds until kiln asks kilnd again (0 when it is not backing off)."""
    _check_fork()
    return max(0.0, _state.down_until - time.monotonic())


def failed(error: BaseException, what: str) -> None:
    """Records a failure of ``what``: backs off when kilnd is away; warns once either way."""
    if isinstance(error, errors.KilnError) and error.code in _DOWN_CODES:
        with _state.lock:
            _state.down_until = time.monotonic() + RETRY_SECS
            first = not _state.warned_down
            _state.warned_down = True
        uri = _state.client.uri if _state.client is not None else "?"
        if first:
            log.warning(
                "kiln: kilnd is unreachable at %s (%s); the job goes on without kiln's caches "
                "(kiln asks again every %d s; this warning is printed once)",
                uri,
                error.details,
                int(RETRY_SECS),
            )
        else:
            log.debug("kiln: kilnd still unreachable at %s: %s", uri, error.details)
        return
    if isinstance(error, errors.KilnError):
        _warn.warn_once(f"{what}:{error.code}", "kiln: %s failed, treated as a miss: %s", what, error)
    else:
        _warn.warn_once(f"bug:{what}", "kiln: %s failed unexpectedly, treated as a miss", what, exc_info=error)


def _retry_after_fork(error: BaseException) -> bool:
    """Whether to try once more with a new client: in a forked child, grpcio's first channel
    sometimes fails its first call with UNAVAILABLE ("sendmsg: Wrong file descriptor
    generation"), and a new channel may work."""
    if not (isinstance(error, errors.KilnError) and error.code == grpc.StatusCode.UNAVAILABLE):
        return False
    with _state.lock:
        if not _state.unproven_after_fork:
            return False
        _state.unproven_after_fork = False
        if _state.client is not None:
            _state.orphans.append(_state.client)
        _state.client = None
    return True


def call(what: str, fn: Callable[[Client], T], default: T) -> T:
    """``fn(client)``, or ``default`` when kiln is backing off or the call fails (recorded)."""
    if not available():
        return default
    try:
        try:
            result = fn(client())
        except Exception as e:  # noqa: BLE001 - retried once, below, or recorded
            if not _retry_after_fork(e):
                raise
            result = fn(client())
    except Exception as e:  # noqa: BLE001 - the job must not fail because of its cache
        failed(e, what)
        return default
    _state.unproven_after_fork = False
    if _state.warned_down and _state.down_until:
        with _state.lock:
            back = _state.down_until != 0.0
            _state.down_until = 0.0
        if back:
            log.info("kiln: kilnd answers again")
    return result


def reset_for_tests() -> None:
    """Forgets the connection and the warnings (tests only)."""
    with _state.lock:
        if _state.client is not None:
            _state.client.close()
        _state.client = None
        _state.down_until = 0.0
        _state.warned_down = False
    _warn.forget()
