"""The restore side of a snapshot on the file system: the host lock, the staging directory and
placing it, so that a target only ever gains whole files and never loses or changes one.

For a target ``T`` with parent ``P``:

- ``P/.kiln-snapshot-<basename(T)>.lock`` is the host-level lock (``flock``): several ranks of
  one host restore once; the others wait, then find every file present. ``flock`` dies with its
  holder, so a killed restore never leaves it held.
- ``P/.kiln-restore-<basename(T)>-<pid>`` is the staging directory: each fetched file is checked
  against its digest and size and written whole there first, and one ``syncfs`` makes them all
  durable before they move. Under the lock nobody else stages for ``T``, so one left behind is
  from a killed restore and is removed.
- Placing: a target that is missing or empty gets the staging directory in one ``rename`` (a
  reader sees the whole root or nothing); otherwise each file is hard-linked in, which fails
  rather than replace anything (a file another process wrote meanwhile wins).

The layout is shared with the Rust ``kiln snapshot`` CLI, so the two never restore one target at
once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ._snapshot_walk import digest_bytes
from .errors import Cancelled
from .snapshot_results import Placement

#: How often a lock wait that can be cancelled checks whether it should stop.
LOCK_POLL_SECS = 0.05
#: Staged files are written by this many threads at once, while the stream goes on; at most this
#: many bytes wait to be written.
WRITERS = 8
MAX_PENDING_BYTES = 64 << 20

_held_lock = threading.Lock()
#: Lock descriptors this process holds. A forked child inherits them, and with them the lock
#: (flock belongs to the open file, which both processes then share): the child closes its
#: copies at once, so a long-lived child (a data loader worker) never keeps another rank waiting.
_held_fds: set[int] = set()


def _close_inherited_locks() -> None:
    for fd in _held_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held_fds.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def check_path(rel: str) -> str | None:
    """Why ``rel`` is no safe relative path (``None`` when it is): a manifest from kilnd is checked
    again here, since a bad one would write outside its root."""
    if not rel or len(rel.encode("utf-8", "surrogatepass")) > 4096:
        return "empty or longer than 4096 bytes"
    if "\0" in rel or rel.startswith("/"):
        return "absolute, or holds a NUL"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "has an empty, '.' or '..' component"
    return None


def lock_path(parent: str, base: str) -> str:
    return os.path.join(parent, f".kiln-snapshot-{base}.lock")


def open_lock_file(path: str) -> int:
    """Opens the lock file, creating it ``0o644`` (less under a stricter umask) and never wider:
    it may stay in a shared directory, where a world-writable file is anybody's to fill. Ranks of
    other users open it read-only (``flock`` needs no write access). ``O_NOFOLLOW``: a symlink
    another user put at the path is refused, not followed."""
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, 0o644)
    except FileExistsError:
        try:
            return os.open(path, os.O_RDWR | flags)
        except PermissionError:
            return os.open(path, os.O_RDONLY | flags)


def try_flock(path: str) -> int | None:
    """The descriptor of ``path`` locked exclusively, or ``None`` when another holds it. The
    caller keeps it (the lock lasts while it is open; see :func:`release`)."""
    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    with _held_lock:
        _held_fds.add(fd)
    return fd


def release(fd: int) -> None:
    with _held_lock:
        _held_fds.discard(fd)
    os.close(fd)


@contextlib.contextmanager
def host_lock(parent: str, base: str, should_stop: Callable[[], bool] | None = None) -> Iterator[None]:
    """Holds ``P/.kiln-snapshot-<base>.lock``. Blocks in ``flock`` unless ``should_stop`` is given;
    then it polls, and raises :class:`Cancelled` once ``should_stop()`` is true."""
    path = lock_path(parent, base)
    if should_stop is None:
        fd = open_lock_file(path)
        fcntl.flock(fd, fcntl.LOCK_EX)
        with _held_lock:
            _held_fds.add(fd)
    else:
        while (polled := try_flock(path)) is None:
            if should_stop():
                raise Cancelled(f"gave up waiting for {path}")
            time.sleep(LOCK_POLL_SECS)
        fd = polled
    try:
        yield
    finally:
        release(fd)


def staging_prefix(base: str) -> str:
    return f".kiln-restore-{base}-"


def remove_stale(parent: str, base: str) -> int:
    """Removes staging directories of ``base`` that killed restores left. Call under the lock.
    Only ``<prefix><digits>`` matches, so the staging of a target ``a-1`` is not taken for
    ``a``'s."""
    prefix = staging_prefix(base)
    removed = 0
    with os.scandir(parent) as it:
        stale = [e.path for e in it if e.name.startswith(prefix) and e.name[len(prefix) :].isdigit()]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new(path: str, data: bytes, mode: int) -> None:
    """Creates ``path`` (it must not exist), writes ``data`` and sets ``mode`` exactly (no umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode & 0o777)
    finally:
        os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)


def sync_filesystem(path: str) -> None:
    """Flushes every dirty page and entry of the file system that holds ``path`` (``syncfs``): one
    call instead of an fsync per file, which waited for a journal commit each (the Rust client
    does the same). It also flushes whatever else is dirty there."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", path)
    finally:
        os.close(fd)


@dataclass
class _Want:
    size: int
    #: Every (relative path, mode) that holds this content.
    paths: list[tuple[str, int]]


@dataclass(frozen=True)
class Placed:
    placement: Placement
    files: int
    bytes: int
    #: Files not placed because their path was taken meanwhile (or sits under a file or a
    #: symlink, which a restore never writes through).
    taken: int


@dataclass
class Staging:
    """``P/.kiln-restore-<base>-<pid>`` being filled with the contents of ``wants``."""

    dir: str
    wants: dict[bytes, _Want]
    written: set[bytes] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    #: Files written, relative, with their sizes.
    staged: list[tuple[str, int]] = field(default_factory=list)
    #: Contents received that failed their digest or size check, hence not written.
    rejected: int = 0
    _gone: bool = False
    _writers: concurrent.futures.ThreadPoolExecutor | None = None
    _pending: list[tuple[concurrent.futures.Future[None], int]] = field(default_factory=list)
    _pending_bytes: int = 0

    @classmethod
    def create(cls, parent: str, base: str, files: list[tuple[str, int, bytes, int]]) -> Staging:
        """``files``: (relative path, mode, digest, size) each."""
        path = os.path.join(parent, f"{staging_prefix(base)}{os.getpid()}")
        os.mkdir(path)
        wants: dict[bytes, _Want] = {}
        for rel, mode, digest, size in files:
            wants.setdefault(digest, _Want(size, [])).paths.append((rel, mode))
        return cls(path, wants)

    def missing_files(self) -> int:
        """Files whose content never arrived intact."""
        return sum(len(w.paths) for d, w in self.wants.items() if d not in self.written)

    def write(self, digest: bytes, data: bytes) -> tuple[int, int]:
        """Stages one received content at every path that holds it, if it is what the manifest
        says (anything unasked for, repeated or damaged is dropped); returns (files, bytes). The
        writer threads write it; :meth:`sync` waits for them and makes it durable."""
        want = self.wants.get(digest)
        if want is None or digest in self.written:
            return 0, 0
        if len(data) != want.size or digest_bytes(data) != digest:
            self.rejected += 1
            return 0, 0
        for rel, mode in want.paths:
            self._make_parents(rel)
            self._write_later(os.path.join(self.dir, rel), data, mode)
            self.staged.append((rel, want.size))
        self.written.add(digest)
        return len(want.paths), len(want.paths) * want.size

    def _write_later(self, path: str, data: bytes, mode: int) -> None:
        if self._writers is None:
            self._writers = concurrent.futures.ThreadPoolExecutor(WRITERS, thread_name_prefix="kiln-restore-write")
        self._pending.append((self._writers.submit(write_new, path, data, mode), len(data)))
        self._pending_bytes += len(data)
        while self._pending_bytes > MAX_PENDING_BYTES:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        future, size = self._pending.pop(0)
        self._pending_bytes -= size
        future.result()

    def _finish_writes(self) -> None:
        """Waits for every write; the first that failed raises here."""
        try:
            while self._pending:
                self._wait_oldest()
        finally:
            if self._writers is not None:
                self._writers.shutdown(wait=True, cancel_futures=True)
                self._writers = None

    def _make_parents(self, rel: str) -> None:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.dirs:
                os.mkdir(os.path.join(self.dir, d))
                self.dirs.add(d)

    def sync(self) -> None:
        """Waits for the staged files, then makes them and their names durable before they move."""
        self._finish_writes()
        sync_filesystem(self.dir)

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self._finish_writes()
        if not self._gone:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._gone = True

    def place(self, target: str) -> Placed:
        """Moves the staged files into ``target``; the staging directory is gone afterwards."""
        try:
            self._finish_writes()
            if not self.staged:
                return Placed(Placement.NOTHING, 0, 0, 0)
            total = sum(size for _, size in self.staged)
            if self._try_rename(target):
                return Placed(Placement.RENAMED, len(self.staged), total, 0)
            return self._link_all(target)
        finally:
            self.discard()

    def _try_rename(self, target: str) -> bool:
        """Renames onto a missing or empty target (taking the empty target's permissions);
        ``False`` when the target has content or the rename fails for any reason (a mount point, a
        writer that got there first): the files are then linked in instead."""
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):  # a symlink or a file: never replaced
                return False
            with os.scandir(target) as it:
                if next(it, None) is not None:
                    return False
            os.chmod(self.dir, stat.S_IMODE(st.st_mode))
        try:
            os.rename(self.dir, target)
        except OSError:
            return False
        self._gone = True
        sync_dir(os.path.dirname(target) or "/")
        return True

    def _link_all(self, target: str) -> Placed:
        os.makedirs(target, exist_ok=True)
        usable: dict[str, bool] = {}
        touched: set[str] = set()
        files = size_total = taken = 0
        for rel, size in sorted(self.staged):
            destination = os.path.join(target, rel)
            if _make_parents(target, rel, usable, touched) and _link(os.path.join(self.dir, rel), destination):
                files += 1
                size_total += size
                touched.add(os.path.dirname(destination))
            else:
                taken += 1
        for d in sorted(touched):
            sync_dir(d)
        return Placed(Placement.LINKED, files, size_total, taken)


def _make_parents(target: str, rel: str, usable: dict[str, bool], touched: set[str]) -> bool:
    """Makes ``rel``'s parent directories in ``target``; ``False`` when one is a file or a
    symlink (never written through)."""
    parts = rel.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        ok = usable.get(d)
        if ok is None:
            path = os.path.join(target, d)
            try:
                os.mkdir(path)
                touched.add(os.path.dirname(path))
                ok = True
            except FileExistsError:
                ok = stat.S_ISDIR(os.lstat(path).st_mode)
            usable[d] = ok
        if not ok:
            return False
    return True


def _link(staged: str, destination: str) -> bool:
    """Links ``staged`` at ``destination``; ``False`` if the name is taken. Across file systems
    the file is copied beside the destination first, so the name still appears whole and by a
    call that never overwrites."""
    try:
        os.link(staged, destination)
        return True
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
    temporary = os.path.join(os.path.dirname(destination), f".kiln-place-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    try:
        shutil.copy2(staged, temporary)
        fd = os.open(temporary, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return _link(temporary, destination)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
