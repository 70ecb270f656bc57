"""Typed results of kilnd's torch.compile graph calls (``kiln.v1.TorchGraphs``), apart from the
protobuf types, as :mod:`kiln.results` has them for the other services.

Public as :mod:`kiln.torch.results`. Defined here, outside the ``kiln.torch`` package, so that
:mod:`kiln.client` and :mod:`kiln.results` can use them without importing ``kiln.torch``, whose
graph path imports the client: a leaf that keeps the imports from running in a circle."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ._from_proto import from_message
from ._proto import kiln_pb2 as pb
from .tier import Tier


@dataclass(frozen=True)
class TorchGraphAnswer:
    """kilnd's answer for one torch.compile graph (:meth:`kiln.Client.compile_torch_graph`)."""

    ok: bool
    #: torch.compiler.save_cache_artifacts()'s bytes; empty when not ok.
    artifacts: bytes
    tier: Tier
    #: What the compile cost in kilnd's worker, even on a hit.
    compile_seconds: float
    #: The worker's log: the error and its traceback when not ok; with ``compile_here`` and no
    #: ``key``, why the process compiles the graph for itself.
    log: str
    key: str
    #: Nobody has the graph stored, and this process compiles it: a claim publishes it under
    #: ``key``; with ``key`` empty (``no_worker``), for itself alone.
    compile_here: bool = False

    @classmethod
    def from_proto(cls, m: Any) -> TorchGraphAnswer:
        return from_message(
            cls, m, artifacts=bytes(m.artifacts), tier=Tier(m.tier), compile_seconds=m.compile_micros / 1e6
        )


@dataclass(frozen=True)
class TorchGraphCost:
    """One graph's running costs as one process saw them, from its start: calls each way, the
    median seconds from one call to the next each way (0 when not measured; the eager one over
    the samples taken while no compile of the job ran on the host, when there are any), the
    compile seconds this process paid, and how kilnd served it."""

    name: str
    eager_calls: int = 0
    compiled_calls: int = 0
    eager_median_s: float = 0.0
    compiled_median_s: float = 0.0
    #: Serialization, a blocking graph's wait for kilnd, and the load; an in-process compile whole.
    compile_s: float = 0.0
    key: str = ""
    #: cold | memory | disk | remote | joined | in-process | eager ("" unknown).
    served: str = ""
    #: The worker's compile seconds as stored with the answer.
    stored_compile_s: float = 0.0
    #: Whether the graph ran eagerly while kilnd compiled it (KILN_TORCH_ASYNC).
    async_compile: bool = False
    eager_samples: int = 0
    eager_contended_samples: int = 0
    eager_contended_median_s: float = 0.0
    compiled_samples: int = 0
    #: Eager calls run after the swap to measure (KILN_TORCH_MEASURE).
    measured_calls: int = 0

    def to_proto(self) -> pb.TorchGraphCost:
        return pb.TorchGraphCost(**{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_proto(cls, m: pb.TorchGraphCost) -> TorchGraphCost:
        return from_message(cls, m)


@dataclass(frozen=True)
class TorchJobReturn:
    """Whether compiling paid off for a job, merged across its processes, ranks, hosts and
    restarts (the fleet's figures when kilnd reached the fleet cache): per-step seconds eager and
    compiled, their ratio, the compile seconds charged (cold compiles once per graph key, plus the
    processes' own), the seconds the caches saved, the steps to break even (0: never, or not
    measured), the steps so far, and one sentence that says it."""

    job: str
    eager_step_s: float
    compiled_step_s: float
    speedup: float
    compile_s: float
    break_even_steps: float
    steps: int
    verdict: str
    graphs: list[TorchGraphCost] = field(default_factory=list)
    cold_compile_s: float = 0.0
    process_compile_s: float = 0.0
    saved_s: float = 0.0
    #: "uncontended", "contended" (timed while a compile of the job ran on the host) or "".
    eager_basis: str = ""
    processes: int = 0
    folded_processes: int = 0
    updated_unix_ms: int = 0
    #: Whether every process of the job reported its exit.
    ended: bool = False
    #: Rank skew: the spread of first-step ends across the processes of the job's latest start
    #: (``first_step_processes`` of them; 0 with fewer than two).
    first_step_skew_s: float = 0.0
    first_step_processes: int = 0

    @classmethod
    def from_proto(cls, m: pb.TorchJobReturn) -> TorchJobReturn:
        return from_message(cls, m, graphs=[TorchGraphCost.from_proto(g) for g in m.graphs])


@dataclass(frozen=True)
class TorchJobs:
    """Jobs' returns (:meth:`kiln.Client.torch_jobs`) and where they come from: ``fleet`` (the
    fleet ledger, every host's processes) or ``kilnd`` (this host's), with why in
    ``source_detail``."""

    jobs: list[TorchJobReturn] = field(default_factory=list)
    source: str = ""
    source_detail: str = ""

    @classmethod
    def from_proto(cls, m: Any) -> TorchJobs:
        return from_message(cls, m, jobs=[TorchJobReturn.from_proto(j) for j in m.jobs])


@dataclass(frozen=True)
class TorchGraphStats:
    """kilnd's torch.compile graph counts since it started (``Stats.torch_graphs``): graphs it
    compiled, failed and answered from its caches, fallbacks jobs reported by reason, and each
    reporting job's return."""

    compiled: int = 0
    failed: int = 0
    hits: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    jobs: list[TorchJobReturn] = field(default_factory=list)

    @classmethod
    def from_proto(cls, m: pb.TorchGraphStats) -> TorchGraphStats:
        return from_message(cls, m, fallbacks=dict(m.fallbacks), jobs=[TorchJobReturn.from_proto(j) for j in m.jobs])
