"""The token and CA files of kilnd's TCP listener: where the client reads them, and what it sends.

The end-to-end check (a real kilnd over TLS, read-only and read-write tokens) is
tests/tests/listeners.rs, which runs kiln.Client against it.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from kiln import _auth


def test_the_token_comes_from_the_argument_or_the_environment(tmp_path: Path) -> None:
    given, named = tmp_path / "given", tmp_path / "named"
    given.write_text("  given-token-0123456789\n")
    named.write_text("named-token-0123456789")
    env = {_auth.TOKEN_FILE_ENV: str(named)}
    assert _auth.read_token(str(given), env) == "given-token-0123456789"
    assert _auth.read_token(None, env) == "named-token-0123456789"
    assert _auth.read_token(None, {}) is None
    assert _auth.read_token(None, {_auth.TOKEN_FILE_ENV: ""}) is None


def test_unreadable_or_empty_token_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="absent"):
        _auth.read_token(str(tmp_path / "absent"), {})
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        _auth.read_token(str(empty), {})


def test_the_ca_comes_from_the_argument_or_the_environment(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"PEM")
    assert _auth.read_ca(None, {_auth.CA_FILE_ENV: str(ca)}) == b"PEM"
    assert _auth.read_ca(None, {}) is None


def test_every_call_carries_the_token_and_keeps_its_own_metadata() -> None:
    seen: list[grpc.ClientCallDetails] = []
    bearer = _auth._Bearer("a-token-0123456789")
    details = _auth._Details("/kiln.v1.Compiler/Stats", 5.0, [("x-trace", "1")], None, None, None)
    for intercept in (
        bearer.intercept_unary_unary,
        bearer.intercept_unary_stream,
        bearer.intercept_stream_unary,
        bearer.intercept_stream_stream,
    ):
        intercept(lambda d, _request: seen.append(d), details, None)
    assert len(seen) == 4
    for d in seen:
        assert d.method == "/kiln.v1.Compiler/Stats" and d.timeout == 5.0
        assert list(d.metadata) == [("x-trace", "1"), ("authorization", "Bearer a-token-0123456789")]
    assert "a-token" not in repr(bearer)
    channel = grpc.insecure_channel("unix:///nonexistent.sock")
    assert _auth.with_token(channel, None) is channel
    channel.close()
