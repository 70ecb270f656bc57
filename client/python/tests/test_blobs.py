"""The named-blob API (kiln.v1.Blobs) through kiln.Client against real kilnds on one fleet:
entries and groups, the fleet tier, leases held by a stream, and group atomicity under
concurrent writers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from harness import Kilnd

import kiln
from kiln.triton import KilnRemoteCacheBackend

NS = "python-test"


def fresh_key(tag: str = "") -> bytes:
    return f"{tag}{uuid.uuid4().hex}".encode()


def test_put_and_get_single_and_group(client: kiln.Client) -> None:
    single, group, missing = fresh_key("s"), fresh_key("g"), fresh_key("m")
    client.put_blob(NS, "1", single, b"\x00one file\xff")
    client.put_blob(NS, "1", group, {"a.cubin": b"A" * 1000, "a.json": b"{}", "__grp__a.json": b'{"child_paths": []}'})
    got = client.get_blobs(NS, "1", [missing, group, single])
    assert got[0] is None
    assert got[1] is not None and got[1].files == {
        "a.cubin": b"A" * 1000,
        "a.json": b"{}",
        "__grp__a.json": b'{"child_paths": []}',
    }
    assert got[2] is not None and got[2].files == {"": b"\x00one file\xff"}
    assert got[2].tier == kiln.Tier.MEMORY
    assert client.get_blobs(NS, "2", [single]) == [None], "another tool version is another entry"
    assert client.get_blobs("python-other", "1", [single]) == [None], "another namespace is another entry"


def test_a_fresh_host_gets_entries_from_the_fleet(client: kiln.Client, kilnd_fresh: Kilnd) -> None:
    key = fresh_key()
    client.put_blob(NS, "1", key, {"x": b"1", "y": b"2"})
    with kiln.Client(kilnd_fresh.uri) as other:
        (entry,) = other.get_blobs(NS, "1", [key])
        assert entry is not None and entry.files == {"x": b"1", "y": b"2"}
        assert entry.tier == kiln.Tier.REMOTE
        (again,) = other.get_blobs(NS, "1", [key])
        assert again is not None and again.tier in (kiln.Tier.MEMORY, kiln.Tier.DISK)


def test_lease_granted_then_waiters_get_the_published_entry(client: kiln.Client, kilnd_fresh: Kilnd) -> None:
    key = fresh_key()
    holder = client.lease_blob(NS, "1", key, wait=5)
    assert holder.kind == kiln.LeaseKind.GRANTED and holder.granted
    # A short wait on this host and on another host: nobody publishes, so PROCEED.
    assert client.lease_blob(NS, "1", key, wait=0.3).kind == kiln.LeaseKind.PROCEED
    with kiln.Client(kilnd_fresh.uri) as other:
        assert other.lease_blob(NS, "1", key, wait=0.3).kind == kiln.LeaseKind.PROCEED
        answers: list[kiln.Lease] = []
        waiters = [
            threading.Thread(target=lambda c=c: answers.append(c.lease_blob(NS, "1", key, wait=30)))
            for c in (client, other)
        ]
        for w in waiters:
            w.start()
        time.sleep(0.5)
        client.put_blob(NS, "1", key, {"f": b"published"})
        for w in waiters:
            w.join(30)
    assert [a.kind for a in answers] == [kiln.LeaseKind.FOUND] * 2, answers
    assert all(a.entry is not None and a.entry.files == {"f": b"published"} for a in answers)
    assert holder.wait(10) == kiln.LeaseKind.PUBLISHED
    holder.close()


def test_closing_a_lease_releases_it(client: kiln.Client) -> None:
    key = fresh_key()
    with client.lease_blob(NS, "1", key, wait=5) as first:
        assert first.granted
    started = time.monotonic()
    second = client.lease_blob(NS, "1", key, wait=20)
    assert second.granted and time.monotonic() - started < 3
    second.close()


def test_a_lease_ends_at_its_hold_bound(client: kiln.Client) -> None:
    lease = client.lease_blob(NS, "1", fresh_key(), wait=5, hold=1)
    assert lease.granted
    assert lease.wait(15) == kiln.LeaseKind.EXPIRED


HOLDER = textwrap.dedent(
    """
    import sys, time, kiln
    lease = kiln.Client(sys.argv[1]).lease_blob(sys.argv[2], "1", sys.argv[3].encode(), wait=5)
    print(lease.kind.name, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("waiter_host", ["same", "other"])
def test_a_killed_holder_releases_its_lease_at_once(
    client: kiln.Client, kilnd_fresh: Kilnd, waiter_host: str
) -> None:
    key = fresh_key()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, client.uri, NS, key.decode()], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "GRANTED"
        waiter = client if waiter_host == "same" else kiln.Client(kilnd_fresh.uri)
        assert waiter.lease_blob(NS, "1", key, wait=0.3).kind == kiln.LeaseKind.PROCEED, "held by the holder"
        holder.kill()  # SIGKILL: no clean-up in the holder
        holder.wait()
        started = time.monotonic()
        lease = waiter.lease_blob(NS, "1", key, wait=30)
        took = time.monotonic() - started
        assert lease.granted, lease
        # The fleet lease's TTL is 10 s; a dead stream must release well before that.
        assert took < 3, f"the lease came free {took:.1f} s after its holder died"
        lease.close()
    finally:
        holder.kill()
        holder.wait()


WRITER = textwrap.dedent(
    """
    import sys, time, kiln
    uri, ns, key, marker, n = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4], int(sys.argv[5])
    c = kiln.Client(uri)
    names = ["k.source", "k.ttir", "k.ptx", "k.cubin", "k.json"]
    for i in range(n):
        files = {name: (marker * (200 + 50 * j)).encode() for j, name in enumerate(names)}
        files["__grp__k.json"] = ('{"child_paths": %s, "w": "%s"}' % (sorted(names), marker)).replace("'", '"').encode()
        c.put_blob(ns, "3.6.0", key, files)
    print("done", flush=True)
    """
)


def _writer_of(files: dict[str, bytes]) -> set[str]:
    """Which writer each file came from (the marker its bytes repeat)."""
    out = set()
    for name, data in files.items():
        if name.startswith("__grp__"):
            out.add('"w": "A"' in data.decode() and "A" or "B")
        else:
            out.add(chr(data[0]))
    return out


def test_concurrent_writers_of_one_group_never_mix(kilnd: Kilnd, fleet_env: Kilnd) -> None:
    # The layout of a Triton group: Triton's key is the backend's key, the group file names it.
    triton_key = f"mix{uuid.uuid4().hex}"
    grp_key = f"{triton_key}/__grp__k.json"
    seed = subprocess.run(
        [sys.executable, "-c", WRITER, kilnd.uri, "triton", grp_key, "A", "1"], capture_output=True, text=True
    )
    assert seed.returncode == 0, seed.stderr
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, kilnd.uri, "triton", grp_key, marker, "150"], stdout=subprocess.PIPE
        )
        for marker in ("A", "B")
    ]
    seen: dict[str, int] = {"A": 0, "B": 0}
    mixed: list[object] = []
    version = "3.6.0"
    with kiln.Client(kilnd.uri) as c:
        while any(w.poll() is None for w in writers):
            # Through the Client...
            (entry,) = c.get_blobs("triton", version, [grp_key])
            assert entry is not None
            whose = _writer_of(entry.files)
            if len(whose) != 1:
                mixed.append(("client", whose))
            # ...and through Triton's backend, the way Triton reads a group: the group file, then
            # its children, from one instance.
            backend = KilnRemoteCacheBackend(triton_key)
            backend._version = version  # the writers' tool version, whatever Triton is installed
            grp = backend.get(["__grp__k.json"])
            children = backend.get(["k.source", "k.ttir", "k.ptx", "k.cubin", "k.json"])
            assert len(grp) == 1 and len(children) == 5
            whose = _writer_of({**grp, **children})
            if len(whose) != 1:
                mixed.append(("backend", whose))
            for w in whose:
                seen[w] += 1
    for w in writers:
        assert w.wait() == 0
    assert not mixed, f"{len(mixed)} reads mixed two writers' groups: {mixed[:5]}"
    assert seen["A"] and seen["B"], f"the readers saw only one writer: {seen}"
