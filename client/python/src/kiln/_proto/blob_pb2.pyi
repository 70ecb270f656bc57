from . import kiln_pb2 as _kiln_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BlobScope(_message.Message):
    __slots__ = ("namespace", "tool_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    tool_version: str
    def __init__(self, namespace: _Optional[str] = ..., tool_version: _Optional[str] = ...) -> None: ...

class BlobFile(_message.Message):
    __slots__ = ("name", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    data: bytes
    def __init__(self, name: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class BlobEntry(_message.Message):
    __slots__ = ("found", "files", "tier")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    found: bool
    files: _containers.RepeatedCompositeFieldContainer[BlobFile]
    tier: _kiln_pb2.Tier
    def __init__(self, found: _Optional[bool] = ..., files: _Optional[_Iterable[_Union[BlobFile, _Mapping]]] = ..., tier: _Optional[_Union[_kiln_pb2.Tier, str]] = ...) -> None: ...

class GetBlobsRequest(_message.Message):
    __slots__ = ("scope", "keys")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    scope: BlobScope
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, scope: _Optional[_Union[BlobScope, _Mapping]] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class GetBlobsResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[BlobEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[BlobEntry, _Mapping]]] = ...) -> None: ...

class PutBlobRequest(_message.Message):
    __slots__ = ("scope", "key", "files")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    scope: BlobScope
    key: bytes
    files: _containers.RepeatedCompositeFieldContainer[BlobFile]
    def __init__(self, scope: _Optional[_Union[BlobScope, _Mapping]] = ..., key: _Optional[bytes] = ..., files: _Optional[_Iterable[_Union[BlobFile, _Mapping]]] = ...) -> None: ...

class PutBlobResponse(_message.Message):
    __slots__ = ("stored_key",)
    STORED_KEY_FIELD_NUMBER: _ClassVar[int]
    stored_key: str
    def __init__(self, stored_key: _Optional[str] = ...) -> None: ...

class LeaseBlobRequest(_message.Message):
    __slots__ = ("scope", "key", "wait_ms", "hold_ms")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    scope: BlobScope
    key: bytes
    wait_ms: int
    hold_ms: int
    def __init__(self, scope: _Optional[_Union[BlobScope, _Mapping]] = ..., key: _Optional[bytes] = ..., wait_ms: _Optional[int] = ..., hold_ms: _Optional[int] = ...) -> None: ...

class LeaseBlobEvent(_message.Message):
    __slots__ = ("kind", "entry", "reason")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[LeaseBlobEvent.Kind]
        KIND_GRANTED: _ClassVar[LeaseBlobEvent.Kind]
        KIND_FOUND: _ClassVar[LeaseBlobEvent.Kind]
        KIND_PROCEED: _ClassVar[LeaseBlobEvent.Kind]
        KIND_PUBLISHED: _ClassVar[LeaseBlobEvent.Kind]
        KIND_EXPIRED: _ClassVar[LeaseBlobEvent.Kind]
    KIND_UNSPECIFIED: LeaseBlobEvent.Kind
    KIND_GRANTED: LeaseBlobEvent.Kind
    KIND_FOUND: LeaseBlobEvent.Kind
    KIND_PROCEED: LeaseBlobEvent.Kind
    KIND_PUBLISHED: LeaseBlobEvent.Kind
    KIND_EXPIRED: LeaseBlobEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: LeaseBlobEvent.Kind
    entry: BlobEntry
    reason: str
    def __init__(self, kind: _Optional[_Union[LeaseBlobEvent.Kind, str]] = ..., entry: _Optional[_Union[BlobEntry, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...
