"""Typed results: what the daemon answers, as dataclasses apart from the protobuf types.

Conversions from the generated messages live here (``from_proto``), so the rest of the package
and its users never touch protobuf objects.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from ._from_proto import from_message
from ._proto import blob_pb2 as bpb
from ._proto import kiln_pb2 as pb
from ._torch_results import TorchGraphStats
from ._wire import WireEnum
from .tier import Tier as Tier


class Outcome(WireEnum):
    UNSPECIFIED = pb.OUTCOME_UNSPECIFIED
    OK = pb.OUTCOME_OK
    FAILED = pb.OUTCOME_FAILED
    #: Lookup only: the kernel is in no tier.
    MISS = pb.OUTCOME_MISS


class Priority(enum.IntEnum):
    UNSPECIFIED = pb.PRIORITY_UNSPECIFIED
    INTERACTIVE = pb.PRIORITY_INTERACTIVE
    BACKGROUND = pb.PRIORITY_BACKGROUND


def _enum(cls: type[enum.IntEnum], value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls(0)


@dataclass(frozen=True)
class KernelAttributes:
    """One entry point of a cubin, as the CUDA driver reported it when kilnd validated the cubin
    on a local GPU (cuFuncGetAttribute)."""

    #: The entry point's (mangled) name.
    name: str
    registers: int
    static_shared_bytes: int
    max_threads_per_block: int
    #: Local memory per thread: spills and stack.
    local_bytes: int
    const_bytes: int


@dataclass(frozen=True)
class KernelResult:
    """One kernel's answer."""

    id: str
    #: 64 lowercase hex characters, schema kiln-key-v1.
    key: str
    outcome: Outcome
    tier: Tier
    #: The cubin; empty when artifacts were omitted or the kernel failed.
    artifact: bytes
    #: Size of the artifact even when omitted.
    artifact_bytes: int
    #: What the artifact cost to compile, even on a hit.
    compile_micros: int
    #: Time this request spent on the kernel, from the start of the job.
    elapsed_micros: int
    log: str
    #: name expression -> lowered (mangled) name.
    lowered_names: dict[str, str]
    toolchain: str
    target: str
    #: Toolchain metadata as JSON text (for Triton: name, num_warps, shared memory, ...).
    metadata_json: str
    #: The PTX, for Triton kernels that asked for it.
    ptx: str
    #: Each entry point's resources, when the cubin was validated on a local GPU; else empty.
    attributes: list[KernelAttributes] = field(default_factory=list)
    #: How the cubin was checked before it was cached ("loaded on <GPU> (sm_XX)"), or why not.
    validation: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK

    @property
    def metadata(self) -> dict[str, Any]:
        """``metadata_json`` parsed; empty when there is none."""
        return json.loads(self.metadata_json) if self.metadata_json else {}

    @classmethod
    def from_proto(cls, m: pb.KernelResult) -> KernelResult:
        return from_message(
            cls,
            m,
            outcome=_enum(Outcome, m.outcome),
            tier=_enum(Tier, m.tier),
            artifact=bytes(m.artifact),
            lowered_names={n.name_expression: n.lowered_name for n in m.lowered_names},
            attributes=[from_message(KernelAttributes, a) for a in m.attributes],
        )


@dataclass(frozen=True)
class Queued:
    job_id: str
    kernels: int
    target: str


@dataclass(frozen=True)
class Started:
    job_id: str


@dataclass(frozen=True)
class KernelDone:
    job_id: str
    result: KernelResult


@dataclass(frozen=True)
class JobDone:
    job_id: str
    #: Key of the graph manifest (for ``kiln warm --graph-key``).
    graph_key: str
    kernel_keys: list[str]
    ok: int
    failed: int
    missed: int


@dataclass(frozen=True)
class JobFailedEvent:
    job_id: str
    reason: str


#: One event of a job's stream, in the order the daemon sends them.
Event = Queued | Started | KernelDone | JobDone | JobFailedEvent


def events_from_proto(m: pb.JobEvent) -> list[Event]:
    """The typed events of one message: a batch of results (``kernels``, a warm graph's hits in
    one message) becomes one :class:`KernelDone` per kernel; an event kind this client does not
    know, none."""
    if m.WhichOneof("event") == "kernels":
        return [KernelDone(job_id=m.job_id, result=KernelResult.from_proto(k)) for k in m.kernels.results]
    event = event_from_proto(m)
    return [] if event is None else [event]


def event_from_proto(m: pb.JobEvent) -> Event | None:
    """The typed event, or ``None`` for an event kind this client does not know (or a batch:
    see :func:`events_from_proto`)."""
    kind = m.WhichOneof("event")
    if kind == "queued":
        return Queued(job_id=m.job_id, kernels=m.queued.kernels, target=m.queued.target)
    if kind == "started":
        return Started(job_id=m.job_id)
    if kind == "kernel":
        return KernelDone(job_id=m.job_id, result=KernelResult.from_proto(m.kernel))
    if kind == "done":
        return from_message(JobDone, m.done, job_id=m.job_id, kernel_keys=list(m.done.kernel_keys))
    if kind == "failed":
        return JobFailedEvent(job_id=m.job_id, reason=m.failed.reason)
    return None


@dataclass
class CompileResult:
    """A whole job: every kernel's result, in arrival order, and the job's summary."""

    job_id: str = ""
    kernels: list[KernelResult] = field(default_factory=list)
    graph_key: str = ""
    kernel_keys: list[str] = field(default_factory=list)
    ok: int = 0
    failed: int = 0
    missed: int = 0
    #: Whether the job's final ``done`` event arrived.
    done: bool = False

    def __getitem__(self, kernel_id: str) -> KernelResult:
        for k in self.kernels:
            if k.id == kernel_id:
                return k
        raise KeyError(kernel_id)

    @property
    def by_id(self) -> dict[str, KernelResult]:
        return {k.id: k for k in self.kernels}

    @property
    def all_ok(self) -> bool:
        return self.done and all(k.ok for k in self.kernels)

    def add(self, event: Event) -> None:
        """Folds one event in (the client does this for :meth:`Client.compile`)."""
        if event.job_id:
            self.job_id = event.job_id
        if isinstance(event, KernelDone):
            self.kernels.append(event.result)
        elif isinstance(event, JobDone):
            self.graph_key = event.graph_key
            self.kernel_keys = event.kernel_keys
            self.ok, self.failed, self.missed = event.ok, event.failed, event.missed
            self.done = True


@dataclass(frozen=True)
class ToolchainInfo:
    name: str
    version: str
    #: 64 hex characters; hosts share artifacts only when fingerprints match.
    fingerprint: str
    location: str
    include_dirs: list[str]
    supported_targets: list[str]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    target: str


@dataclass(frozen=True)
class TierStats:
    tier: str
    entries: int
    bytes: int
    capacity_bytes: int
    hits: int
    misses: int
    integrity_failures: int


@dataclass(frozen=True)
class RecentMiss:
    """One of the last kernels kilnd compiled because no tier held them, and why."""

    unix_millis: int
    graph: str
    kernel_id: str
    kernel_name: str
    toolchain: str
    #: A ``kiln_misses_total`` reason label: new, toolchain, target, options, source, header, ...
    reason: str
    detail: str
    key: str


@dataclass(frozen=True)
class SnapshotStats:
    """Job snapshots kilnd served since it started."""

    saves_changed: int = 0
    saves_unchanged: int = 0
    restores_found: int = 0
    restores_missing: int = 0
    files_fetched: int = 0
    files_present: int = 0
    files_missing: int = 0
    bytes_fetched: int = 0
    bytes_stored: int = 0


@dataclass(frozen=True)
class Provenance:
    """Who published a fleet artifact, as kiln-cache recorded it."""

    #: The host name the publisher gave (self-declared).
    host: str = ""
    #: The identity of the token it wrote with (``tok-`` and a digest prefix; never the token).
    token: str = ""
    unix_ms: int = 0
    #: Another writer offered different bytes under this key and was refused: the held artifact is
    #: audited at its next fetch.
    disputed: bool = False
    #: kiln-cache says some host vouched for this publisher and none found it wrong since:
    #: under ``vet = "first-use"`` its kernels are run without being compiled here first.
    vetted: bool = False
    #: kiln-cache says a host holding another token compiled this key to exactly these bytes:
    #: under ``vet = "confirmed"`` only such kernels are run without being compiled here first.
    confirmed: bool = False


@dataclass(frozen=True)
class AuditStats:
    """The fleet audit on one host: its recompiles of what it took from the fleet."""

    #: The fraction of fleet artifacts audited (besides new publishers' first), and the share
    #: of one CPU audits may use.
    rate: float = 0.0
    cpu_share: float = 0.0
    clean: int = 0
    mismatched: int = 0
    failed: int = 0
    #: Audits not run because the queue was full.
    dropped: int = 0
    #: Quarantine records this host knows of.
    quarantined_keys: int = 0
    publishers_audited: list[str] = field(default_factory=list)
    #: The ``vet`` policy (``first-use``, ``sample``, ``trusted-writers``, ``confirmed``); empty
    #: with the audit off.
    vet: str = ""
    #: What the policy cannot give on this host (a fleet without tokens), when it cannot.
    vet_warning: str = ""

    @classmethod
    def from_proto(cls, m: pb.AuditStats) -> AuditStats:
        return from_message(cls, m, publishers_audited=list(m.publishers_audited))


@dataclass(frozen=True)
class Stats:
    version: str
    toolchains: list[ToolchainInfo]
    gpus: list[Gpu]
    #: Empty when there is neither a --target nor a local GPU.
    default_target: str
    tiers: list[TierStats]
    compiles_ok: int
    compiles_failed: int
    queue_depth: int
    inflight_compiles: int
    jobs_total: int
    compile_seconds_saved: float
    concurrency: int
    #: The fleet cache (kilnd --remote); empty without one.
    remote: str
    remote_up: bool
    #: The fleet cache's state, empty without one: "starting", "up", "down" or "refused" (it
    #: answered and refused kilnd's token: a configuration error, not an outage).
    remote_state: str = ""
    #: Why the fleet cache is not usable, with the fix; empty when up.
    remote_reason: str = ""
    #: The last kernels compiled on a miss, newest last, with why each missed.
    recent_misses: list[RecentMiss] = field(default_factory=list)
    snapshots: SnapshotStats = field(default_factory=SnapshotStats)
    #: torch.compile graphs (kiln.torch); ``None`` from a kilnd too old to count them.
    torch_graphs: TorchGraphStats | None = None
    #: The fleet audit; ``None`` without a fleet cache (or from a kilnd without the audit).
    audit: AuditStats | None = None

    @classmethod
    def from_proto(cls, m: pb.StatsResponse) -> Stats:
        return from_message(
            cls,
            m,
            toolchains=[
                from_message(
                    ToolchainInfo,
                    t,
                    include_dirs=list(t.include_dirs),
                    supported_targets=list(t.supported_targets),
                )
                for t in m.toolchains
            ],
            gpus=[from_message(Gpu, g) for g in m.gpus],
            tiers=[from_message(TierStats, t) for t in m.tiers],
            recent_misses=[from_message(RecentMiss, r) for r in m.recent_misses],
            snapshots=from_message(SnapshotStats, m.snapshots),
            torch_graphs=_torch_graph_stats(m),
            audit=AuditStats.from_proto(m.audit) if m.HasField("audit") else None,
        )


def _torch_graph_stats(m: pb.StatsResponse) -> TorchGraphStats | None:
    return TorchGraphStats.from_proto(m.torch_graphs) if m.HasField("torch_graphs") else None


@dataclass(frozen=True)
class WarmProgress:
    total: int
    done: int
    already_local: int
    fetched: int
    missing: int
    unknown_graphs: list[str]
    finished: bool

    @classmethod
    def from_proto(cls, m: pb.WarmProgress) -> WarmProgress:
        return from_message(cls, m, unknown_graphs=list(m.unknown_graphs))


@dataclass(frozen=True)
class BlobEntry:
    """A stored entry: its files by name (a single-file entry may have the name ``""``)."""

    files: dict[str, bytes]
    #: Which tier answered.
    tier: Tier

    @classmethod
    def from_proto(cls, m: bpb.BlobEntry) -> BlobEntry | None:
        """The entry, or ``None`` for a miss."""
        if not m.found:
            return None
        return cls(files={f.name: bytes(f.data) for f in m.files}, tier=_enum(Tier, m.tier))


class LeaseKind(WireEnum):
    UNSPECIFIED = bpb.LeaseBlobEvent.KIND_UNSPECIFIED
    #: The caller produces the entry; it holds the lease while the stream is open.
    GRANTED = bpb.LeaseBlobEvent.KIND_GRANTED
    #: Another process or host published the entry while the caller waited.
    FOUND = bpb.LeaseBlobEvent.KIND_FOUND
    #: Produce it without a lease (fleet cache down, leases off, or the wait bound passed).
    PROCEED = bpb.LeaseBlobEvent.KIND_PROCEED
    #: After GRANTED: the entry was stored; the lease is released.
    PUBLISHED = bpb.LeaseBlobEvent.KIND_PUBLISHED
    #: After GRANTED: the hold bound passed with no put; the lease is released.
    EXPIRED = bpb.LeaseBlobEvent.KIND_EXPIRED
