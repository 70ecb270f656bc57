from . import kiln_pb2 as _kiln_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WarmTorchWorkersRequest(_message.Message):
    __slots__ = ("ask_only",)
    ASK_ONLY_FIELD_NUMBER: _ClassVar[int]
    ask_only: bool
    def __init__(self, ask_only: _Optional[bool] = ...) -> None: ...

class WarmTorchWorkersReply(_message.Message):
    __slots__ = ("ready", "torch_version")
    READY_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    torch_version: str
    def __init__(self, ready: _Optional[bool] = ..., torch_version: _Optional[str] = ...) -> None: ...

class TorchGraphRequest(_message.Message):
    __slots__ = ("torch_version", "payload", "job", "name", "timeout_ms", "triton_version", "python_version", "cuda_version", "wait_for_claim_ms", "prefer_workers", "no_worker")
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRITON_VERSION_FIELD_NUMBER: _ClassVar[int]
    PYTHON_VERSION_FIELD_NUMBER: _ClassVar[int]
    CUDA_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_CLAIM_MS_FIELD_NUMBER: _ClassVar[int]
    PREFER_WORKERS_FIELD_NUMBER: _ClassVar[int]
    NO_WORKER_FIELD_NUMBER: _ClassVar[int]
    torch_version: str
    payload: bytes
    job: str
    name: str
    timeout_ms: int
    triton_version: str
    python_version: str
    cuda_version: str
    wait_for_claim_ms: int
    prefer_workers: bool
    no_worker: bool
    def __init__(self, torch_version: _Optional[str] = ..., payload: _Optional[bytes] = ..., job: _Optional[str] = ..., name: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., triton_version: _Optional[str] = ..., python_version: _Optional[str] = ..., cuda_version: _Optional[str] = ..., wait_for_claim_ms: _Optional[int] = ..., prefer_workers: _Optional[bool] = ..., no_worker: _Optional[bool] = ...) -> None: ...

class PublishTorchGraphRequest(_message.Message):
    __slots__ = ("key", "artifacts", "compile_micros")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    COMPILE_MICROS_FIELD_NUMBER: _ClassVar[int]
    key: str
    artifacts: bytes
    compile_micros: int
    def __init__(self, key: _Optional[str] = ..., artifacts: _Optional[bytes] = ..., compile_micros: _Optional[int] = ...) -> None: ...

class PublishTorchGraphReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TorchGraphReply(_message.Message):
    __slots__ = ("ok", "artifacts", "tier", "compile_micros", "log", "key", "compile_here")
    OK_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    COMPILE_MICROS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    COMPILE_HERE_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    artifacts: bytes
    tier: _kiln_pb2.Tier
    compile_micros: int
    log: str
    key: str
    compile_here: bool
    def __init__(self, ok: _Optional[bool] = ..., artifacts: _Optional[bytes] = ..., tier: _Optional[_Union[_kiln_pb2.Tier, str]] = ..., compile_micros: _Optional[int] = ..., log: _Optional[str] = ..., key: _Optional[str] = ..., compile_here: _Optional[bool] = ...) -> None: ...

class TorchGraphReport(_message.Message):
    __slots__ = ("job", "fallbacks", "graphs", "process", "rank", "started_unix_ms", "ended", "first_step_unix_ms")
    class FallbacksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    job: str
    fallbacks: _containers.ScalarMap[str, int]
    graphs: _containers.RepeatedCompositeFieldContainer[_kiln_pb2.TorchGraphCost]
    process: str
    rank: int
    started_unix_ms: int
    ended: bool
    first_step_unix_ms: int
    def __init__(self, job: _Optional[str] = ..., fallbacks: _Optional[_Mapping[str, int]] = ..., graphs: _Optional[_Iterable[_Union[_kiln_pb2.TorchGraphCost, _Mapping]]] = ..., process: _Optional[str] = ..., rank: _Optional[int] = ..., started_unix_ms: _Optional[int] = ..., ended: _Optional[bool] = ..., first_step_unix_ms: _Optional[int] = ...) -> None: ...

class TorchGraphReportReply(_message.Message):
    __slots__ = ("job", "source")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    job: _kiln_pb2.TorchJobReturn
    source: str
    def __init__(self, job: _Optional[_Union[_kiln_pb2.TorchJobReturn, _Mapping]] = ..., source: _Optional[str] = ...) -> None: ...
