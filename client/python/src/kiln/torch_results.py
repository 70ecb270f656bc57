"""Typed results of kilnd's torch.compile graph calls (``kiln.v1.TorchGraphs``), apart from the
protobuf types, as :mod:`kiln.results` has them for the other services."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    #: The worker's log: the error and its traceback when not ok.
    log: str
    key: str

    @classmethod
    def from_proto(cls, m: Any) -> TorchGraphAnswer:
        return cls(
            ok=m.ok,
            artifacts=bytes(m.artifacts),
            tier=Tier(m.tier),
            compile_seconds=m.compile_micros / 1e6,
            log=m.log,
            key=m.key,
        )


@dataclass(frozen=True)
class TorchGraphCost:
    """One graph's running costs as one process saw them: calls each way, the median seconds
    from one call to the next each way (0 when not measured), and the compile seconds paid."""

    name: str
    eager_calls: int = 0
    compiled_calls: int = 0
    eager_median_s: float = 0.0
    compiled_median_s: float = 0.0
    compile_s: float = 0.0

    def to_proto(self) -> pb.TorchGraphCost:
        return pb.TorchGraphCost(
            name=self.name,
            eager_calls=self.eager_calls,
            compiled_calls=self.compiled_calls,
            eager_median_s=self.eager_median_s,
            compiled_median_s=self.compiled_median_s,
            compile_s=self.compile_s,
        )

    @classmethod
    def from_proto(cls, m: pb.TorchGraphCost) -> TorchGraphCost:
        return cls(
            name=m.name,
            eager_calls=m.eager_calls,
            compiled_calls=m.compiled_calls,
            eager_median_s=m.eager_median_s,
            compiled_median_s=m.compiled_median_s,
            compile_s=m.compile_s,
        )


@dataclass(frozen=True)
class TorchJobReturn:
    """Whether compiling paid off for a job: per-step seconds eager and compiled, their ratio,
    the compile seconds, the steps to break even (0: never, or not measured), the steps so far,
    and one sentence that says it."""

    job: str
    eager_step_s: float
    compiled_step_s: float
    speedup: float
    compile_s: float
    break_even_steps: float
    steps: int
    verdict: str
    graphs: list[TorchGraphCost] = field(default_factory=list)

    @classmethod
    def from_proto(cls, m: pb.TorchJobReturn) -> TorchJobReturn:
        return cls(
            job=m.job,
            eager_step_s=m.eager_step_s,
            compiled_step_s=m.compiled_step_s,
            speedup=m.speedup,
            compile_s=m.compile_s,
            break_even_steps=m.break_even_steps,
            steps=m.steps,
            verdict=m.verdict,
            graphs=[TorchGraphCost.from_proto(g) for g in m.graphs],
        )


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
        return cls(
            compiled=m.compiled,
            failed=m.failed,
            hits=m.hits,
            fallbacks=dict(m.fallbacks),
            jobs=[TorchJobReturn.from_proto(j) for j in m.jobs],
        )
