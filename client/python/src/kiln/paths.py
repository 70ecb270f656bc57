"""Where the daemon is: the same rule as kilnd and the Rust client (proto/src/paths.rs).

``KILN_DAEMON`` (``unix:///path`` or ``http://host:port``) first; else
``$XDG_RUNTIME_DIR/kiln/kilnd.sock`` when that is set, ``/run/kiln/kilnd.sock`` for root, or
``/tmp/kiln-$UID/kilnd.sock``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from . import settings

DAEMON_ENV = settings.DAEMON.name


def socket_path_for(xdg_runtime_dir: str | None, uid: int) -> str:
    """The pure part of :func:`default_socket_path`, for tests."""
    if xdg_runtime_dir:
        return os.path.join(xdg_runtime_dir, "kiln", "kilnd.sock")
    if uid == 0:
        return "/run/kiln/kilnd.sock"
    return f"/tmp/kiln-{uid}/kilnd.sock"


def default_socket_path(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return socket_path_for(env.get("XDG_RUNTIME_DIR"), os.getuid())


def daemon_uri(environ: Mapping[str, str] | None = None) -> str:
    """The URI a client uses: ``KILN_DAEMON`` first, then the default socket."""
    env = os.environ if environ is None else environ
    uri = env.get(DAEMON_ENV, "")
    if uri:
        return uri
    return "unix://" + default_socket_path(env)


def grpc_target(uri: str) -> tuple[str, bool]:
    """The gRPC channel target for a daemon URI, and whether it needs TLS.

    ``unix:///path`` stays as it is (gRPC reads it), ``http://host:port`` becomes ``host:port``,
    ``https://host:port`` the same with TLS. Anything else is a ``ValueError`` naming the forms.
    """
    if uri.startswith("unix:"):
        if uri.startswith("unix://") and not uri.startswith("unix:///"):
            raise ValueError(f"{uri!r}: a unix URI needs an absolute path, as in unix:///run/kiln/kilnd.sock")
        return uri, False
    for scheme, tls in (("http://", False), ("https://", True)):
        if uri.startswith(scheme):
            host = uri[len(scheme) :].rstrip("/")
            if not host or "/" in host:
                raise ValueError(f"{uri!r}: expected {scheme}host:port")
            return host, tls
    raise ValueError(f"{uri!r}: expected unix:///path, http://host:port or https://host:port")
