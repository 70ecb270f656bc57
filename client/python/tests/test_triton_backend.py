"""kiln.triton.KilnRemoteCacheBackend, driven the way Triton 3.6.0's RemoteCacheManager drives
it, against a real kilnd: groups written as one entry, reads answered from one group, the
fleet lease, and kilnd down."""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable

import pytest
import triton
from harness import Kilnd

import kiln
from kiln import _fleet
from kiln import triton as kt
from kiln.triton import KilnRemoteCacheBackend

VERSION = triton.__version__


def triton_key() -> str:
    return f"T{uuid.uuid4().hex.upper()}"


def group_file(children: list[str]) -> bytes:
    return json.dumps({"child_paths": sorted(children)}).encode()


def compile_into(backend: KilnRemoteCacheBackend, name: str = "k") -> dict[str, bytes]:
    """What Triton's compile() does: look the group up, and on a miss put one file at a time,
    the group file last."""
    assert backend.get([f"__grp__{name}.json"]) == {}
    files = {f"{name}.source": b"src", f"{name}.ttir": b"ttir", f"{name}.cubin": b"\x7fELF" + uuid.uuid4().bytes}
    for filename, data in files.items():
        backend.put(filename, data)
    backend.put(f"__grp__{name}.json", group_file(list(files)))
    return files


def test_a_compile_is_stored_as_one_group_entry(client: kiln.Client, fleet_env: Kilnd) -> None:
    key = triton_key()
    writer = KilnRemoteCacheBackend(key)
    assert writer.get(["__grp__k.json"]) == {}
    assert kt._leases.held() == [f"{key}/__grp__k.json".encode()], "a group miss takes the lease"
    files = {"k.source": b"src", "k.cubin": b"cubin"}
    for name, data in files.items():
        writer.put(name, data)
    assert writer.get(["k.cubin"]) == {"k.cubin": b"cubin"}, "a file put in this compile reads back"
    # Buffered, not published file by file: nothing is visible before the group put.
    assert client.get_blobs("triton", VERSION, [f"{key}/k.source", f"{key}/k.cubin", f"{key}/__grp__k.json"]) == [None] * 3
    writer.put("__grp__k.json", group_file(list(files)))
    (entry,) = client.get_blobs("triton", VERSION, [f"{key}/__grp__k.json"])
    assert entry is not None and entry.files == {**files, "__grp__k.json": group_file(list(files))}
    assert kt._leases.held() == [], "the group put releases the lease"


def test_a_reader_gets_every_child_from_the_one_group_it_read(client: kiln.Client, fleet_env: Kilnd) -> None:
    key = triton_key()
    files = compile_into(KilnRemoteCacheBackend(key))
    # A single-file entry under a child's key (another writer, an older layout) must not leak in.
    client.put_blob("triton", VERSION, f"{key}/k.cubin", {"k.cubin": b"not this one"})
    reader = KilnRemoteCacheBackend(key)
    grp = reader.get(["__grp__k.json"])
    assert list(grp) == ["__grp__k.json"]
    children = json.loads(grp["__grp__k.json"])["child_paths"]
    assert reader.get(children) == files


def test_files_outside_a_compile_are_stored_at_once(client: kiln.Client, fleet_env: Kilnd) -> None:
    key = triton_key()
    launcher = KilnRemoteCacheBackend(key)
    assert launcher.get(["cuda_utils.so"]) == {}
    launcher.put("cuda_utils.so", b"\x7fELF launcher")
    (entry,) = client.get_blobs("triton", VERSION, [f"{key}/cuda_utils.so"])
    assert entry is not None and entry.files == {"cuda_utils.so": b"\x7fELF launcher"}
    assert KilnRemoteCacheBackend(key).get(["cuda_utils.so"]) == {"cuda_utils.so": b"\x7fELF launcher"}
    assert kt._leases.held() == [], "no lease for a file with no group"


def test_a_compile_that_raises_releases_the_lease(client: kiln.Client, fleet_env: Kilnd) -> None:
    key = triton_key()
    failing = KilnRemoteCacheBackend(key)
    assert failing.get(["__grp__k.json"]) == {}
    failing.put("k.source", b"src")
    assert kt._leases.held()
    del failing  # what Triton's compile() leaves behind when a stage raises
    gc.collect()
    assert kt._leases.held() == []
    started = time.monotonic()
    lease = client.lease_blob("triton", VERSION, f"{key}/__grp__k.json", wait=20)
    assert lease.granted and time.monotonic() - started < 3
    lease.close()
    (entry,) = client.get_blobs("triton", VERSION, [f"{key}/__grp__k.json"])
    assert entry is None, "nothing of a failed compile is published"


def test_a_waiter_gets_the_group_another_process_publishes(client: kiln.Client, fleet_env: Kilnd) -> None:
    key = triton_key()
    holder = client.lease_blob("triton", VERSION, f"{key}/__grp__k.json", wait=5)
    assert holder.granted
    got: dict[str, dict[str, bytes]] = {}
    waiter = KilnRemoteCacheBackend(key)
    t = threading.Thread(target=lambda: got.setdefault("grp", waiter.get(["__grp__k.json"])))
    t.start()
    time.sleep(0.5)
    assert t.is_alive(), "the waiter waits for the producer"
    files = {"k.cubin": b"published cubin", "__grp__k.json": group_file(["k.cubin"])}
    client.put_blob("triton", VERSION, f"{key}/__grp__k.json", files)
    t.join(20)
    assert got["grp"] == {"__grp__k.json": files["__grp__k.json"]}
    assert waiter.get(["k.cubin"]) == {"k.cubin": b"published cubin"}
    holder.close()


def test_the_wait_bound_comes_from_the_environment(
    client: kiln.Client, fleet_env: Kilnd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kt.WAIT_ENV, "0.3")
    key = triton_key()
    holder = client.lease_blob("triton", VERSION, f"{key}/__grp__k.json", wait=5)
    started = time.monotonic()
    backend = KilnRemoteCacheBackend(key)
    compile_into(backend)
    assert 0.2 < time.monotonic() - started < 5
    # PROCEED: it compiled, and still published its files as one group.
    (entry,) = client.get_blobs("triton", VERSION, [f"{key}/__grp__k.json"])
    assert entry is not None and len(entry.files) == 4
    holder.close()


def count_fleet_clients(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Counts the kilnd connections the backend asks ``_fleet`` for from now on; returns a reader."""
    calls = 0
    real_client = _fleet.client

    def counting_client() -> kiln.Client:
        nonlocal calls
        calls += 1
        return real_client()

    monkeypatch.setattr(_fleet, "client", counting_client)
    return lambda: calls


def test_kilnd_down_is_one_warning_then_quiet_misses(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KILN_DAEMON", f"unix://{tmp_path}/no-kilnd.sock")
    _fleet.reset_for_tests()
    calls = count_fleet_clients(monkeypatch)
    caplog.set_level(logging.DEBUG, logger="kiln")
    try:
        for _ in range(5):
            compile_into(KilnRemoteCacheBackend(triton_key()))
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "kilnd is unreachable" in warnings[0].getMessage() and "no-kilnd.sock" in warnings[0].getMessage()
        assert calls() == 1, f"kiln asked a dead kilnd {calls()} times; it must back off after the first"
        assert not _fleet.available()
    finally:
        _fleet.reset_for_tests()


def test_tritons_own_redis_backend_fails_at_construction() -> None:
    """The peer of the benchmark, unpatched: Triton 3.6.0 reads knobs.cache.redis, which it lacks."""
    from triton.runtime.cache import RedisRemoteCacheBackend

    with pytest.raises(AttributeError, match="redis"):
        RedisRemoteCacheBackend("key")


def test_a_forked_child_gets_its_own_connection(client: kiln.Client, fleet_env: Kilnd) -> None:
    import os

    key = triton_key()
    client.put_blob("triton", VERSION, f"{key}/cuda_utils.so", {"cuda_utils.so": b"launcher"})
    assert KilnRemoteCacheBackend(key).get(["cuda_utils.so"]) == {"cuda_utils.so": b"launcher"}
    parent_client = _fleet.client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running anything of pytest's
        try:
            got = KilnRemoteCacheBackend(key).get(["cuda_utils.so"])
            fresh = _fleet.client() is not parent_client
            os.write(write, json.dumps({"got": {k: v.decode() for k, v in got.items()}, "fresh": fresh}).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        report = json.loads(f.read() or "{}")
    os.waitpid(pid, 0)
    assert report == {"got": {"cuda_utils.so": "launcher"}, "fresh": True}
    assert _fleet.client() is parent_client, "the parent keeps its connection"
    assert KilnRemoteCacheBackend(key).get(["cuda_utils.so"]) == {"cuda_utils.so": b"launcher"}


def test_files_in_the_local_cache_are_served_without_asking_kilnd(
    client: kiln.Client, fleet_env: Kilnd, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm host or a restored snapshot: Triton's RemoteCacheManager asks the backend on every
    lookup, and the backend answers from the local cache directory when it holds every file."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    calls = count_fleet_clients(monkeypatch)
    key = triton_key()
    local = {"k.cubin": b"local cubin", "k.json": b"{}"}
    (tmp_path / key).mkdir()
    for name, data in {**local, "__grp__k.json": group_file(list(local))}.items():
        (tmp_path / key / name).write_bytes(data)
    backend = KilnRemoteCacheBackend(key)
    assert backend.get(["__grp__k.json"]) == {"__grp__k.json": group_file(list(local))}
    assert backend.get(["k.cubin", "k.json"]) == local
    assert calls() == 0 and kt._leases.held() == [], "no kilnd round trip, no lease"

    # A child missing locally: the children come from the group's entry in kilnd, whole.
    published = {"k.cubin": b"published cubin", "k.json": b"{}", "__grp__k.json": group_file(list(local))}
    client.put_blob("triton", VERSION, f"{key}/__grp__k.json", published)
    (tmp_path / key / "k.json").unlink()
    backend = KilnRemoteCacheBackend(key)
    assert list(backend.get(["__grp__k.json"])) == ["__grp__k.json"]
    assert backend.get(["k.cubin", "k.json"]) == {"k.cubin": b"published cubin", "k.json": b"{}"}
    assert calls() == 1

    # ... and with no entry in kilnd either, a miss: the compile that follows is stored as a group.
    other = triton_key()
    (tmp_path / other).mkdir()
    (tmp_path / other / "__grp__k.json").write_bytes(group_file(["k.cubin"]))
    backend = KilnRemoteCacheBackend(other)
    assert list(backend.get(["__grp__k.json"])) == ["__grp__k.json"]
    assert backend.get(["k.cubin"]) == {}
    backend.put("k.cubin", b"compiled")
    backend.put("__grp__k.json", group_file(["k.cubin"]))
    (entry,) = client.get_blobs("triton", VERSION, [f"{other}/__grp__k.json"])
    assert entry is not None and entry.files == {"k.cubin": b"compiled", "__grp__k.json": group_file(["k.cubin"])}


LOCAL_HIT = """
import sys
from kiln.triton import KilnRemoteCacheBackend
loaded = lambda: sorted(m for m in ("grpc", "kiln._fleet", "kiln.client", "kiln._proto") if m in sys.modules)
at_import = loaded()
hit = KilnRemoteCacheBackend(sys.argv[1]).get(["cuda_utils.so"])
print(at_import, loaded(), hit == {"cuda_utils.so": b"launcher"})
"""


def test_a_local_hit_loads_no_grpc(tmp_path) -> None:
    """Triton builds its driver's helper through the cache manager inside a process's first
    compile: serving it from the local directory must not cost the import of kilnd's client."""
    import subprocess
    import sys

    key = triton_key()
    (tmp_path / key).mkdir()
    (tmp_path / key / "cuda_utils.so").write_bytes(b"launcher")
    env = {"TRITON_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", LOCAL_HIT, key], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == "[] [] True"
