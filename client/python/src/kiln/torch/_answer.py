"""kilnd's answer for one torch.compile graph, as its torch worker bundles it: torch's cache
artifacts (``torch.compiler.save_cache_artifacts``) and the C++ that compile built (the kernels'
and wrapper's shared objects, precompiled headers). torch's artifacts hold only the C++ source, so
without the built files a process on a CPU would run the C++ compiler again for every kernel after
the answer arrived. Each file goes where Inductor looks before it compiles: its path in the cache
is a hash of its source and compile command, the same in the worker and here when both run the
same torch from the same place.

The bundle: ``KILNGB1\\n``, a u32 length, a JSON index ``{"artifacts": n, "files": [[path, size]]}``,
the artifacts, then each file's bytes. An answer without the magic is torch's artifacts alone.
"""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass, field

MAGIC = b"KILNGB1\n"
#: A file's path under Inductor's cache: a short directory and a file name, nothing that climbs.
_PATH = re.compile(r"[A-Za-z0-9_]{1,64}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}\.(so|gch)")


class BadBundle(ValueError):
    """The answer's bytes are not a bundle this client reads."""


@dataclass
class Bundle:
    artifacts: bytes
    #: (path under Inductor's cache, bytes)
    files: list[tuple[str, bytes]] = field(default_factory=list)


def parse(data: bytes) -> Bundle:
    """The bundle in ``data``; raises :class:`BadBundle` on a malformed one."""
    if not data.startswith(MAGIC):
        return Bundle(data)
    at = len(MAGIC)
    if len(data) < at + 4:
        raise BadBundle("shorter than its index length")
    (n,) = struct.unpack_from("<I", data, at)
    at += 4
    try:
        index = json.loads(data[at : at + n])
        size = int(index["artifacts"])
        listed = [(str(path), int(length)) for path, length in index["files"]]
    except (ValueError, KeyError, TypeError) as e:
        raise BadBundle(f"its index does not read: {e}") from e
    at += n
    artifacts = data[at : at + size]
    at += size
    files = []
    for path, length in listed:
        if not _PATH.fullmatch(path) or length < 0:
            raise BadBundle(f"a file at {path!r}, which is not a place in Inductor's cache")
        files.append((path, data[at : at + length]))
        at += length
    if len(artifacts) != size or at != len(data):
        raise BadBundle("its parts do not add up to its length")
    return Bundle(artifacts, files)


def bundle(artifacts: bytes, files: list[tuple[str, bytes]]) -> bytes:
    """The bundle of ``artifacts`` and ``files``, as :func:`parse` reads it."""
    index = json.dumps({"artifacts": len(artifacts), "files": [[path, len(data)] for path, data in files]}).encode()
    return MAGIC + struct.pack("<I", len(index)) + index + artifacts + b"".join(data for _, data in files)


def native_files(cache_dir: str, since: float) -> list[tuple[str, bytes]]:
    """(path under the cache, bytes) of each compiled C++ file written under ``cache_dir`` since
    ``since`` (a ``time.time()``): what a compile in this process built, to share with its graph.
    Each sits one directory down, and a file renamed into a directory updates the directory's
    modification time: only directories changed since are read, so a large shared cache (or a
    GPU graph's, which builds none) costs a listing of its top level."""
    found = []
    try:
        top = list(os.scandir(cache_dir))
    except OSError:
        return []
    for directory in top:
        try:
            if not directory.is_dir(follow_symlinks=False) or directory.stat().st_mtime < since:
                continue
            entries = list(os.scandir(directory.path))
        except OSError:
            continue
        for entry in entries:
            relative = f"{directory.name}/{entry.name}"
            if not _PATH.fullmatch(relative):
                continue
            try:
                if not entry.is_file(follow_symlinks=False) or entry.stat().st_mtime < since:
                    continue
                with open(entry.path, "rb") as f:
                    found.append((relative, f.read()))
            except OSError:
                continue
    return sorted(found)


def place(files: list[tuple[str, bytes]], cache_dir: str) -> list[str]:
    """Writes each file under ``cache_dir`` unless one is there; returns the paths written. Each
    write is a temporary file renamed into place, so a process that compiles the same kernel at
    once never loads half a file."""
    written = []
    for path, data in files:
        target = os.path.join(cache_dir, path)
        if os.path.exists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".kiln-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        written.append(path)
    return written
