"""Job snapshots: the directories a JIT cache keeps (Inductor's, Triton's, vLLM's, any) saved into
kilnd by one host and restored on the next, so a fresh host starts as warm as the one that
compiled. This is the client side of ``kiln.v1.Snapshots``; the Rust ``kiln snapshot`` CLI
follows the same contract, so either restores what the other saved.

- **Save**: walk each root (regular files; see :mod:`kiln._snapshot_walk`), blake3 every file,
  ask kilnd which contents no tier holds (``MissingFiles``), send only those (``PutFiles``, in
  batches of at most 32 MiB), then ``SaveSnapshot``. kilnd unions the files with the stored
  manifest (a save never shrinks a snapshot) and enforces its size bound.
- **Restore**: ``GetSnapshot``, every manifest path checked again here, then per root under the
  host lock: stale staging removed, files already there skipped (never overwritten, whatever
  their content), the rest streamed with ``GetFiles``, verified against their digest, written
  and fsynced into a staging directory, and placed (see :mod:`kiln._snapshot_place`). A process
  killed at any point leaves only whole files in the target.

kilnd adds the host's facts (GPU, target, driver, CUDA) to every snapshot's key, so a snapshot
taken on another GPU is never found. Roots are given as a mapping ``{name: dir}`` or as
``DIR``/``NAME=DIR`` strings, as on the command line; a root's recorded path is its absolute
path with symlinks left unresolved.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import grpc

from . import errors
from ._proto import snapshot_pb2 as spb
from ._snapshot_place import Staging, check_path, host_lock, remove_stale
from ._snapshot_walk import DigestCache, Found, digest_bytes, walk
from .snapshot_results import (
    Placement,
    RestoreResult,
    RootRestore,
    SaveResult,
    SnapshotInfo,
    SnapshotManifest,
    SnapshotProgress,
    SnapshotRoot,
    SnapshotSummary,
)


class SnapshotClient(Protocol):
    """What the snapshot calls need of a client: its ``Snapshots`` stub, its mapping of RPC errors
    and its default timeout. :class:`kiln.Client` is one; this module does not import it, since it
    imports this module for its ``snapshot_*`` methods."""

    @property
    def _snapshots(self) -> Any: ...

    def _rpc(self) -> AbstractContextManager[None]: ...

    def _timeout(self, timeout: float | None) -> float | None: ...


log = logging.getLogger("kiln")

#: Digests per MissingFiles or GetFiles call.
DIGESTS_PER_CALL = 100_000
#: Bytes of contents per PutFiles call (a larger file goes alone) and files per call.
UPLOAD_BATCH_BYTES = 32 << 20
UPLOAD_BATCH_FILES = 4096

_ROOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

T = TypeVar("T")

PathArg = str | os.PathLike[str]
#: ``{name: dir}``, or ``DIR`` / ``NAME=DIR`` strings (paths as ``os.PathLike`` are never split
#: at ``=``), or ``(name, dir)`` pairs.
Roots = Mapping[str, PathArg] | Iterable[PathArg | tuple[str, PathArg]]
Keys = Mapping[str, str] | Iterable[str] | None
Progress = Callable[[SnapshotProgress], None]


# -- naming --


def _usage(details: str) -> errors.InvalidArgument:
    """A request this client refuses before sending anything, as kilnd would."""
    return errors.InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, details)


def is_root_name(name: str) -> bool:
    return _ROOT_NAME.fullmatch(name) is not None


def default_root_name(path: str) -> str:
    """The directory's last component, every character outside ``[A-Za-z0-9_.-]`` made ``_``,
    cut at 64 characters."""
    last = os.path.basename(path)
    if not last:
        raise _usage(f"{path}: give the root a name, as NAME={path}")
    return "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "_" for c in last)[:64]


def parse_root(arg: PathArg | tuple[str, PathArg]) -> SnapshotRoot:
    """One root: ``DIR`` or ``NAME=DIR`` (the text before the first ``=`` is a name only if it is
    a valid root name, so ``/data/a=b`` is a directory), an ``os.PathLike``, or ``(name, dir)``."""
    if isinstance(arg, tuple):
        name, directory = arg[0], os.fspath(arg[1])
    elif isinstance(arg, str):
        head, eq, tail = arg.partition("=")
        name, directory = (head, tail) if eq and is_root_name(head) else ("", arg)
    else:
        name, directory = "", os.fspath(arg)
    if not directory:
        raise _usage(f"{arg!r} names no directory")
    path = os.path.abspath(directory)
    name = name or default_root_name(path)
    if not is_root_name(name):
        raise _usage(f"root name {name!r}: 1 to 64 characters of [A-Za-z0-9_.-]")
    return SnapshotRoot(name, path)


def parse_roots(dirs: Roots) -> list[SnapshotRoot]:
    """Every root, in order; a name given twice, or two roots onto one directory, is an error."""
    items = list(dirs.items()) if isinstance(dirs, Mapping) else list(dirs)
    roots = [parse_root(item) for item in items]
    names: set[str] = set()
    paths: set[str] = set()
    for root in roots:
        if root.name in names:
            raise _usage(f"root {root.name!r} is named twice")
        if root.path in paths:
            raise _usage(f"{root.path} is given as two roots")
        names.add(root.name)
        paths.add(root.path)
    return roots


def parse_keys(keys: Keys) -> dict[str, str]:
    """The caller's key parts: a mapping, or ``K=V`` strings as on the command line (a part given
    twice is an error). kilnd checks names and values."""
    if keys is None:
        return {}
    if isinstance(keys, Mapping):
        return {str(k): str(v) for k, v in keys.items()}
    parsed: dict[str, str] = {}
    for part in keys:
        name, eq, value = part.partition("=")
        if not eq or not name:
            raise _usage(f"key part {part!r} is not K=V")
        if name in parsed:
            raise _usage(f"key part {name!r} is given twice")
        parsed[name] = value
    return parsed


def _id(job: str, keys: Keys) -> spb.SnapshotId:
    return spb.SnapshotId(job=job, keys=parse_keys(keys))


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# -- save --


@dataclass
class _Entry:
    """One file of a save: where it is, what the manifest will say."""

    root: str
    found: Found
    digest: bytes
    size: int


def _hash_roots(
    roots: list[SnapshotRoot], exclude: Callable[[str], bool] | None, cache: DigestCache, on_progress: Progress | None
) -> tuple[list[_Entry], int, int]:
    listed: list[tuple[str, Found]] = []
    skipped = symlinks = 0
    for root in roots:
        try:
            found, root_skipped, root_symlinks = walk(root.path, exclude)
        except OSError as e:
            raise _usage(f"root {root.name!r}: {root.path}: {e.strerror or e}") from e
        listed += [(root.name, f) for f in found]
        skipped += root_skipped
        symlinks += root_symlinks
    total_bytes = sum(f.size for _, f in listed)
    entries: list[_Entry] = []
    done_bytes = 0
    for i, (name, f) in enumerate(listed):
        try:
            digest, size = cache.digest(f)
        except OSError:
            skipped += 1
            continue
        entries.append(_Entry(name, f, digest, size))
        done_bytes += f.size
        if on_progress is not None:
            on_progress(SnapshotProgress("hash", name, i + 1, len(listed), done_bytes, total_bytes))
    return entries, skipped, symlinks


def _upload_contents(entries: list[_Entry], missing: set[bytes]) -> Iterator[tuple[bytes, bytes]]:
    """(digest, bytes) of every missing content, read again from a file that holds it. A file
    that changed since it was hashed gets its entry updated to what it holds now (sent too); one
    that vanished is dropped from the save (its size set to -1)."""
    by_digest: dict[bytes, list[_Entry]] = {}
    for e in entries:
        if e.digest in missing:
            by_digest.setdefault(e.digest, []).append(e)
    for digest, holders in by_digest.items():
        for e in holders:
            try:
                with open(e.found.path, "rb") as f:
                    data = f.read()
            except OSError:
                e.size = -1
                continue
            now = digest_bytes(data)
            e.digest, e.size = now, len(data)
            yield now, data
            if now == digest:
                break


def _upload(
    client: SnapshotClient, entries: list[_Entry], missing: set[bytes], timeout: float | None, on_progress: Progress | None
) -> tuple[int, int]:
    """Sends the missing contents in batches; returns (files, bytes) sent."""
    total_files = len(missing)
    total_bytes = sum({e.digest: e.size for e in entries if e.digest in missing}.values())
    files = size = 0
    batch: list[spb.FileData] = []
    batch_bytes = 0

    def flush() -> None:
        nonlocal batch, batch_bytes
        if batch:
            with client._rpc():
                client._snapshots.PutFiles(spb.PutFilesRequest(files=batch), timeout=client._timeout(timeout))
        batch, batch_bytes = [], 0

    sent: set[bytes] = set()
    for digest, data in _upload_contents(entries, missing):
        if digest in sent:
            continue
        sent.add(digest)
        if batch and (batch_bytes + len(data) > UPLOAD_BATCH_BYTES or len(batch) >= UPLOAD_BATCH_FILES):
            flush()
        batch.append(spb.FileData(digest=digest, data=data))
        batch_bytes += len(data)
        files += 1
        size += len(data)
        if on_progress is not None:
            on_progress(SnapshotProgress("upload", "", files, total_files, size, total_bytes))
    flush()
    return files, size


def _missing(client: SnapshotClient, digests: list[bytes], timeout: float | None) -> set[bytes]:
    missing: set[bytes] = set()
    for chunk in _chunks(digests, DIGESTS_PER_CALL):
        with client._rpc():
            response = client._snapshots.MissingFiles(spb.MissingFilesRequest(digests=chunk), timeout=client._timeout(timeout))
        missing.update(bytes(d) for d in response.missing)
    return missing


def save(
    client: SnapshotClient,
    job: str,
    dirs: Roots,
    keys: Keys = None,
    *,
    exclude: Callable[[str], bool] | None = None,
    digests: DigestCache | None = None,
    timeout: float | None = None,
    on_progress: Progress | None = None,
) -> SaveResult:
    """Saves ``dirs`` as (part of) ``job``'s snapshot for this host's environment.

    ``exclude(name)`` leaves out files and directories by name (beyond kiln's own rules);
    ``digests`` reuses the digests of files unchanged since an earlier save of this process.
    Raises :class:`kiln.InvalidArgument` for a root that is not a directory, and
    :class:`kiln.ResourceExhausted` when the snapshot would pass kilnd's ``max_snapshot_mb``
    (nothing is stored then).
    """
    started = time.perf_counter()
    roots = parse_roots(dirs)
    if not roots:
        raise _usage("a snapshot save needs at least one directory")
    snapshot_id = _id(job, keys)
    entries, skipped, symlinks = _hash_roots(roots, exclude, digests or DigestCache(), on_progress)
    missing = _missing(client, sorted({e.digest for e in entries}), timeout) if entries else set()
    files_uploaded, bytes_uploaded = _upload(client, entries, missing, timeout, on_progress)
    kept = [e for e in entries if e.size >= 0]
    skipped += len(entries) - len(kept)
    request = spb.SaveSnapshotRequest(
        id=snapshot_id,
        roots=[spb.SnapshotRoot(name=r.name, path=r.path) for r in roots],
        files=[spb.SnapshotFile(root=e.root, path=e.found.rel, mode=e.found.mode, digest=e.digest, size=e.size) for e in kept],
    )
    with client._rpc():
        response = client._snapshots.SaveSnapshot(request, timeout=client._timeout(timeout))
    manifest = response.manifest
    return SaveResult(
        job=job,
        key=manifest.key,
        roots=roots,
        files=len(kept),
        bytes=sum(e.size for e in kept),
        files_uploaded=files_uploaded,
        bytes_uploaded=bytes_uploaded,
        files_added=response.files_added,
        changed=response.changed,
        skipped=skipped,
        symlinks=symlinks,
        manifest_files=len(manifest.files),
        manifest_bytes=manifest.total_bytes,
        seconds=time.perf_counter() - started,
    )


# -- show, list --


def show(client: SnapshotClient, job: str, keys: Keys = None, *, timeout: float | None = None) -> SnapshotInfo:
    """The manifest of ``job``'s snapshot for this host's environment (``manifest`` is ``None``
    when there is none)."""
    with client._rpc():
        response = client._snapshots.GetSnapshot(spb.GetSnapshotRequest(id=_id(job, keys)), timeout=client._timeout(timeout))
    manifest = SnapshotManifest.from_proto(response.manifest) if response.found else None
    return SnapshotInfo(manifest, dict(response.host_environment))


def list_snapshots(client: SnapshotClient, job: str | None = None, *, timeout: float | None = None) -> list[SnapshotSummary]:
    """Every snapshot saved through the fleet, or ``job``'s, one per environment."""
    with client._rpc():
        response = client._snapshots.ListSnapshots(spb.ListSnapshotsRequest(job=job or ""), timeout=client._timeout(timeout))
    return [SnapshotSummary.from_proto(s) for s in response.snapshots]


# -- restore --


def _bad_manifest(why: str) -> errors.KilnError:
    return errors.KilnError(grpc.StatusCode.DATA_LOSS, f"the snapshot's manifest: {why}; nothing was restored")


def _checked(manifest: spb.SnapshotManifest) -> dict[str, list[spb.SnapshotFile]]:
    """The manifest's files by root, every path checked: one bad entry refuses the whole
    restore before anything is written."""
    by_root: dict[str, list[spb.SnapshotFile]] = {r.name: [] for r in manifest.roots}
    for i, f in enumerate(manifest.files):
        why = check_path(f.path)
        if why is None and (f.root not in by_root or len(f.digest) != 32):
            why = "names no root of the manifest, or has no 32-byte digest"
        if why is not None:
            raise _bad_manifest(f"files[{i}]: {f.root}/{f.path!r}: {why}")
        by_root[f.root].append(f)
    for r in manifest.roots:
        if not is_root_name(r.name) or not os.path.isabs(r.path):
            raise _bad_manifest(f"root {r.name!r} at {r.path!r} is not a valid name and absolute path")
    return by_root


def _named(arg: PathArg | tuple[str, PathArg]) -> bool:
    """Whether a root argument gives its name (``NAME=DIR`` or ``(name, dir)``) rather than a bare ``DIR``."""
    if isinstance(arg, tuple):
        return True
    head, eq, _ = arg.partition("=") if isinstance(arg, str) else ("", "", "")
    return bool(eq) and is_root_name(head)


def _nothing_to_restore(manifest: spb.SnapshotManifest, asked: list[str]) -> errors.InvalidArgument:
    has = ", ".join(f"`{r.name}` (saved at {r.path})" for r in manifest.roots) or "none"
    names = " or ".join(f"`{n}`" for n in asked)
    return _usage(
        f"the snapshot has no root {names}, so nothing would be restored; its roots: {has}. Give one as NAME=DIR, "
        "or no directory to restore every root where it was saved"
    )


def _targets(manifest: spb.SnapshotManifest, dirs: Roots | None) -> tuple[list[tuple[SnapshotRoot, str]], list[str]]:
    """(manifest root, target directory) to restore, and the names given that the manifest lacks.
    A restore that would restore nothing is refused, naming the snapshot's roots; a single bare
    ``DIR`` for a snapshot of one root is where that root goes, whatever the directory is called."""
    recorded = {r.name: SnapshotRoot(r.name, os.path.normpath(r.path)) for r in manifest.roots}
    if dirs is None:
        return [(r, r.path) for r in recorded.values()], []
    items = list(dirs.items()) if isinstance(dirs, Mapping) else list(dirs)
    roots = parse_roots(items)
    plan, unknown = [], []
    for root in roots:
        if root.name in recorded:
            plan.append((recorded[root.name], root.path))
        else:
            unknown.append(root.name)
    if not plan and roots:
        if len(recorded) == 1 and len(roots) == 1 and not _named(items[0]):
            return [(next(iter(recorded.values())), roots[0].path)], []
        raise _nothing_to_restore(manifest, unknown)
    return plan, unknown


def _get_files(
    client: SnapshotClient, staging: Staging | None, present: int, root: str, timeout: float | None, on_progress: Progress | None
) -> None:
    """Streams the contents ``staging`` wants into it. With nothing to fetch (``None``) it still
    calls once, with no digests: that call carries ``present`` for kilnd's restore metrics."""
    if staging is None:
        with client._rpc():
            for _ in client._snapshots.GetFiles(spb.GetFilesRequest(present=present), timeout=timeout):
                pass
        return
    digests = list(staging.wants)
    total_files = sum(len(w.paths) for w in staging.wants.values())
    total_bytes = sum(len(w.paths) * w.size for w in staging.wants.values())
    files = size = 0
    for i, chunk in enumerate(_chunks(digests, DIGESTS_PER_CALL)):
        request = spb.GetFilesRequest(digests=chunk, present=present if i == 0 else 0)
        with client._rpc():
            for message in client._snapshots.GetFiles(request, timeout=timeout):
                for f in message.files:
                    n, b = staging.write(bytes(f.digest), f.data)
                    files, size = files + n, size + b
                if message.files and on_progress is not None:
                    on_progress(SnapshotProgress("fetch", root, files, total_files, size, total_bytes))


def _restore_root(
    client: SnapshotClient,
    root: SnapshotRoot,
    target: str,
    files: list[spb.SnapshotFile],
    timeout: float | None,
    on_progress: Progress | None,
    should_stop: Callable[[], bool] | None,
) -> RootRestore:
    parent, base = os.path.dirname(target), os.path.basename(target)
    if not base:
        raise _usage(f"cannot restore root {root.name!r} onto {target}")
    os.makedirs(parent, exist_ok=True)
    report = RootRestore(root.name, target, root.path, root.path != target, len(files), 0, 0, 0, 0, Placement.NOTHING)
    with host_lock(parent, base, should_stop):
        remove_stale(parent, base)
        needed = [f for f in files if not os.path.lexists(os.path.join(target, f.path))]
        present = len(files) - len(needed)
        if not needed:
            _get_files(client, None, present, root.name, timeout, None)
            return replace(report, present=present)
        staging = Staging.create(parent, base, [(f.path, f.mode, bytes(f.digest), f.size) for f in needed])
        try:
            _get_files(client, staging, present, root.name, timeout, on_progress)
            staging.sync()
            if on_progress is not None:
                staged_bytes = sum(size for _, size in staging.staged)
                on_progress(SnapshotProgress("place", root.name, len(staging.staged), len(needed), staged_bytes, staged_bytes))
            if should_stop is not None and should_stop():
                raise errors.Cancelled(f"restore of root {root.name!r} stopped before placing")
            placed = staging.place(target)
        finally:
            staging.discard()
    return replace(
        report,
        restored_files=placed.files,
        restored_bytes=placed.bytes,
        present=present + placed.taken,
        missing=staging.missing_files(),
        placement=placed.placement,
    )


def restore(
    client: SnapshotClient,
    job: str,
    dirs: Roots | None = None,
    keys: Keys = None,
    *,
    timeout: float | None = None,
    on_progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    warn: bool = True,
) -> RestoreResult:
    """Restores ``job``'s snapshot for this host's environment: every root to its recorded path
    when ``dirs`` is ``None``, else the roots named there to the directories given (manifest
    roots not named are left alone). ``found`` is false when there is no snapshot.

    A file that already exists is never overwritten, whatever its content. Contents no tier
    holds intact are skipped and counted in ``missing``; the rest is restored. ``should_stop``
    (polled while waiting for another process's restore of the same directory, and before
    placing) ends the restore with :class:`kiln.Cancelled`, leaving the target as it was. With
    ``warn``, relocated roots, unknown roots and missing files are logged as warnings on the
    ``kiln`` logger.
    """
    started = time.perf_counter()
    with client._rpc():
        response = client._snapshots.GetSnapshot(spb.GetSnapshotRequest(id=_id(job, keys)), timeout=client._timeout(timeout))
    host_environment = dict(response.host_environment)
    if not response.found:
        return RestoreResult(False, job, "", {}, host_environment, "", 0, [], [], time.perf_counter() - started)
    manifest = response.manifest
    by_root = _checked(manifest)
    plan, unknown = _targets(manifest, dirs)
    reports = [_restore_root(client, root, target, by_root[root.name], timeout, on_progress, should_stop) for root, target in plan]
    result = RestoreResult(
        True, job, manifest.key, dict(manifest.environment), host_environment, manifest.saved_by,
        manifest.updated_unix_ms, reports, unknown, time.perf_counter() - started,
    )
    if warn:
        for warning in restore_warnings(result):
            log.warning("kiln: snapshot of job %r: %s", job, warning)
    return result


def restore_warnings(result: RestoreResult) -> list[str]:
    """What the user should know about a restore that succeeded: roots away from their recorded
    path, roots asked for that the snapshot lacks, files no tier held."""
    warnings = [
        f"root {r.name!r} was restored to {r.path}, not where it was saved ({r.recorded_path}): JIT caches such as "
        "Inductor's are only fast at the path they were written at"
        for r in result.relocated
    ]
    warnings += [f"the snapshot has no root {name!r}: nothing to restore there" for name in result.unknown_roots]
    if result.missing:
        warnings.append(f"{result.missing} file(s) of the snapshot could not be fetched intact from any tier and were skipped")
    return warnings
