"""The save side of a snapshot on the file system: which files a root holds, and their digests.

A JIT cache is written to while it is saved, so an entry that vanishes or cannot be read during
the walk is skipped and counted, never an error; only the root itself must be a directory. Names
that are kiln's own (``.kiln-`` staging directories and locks) and lock files (``*.lock``,
meaningless on another host) are never taken; neither are symlinks, devices or sockets.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from blake3 import blake3

KILN_PREFIX = ".kiln-"
LOCK_SUFFIX = ".lock"
#: The longest relative path the protocol carries.
MAX_PATH_BYTES = 4096
#: Read size while hashing.
CHUNK = 1 << 20


@dataclass(frozen=True)
class Found:
    """A regular file under a root, as the walk saw it."""

    #: Relative to the root, '/'-separated.
    rel: str
    path: str
    mode: int
    #: What ``stat`` said: a digest cached under these is reused without reading the file.
    size: int
    mtime_ns: int
    ino: int


def walk(root: str, exclude: Callable[[str], bool] | None = None) -> tuple[list[Found], int, int]:
    """The regular files under ``root``, sorted by relative path, how many entries were skipped
    (vanished, unreadable, or a name the wire cannot carry), and how many symbolic links were
    left out (a snapshot holds regular files only; the save says so). ``exclude(name)`` drops a
    file or a whole directory by its name. Raises ``NotADirectoryError``/``FileNotFoundError``
    when ``root`` is not a directory."""
    if not os.path.isdir(root):
        raise (NotADirectoryError if os.path.exists(root) else FileNotFoundError)(f"{root}: not a directory")
    files: list[Found] = []
    skipped = symlinks = 0
    pending = [(root, "")]
    while pending:
        directory, rel_dir = pending.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            if not rel_dir:
                raise
            skipped += 1
            continue
        for entry in entries:
            name = entry.name
            if name.startswith(KILN_PREFIX) or (exclude is not None and exclude(name)):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                if entry.is_symlink():
                    symlinks += 1
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, rel))
                    continue
                if not entry.is_file(follow_symlinks=False) or name.endswith(LOCK_SUFFIX):
                    continue
                st = entry.stat(follow_symlinks=False)
                if len(rel.encode("utf-8")) > MAX_PATH_BYTES:
                    skipped += 1
                    continue
            except (OSError, UnicodeEncodeError):  # vanished, or not UTF-8
                skipped += 1
                continue
            files.append(Found(rel, entry.path, stat.S_IMODE(st.st_mode) & 0o777, st.st_size, st.st_mtime_ns, st.st_ino))
    files.sort(key=lambda f: f.rel)
    return files, skipped, symlinks


def digest_bytes(data: bytes) -> bytes:
    return blake3(data).digest()


def digest_file(path: str) -> tuple[bytes, int]:
    """blake3 of the file's content and its size, as read now."""
    h = blake3()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.digest(), size


class DigestCache:
    """Digests by path, reused while a file's size, mtime and inode are unchanged, so a process
    that saves the same directories again (kiln.torch after every compile) reads only what is
    new. Not thread-safe: one saver at a time uses it."""

    def __init__(self) -> None:
        self._by_path: dict[str, tuple[int, int, int, bytes]] = {}

    def digest(self, f: Found) -> tuple[bytes, int]:
        cached = self._by_path.get(f.path)
        if cached is not None and cached[:3] == (f.size, f.mtime_ns, f.ino):
            return cached[3], f.size
        digest, size = digest_file(f.path)
        if size == f.size:
            self._by_path[f.path] = (f.size, f.mtime_ns, f.ino, digest)
        return digest, size
