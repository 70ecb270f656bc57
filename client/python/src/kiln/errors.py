"""Exceptions that carry the daemon's gRPC status.

Every error the client raises is a :class:`KilnError`; its ``code`` is the ``grpc.StatusCode``
(``None`` where no RPC status applies) and ``details`` the daemon's message, which names the
field for an invalid request (``scope.namespace: ...``). The subclasses let a caller catch one
case without comparing codes.
"""

from __future__ import annotations

import grpc


class KilnError(Exception):
    """An RPC to kilnd failed, or kilnd answered that a request cannot be done."""

    code: grpc.StatusCode | None
    details: str

    def __init__(self, code: grpc.StatusCode | None, details: str, *, uri: str | None = None) -> None:
        self.code = code
        self.details = details
        self.uri = uri
        name = code.name if code is not None else "ERROR"
        super().__init__(f"{name}: {details}")


class DaemonUnavailable(KilnError):
    """kilnd does not answer at the URI (not running, wrong socket, or going down)."""

    def __init__(self, code: grpc.StatusCode | None, details: str, *, uri: str | None = None) -> None:
        super().__init__(code, details, uri=uri)
        hint = "is kilnd running? KILN_DAEMON=unix:///path or http://host:port names another daemon"
        self.args = (f"kilnd is not reachable at {uri}: {details} ({hint})",)


class InvalidArgument(KilnError):
    """The request is malformed; ``details`` names the field."""


class ResourceExhausted(KilnError):
    """The daemon's queue or a size limit is full."""


class DeadlineExceeded(KilnError):
    """The call's timeout passed."""


class NotFound(KilnError):
    """An unknown job id, for example."""


class Unimplemented(KilnError):
    """The daemon does not serve this RPC (a kilnd older than this client)."""


class FailedPrecondition(KilnError):
    """The request does not fit the daemon's state (a snapshot naming a file that was never
    stored, for example)."""


class Cancelled(KilnError):
    """The caller gave up (a snapshot restore whose ``should_stop`` said stop)."""

    def __init__(self, details: str, *, uri: str | None = None) -> None:
        super().__init__(grpc.StatusCode.CANCELLED, details, uri=uri)


class JobFailed(KilnError):
    """The job as a whole could not finish (the daemon is shutting down, for example).

    ``partial`` holds the results of the kernels that did arrive; they stay valid.
    """

    def __init__(self, details: str, partial: object | None = None, *, uri: str | None = None) -> None:
        super().__init__(grpc.StatusCode.ABORTED, details, uri=uri)
        self.partial = partial


_BY_CODE: dict[grpc.StatusCode, type[KilnError]] = {
    grpc.StatusCode.UNAVAILABLE: DaemonUnavailable,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
}


def from_code(code: str | None, details: str) -> KilnError:
    """The :class:`KilnError` for a status code by name (``"UNAVAILABLE"``), as another process
    reported it; ``None`` for an error with no status."""
    status = getattr(grpc.StatusCode, code, None) if code else None
    cls = _BY_CODE.get(status, KilnError) if status is not None else KilnError
    return cls(status, details)


def from_rpc_error(error: grpc.RpcError, uri: str | None = None) -> KilnError:
    """The :class:`KilnError` for a failed call, by its status code."""
    code = error.code() if isinstance(error, grpc.Call) else None
    details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    cls = _BY_CODE.get(code, KilnError) if code is not None else KilnError
    return cls(code, details, uri=uri)
