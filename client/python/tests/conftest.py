"""Fixtures: one fleet for the session (redis-server, kiln-cache, kilnd A with --remote), a
second kilnd on the same fleet with an empty cache (a fresh host), and a ``kiln.Client`` on A.

The package under test is the one installed in this interpreter (scripts/test installs
client/python into .venv/), so the tests also prove that it installs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import kiln
from harness import CacheServer, Kilnd, Redis


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kiln")


@pytest.fixture(scope="session")
def redis(session_dir: Path) -> Iterator[Redis]:
    r = Redis(session_dir / "redis")
    yield r
    r.kill9()


@pytest.fixture(scope="session")
def cache_server(session_dir: Path, redis: Redis) -> Iterator[CacheServer]:
    c = CacheServer(session_dir / "kiln-cache", redis)
    yield c
    assert c.stop() == 0, f"kiln-cache did not exit 0 on SIGTERM:\n{c.log.read_text()[-2000:]}"


@pytest.fixture(scope="session")
def kilnd(session_dir: Path, cache_server: CacheServer) -> Iterator[Kilnd]:
    d = Kilnd(session_dir / "kilnd-a", remote=cache_server)
    yield d
    assert d.stop() == 0, f"kilnd did not exit 0 on SIGTERM:\n{d.log.read_text()[-2000:]}"


@pytest.fixture(scope="session")
def kilnd_fresh(session_dir: Path, cache_server: CacheServer) -> Iterator[Kilnd]:
    """Another host of the same fleet: its own (empty) cache directory and socket."""
    d = Kilnd(session_dir / "kilnd-b", remote=cache_server)
    yield d
    assert d.stop() == 0, f"kilnd did not exit 0 on SIGTERM:\n{d.log.read_text()[-2000:]}"


@pytest.fixture
def client(kilnd: Kilnd) -> Iterator[kiln.Client]:
    with kiln.Client(kilnd.uri) as c:
        yield c


@pytest.fixture
def fleet_env(kilnd: Kilnd, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kilnd]:
    """KILN_DAEMON names kilnd A for this test, and the process's shared connection is fresh."""
    from kiln import _fleet

    monkeypatch.setenv("KILN_DAEMON", kilnd.uri)
    _fleet.reset_for_tests()
    yield kilnd
    _fleet.reset_for_tests()


def pytest_report_header(config: pytest.Config) -> str:
    return f"kiln {kiln.__version__} from {os.path.dirname(kiln.__file__)}"
