"""Triton's cache through kilnd and the fleet: ``KilnRemoteCacheBackend``.

Turn it on for a job with two environment variables::

    TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager
    TRITON_REMOTE_CACHE_BACKEND=kiln.triton:KilnRemoteCacheBackend

How Triton 3.6.0 drives a backend (triton/runtime/cache.py, triton/compiler/compiler.py):
``compile()`` makes one ``RemoteCacheManager`` per kernel key, which makes one backend
instance. It asks ``get(["__grp__<name>.json"])``; on a hit it reads the group file's
``child_paths`` and asks ``get(children)``. On a miss it compiles, calls ``put(file, bytes)``
once per file (source, IRs, cubin, metadata), and last ``put("__grp__<name>.json", ...)``.
Other users of the cache (the launcher build in ``runtime/build.py``, the autotuner's cache)
``get`` one file and ``put`` it back, with no group.

What this backend does with that:

- **Entries.** Namespace ``triton``, tool version ``triton.__version__`` (Triton's own key
  already hashes its sources), caller key ``"<kernel key>/<file name>"``.
- **Groups.** After a ``__grp__`` lookup misses, the instance is in a compile: every ``put`` is
  buffered, and the ``__grp__`` put stores the buffered files and the group file as ONE entry
  under the group file's key, so a reader sees all of one writer's files or none. A ``put`` on an
  instance that has not missed a ``__grp__`` lookup (a launcher ``.so``, an autotune record) is
  stored at once as a single-file entry. Buffered files of a compile that raises are dropped
  with the instance: nothing half-written is ever published.
- **Reads.** A ``__grp__`` hit keeps the group's files on the instance, and the following
  ``get(children)`` is answered from them, never from another writer's entries. Names outside
  the group fall back to single-file entries.
- **Fleet single-flight.** Only when a ``__grp__`` lookup misses, the backend asks kilnd for
  the entry's lease (``LeaseBlob``), waiting up to ``KILN_TRITON_WAIT_SECS`` (default 60) for
  another process or host that is compiling the kernel. FOUND: the published group is a hit,
  and this process compiles nothing. GRANTED: a miss (Triton compiles), and the lease stays
  held in a process-wide table until the group put lands, or the instance is dropped without
  one (the compile raised), or ``KILN_TRITON_HOLD_SECS`` pass (default: the wait bound), or the
  process exits, whichever comes first. PROCEED: a miss, no lease.
- **Local first.** Triton's ``RemoteCacheManager`` asks the backend on every lookup, even when
  its local ``FileCacheManager`` has the file (triton/runtime/cache.py). When every file asked
  for is already in the local cache directory of the kernel's key (a warm host, or a restored
  snapshot), the backend returns those bytes without asking kilnd, so a restored snapshot serves
  kernels at local-disk speed. Should a group file be local but not all its children, the
  children come from the group's entry in kilnd (one writer's files), else the lookup is a miss
  and the compile is stored as a group.
- **Nothing loaded that a hit does not need.** Triton builds its driver's helper module through
  the cache manager on a process's first kernel, so this module is imported then, inside the
  first compile. It imports kilnd's client (grpc, the generated messages) only when it first
  asks kilnd: on an H100 that import was 0.4 s of a warm GPT-2 step's first call, which a
  restored snapshot answers from the local directory without asking.
- **kilnd down.** Triton compiles locally as if there were no remote cache; the job gets one
  warning, and kiln asks again only every 30 s (see :mod:`kiln._fleet`). No method raises.

For comparison: Triton 3.6.0's own ``RedisRemoteCacheBackend`` fails at construction, because
it reads ``knobs.cache.redis``, which does not exist in 3.6.0; and once patched it lets every
process that misses compile by itself, and stores each file under its own Redis key, so a
reader can mix files of two writers.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import triton
from triton import knobs
from triton.runtime.cache import RemoteCacheBackend

from . import settings

if TYPE_CHECKING:
    from .blob_lease import Lease
    from .results import BlobEntry

NAMESPACE = "triton"
GROUP_PREFIX = "__grp__"
WAIT_ENV = settings.TRITON_WAIT_SECS.name
HOLD_ENV = settings.TRITON_HOLD_SECS.name
DEFAULT_WAIT_SECS = float(settings.TRITON_WAIT_SECS.default)

#: Deadlines of the unary calls: a hung kilnd costs a lookup this much once, then kiln backs off.
GET_TIMEOUT_SECS = 60.0
PUT_TIMEOUT_SECS = 120.0


def wait_secs() -> float:
    """How long a lookup that missed waits for another producer of the kernel."""
    return settings.TRITON_WAIT_SECS.number(DEFAULT_WAIT_SECS)


def hold_secs() -> float:
    """How long a compile may hold a kernel's lease."""
    return settings.TRITON_HOLD_SECS.number(wait_secs())


class _Leases:
    """GRANTED leases of this process, by caller key.

    Process-wide, not per backend instance, so that exit can release them all. Each is released
    by the group put, by its instance's finalizer (the compile raised), at its hold deadline
    (swept on every hold; kilnd ends it at the same bound too), or at exit. A plain lock:
    nothing is closed while it is held.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._held: dict[bytes, tuple[Lease, float]] = {}
        #: Leases inherited from a parent process by fork: never touched in the child.
        self._orphans: list[Lease] = []

    def _fork_check(self) -> None:
        if self._pid != os.getpid():
            self._orphans.extend(lease for lease, _ in self._held.values())
            self._held = {}
            self._pid = os.getpid()

    def hold(self, key: bytes, lease: Lease, hold: float) -> None:
        expired: list[Lease] = []
        with self._lock:
            self._fork_check()
            now = time.monotonic()
            for k, (old, deadline) in list(self._held.items()):
                if deadline <= now or k == key:
                    expired.append(old)
                    del self._held[k]
            self._held[key] = (lease, now + hold)
        for old in expired:
            old.close()

    def release(self, key: bytes, lease: Lease) -> None:
        """Releases ``lease`` (only that one: a later compile of the key may hold another)."""
        with self._lock:
            self._fork_check()
            entry = self._held.get(key)
            if entry is not None and entry[0] is lease:
                del self._held[key]
            inherited = any(o is lease for o in self._orphans)
        if not inherited:
            lease.close()

    def held(self) -> list[bytes]:
        with self._lock:
            self._fork_check()
            return list(self._held)

    def release_all(self) -> None:
        with self._lock:
            if self._pid != os.getpid():
                return
            leases = [lease for lease, _ in self._held.values()]
            self._held = {}
        for lease in leases:
            try:
                lease.close()
            except Exception:  # noqa: BLE001 - at exit, the process's end releases it anyway
                pass


_leases = _Leases()
atexit.register(_leases.release_all)


class KilnRemoteCacheBackend(RemoteCacheBackend):  # type: ignore[misc]  # triton ships no types
    """Triton's ``RemoteCacheBackend`` over kilnd's named blobs. One instance per kernel key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self._key = key
        self._version = triton.__version__
        #: Files of the group entry this instance read (a hit): later lookups come from here.
        self._group: dict[str, bytes] | None = None
        #: Files put since a ``__grp__`` lookup missed, for the group put; ``None`` outside a
        #: compile, where a put is stored at once.
        self._pending: dict[str, bytes] | None = None
        #: The lease this instance holds, if any: its key, itself, and the finalizer that
        #: releases it when the instance is dropped without a group put (the compile raised).
        self._lease: tuple[bytes, Lease, weakref.finalize[..., Any]] | None = None
        #: The group file answered from the local cache directory, if any.
        self._local_group: str | None = None

    def _caller_key(self, filename: str) -> bytes:
        return f"{self._key}/{filename}".encode()

    # -- reads --

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        try:
            return self._get(list(filenames))
        except Exception as e:  # noqa: BLE001 - Triton must compile whatever happens here
            from . import _fleet

            _fleet.failed(e, "Triton cache lookup")
            return {}

    def _get(self, filenames: list[str]) -> dict[str, bytes]:
        on_disk = self._on_disk(filenames)
        if on_disk is not None:
            self._local_group = next((n for n in filenames if n.startswith(GROUP_PREFIX)), self._local_group)
            return on_disk
        if self._local_group is not None and self._group is None and self._pending is None:
            self._children_of_local_group()
        found: dict[str, bytes] = {}
        ask: list[str] = []
        for name in filenames:
            local = self._local(name)
            if local is not None:
                found[name] = local
            else:
                ask.append(name)
        if not ask:
            return found
        from . import _fleet

        keys = [self._caller_key(n) for n in ask]
        entries: list[BlobEntry | None] = _fleet.call(
            "Triton cache lookup",
            lambda c: c.get_blobs(NAMESPACE, self._version, keys, timeout=GET_TIMEOUT_SECS),
            [None] * len(keys),
        )
        for name, entry in zip(ask, entries, strict=False):
            if name.startswith(GROUP_PREFIX):
                if entry is None or name not in entry.files:
                    entry = self._missed_group(name)
                if entry is not None and name in entry.files:
                    self._group = dict(entry.files)
                    self._pending = None
                    found[name] = entry.files[name]
            elif entry is not None:
                data = entry.files.get(name, entry.files.get(""))
                if data is not None:
                    found[name] = data
        return found

    def _on_disk(self, filenames: list[str]) -> dict[str, bytes] | None:
        """Every file from the local cache directory of this key (where Triton's
        ``FileCacheManager`` keeps it), or ``None`` unless all are there. Triton writes each file
        whole (a temporary directory, then a rename), as a snapshot restore does."""
        directory = os.path.join(knobs.cache.dir, self._key)
        found: dict[str, bytes] = {}
        for name in filenames:
            try:
                with open(os.path.join(directory, name), "rb") as f:
                    found[name] = f.read()
            except OSError:
                return None
        return found

    def _children_of_local_group(self) -> None:
        """The group file was local but not every child is: answer from the group's entry in
        kilnd, so the files are one writer's; without one, the lookup is a compile's miss."""
        from . import _fleet

        name = self._local_group
        assert name is not None
        key = self._caller_key(name)
        entries: list[BlobEntry | None] = _fleet.call(
            "Triton cache lookup",
            lambda c: c.get_blobs(NAMESPACE, self._version, [key], timeout=GET_TIMEOUT_SECS),
            [None],
        )
        entry = entries[0] if entries else None
        if entry is not None and name in entry.files:
            self._group = dict(entry.files)
        else:
            self._pending = {}

    def _local(self, name: str) -> bytes | None:
        if self._group is not None and name in self._group:
            return self._group[name]
        if self._pending is not None and name in self._pending:
            return self._pending[name]
        return None

    def _missed_group(self, name: str) -> BlobEntry | None:
        """A group lookup missed: this instance is about to compile. Ask for the lease; return
        the entry when another producer published it meanwhile."""
        from . import _fleet
        from .results import LeaseKind

        self._pending = {}
        if not _fleet.available():
            return None
        key = self._caller_key(name)
        wait, hold = wait_secs(), hold_secs()
        lease: Lease | None = _fleet.call(
            "Triton cache lease",
            lambda c: c.lease_blob(NAMESPACE, self._version, key, wait=wait, hold=hold, timeout=wait + hold + 30),
            None,
        )
        if lease is None:
            return None
        if lease.kind == LeaseKind.FOUND:
            return lease.entry
        if lease.kind == LeaseKind.GRANTED:
            _leases.hold(key, lease, hold)
            self._lease = (key, lease, weakref.finalize(self, _leases.release, key, lease))
        return None

    # -- writes --

    def put(self, filename: str, data: bytes) -> None:
        try:
            self._put(filename, bytes(data))
        except Exception as e:  # noqa: BLE001
            from . import _fleet

            _fleet.failed(e, "Triton cache store")

    def _put(self, filename: str, data: bytes) -> None:
        if filename.startswith(GROUP_PREFIX):
            files = dict(self._pending or {})
            files[filename] = data
            self._pending = None
            self._store(filename, files)
            if self._lease is not None:
                # After the put: closing first would let a waiter take the lease and compile.
                key, lease, finalizer = self._lease
                self._lease = None
                finalizer.detach()
                _leases.release(key, lease)
        elif self._pending is not None:
            self._pending[filename] = data
        else:
            self._store(filename, {filename: data})

    def _store(self, filename: str, files: dict[str, bytes]) -> None:
        from . import _fleet

        key = self._caller_key(filename)
        _fleet.call(
            "Triton cache store",
            lambda c: c.put_blob(NAMESPACE, self._version, key, files, timeout=PUT_TIMEOUT_SECS),
            None,
        )
