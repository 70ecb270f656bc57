"""kiln: the Python client of kilnd, the per-host GPU compile daemon, and drop-in fleet caching
for Triton (:mod:`kiln.triton`) and torch.compile (:mod:`kiln.torch`).

Modules:

- :mod:`kiln.client` — :class:`Client`: compile, submit/watch, lookup, stats, warm, the
  named-blob API (get_blobs, put_blob, lease_blob) and job snapshots (snapshot_save,
  snapshot_restore, snapshot_list, snapshot_show);
- :mod:`kiln.snapshot` — job snapshots: directories saved into kilnd and restored on another host;
- :mod:`kiln.graph` — compile graphs and the kernel builders for CUDA C++, PTX and Triton;
- :mod:`kiln.results` — typed results (dataclasses and enums);
- :mod:`kiln.errors` — :class:`KilnError` and its subclasses, carrying the gRPC status;
- :mod:`kiln.paths` — which daemon a client talks to (``KILN_DAEMON``, else the default socket);
- :mod:`kiln.keys` — kiln-key-v1 keys computed locally (needs ``blake3``);
- :mod:`kiln.triton` — ``KilnRemoteCacheBackend`` for Triton's remote cache;
- :mod:`kiln.torch` — ``install()``: kiln behind Inductor's remote caches;
- :mod:`kiln.torch_snapshot` — ``KILN_TORCH=1``: Inductor's and Triton's cache directories
  restored before the first compile and saved after each;
- :mod:`kiln.doctor` — ``python -m kiln doctor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Names are loaded on first use (PEP 562), so that importing a submodule such as
# kiln._autoinstall does not pull in gRPC.
_EXPORTS: dict[str, str] = {
    "Client": "client",
    "Lease": "client",
    "Cancelled": "errors",
    "DaemonUnavailable": "errors",
    "FailedPrecondition": "errors",
    "DeadlineExceeded": "errors",
    "InvalidArgument": "errors",
    "JobFailed": "errors",
    "KilnError": "errors",
    "NotFound": "errors",
    "ResourceExhausted": "errors",
    "Unimplemented": "errors",
    "CudaSource": "graph",
    "Graph": "graph",
    "Kernel": "graph",
    "PtxSource": "graph",
    "TritonSource": "graph",
    "cuda_kernel": "graph",
    "ptx_kernel": "graph",
    "triton_kernel": "graph",
    "daemon_uri": "paths",
    "BlobEntry": "results",
    "CompileResult": "results",
    "Event": "results",
    "Gpu": "results",
    "JobDone": "results",
    "JobFailedEvent": "results",
    "KernelAttributes": "results",
    "KernelDone": "results",
    "KernelResult": "results",
    "LeaseKind": "results",
    "Outcome": "results",
    "Placement": "results",
    "Priority": "results",
    "Queued": "results",
    "RestoreResult": "results",
    "RootRestore": "results",
    "SaveResult": "results",
    "SnapshotFile": "results",
    "SnapshotInfo": "results",
    "SnapshotManifest": "results",
    "SnapshotProgress": "results",
    "SnapshotRoot": "results",
    "SnapshotSummary": "results",
    "Started": "results",
    "Stats": "results",
    "Tier": "results",
    "TierStats": "results",
    "ToolchainInfo": "results",
    "WarmProgress": "results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)


if TYPE_CHECKING:
    from .client import Client, Lease
    from .errors import (
        Cancelled,
        DaemonUnavailable,
        DeadlineExceeded,
        FailedPrecondition,
        InvalidArgument,
        JobFailed,
        KilnError,
        NotFound,
        ResourceExhausted,
        Unimplemented,
    )
    from .graph import CudaSource, Graph, Kernel, PtxSource, TritonSource, cuda_kernel, ptx_kernel, triton_kernel
    from .paths import daemon_uri
    from .results import (
        BlobEntry,
        CompileResult,
        Event,
        Gpu,
        JobDone,
        JobFailedEvent,
        KernelAttributes,
        KernelDone,
        KernelResult,
        LeaseKind,
        Outcome,
        Placement,
        Priority,
        Queued,
        RestoreResult,
        RootRestore,
        SaveResult,
        SnapshotFile,
        SnapshotInfo,
        SnapshotManifest,
        SnapshotProgress,
        SnapshotRoot,
        SnapshotSummary,
        Started,
        Stats,
        Tier,
        TierStats,
        ToolchainInfo,
        WarmProgress,
    )
