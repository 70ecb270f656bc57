from . import kiln_pb2 as _kiln_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SnapshotId(_message.Message):
    __slots__ = ("job", "keys")
    class KeysEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    job: str
    keys: _containers.ScalarMap[str, str]
    def __init__(self, job: _Optional[str] = ..., keys: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SnapshotRoot(_message.Message):
    __slots__ = ("name", "path")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class SnapshotFile(_message.Message):
    __slots__ = ("root", "path", "mode", "digest", "size")
    ROOT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    root: str
    path: str
    mode: int
    digest: bytes
    size: int
    def __init__(self, root: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[int] = ..., digest: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class SnapshotManifest(_message.Message):
    __slots__ = ("job", "environment", "roots", "files", "total_bytes", "updated_unix_ms", "saved_by", "key")
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SAVED_BY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    job: str
    environment: _containers.ScalarMap[str, str]
    roots: _containers.RepeatedCompositeFieldContainer[SnapshotRoot]
    files: _containers.RepeatedCompositeFieldContainer[SnapshotFile]
    total_bytes: int
    updated_unix_ms: int
    saved_by: str
    key: str
    def __init__(self, job: _Optional[str] = ..., environment: _Optional[_Mapping[str, str]] = ..., roots: _Optional[_Iterable[_Union[SnapshotRoot, _Mapping]]] = ..., files: _Optional[_Iterable[_Union[SnapshotFile, _Mapping]]] = ..., total_bytes: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., saved_by: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class FileData(_message.Message):
    __slots__ = ("digest", "data")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    digest: bytes
    data: bytes
    def __init__(self, digest: _Optional[bytes] = ..., data: _Optional[bytes] = ...) -> None: ...

class MissingFilesRequest(_message.Message):
    __slots__ = ("digests",)
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    digests: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, digests: _Optional[_Iterable[bytes]] = ...) -> None: ...

class MissingFilesResponse(_message.Message):
    __slots__ = ("missing",)
    MISSING_FIELD_NUMBER: _ClassVar[int]
    missing: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, missing: _Optional[_Iterable[bytes]] = ...) -> None: ...

class PutFilesRequest(_message.Message):
    __slots__ = ("files",)
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileData]
    def __init__(self, files: _Optional[_Iterable[_Union[FileData, _Mapping]]] = ...) -> None: ...

class PutFilesResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    def __init__(self, stored: _Optional[int] = ...) -> None: ...

class GetFilesRequest(_message.Message):
    __slots__ = ("digests", "present")
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    digests: _containers.RepeatedScalarFieldContainer[bytes]
    present: int
    def __init__(self, digests: _Optional[_Iterable[bytes]] = ..., present: _Optional[int] = ...) -> None: ...

class GetFilesResponse(_message.Message):
    __slots__ = ("files", "missing", "tier")
    FILES_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileData]
    missing: _containers.RepeatedScalarFieldContainer[bytes]
    tier: _kiln_pb2.Tier
    def __init__(self, files: _Optional[_Iterable[_Union[FileData, _Mapping]]] = ..., missing: _Optional[_Iterable[bytes]] = ..., tier: _Optional[_Union[_kiln_pb2.Tier, str]] = ...) -> None: ...

class SaveSnapshotRequest(_message.Message):
    __slots__ = ("id", "roots", "files")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    id: SnapshotId
    roots: _containers.RepeatedCompositeFieldContainer[SnapshotRoot]
    files: _containers.RepeatedCompositeFieldContainer[SnapshotFile]
    def __init__(self, id: _Optional[_Union[SnapshotId, _Mapping]] = ..., roots: _Optional[_Iterable[_Union[SnapshotRoot, _Mapping]]] = ..., files: _Optional[_Iterable[_Union[SnapshotFile, _Mapping]]] = ...) -> None: ...

class SaveSnapshotResponse(_message.Message):
    __slots__ = ("manifest", "changed", "files_added")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    FILES_ADDED_FIELD_NUMBER: _ClassVar[int]
    manifest: SnapshotManifest
    changed: bool
    files_added: int
    def __init__(self, manifest: _Optional[_Union[SnapshotManifest, _Mapping]] = ..., changed: _Optional[bool] = ..., files_added: _Optional[int] = ...) -> None: ...

class GetSnapshotRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: SnapshotId
    def __init__(self, id: _Optional[_Union[SnapshotId, _Mapping]] = ...) -> None: ...

class GetSnapshotResponse(_message.Message):
    __slots__ = ("found", "manifest", "host_environment")
    class HostEnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FOUND_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    HOST_ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    found: bool
    manifest: SnapshotManifest
    host_environment: _containers.ScalarMap[str, str]
    def __init__(self, found: _Optional[bool] = ..., manifest: _Optional[_Union[SnapshotManifest, _Mapping]] = ..., host_environment: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class SnapshotSummary(_message.Message):
    __slots__ = ("job", "environment", "key", "files", "total_bytes", "updated_unix_ms", "saved_by", "roots")
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SAVED_BY_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    job: str
    environment: _containers.ScalarMap[str, str]
    key: str
    files: int
    total_bytes: int
    updated_unix_ms: int
    saved_by: str
    roots: _containers.RepeatedCompositeFieldContainer[SnapshotRoot]
    def __init__(self, job: _Optional[str] = ..., environment: _Optional[_Mapping[str, str]] = ..., key: _Optional[str] = ..., files: _Optional[int] = ..., total_bytes: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., saved_by: _Optional[str] = ..., roots: _Optional[_Iterable[_Union[SnapshotRoot, _Mapping]]] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotSummary]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotSummary, _Mapping]]] = ...) -> None: ...
