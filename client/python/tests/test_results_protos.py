"""kiln's result dataclasses against the protobuf messages they mirror.

Every field of a message must be a field of its dataclass (by the same name) or be listed here as
carried differently, with why; a field the dataclass has beyond the message must be listed too. A
field added to a proto fails here until the Python side carries it or says why not, so the two
cannot drift apart unnoticed. And each dataclass built from a fully set message keeps every value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kiln import explain, results, snapshot_results
from kiln.torch import results as torch_results
from kiln._proto import blob_pb2 as bpb
from kiln._proto import kiln_pb2 as pb
from kiln._proto import snapshot_pb2 as spb

#: Each result dataclass and the message it mirrors.
PAIRS: list[tuple[type, Any]] = [
    (results.KernelAttributes, pb.KernelAttributes),
    (results.KernelResult, pb.KernelResult),
    (results.Queued, pb.Queued),
    (results.Started, pb.Started),
    (results.JobDone, pb.JobDone),
    (results.ToolchainInfo, pb.ToolchainInfo),
    (results.Gpu, pb.Gpu),
    (results.TierStats, pb.TierStats),
    (results.RecentMiss, pb.RecentMiss),
    (results.SnapshotStats, pb.SnapshotStats),
    (results.Stats, pb.StatsResponse),
    (results.AuditStats, pb.AuditStats),
    (results.Provenance, pb.Provenance),
    (results.WarmProgress, pb.WarmProgress),
    (results.BlobEntry, bpb.BlobEntry),
    (snapshot_results.SnapshotRoot, spb.SnapshotRoot),
    (snapshot_results.SnapshotFile, spb.SnapshotFile),
    (snapshot_results.SnapshotSummary, spb.SnapshotSummary),
    (snapshot_results.SnapshotManifest, spb.SnapshotManifest),
    (torch_results.TorchGraphCost, pb.TorchGraphCost),
    (torch_results.TorchJobReturn, pb.TorchJobReturn),
    (torch_results.TorchGraphStats, pb.TorchGraphStats),
    (explain.Difference, pb.Difference),
    (explain.Explanation, pb.KernelExplanation),
]

#: The message fields a dataclass carries differently (or not at all), and why.
ELSEWHERE: dict[type, dict[str, str]] = {
    results.BlobEntry: {"found": "a miss is None, not an entry"},
    explain.Explanation: {
        "identity": "flattened into graph, kernel_id and kernel_name",
        "nearest": "the recipes are for kiln explain's own printing, not the typed answer",
        "recipe": "the recipes are for kiln explain's own printing, not the typed answer",
    },
}

#: The dataclass fields beyond the message, and where they come from.
BEYOND: dict[type, dict[str, str]] = {
    results.Queued: {"job_id": "from the event that carries it"},
    results.Started: {"job_id": "from the event that carries it"},
    results.JobDone: {"job_id": "from the event that carries it"},
    explain.Explanation: {"graph": "identity.graph", "kernel_id": "identity.kernel_id", "kernel_name": "identity.kernel_name"},
}


@pytest.mark.parametrize("dataclass, message", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_each_dataclass_carries_its_message(dataclass: type, message: Any) -> None:
    ours = {f.name for f in dataclasses.fields(dataclass)}
    theirs = {f.name for f in message.DESCRIPTOR.fields}
    elsewhere, beyond = ELSEWHERE.get(dataclass, {}), BEYOND.get(dataclass, {})
    assert theirs - ours == set(elsewhere), f"{message.DESCRIPTOR.full_name} fields {sorted(theirs - ours)} missing from {dataclass.__name__}"
    assert ours - theirs == set(beyond), f"{dataclass.__name__} fields {sorted(ours - theirs)} not in {message.DESCRIPTOR.full_name}"


def test_stats_from_a_full_message_keeps_every_value() -> None:
    m = pb.StatsResponse(version="v", default_target="sm_90", compiles_ok=3, remote="http://c:7171", remote_up=True)
    m.remote_state, m.remote_reason = "up", ""
    m.toolchains.add(name="nvrtc", version="13.0", fingerprint="f" * 64, location="/x", include_dirs=["/i"], supported_targets=["sm_90"])
    m.gpus.add(index=0, name="H100", target="sm_90")
    m.tiers.add(tier="memory", entries=1, bytes=2, capacity_bytes=3, hits=4, misses=5, integrity_failures=6)
    m.recent_misses.add(unix_millis=7, graph="g", kernel_id="k", kernel_name="n", toolchain="nvrtc", reason="new", detail="d", key="a" * 64)
    m.snapshots.saves_changed, m.snapshots.bytes_stored = 8, 9
    m.torch_graphs.compiled = 10
    m.torch_graphs.fallbacks["kilnd_unreachable"] = 11
    m.torch_graphs.jobs.add(job="j", steps=12).graphs.add(name="g0", eager_calls=13)
    m.audit.rate, m.audit.mismatched, m.audit.quarantined_keys = 0.5, 14, 15
    m.audit.publishers_audited.append("gpu-1")
    s = results.Stats.from_proto(m)
    assert (s.version, s.default_target, s.compiles_ok, s.remote, s.remote_up, s.remote_state) == ("v", "sm_90", 3, "http://c:7171", True, "up")
    assert s.toolchains[0].supported_targets == ["sm_90"] and s.gpus[0].name == "H100" and s.tiers[0].integrity_failures == 6
    assert s.recent_misses == [results.RecentMiss(unix_millis=7, graph="g", kernel_id="k", kernel_name="n", toolchain="nvrtc", reason="new", detail="d", key="a" * 64)]
    assert (s.snapshots.saves_changed, s.snapshots.bytes_stored) == (8, 9)
    assert s.torch_graphs is not None and s.torch_graphs.compiled == 10
    assert s.torch_graphs.fallbacks == {"kilnd_unreachable": 11}
    assert s.torch_graphs.jobs[0].steps == 12 and s.torch_graphs.jobs[0].graphs[0].eager_calls == 13
    assert s.audit == results.AuditStats(rate=0.5, mismatched=14, quarantined_keys=15, publishers_audited=["gpu-1"])
    assert results.Stats.from_proto(pb.StatsResponse()).torch_graphs is None
    assert results.Stats.from_proto(pb.StatsResponse()).audit is None


def _filled(m: Any, depth: int = 0) -> Any:
    """``m`` with every field set: scalars to a value, one element in each repeated field and map,
    nested messages filled (three levels deep)."""

    def value(f: Any) -> Any:
        return "x" if f.type == f.TYPE_STRING else b"x" if f.type == f.TYPE_BYTES else True if f.type == f.TYPE_BOOL else 1

    for f in m.DESCRIPTOR.fields:
        field = getattr(m, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            key, val = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            if val.message_type is not None:
                _filled(field[value(key)], depth + 1)
            else:
                field[value(key)] = value(val)
        elif f.is_repeated:
            if f.message_type is None:
                field.append(value(f))
            elif depth < 3:
                _filled(field.add(), depth + 1)
        elif f.message_type is not None:
            if depth < 3:
                _filled(field, depth + 1)
        else:
            setattr(m, f.name, value(f))
    return m


def _protobuf_leftovers(obj: Any, path: str) -> list[str]:
    """Where a protobuf value (a message, a repeated container, a map) survived into a result:
    such a container compares equal to a list, so an equality test would not see it."""
    if type(obj).__module__.startswith("google."):
        return [f"{path}: {type(obj).__name__}"]
    if dataclasses.is_dataclass(obj):
        return [x for f in dataclasses.fields(obj) for x in _protobuf_leftovers(getattr(obj, f.name), f"{path}.{f.name}")]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in _protobuf_leftovers(v, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _protobuf_leftovers(v, f"{path}[{k!r}]")]
    return []


@pytest.mark.parametrize("dataclass, message", [p for p in PAIRS if hasattr(p[0], "from_proto")], ids=lambda x: getattr(x, "__name__", ""))
def test_a_result_built_from_a_full_message_holds_plain_python_values(dataclass: type, message: Any) -> None:
    # from_proto copies same-named fields as they are: a repeated field or map left out of its
    # conversions would hand the caller protobuf's container instead of a list or a dict.
    built = dataclass.from_proto(_filled(message()))
    assert _protobuf_leftovers(built, dataclass.__name__) == []
