"""What :meth:`kiln.Client.explain` answers: whether each kernel would hit, and on a miss the
inputs of its key that differ from the nearest recipe kilnd or the fleet kept for it."""

from __future__ import annotations

from dataclasses import dataclass

from ._from_proto import from_message
from ._proto import kiln_pb2 as pb
from .results import Provenance, Tier, _enum


@dataclass(frozen=True)
class Difference:
    """One input of a kernel's key that differs from the nearest recipe kilnd kept."""

    #: A ``kiln_misses_total`` reason label: toolchain, target, options, source, header, ...
    reason: str
    #: For a person, this key's side first: ``"target sm_90a vs sm_90"``.
    text: str


@dataclass(frozen=True)
class Explanation:
    """Why a kernel would hit or miss (:meth:`kiln.Client.explain`); nothing is compiled."""

    #: The kernel's id in the graph; empty when a key was explained.
    id: str
    key: str
    #: Whether a cache holds the key, and which (memory, disk or remote).
    cached: bool
    tier: Tier
    #: One line: ``"hit (memory)"``, ``"miss: header `common.cuh`: content differs"``.
    verdict: str
    #: The first difference's reason label; ``"new"`` when no other recipe of this kernel is
    #: known, ``"evicted"`` when the key itself was compiled before; empty on a hit.
    reason: str
    #: The kernel's identity: its graph's name, its id and (Triton) its function name.
    graph: str
    kernel_id: str
    kernel_name: str
    #: Where the nearest recipe was found: ``"local"`` (this host), ``"fleet"``, or empty.
    nearest_from: str
    differences: list[Difference]
    #: Who published the artifact, when kilnd took it from the fleet lately; else ``None``.
    publisher: Provenance | None = None

    @classmethod
    def from_proto(cls, m: pb.KernelExplanation) -> Explanation:
        return cls(
            id=m.id,
            key=m.key,
            cached=m.cached,
            tier=_enum(Tier, m.tier),
            verdict=m.verdict,
            reason=m.reason,
            graph=m.identity.graph,
            kernel_id=m.identity.kernel_id,
            kernel_name=m.identity.kernel_name,
            nearest_from=m.nearest_from,
            differences=[Difference(reason=d.reason, text=d.text) for d in m.differences],
            publisher=from_message(Provenance, m.publisher) if m.HasField("publisher") else None,
        )
