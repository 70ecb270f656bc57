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
- :mod:`kiln.torch.snapshot` — ``KILN_TORCH=1``: Inductor's and Triton's cache directories
  restored before the first compile and saved after each;
- :mod:`kiln.doctor` — ``python -m kiln doctor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one export list. Names are loaded on first use (PEP 562), so that importing a submodule
# such as kiln._autoinstall (which a .pth file does at every interpreter start) pulls in neither
# gRPC nor protobuf; each comes from the first of _MODULES that defines it.
__all__ = [
    "BlobEntry",
    "Cancelled",
    "Client",
    "CompileResult",
    "CudaSource",
    "DaemonUnavailable",
    "DeadlineExceeded",
    "Difference",
    "Event",
    "Explanation",
    "FailedPrecondition",
    "Gpu",
    "Graph",
    "InvalidArgument",
    "JobDone",
    "JobFailed",
    "JobFailedEvent",
    "Kernel",
    "KernelAttributes",
    "KernelDone",
    "KernelResult",
    "KilnError",
    "Lease",
    "LeaseKind",
    "NotFound",
    "Outcome",
    "Placement",
    "Priority",
    "PtxSource",
    "Queued",
    "RecentMiss",
    "ResourceExhausted",
    "RestoreResult",
    "RootRestore",
    "SaveResult",
    "SnapshotFile",
    "SnapshotInfo",
    "SnapshotManifest",
    "SnapshotProgress",
    "SnapshotRoot",
    "SnapshotStats",
    "SnapshotSummary",
    "Started",
    "Stats",
    "Tier",
    "TierStats",
    "ToolchainInfo",
    "TorchGraphAnswer",
    "TorchGraphCost",
    "TorchGraphStats",
    "TorchJobReturn",
    "TorchJobs",
    "TritonSource",
    "Unimplemented",
    "WarmProgress",
    "cuda_kernel",
    "daemon_uri",
    "ptx_kernel",
    "triton_kernel",
]

# Searched in this order, cheapest import first: a name from kiln.paths imports nothing else.
_MODULES = ("paths", "graph", "results", "snapshot_results", "torch.results", "explain", "errors", "client")


def _version() -> str:
    """The installed distribution's version (pyproject.toml's), or ``0+unknown`` when kiln runs
    from a source tree that was never installed."""
    from importlib import metadata

    try:
        return metadata.version("kiln")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in __all__:
        import importlib

        for module in _MODULES:
            mod = importlib.import_module(f"{__name__}.{module}")
            if name in vars(mod):
                value = vars(mod)[name]
                break
        else:  # pragma: no cover - every name in __all__ is defined by one of _MODULES
            raise AttributeError(f"module 'kiln' lists {name!r} but none of {_MODULES} defines it")
    else:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})


if TYPE_CHECKING:
    # For type checkers only: __all__ above says which of these names kiln exports.
    from .client import *  # noqa: F403
    from .errors import *  # noqa: F403
    from .explain import *  # noqa: F403
    from .graph import *  # noqa: F403
    from .paths import *  # noqa: F403
    from .results import *  # noqa: F403
    from .snapshot_results import *  # noqa: F403
    from .torch.results import *  # noqa: F403

    __version__: str
