from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_INTERACTIVE: _ClassVar[Priority]
    PRIORITY_BACKGROUND: _ClassVar[Priority]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_OK: _ClassVar[Outcome]
    OUTCOME_FAILED: _ClassVar[Outcome]
    OUTCOME_MISS: _ClassVar[Outcome]

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_MEMORY: _ClassVar[Tier]
    TIER_DISK: _ClassVar[Tier]
    TIER_REMOTE: _ClassVar[Tier]
    TIER_COMPILED: _ClassVar[Tier]
    TIER_JOINED: _ClassVar[Tier]
PRIORITY_UNSPECIFIED: Priority
PRIORITY_INTERACTIVE: Priority
PRIORITY_BACKGROUND: Priority
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_OK: Outcome
OUTCOME_FAILED: Outcome
OUTCOME_MISS: Outcome
TIER_UNSPECIFIED: Tier
TIER_MEMORY: Tier
TIER_DISK: Tier
TIER_REMOTE: Tier
TIER_COMPILED: Tier
TIER_JOINED: Tier

class AuditRequest(_message.Message):
    __slots__ = ("graph", "publisher", "report_only")
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    REPORT_ONLY_FIELD_NUMBER: _ClassVar[int]
    graph: CompileGraph
    publisher: str
    report_only: bool
    def __init__(self, graph: _Optional[_Union[CompileGraph, _Mapping]] = ..., publisher: _Optional[str] = ..., report_only: _Optional[bool] = ...) -> None: ...

class AuditResult(_message.Message):
    __slots__ = ("id", "key", "verdict", "publisher", "detail", "quarantined")
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    verdict: str
    publisher: Provenance
    detail: str
    quarantined: bool
    def __init__(self, id: _Optional[str] = ..., key: _Optional[str] = ..., verdict: _Optional[str] = ..., publisher: _Optional[_Union[Provenance, _Mapping]] = ..., detail: _Optional[str] = ..., quarantined: _Optional[bool] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("host", "token", "unix_ms", "disputed", "vetted", "confirmed")
    HOST_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DISPUTED_FIELD_NUMBER: _ClassVar[int]
    VETTED_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    host: str
    token: str
    unix_ms: int
    disputed: bool
    vetted: bool
    confirmed: bool
    def __init__(self, host: _Optional[str] = ..., token: _Optional[str] = ..., unix_ms: _Optional[int] = ..., disputed: _Optional[bool] = ..., vetted: _Optional[bool] = ..., confirmed: _Optional[bool] = ...) -> None: ...

class QuarantineRecord(_message.Message):
    __slots__ = ("key", "publisher", "reporter_host", "reporter_token", "unix_ms", "served_digest", "audited_digest", "detail")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    REPORTER_HOST_FIELD_NUMBER: _ClassVar[int]
    REPORTER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SERVED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    AUDITED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    key: str
    publisher: Provenance
    reporter_host: str
    reporter_token: str
    unix_ms: int
    served_digest: str
    audited_digest: str
    detail: str
    def __init__(self, key: _Optional[str] = ..., publisher: _Optional[_Union[Provenance, _Mapping]] = ..., reporter_host: _Optional[str] = ..., reporter_token: _Optional[str] = ..., unix_ms: _Optional[int] = ..., served_digest: _Optional[str] = ..., audited_digest: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class QuarantineListRequest(_message.Message):
    __slots__ = ("since_ms", "limit", "conflicts")
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    since_ms: int
    limit: int
    conflicts: bool
    def __init__(self, since_ms: _Optional[int] = ..., limit: _Optional[int] = ..., conflicts: _Optional[bool] = ...) -> None: ...

class QuarantineListResponse(_message.Message):
    __slots__ = ("records", "more", "conflicts")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[QuarantineRecord]
    more: bool
    conflicts: _containers.RepeatedCompositeFieldContainer[ConflictRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[QuarantineRecord, _Mapping]]] = ..., more: _Optional[bool] = ..., conflicts: _Optional[_Iterable[_Union[ConflictRecord, _Mapping]]] = ...) -> None: ...

class ConflictRecord(_message.Message):
    __slots__ = ("key", "held", "held_digest", "offered", "offered_digest", "unix_ms", "detail", "refused")
    KEY_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    HELD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OFFERED_FIELD_NUMBER: _ClassVar[int]
    OFFERED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    key: str
    held: Provenance
    held_digest: str
    offered: Provenance
    offered_digest: str
    unix_ms: int
    detail: str
    refused: bool
    def __init__(self, key: _Optional[str] = ..., held: _Optional[_Union[Provenance, _Mapping]] = ..., held_digest: _Optional[str] = ..., offered: _Optional[_Union[Provenance, _Mapping]] = ..., offered_digest: _Optional[str] = ..., unix_ms: _Optional[int] = ..., detail: _Optional[str] = ..., refused: _Optional[bool] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("graph", "keys", "torch_graphs")
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TORCH_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    graph: CompileGraph
    keys: _containers.RepeatedScalarFieldContainer[str]
    torch_graphs: _containers.RepeatedCompositeFieldContainer[TorchGraphName]
    def __init__(self, graph: _Optional[_Union[CompileGraph, _Mapping]] = ..., keys: _Optional[_Iterable[str]] = ..., torch_graphs: _Optional[_Iterable[_Union[TorchGraphName, _Mapping]]] = ...) -> None: ...

class TorchGraphName(_message.Message):
    __slots__ = ("job", "name")
    JOB_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    job: str
    name: str
    def __init__(self, job: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("kernels",)
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    kernels: _containers.RepeatedCompositeFieldContainer[KernelExplanation]
    def __init__(self, kernels: _Optional[_Iterable[_Union[KernelExplanation, _Mapping]]] = ...) -> None: ...

class KernelExplanation(_message.Message):
    __slots__ = ("id", "identity", "key", "cached", "tier", "verdict", "reason", "recipe", "nearest", "nearest_from", "differences", "publisher")
    ID_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECIPE_FIELD_NUMBER: _ClassVar[int]
    NEAREST_FIELD_NUMBER: _ClassVar[int]
    NEAREST_FROM_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    id: str
    identity: KernelIdentity
    key: str
    cached: bool
    tier: Tier
    verdict: str
    reason: str
    recipe: KeyRecipe
    nearest: KeyRecipe
    nearest_from: str
    differences: _containers.RepeatedCompositeFieldContainer[Difference]
    publisher: Provenance
    def __init__(self, id: _Optional[str] = ..., identity: _Optional[_Union[KernelIdentity, _Mapping]] = ..., key: _Optional[str] = ..., cached: _Optional[bool] = ..., tier: _Optional[_Union[Tier, str]] = ..., verdict: _Optional[str] = ..., reason: _Optional[str] = ..., recipe: _Optional[_Union[KeyRecipe, _Mapping]] = ..., nearest: _Optional[_Union[KeyRecipe, _Mapping]] = ..., nearest_from: _Optional[str] = ..., differences: _Optional[_Iterable[_Union[Difference, _Mapping]]] = ..., publisher: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class Difference(_message.Message):
    __slots__ = ("reason", "text")
    REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    reason: str
    text: str
    def __init__(self, reason: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class KernelIdentity(_message.Message):
    __slots__ = ("graph", "kernel_id", "kernel_name")
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    KERNEL_ID_FIELD_NUMBER: _ClassVar[int]
    KERNEL_NAME_FIELD_NUMBER: _ClassVar[int]
    graph: str
    kernel_id: str
    kernel_name: str
    def __init__(self, graph: _Optional[str] = ..., kernel_id: _Optional[str] = ..., kernel_name: _Optional[str] = ...) -> None: ...

class RecipeBook(_message.Message):
    __slots__ = ("identity", "recipes")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    RECIPES_FIELD_NUMBER: _ClassVar[int]
    identity: KernelIdentity
    recipes: _containers.RepeatedCompositeFieldContainer[KeyRecipe]
    def __init__(self, identity: _Optional[_Union[KernelIdentity, _Mapping]] = ..., recipes: _Optional[_Iterable[_Union[KeyRecipe, _Mapping]]] = ...) -> None: ...

class WarmRequest(_message.Message):
    __slots__ = ("graph_keys", "kernel_keys")
    GRAPH_KEYS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_KEYS_FIELD_NUMBER: _ClassVar[int]
    graph_keys: _containers.RepeatedScalarFieldContainer[str]
    kernel_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, graph_keys: _Optional[_Iterable[str]] = ..., kernel_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class WarmProgress(_message.Message):
    __slots__ = ("total", "done", "already_local", "fetched", "missing", "unknown_graphs", "finished")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ALREADY_LOCAL_FIELD_NUMBER: _ClassVar[int]
    FETCHED_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    total: int
    done: int
    already_local: int
    fetched: int
    missing: int
    unknown_graphs: _containers.RepeatedScalarFieldContainer[str]
    finished: bool
    def __init__(self, total: _Optional[int] = ..., done: _Optional[int] = ..., already_local: _Optional[int] = ..., fetched: _Optional[int] = ..., missing: _Optional[int] = ..., unknown_graphs: _Optional[_Iterable[str]] = ..., finished: _Optional[bool] = ...) -> None: ...

class CompileGraph(_message.Message):
    __slots__ = ("name", "target", "kernels")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    target: str
    kernels: _containers.RepeatedCompositeFieldContainer[Kernel]
    def __init__(self, name: _Optional[str] = ..., target: _Optional[str] = ..., kernels: _Optional[_Iterable[_Union[Kernel, _Mapping]]] = ...) -> None: ...

class Kernel(_message.Message):
    __slots__ = ("id", "cuda", "ptx", "triton")
    ID_FIELD_NUMBER: _ClassVar[int]
    CUDA_FIELD_NUMBER: _ClassVar[int]
    PTX_FIELD_NUMBER: _ClassVar[int]
    TRITON_FIELD_NUMBER: _ClassVar[int]
    id: str
    cuda: CudaSource
    ptx: PtxSource
    triton: TritonSource
    def __init__(self, id: _Optional[str] = ..., cuda: _Optional[_Union[CudaSource, _Mapping]] = ..., ptx: _Optional[_Union[PtxSource, _Mapping]] = ..., triton: _Optional[_Union[TritonSource, _Mapping]] = ...) -> None: ...

class CudaSource(_message.Message):
    __slots__ = ("source", "name_expressions", "headers", "options")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NAME_EXPRESSIONS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    source: str
    name_expressions: _containers.RepeatedScalarFieldContainer[str]
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    options: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, source: _Optional[str] = ..., name_expressions: _Optional[_Iterable[str]] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., options: _Optional[_Iterable[str]] = ...) -> None: ...

class PtxSource(_message.Message):
    __slots__ = ("ptx", "options")
    PTX_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    ptx: str
    options: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ptx: _Optional[str] = ..., options: _Optional[_Iterable[str]] = ...) -> None: ...

class TritonSource(_message.Message):
    __slots__ = ("source", "kernel_name", "signature", "constexprs", "attributes", "options", "want_ptx")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_NAME_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    CONSTEXPRS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    WANT_PTX_FIELD_NUMBER: _ClassVar[int]
    source: str
    kernel_name: str
    signature: _containers.RepeatedCompositeFieldContainer[TritonArg]
    constexprs: _containers.RepeatedCompositeFieldContainer[TritonConstexpr]
    attributes: _containers.RepeatedCompositeFieldContainer[TritonAttribute]
    options: TritonOptions
    want_ptx: bool
    def __init__(self, source: _Optional[str] = ..., kernel_name: _Optional[str] = ..., signature: _Optional[_Iterable[_Union[TritonArg, _Mapping]]] = ..., constexprs: _Optional[_Iterable[_Union[TritonConstexpr, _Mapping]]] = ..., attributes: _Optional[_Iterable[_Union[TritonAttribute, _Mapping]]] = ..., options: _Optional[_Union[TritonOptions, _Mapping]] = ..., want_ptx: _Optional[bool] = ...) -> None: ...

class TritonArg(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class TritonConstexpr(_message.Message):
    __slots__ = ("name", "int_value", "float_value", "bool_value", "string_value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    int_value: int
    float_value: float
    bool_value: bool
    string_value: str
    def __init__(self, name: _Optional[str] = ..., int_value: _Optional[int] = ..., float_value: _Optional[float] = ..., bool_value: _Optional[bool] = ..., string_value: _Optional[str] = ...) -> None: ...

class TritonAttribute(_message.Message):
    __slots__ = ("arg_index", "name", "value")
    ARG_INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    arg_index: int
    name: str
    value: int
    def __init__(self, arg_index: _Optional[int] = ..., name: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...

class TritonOptions(_message.Message):
    __slots__ = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "enable_fp_fusion_set")
    NUM_WARPS_FIELD_NUMBER: _ClassVar[int]
    NUM_STAGES_FIELD_NUMBER: _ClassVar[int]
    NUM_CTAS_FIELD_NUMBER: _ClassVar[int]
    MAXNREG_FIELD_NUMBER: _ClassVar[int]
    ENABLE_FP_FUSION_FIELD_NUMBER: _ClassVar[int]
    ENABLE_FP_FUSION_SET_FIELD_NUMBER: _ClassVar[int]
    num_warps: int
    num_stages: int
    num_ctas: int
    maxnreg: int
    enable_fp_fusion: bool
    enable_fp_fusion_set: bool
    def __init__(self, num_warps: _Optional[int] = ..., num_stages: _Optional[int] = ..., num_ctas: _Optional[int] = ..., maxnreg: _Optional[int] = ..., enable_fp_fusion: _Optional[bool] = ..., enable_fp_fusion_set: _Optional[bool] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("name", "content")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    content: str
    def __init__(self, name: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class CompileRequest(_message.Message):
    __slots__ = ("graph", "priority", "omit_artifacts", "batch_results")
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    OMIT_ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_RESULTS_FIELD_NUMBER: _ClassVar[int]
    graph: CompileGraph
    priority: Priority
    omit_artifacts: bool
    batch_results: bool
    def __init__(self, graph: _Optional[_Union[CompileGraph, _Mapping]] = ..., priority: _Optional[_Union[Priority, str]] = ..., omit_artifacts: _Optional[bool] = ..., batch_results: _Optional[bool] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("job_id", "batch_results")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_RESULTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    batch_results: bool
    def __init__(self, job_id: _Optional[str] = ..., batch_results: _Optional[bool] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("job_id", "queued", "started", "kernel", "done", "failed", "kernels")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    queued: Queued
    started: Started
    kernel: KernelResult
    done: JobDone
    failed: JobFailed
    kernels: KernelResults
    def __init__(self, job_id: _Optional[str] = ..., queued: _Optional[_Union[Queued, _Mapping]] = ..., started: _Optional[_Union[Started, _Mapping]] = ..., kernel: _Optional[_Union[KernelResult, _Mapping]] = ..., done: _Optional[_Union[JobDone, _Mapping]] = ..., failed: _Optional[_Union[JobFailed, _Mapping]] = ..., kernels: _Optional[_Union[KernelResults, _Mapping]] = ...) -> None: ...

class KernelResults(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[KernelResult]
    def __init__(self, results: _Optional[_Iterable[_Union[KernelResult, _Mapping]]] = ...) -> None: ...

class JobFailed(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Queued(_message.Message):
    __slots__ = ("kernels", "target")
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    kernels: int
    target: str
    def __init__(self, kernels: _Optional[int] = ..., target: _Optional[str] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LoweredName(_message.Message):
    __slots__ = ("name_expression", "lowered_name")
    NAME_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    LOWERED_NAME_FIELD_NUMBER: _ClassVar[int]
    name_expression: str
    lowered_name: str
    def __init__(self, name_expression: _Optional[str] = ..., lowered_name: _Optional[str] = ...) -> None: ...

class KernelResult(_message.Message):
    __slots__ = ("id", "key", "outcome", "tier", "artifact", "artifact_bytes", "compile_micros", "elapsed_micros", "log", "lowered_names", "toolchain", "target", "metadata_json", "ptx", "attributes", "validation")
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPILE_MICROS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MICROS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    LOWERED_NAMES_FIELD_NUMBER: _ClassVar[int]
    TOOLCHAIN_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    PTX_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    outcome: Outcome
    tier: Tier
    artifact: bytes
    artifact_bytes: int
    compile_micros: int
    elapsed_micros: int
    log: str
    lowered_names: _containers.RepeatedCompositeFieldContainer[LoweredName]
    toolchain: str
    target: str
    metadata_json: str
    ptx: str
    attributes: _containers.RepeatedCompositeFieldContainer[KernelAttributes]
    validation: str
    def __init__(self, id: _Optional[str] = ..., key: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., tier: _Optional[_Union[Tier, str]] = ..., artifact: _Optional[bytes] = ..., artifact_bytes: _Optional[int] = ..., compile_micros: _Optional[int] = ..., elapsed_micros: _Optional[int] = ..., log: _Optional[str] = ..., lowered_names: _Optional[_Iterable[_Union[LoweredName, _Mapping]]] = ..., toolchain: _Optional[str] = ..., target: _Optional[str] = ..., metadata_json: _Optional[str] = ..., ptx: _Optional[str] = ..., attributes: _Optional[_Iterable[_Union[KernelAttributes, _Mapping]]] = ..., validation: _Optional[str] = ...) -> None: ...

class KernelAttributes(_message.Message):
    __slots__ = ("name", "registers", "static_shared_bytes", "max_threads_per_block", "local_bytes", "const_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REGISTERS_FIELD_NUMBER: _ClassVar[int]
    STATIC_SHARED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_THREADS_PER_BLOCK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONST_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    registers: int
    static_shared_bytes: int
    max_threads_per_block: int
    local_bytes: int
    const_bytes: int
    def __init__(self, name: _Optional[str] = ..., registers: _Optional[int] = ..., static_shared_bytes: _Optional[int] = ..., max_threads_per_block: _Optional[int] = ..., local_bytes: _Optional[int] = ..., const_bytes: _Optional[int] = ...) -> None: ...

class JobDone(_message.Message):
    __slots__ = ("graph_key", "kernel_keys", "ok", "failed", "missed")
    GRAPH_KEY_FIELD_NUMBER: _ClassVar[int]
    KERNEL_KEYS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    graph_key: str
    kernel_keys: _containers.RepeatedScalarFieldContainer[str]
    ok: int
    failed: int
    missed: int
    def __init__(self, graph_key: _Optional[str] = ..., kernel_keys: _Optional[_Iterable[str]] = ..., ok: _Optional[int] = ..., failed: _Optional[int] = ..., missed: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ToolchainInfo(_message.Message):
    __slots__ = ("name", "version", "fingerprint", "location", "include_dirs", "supported_targets")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DIRS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_TARGETS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    fingerprint: str
    location: str
    include_dirs: _containers.RepeatedScalarFieldContainer[str]
    supported_targets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., fingerprint: _Optional[str] = ..., location: _Optional[str] = ..., include_dirs: _Optional[_Iterable[str]] = ..., supported_targets: _Optional[_Iterable[str]] = ...) -> None: ...

class Gpu(_message.Message):
    __slots__ = ("index", "name", "target")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    target: str
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., target: _Optional[str] = ...) -> None: ...

class TierStats(_message.Message):
    __slots__ = ("tier", "entries", "bytes", "capacity_bytes", "hits", "misses", "integrity_failures")
    TIER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    INTEGRITY_FAILURES_FIELD_NUMBER: _ClassVar[int]
    tier: str
    entries: int
    bytes: int
    capacity_bytes: int
    hits: int
    misses: int
    integrity_failures: int
    def __init__(self, tier: _Optional[str] = ..., entries: _Optional[int] = ..., bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., integrity_failures: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("version", "toolchains", "gpus", "default_target", "tiers", "compiles_ok", "compiles_failed", "queue_depth", "inflight_compiles", "jobs_total", "compile_seconds_saved", "concurrency", "remote", "remote_up", "snapshots", "recent_misses", "torch_graphs", "remote_state", "remote_reason", "audit")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOLCHAINS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TARGET_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    COMPILES_OK_FIELD_NUMBER: _ClassVar[int]
    COMPILES_FAILED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_COMPILES_FIELD_NUMBER: _ClassVar[int]
    JOBS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPILE_SECONDS_SAVED_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    REMOTE_UP_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    RECENT_MISSES_FIELD_NUMBER: _ClassVar[int]
    TORCH_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_STATE_FIELD_NUMBER: _ClassVar[int]
    REMOTE_REASON_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    version: str
    toolchains: _containers.RepeatedCompositeFieldContainer[ToolchainInfo]
    gpus: _containers.RepeatedCompositeFieldContainer[Gpu]
    default_target: str
    tiers: _containers.RepeatedCompositeFieldContainer[TierStats]
    compiles_ok: int
    compiles_failed: int
    queue_depth: int
    inflight_compiles: int
    jobs_total: int
    compile_seconds_saved: float
    concurrency: int
    remote: str
    remote_up: bool
    snapshots: SnapshotStats
    recent_misses: _containers.RepeatedCompositeFieldContainer[RecentMiss]
    torch_graphs: TorchGraphStats
    remote_state: str
    remote_reason: str
    audit: AuditStats
    def __init__(self, version: _Optional[str] = ..., toolchains: _Optional[_Iterable[_Union[ToolchainInfo, _Mapping]]] = ..., gpus: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ..., default_target: _Optional[str] = ..., tiers: _Optional[_Iterable[_Union[TierStats, _Mapping]]] = ..., compiles_ok: _Optional[int] = ..., compiles_failed: _Optional[int] = ..., queue_depth: _Optional[int] = ..., inflight_compiles: _Optional[int] = ..., jobs_total: _Optional[int] = ..., compile_seconds_saved: _Optional[float] = ..., concurrency: _Optional[int] = ..., remote: _Optional[str] = ..., remote_up: _Optional[bool] = ..., snapshots: _Optional[_Union[SnapshotStats, _Mapping]] = ..., recent_misses: _Optional[_Iterable[_Union[RecentMiss, _Mapping]]] = ..., torch_graphs: _Optional[_Union[TorchGraphStats, _Mapping]] = ..., remote_state: _Optional[str] = ..., remote_reason: _Optional[str] = ..., audit: _Optional[_Union[AuditStats, _Mapping]] = ...) -> None: ...

class AuditStats(_message.Message):
    __slots__ = ("rate", "cpu_share", "clean", "mismatched", "failed", "dropped", "quarantined_keys", "publishers_audited", "vet", "vet_warning")
    RATE_FIELD_NUMBER: _ClassVar[int]
    CPU_SHARE_FIELD_NUMBER: _ClassVar[int]
    CLEAN_FIELD_NUMBER: _ClassVar[int]
    MISMATCHED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_KEYS_FIELD_NUMBER: _ClassVar[int]
    PUBLISHERS_AUDITED_FIELD_NUMBER: _ClassVar[int]
    VET_FIELD_NUMBER: _ClassVar[int]
    VET_WARNING_FIELD_NUMBER: _ClassVar[int]
    rate: float
    cpu_share: float
    clean: int
    mismatched: int
    failed: int
    dropped: int
    quarantined_keys: int
    publishers_audited: _containers.RepeatedScalarFieldContainer[str]
    vet: str
    vet_warning: str
    def __init__(self, rate: _Optional[float] = ..., cpu_share: _Optional[float] = ..., clean: _Optional[int] = ..., mismatched: _Optional[int] = ..., failed: _Optional[int] = ..., dropped: _Optional[int] = ..., quarantined_keys: _Optional[int] = ..., publishers_audited: _Optional[_Iterable[str]] = ..., vet: _Optional[str] = ..., vet_warning: _Optional[str] = ...) -> None: ...

class TorchGraphStats(_message.Message):
    __slots__ = ("compiled", "failed", "hits", "fallbacks", "jobs")
    class FallbacksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    COMPILED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    compiled: int
    failed: int
    hits: int
    fallbacks: _containers.ScalarMap[str, int]
    jobs: _containers.RepeatedCompositeFieldContainer[TorchJobReturn]
    def __init__(self, compiled: _Optional[int] = ..., failed: _Optional[int] = ..., hits: _Optional[int] = ..., fallbacks: _Optional[_Mapping[str, int]] = ..., jobs: _Optional[_Iterable[_Union[TorchJobReturn, _Mapping]]] = ...) -> None: ...

class TorchGraphCost(_message.Message):
    __slots__ = ("name", "eager_calls", "compiled_calls", "eager_median_s", "compiled_median_s", "compile_s", "key", "served", "stored_compile_s", "async_compile", "eager_samples", "eager_contended_samples", "eager_contended_median_s", "compiled_samples", "measured_calls")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EAGER_CALLS_FIELD_NUMBER: _ClassVar[int]
    COMPILED_CALLS_FIELD_NUMBER: _ClassVar[int]
    EAGER_MEDIAN_S_FIELD_NUMBER: _ClassVar[int]
    COMPILED_MEDIAN_S_FIELD_NUMBER: _ClassVar[int]
    COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    STORED_COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    ASYNC_COMPILE_FIELD_NUMBER: _ClassVar[int]
    EAGER_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    EAGER_CONTENDED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    EAGER_CONTENDED_MEDIAN_S_FIELD_NUMBER: _ClassVar[int]
    COMPILED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MEASURED_CALLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    eager_calls: int
    compiled_calls: int
    eager_median_s: float
    compiled_median_s: float
    compile_s: float
    key: str
    served: str
    stored_compile_s: float
    async_compile: bool
    eager_samples: int
    eager_contended_samples: int
    eager_contended_median_s: float
    compiled_samples: int
    measured_calls: int
    def __init__(self, name: _Optional[str] = ..., eager_calls: _Optional[int] = ..., compiled_calls: _Optional[int] = ..., eager_median_s: _Optional[float] = ..., compiled_median_s: _Optional[float] = ..., compile_s: _Optional[float] = ..., key: _Optional[str] = ..., served: _Optional[str] = ..., stored_compile_s: _Optional[float] = ..., async_compile: _Optional[bool] = ..., eager_samples: _Optional[int] = ..., eager_contended_samples: _Optional[int] = ..., eager_contended_median_s: _Optional[float] = ..., compiled_samples: _Optional[int] = ..., measured_calls: _Optional[int] = ...) -> None: ...

class TorchJobReturn(_message.Message):
    __slots__ = ("job", "eager_step_s", "compiled_step_s", "speedup", "compile_s", "break_even_steps", "steps", "verdict", "graphs", "cold_compile_s", "process_compile_s", "saved_s", "eager_basis", "processes", "folded_processes", "updated_unix_ms", "ended", "first_step_skew_s", "first_step_processes")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EAGER_STEP_S_FIELD_NUMBER: _ClassVar[int]
    COMPILED_STEP_S_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    BREAK_EVEN_STEPS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    COLD_COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    SAVED_S_FIELD_NUMBER: _ClassVar[int]
    EAGER_BASIS_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    FOLDED_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_SKEW_S_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    job: str
    eager_step_s: float
    compiled_step_s: float
    speedup: float
    compile_s: float
    break_even_steps: float
    steps: int
    verdict: str
    graphs: _containers.RepeatedCompositeFieldContainer[TorchGraphCost]
    cold_compile_s: float
    process_compile_s: float
    saved_s: float
    eager_basis: str
    processes: int
    folded_processes: int
    updated_unix_ms: int
    ended: bool
    first_step_skew_s: float
    first_step_processes: int
    def __init__(self, job: _Optional[str] = ..., eager_step_s: _Optional[float] = ..., compiled_step_s: _Optional[float] = ..., speedup: _Optional[float] = ..., compile_s: _Optional[float] = ..., break_even_steps: _Optional[float] = ..., steps: _Optional[int] = ..., verdict: _Optional[str] = ..., graphs: _Optional[_Iterable[_Union[TorchGraphCost, _Mapping]]] = ..., cold_compile_s: _Optional[float] = ..., process_compile_s: _Optional[float] = ..., saved_s: _Optional[float] = ..., eager_basis: _Optional[str] = ..., processes: _Optional[int] = ..., folded_processes: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., ended: _Optional[bool] = ..., first_step_skew_s: _Optional[float] = ..., first_step_processes: _Optional[int] = ...) -> None: ...

class TorchProcessCosts(_message.Message):
    __slots__ = ("process", "host", "rank", "started_unix_ms", "updated_unix_ms", "steps", "ended", "graphs", "folded", "first_step_unix_ms")
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    process: str
    host: str
    rank: int
    started_unix_ms: int
    updated_unix_ms: int
    steps: int
    ended: bool
    graphs: _containers.RepeatedCompositeFieldContainer[TorchGraphCost]
    folded: int
    first_step_unix_ms: int
    def __init__(self, process: _Optional[str] = ..., host: _Optional[str] = ..., rank: _Optional[int] = ..., started_unix_ms: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., steps: _Optional[int] = ..., ended: _Optional[bool] = ..., graphs: _Optional[_Iterable[_Union[TorchGraphCost, _Mapping]]] = ..., folded: _Optional[int] = ..., first_step_unix_ms: _Optional[int] = ...) -> None: ...

class TorchJobLedger(_message.Message):
    __slots__ = ("job", "processes", "folded", "folded_ids")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    FOLDED_IDS_FIELD_NUMBER: _ClassVar[int]
    job: str
    processes: _containers.RepeatedCompositeFieldContainer[TorchProcessCosts]
    folded: TorchProcessCosts
    folded_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[str] = ..., processes: _Optional[_Iterable[_Union[TorchProcessCosts, _Mapping]]] = ..., folded: _Optional[_Union[TorchProcessCosts, _Mapping]] = ..., folded_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TorchJobsRequest(_message.Message):
    __slots__ = ("job", "limit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job: str
    limit: int
    def __init__(self, job: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class TorchJobsReply(_message.Message):
    __slots__ = ("jobs", "source", "source_detail")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DETAIL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[TorchJobReturn]
    source: str
    source_detail: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[TorchJobReturn, _Mapping]]] = ..., source: _Optional[str] = ..., source_detail: _Optional[str] = ...) -> None: ...

class KeyRecipe(_message.Message):
    __slots__ = ("key", "toolchain", "fingerprint", "target", "source", "options", "headers", "entries", "toolchain_version", "unix_millis", "host")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOOLCHAIN_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TOOLCHAIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNIX_MILLIS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    key: str
    toolchain: str
    fingerprint: str
    target: str
    source: str
    options: _containers.RepeatedScalarFieldContainer[str]
    headers: _containers.RepeatedCompositeFieldContainer[RecipeHeader]
    entries: _containers.RepeatedScalarFieldContainer[str]
    toolchain_version: str
    unix_millis: int
    host: str
    def __init__(self, key: _Optional[str] = ..., toolchain: _Optional[str] = ..., fingerprint: _Optional[str] = ..., target: _Optional[str] = ..., source: _Optional[str] = ..., options: _Optional[_Iterable[str]] = ..., headers: _Optional[_Iterable[_Union[RecipeHeader, _Mapping]]] = ..., entries: _Optional[_Iterable[str]] = ..., toolchain_version: _Optional[str] = ..., unix_millis: _Optional[int] = ..., host: _Optional[str] = ...) -> None: ...

class RecipeHeader(_message.Message):
    __slots__ = ("name", "digest")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    digest: str
    def __init__(self, name: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class RecentMiss(_message.Message):
    __slots__ = ("unix_millis", "graph", "kernel_id", "kernel_name", "toolchain", "reason", "detail", "key")
    UNIX_MILLIS_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    KERNEL_ID_FIELD_NUMBER: _ClassVar[int]
    KERNEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOLCHAIN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    unix_millis: int
    graph: str
    kernel_id: str
    kernel_name: str
    toolchain: str
    reason: str
    detail: str
    key: str
    def __init__(self, unix_millis: _Optional[int] = ..., graph: _Optional[str] = ..., kernel_id: _Optional[str] = ..., kernel_name: _Optional[str] = ..., toolchain: _Optional[str] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class SnapshotStats(_message.Message):
    __slots__ = ("saves_changed", "saves_unchanged", "restores_found", "restores_missing", "files_fetched", "files_present", "files_missing", "bytes_fetched", "bytes_stored")
    SAVES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    SAVES_UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    RESTORES_FOUND_FIELD_NUMBER: _ClassVar[int]
    RESTORES_MISSING_FIELD_NUMBER: _ClassVar[int]
    FILES_FETCHED_FIELD_NUMBER: _ClassVar[int]
    FILES_PRESENT_FIELD_NUMBER: _ClassVar[int]
    FILES_MISSING_FIELD_NUMBER: _ClassVar[int]
    BYTES_FETCHED_FIELD_NUMBER: _ClassVar[int]
    BYTES_STORED_FIELD_NUMBER: _ClassVar[int]
    saves_changed: int
    saves_unchanged: int
    restores_found: int
    restores_missing: int
    files_fetched: int
    files_present: int
    files_missing: int
    bytes_fetched: int
    bytes_stored: int
    def __init__(self, saves_changed: _Optional[int] = ..., saves_unchanged: _Optional[int] = ..., restores_found: _Optional[int] = ..., restores_missing: _Optional[int] = ..., files_fetched: _Optional[int] = ..., files_present: _Optional[int] = ..., files_missing: _Optional[int] = ..., bytes_fetched: _Optional[int] = ..., bytes_stored: _Optional[int] = ...) -> None: ...

class ArtifactMeta(_message.Message):
    __slots__ = ("toolchain", "target", "compile_micros", "log", "lowered_names", "raw_bytes", "metadata_json", "ptx", "attributes", "validation")
    TOOLCHAIN_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    COMPILE_MICROS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    LOWERED_NAMES_FIELD_NUMBER: _ClassVar[int]
    RAW_BYTES_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    PTX_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    toolchain: str
    target: str
    compile_micros: int
    log: str
    lowered_names: _containers.RepeatedCompositeFieldContainer[LoweredName]
    raw_bytes: int
    metadata_json: str
    ptx: str
    attributes: _containers.RepeatedCompositeFieldContainer[KernelAttributes]
    validation: str
    def __init__(self, toolchain: _Optional[str] = ..., target: _Optional[str] = ..., compile_micros: _Optional[int] = ..., log: _Optional[str] = ..., lowered_names: _Optional[_Iterable[_Union[LoweredName, _Mapping]]] = ..., raw_bytes: _Optional[int] = ..., metadata_json: _Optional[str] = ..., ptx: _Optional[str] = ..., attributes: _Optional[_Iterable[_Union[KernelAttributes, _Mapping]]] = ..., validation: _Optional[str] = ...) -> None: ...

class WorkerHello(_message.Message):
    __slots__ = ("toolchain", "version", "supported_targets", "error")
    TOOLCHAIN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_TARGETS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    toolchain: str
    version: str
    supported_targets: _containers.RepeatedScalarFieldContainer[str]
    error: str
    def __init__(self, toolchain: _Optional[str] = ..., version: _Optional[str] = ..., supported_targets: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ...) -> None: ...

class WorkerRequest(_message.Message):
    __slots__ = ("cuda", "target", "system_include_dirs", "cpu_seconds")
    CUDA_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_INCLUDE_DIRS_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    cuda: CudaSource
    target: str
    system_include_dirs: _containers.RepeatedScalarFieldContainer[str]
    cpu_seconds: int
    def __init__(self, cuda: _Optional[_Union[CudaSource, _Mapping]] = ..., target: _Optional[str] = ..., system_include_dirs: _Optional[_Iterable[str]] = ..., cpu_seconds: _Optional[int] = ...) -> None: ...

class WorkerResponse(_message.Message):
    __slots__ = ("ok", "cubin", "log", "lowered_names", "compile_micros")
    OK_FIELD_NUMBER: _ClassVar[int]
    CUBIN_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    LOWERED_NAMES_FIELD_NUMBER: _ClassVar[int]
    COMPILE_MICROS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    cubin: bytes
    log: str
    lowered_names: _containers.RepeatedCompositeFieldContainer[LoweredName]
    compile_micros: int
    def __init__(self, ok: _Optional[bool] = ..., cubin: _Optional[bytes] = ..., log: _Optional[str] = ..., lowered_names: _Optional[_Iterable[_Union[LoweredName, _Mapping]]] = ..., compile_micros: _Optional[int] = ...) -> None: ...
