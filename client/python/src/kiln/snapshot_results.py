"""Typed results of job snapshots (``kiln.v1.Snapshots``; the algorithm is in :mod:`kiln.snapshot`),
apart from the protobuf types, as :mod:`kiln.results` has them for compiles and blobs."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._from_proto import from_message

if TYPE_CHECKING:
    from ._proto import snapshot_pb2 as spb


@dataclass(frozen=True)
class SnapshotRoot:
    """A directory a snapshot covers, by name, and where the saving host had it."""

    name: str
    #: Absolute, symlinks not resolved: a JIT cache is often valid only at this path.
    path: str


@dataclass(frozen=True)
class SnapshotFile:
    root: str
    #: Relative to the root, '/'-separated.
    path: str
    #: Permission bits.
    mode: int
    #: blake3 of the content, 64 lowercase hex characters.
    digest: str
    size: int

    @classmethod
    def from_proto(cls, m: spb.SnapshotFile) -> SnapshotFile:
        return from_message(cls, m, digest=bytes(m.digest).hex())


@dataclass(frozen=True)
class SnapshotSummary:
    """One stored snapshot, as ``snapshot_list`` gives it (a manifest without its files)."""

    job: str
    #: Every key part: the caller's and the host's (``host.gpu``, ``host.target``, ...).
    environment: dict[str, str]
    #: The stored key, 64 lowercase hex characters.
    key: str
    files: int
    total_bytes: int
    #: When the last save changed it, in milliseconds since the epoch.
    updated_unix_ms: int
    #: The host name of that save.
    saved_by: str
    roots: list[SnapshotRoot]

    @classmethod
    def from_proto(cls, m: spb.SnapshotSummary) -> SnapshotSummary:
        return from_message(
            cls, m, environment=dict(m.environment), roots=[from_message(SnapshotRoot, r) for r in m.roots]
        )


@dataclass(frozen=True)
class SnapshotManifest:
    """A snapshot in full: its roots and every file, sorted by (root, path)."""

    job: str
    environment: dict[str, str]
    key: str
    roots: list[SnapshotRoot]
    files: list[SnapshotFile]
    total_bytes: int
    updated_unix_ms: int
    saved_by: str

    @classmethod
    def from_proto(cls, m: spb.SnapshotManifest) -> SnapshotManifest:
        return from_message(
            cls,
            m,
            environment=dict(m.environment),
            roots=[from_message(SnapshotRoot, r) for r in m.roots],
            files=[SnapshotFile.from_proto(f) for f in m.files],
        )

    def summary(self) -> SnapshotSummary:
        return SnapshotSummary(
            job=self.job,
            environment=self.environment,
            key=self.key,
            files=len(self.files),
            total_bytes=self.total_bytes,
            updated_unix_ms=self.updated_unix_ms,
            saved_by=self.saved_by,
            roots=self.roots,
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """What ``snapshot_show`` found: the manifest, or ``None`` when this host's environment has no
    snapshot of the job; ``host_environment`` is what kilnd added to the key either way."""

    manifest: SnapshotManifest | None
    host_environment: dict[str, str]

    @property
    def found(self) -> bool:
        return self.manifest is not None


@dataclass(frozen=True)
class SaveResult:
    """What a save did. ``files``/``bytes`` are what this save covered; ``manifest_files`` and
    ``manifest_bytes`` the stored snapshot after the union with what was there."""

    job: str
    key: str
    roots: list[SnapshotRoot]
    files: int
    bytes: int
    #: Contents no tier had, sent with PutFiles (an unchanged file is never sent twice).
    files_uploaded: int
    bytes_uploaded: int
    #: Manifest entries this save added or changed.
    files_added: int
    #: Whether the stored manifest changed.
    changed: bool
    #: Entries that vanished or could not be read during the walk (a cache written meanwhile).
    skipped: int
    manifest_files: int
    manifest_bytes: int
    seconds: float
    #: Symbolic links under the roots, left out: a snapshot holds regular files only.
    symlinks: int = 0


class Placement(enum.Enum):
    """How a root's restored files reached their directory."""

    #: Nothing was needed, or nothing arrived.
    NOTHING = "none"
    #: The staging directory became the (missing or empty) target in one rename.
    RENAMED = "renamed"
    #: Files were hard-linked into an existing directory one by one, never over a file.
    LINKED = "linked"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RootRestore:
    """One root's restore."""

    name: str
    #: Where it was restored.
    path: str
    #: Where the saving host had it.
    recorded_path: str
    #: Restored somewhere else: JIT caches such as Inductor's are only fast at the recorded path.
    relocated: bool
    #: Files the manifest lists for this root.
    files: int
    restored_files: int
    restored_bytes: int
    #: Files not written because their path was already taken (never overwritten).
    present: int
    #: Files whose content no tier held intact: skipped.
    missing: int
    placement: Placement


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did; ``found`` is false when this host's environment has no snapshot of the
    job (then ``roots`` is empty and ``host_environment`` says what was looked for)."""

    found: bool
    job: str
    key: str
    environment: dict[str, str]
    host_environment: dict[str, str]
    saved_by: str
    updated_unix_ms: int
    roots: list[RootRestore]
    #: Roots asked for that the snapshot does not have.
    unknown_roots: list[str]
    seconds: float

    @property
    def restored_files(self) -> int:
        return sum(r.restored_files for r in self.roots)

    @property
    def restored_bytes(self) -> int:
        return sum(r.restored_bytes for r in self.roots)

    @property
    def present(self) -> int:
        return sum(r.present for r in self.roots)

    @property
    def missing(self) -> int:
        return sum(r.missing for r in self.roots)

    @property
    def relocated(self) -> list[RootRestore]:
        return [r for r in self.roots if r.relocated]


@dataclass(frozen=True)
class SnapshotProgress:
    """A progress report of a save or restore, for a progress bar (``on_progress``).

    ``phase`` is ``hash`` (save: reading and hashing), ``upload`` (save: sending contents no tier
    had), ``fetch`` (restore: receiving one root's missing files into its staging directory) or
    ``place`` (restore: a root's files are all staged and about to be moved into place).
    """

    phase: str
    root: str
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int

