"""A token and a CA for kilnd's TCP listener: read from files, sent on every call.

The Unix socket needs neither (its file mode is its guard). Over TCP, kilnd asks for a bearer
token when it has tokens configured, read-only (Lookup, Stats, GetBlobs) or read-write
(everything else), and serves TLS with a certificate a private CA may have signed. The files are
named as the ``kiln`` CLI names them: ``KILN_TOKEN_FILE`` and ``KILN_CA_FILE``.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc

from . import settings

TOKEN_FILE_ENV = settings.TOKEN_FILE.name
CA_FILE_ENV = settings.CA_FILE.name


def read_token(token_file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The token in ``token_file`` (else ``KILN_TOKEN_FILE``), whitespace trimmed; ``None`` when
    neither names a file. A file that cannot be read raises ``OSError`` naming it."""
    env = os.environ if environ is None else environ
    path = token_file or env.get(TOKEN_FILE_ENV) or None
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"{path}: the token file is empty")
    return token


def read_ca(ca_file: str | None, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The PEM in ``ca_file`` (else ``KILN_CA_FILE``) to trust for ``https://``, or ``None`` for
    the system's roots only."""
    env = os.environ if environ is None else environ
    path = ca_file or env.get(CA_FILE_ENV) or None
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


class _Details(
    collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    """A call's details with the metadata replaced (grpc's own type cannot be built)."""


class _Bearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Puts ``authorization: Bearer <token>`` on every call, whatever its kind."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def __repr__(self) -> str:
        return "_Bearer(<redacted>)"

    def _with_token(self, details: grpc.ClientCallDetails) -> _Details:
        metadata = [*(details.metadata or ()), self._header]
        return _Details(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._with_token(details), requests)


def with_token(channel: grpc.Channel, token: str | None) -> grpc.Channel:
    """``channel`` sending ``token`` on every call; ``channel`` itself when there is none."""
    if token is None:
        return channel
    return grpc.intercept_channel(channel, _Bearer(token))
