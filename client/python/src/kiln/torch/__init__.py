"""kiln as the storage behind torch.compile's remote caches.

``kiln.torch.install()`` (or ``KILN_TORCH=1`` in the environment; see :mod:`kiln._autoinstall`)
replaces the open-source remote cache classes that Inductor, AOTAutograd and Dynamo look up by
name in ``torch._inductor.remote_cache`` (``create_cache(key, is_fbcode, fb_cls, oss_cls)`` does
``getattr(module, oss_cls)`` on every call) with classes that keep the same controller and JSON
serde but store through kilnd, and so through its memory, disk and fleet tiers:

============================  ==================  =============================================
torch's class                 kiln namespace      switched on by (unless the user set it)
============================  ==================  =============================================
RemoteFxGraphCache            inductor-fx         torch._inductor.config.fx_graph_remote_cache
RemoteAutotuneCache           inductor-autotune   torch._inductor.config.autotune_remote_cache
RemoteBundledAutotuneCache    inductor-bundled    (left as the user set it; see below)
RemoteAOTAutogradCache        aot-autograd        torch._functorch.config.enable_remote_autograd_cache
RemoteDynamoPGOCache          dynamo-pgo          torch._dynamo.config.automatic_dynamic_remote_pgo
============================  ==================  =============================================

A flag that is ``None`` (neither the code nor its ``TORCHINDUCTOR_*``/``TORCH_*`` variable set
it) becomes ``True``; one the user set, to either value, is left alone. The bundled autotune
cache is not switched on: in torch 2.11 it fails the whole compile (an assertion on
``backend_hash``) on a host where Triton has no active GPU driver, even for a CPU graph. Its
class is replaced all the same, so ``bundled_autotune_remote_cache=True`` stores through kiln. The tool version of
every entry is ``torch.__version__``; the caller key is ``"<cache id>::<key>"``, as torch's own
Redis cache writes it. As with Triton, a kilnd that does not answer turns into misses and one
warning per process, never a failed compile.

Tested with torch 2.11.x. Other versions are refused (:class:`UnsupportedTorchVersion`), since
these are private torch interfaces that change between releases; ``allow_untested=True`` (or
``KILN_TORCH_UNTESTED=1``) tries anyway.

The rest of the integration lives beside this module: :mod:`kiln.torch.snapshot` (the job's
cache directories restored and saved), :mod:`kiln.torch.results` (typed results of kilnd's graph
calls) and private modules: the graph path (``_graph``, ``_ask``, ``_deferred``, ``_claim``,
``_first_backward``, ``_layout``, ``_inductor``, ``_payload``, ``_device``, ``_answer``), the
process's ledger (``_ledger``) and the snapshot's job, restore process and source keys (``_job``,
``_restore``, ``_source_keys``).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .. import settings
from .._warn import warn_once

if TYPE_CHECKING:
    from ..results import BlobEntry

#: (major, minor) versions of torch that this module was tested with.
TESTED_VERSIONS: tuple[tuple[int, int], ...] = ((2, 11),)
UNTESTED_ENV = settings.TORCH_UNTESTED.name

#: torch's class name in torch._inductor.remote_cache -> kiln namespace.
NAMESPACES: dict[str, str] = {
    "RemoteFxGraphCache": "inductor-fx",
    "RemoteAutotuneCache": "inductor-autotune",
    "RemoteBundledAutotuneCache": "inductor-bundled",
    "RemoteAOTAutogradCache": "aot-autograd",
    "RemoteDynamoPGOCache": "dynamo-pgo",
}

#: Config module -> flags that switch the remote caches on.
FLAGS: dict[str, tuple[str, ...]] = {
    "torch._inductor.config": ("fx_graph_remote_cache", "autotune_remote_cache"),
    "torch._functorch.config": ("enable_remote_autograd_cache",),
    "torch._dynamo.config": ("automatic_dynamic_remote_pgo",),
}

REMOTE_CACHE_MODULE = "torch._inductor.remote_cache"

#: Triton's switches for kiln's backend (kiln.triton), so the Triton kernels Inductor compiles go
#: through kiln too. Set unless the user set them.
TRITON_ENV = {
    "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
    "TRITON_REMOTE_CACHE_BACKEND": "kiln.triton:KilnRemoteCacheBackend",
}


def switch_on_triton() -> None:
    """Sets Triton's two variables for kiln's backend where the user has not set them (Triton
    reads them at each compile; child processes inherit them)."""
    for key, value in TRITON_ENV.items():
        os.environ.setdefault(key, value)

GET_TIMEOUT_SECS = 60.0
PUT_TIMEOUT_SECS = 120.0


class UnsupportedTorchVersion(RuntimeError):
    """The installed torch is not one kiln.torch was tested with."""


def tested_versions_text() -> str:
    return ", ".join(f"{major}.{minor}.x" for major, minor in TESTED_VERSIONS)


def check_version(version: str, *, allow_untested: bool = False) -> None:
    """Raises :class:`UnsupportedTorchVersion` unless ``version`` (``torch.__version__``, such as
    ``2.11.0+cu130``) is a tested release series."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if m and (int(m.group(1)), int(m.group(2))) in TESTED_VERSIONS:
        return
    if allow_untested or settings.TORCH_UNTESTED.switch():
        warn_once("torch-untested", "kiln: torch %s is untested (tested: %s); installing anyway", version, tested_versions_text())
        return
    raise UnsupportedTorchVersion(
        f"kiln.torch is tested with torch {tested_versions_text()}, and this is torch {version}: its remote-cache "
        f"interfaces are private and change between releases. Set {UNTESTED_ENV}=1 (or install(allow_untested=True)) "
        "to try anyway."
    )


class KilnStore:
    """Bytes by key in one kiln namespace: what a torch remote-cache backend needs, with no
    torch in it. Errors are misses (and one warning), as in :mod:`kiln._fleet`."""

    def __init__(self, namespace: str, tool_version: str, cache_id: str) -> None:
        self.namespace = namespace
        self.tool_version = tool_version
        self.cache_id = cache_id

    def caller_key(self, key: str) -> bytes:
        return f"{self.cache_id}::{key}".encode()

    def get(self, key: str) -> bytes | None:
        from .. import _fleet

        ck = self.caller_key(key)
        missed: list[BlobEntry | None] = [None]
        entries = _fleet.call(
            f"torch {self.namespace} lookup",
            lambda c: c.get_blobs(self.namespace, self.tool_version, [ck], timeout=GET_TIMEOUT_SECS),
            missed,
        )
        entry = entries[0] if entries else None
        if entry is None:
            return None
        return entry.files.get("", next(iter(entry.files.values()), None))

    def put(self, key: str, data: bytes) -> None:
        from .. import _fleet

        ck = self.caller_key(key)
        _fleet.call(
            f"torch {self.namespace} store",
            lambda c: c.put_blob(self.namespace, self.tool_version, ck, bytes(data), timeout=PUT_TIMEOUT_SECS),
            None,
        )


_lock = threading.Lock()
#: Names of the steps already done in this process (patch, flags per module).
_done: set[str] = set()


def _kiln_classes(rc: ModuleType, tool_version: str) -> dict[str, type]:
    """Subclasses of torch's ``RemoteCache`` over a kiln backend, by the name they replace."""

    class KilnCacheBackend(rc.RemoteCacheBackend):  # type: ignore[name-defined,misc]
        """torch's bytes backend interface (``_get``/``_put``) over a :class:`KilnStore`."""

        def __init__(self, store: KilnStore) -> None:
            super().__init__()
            self._store = store

        def _get(self, key: str) -> bytes | None:
            return self._store.get(key)

        def _put(self, key: str, data: bytes) -> None:
            self._store.put(key, data)

    def make(torch_name: str, namespace: str) -> type:
        def __init__(self: Any, cache_id: str) -> None:
            backend = KilnCacheBackend(KilnStore(namespace, tool_version, cache_id))
            rc.RemoteCache.__init__(self, backend, rc.RemoteCacheJsonSerde())

        name = "Kiln" + torch_name.removeprefix("Remote")
        return type(name, (rc.RemoteCache,), {"__init__": __init__, "__module__": __name__, "replaces": torch_name})

    return {torch_name: make(torch_name, ns) for torch_name, ns in NAMESPACES.items()}


def patch_remote_cache(rc: ModuleType, tool_version: str) -> list[str]:
    """Replaces the remote cache classes in ``rc`` (torch._inductor.remote_cache); returns the
    names replaced. Names the module lacks are left out (an older torch)."""
    with _lock:
        if "patch" in _done:
            return []
        classes = _kiln_classes(rc, tool_version)
        replaced = []
        for torch_name, cls in classes.items():
            if hasattr(rc, torch_name):
                setattr(rc, torch_name, cls)
                replaced.append(torch_name)
        _done.add("patch")
    return replaced


def switch_on_flags(module: ModuleType, names: tuple[str, ...]) -> list[str]:
    """Sets each flag of ``module`` that is ``None`` (unset) to ``True``; returns those set."""
    changed = []
    for name in names:
        if hasattr(module, name) and getattr(module, name) is None:
            setattr(module, name, True)
            changed.append(name)
    return changed


def _clear_memoized() -> None:
    # AOTAutogradCache.get_remote_cache is functools.cache'd: one made before the patch would
    # stick. Clear it so the next call builds a kiln cache.
    mod = sys.modules.get("torch._functorch._aot_autograd.autograd_cache")
    getter = getattr(getattr(mod, "AOTAutogradCache", None), "get_remote_cache", None)
    if getter is not None and hasattr(getter, "cache_clear"):
        getter.cache_clear()


def install(
    *,
    allow_untested: bool = False,
    flags: bool = True,
    triton: bool = True,
    snapshots: bool = True,
    graphs: bool = True,
) -> list[str]:
    """Plugs kiln in behind torch.compile's remote caches, in this process; idempotent.

    Imports torch, checks its version (raises :class:`UnsupportedTorchVersion` on an untested
    one), replaces the remote cache classes and, with ``flags``, switches on the caches whose
    flags the user left unset; with ``triton``, sets Triton's two variables for
    :mod:`kiln.triton` unless set; with ``snapshots`` (and ``KILN_TORCH_SNAPSHOT`` not ``0``),
    restores the job's cache directories at the first compile and saves them after each (see
    :mod:`kiln.torch.snapshot`; under ``KILN_TORCH=1`` the restore starts earlier, at
    interpreter start-up; the snapshot also carries the source hashes of torch and Triton, see
    :mod:`kiln.torch._source_keys`); with ``graphs`` (and ``KILN_TORCH_GRAPHS`` not ``0``), each
    graph Dynamo captures is compiled by kilnd's torch workers, once per fleet, and with
    ``KILN_TORCH_ASYNC=1`` runs eagerly until that compile is ready (see :mod:`kiln.torch._graph`).
    Returns the torch class names replaced. Call it before the first
    ``torch.compile``; child processes (Inductor's compile workers) need ``KILN_TORCH=1``.
    """
    import torch

    check_version(torch.__version__, allow_untested=allow_untested)
    import importlib

    if flags:
        for module_name, names in FLAGS.items():
            switch_on_flags(importlib.import_module(module_name), names)
    replaced = patch_remote_cache(importlib.import_module(REMOTE_CACHE_MODULE), torch.__version__)
    _clear_memoized()
    if triton:
        switch_on_triton()
    # The snapshot's callbacks before the graph path's: a frame's trace is timed from after the
    # restore's join.
    if snapshots:
        from .. import _import_hooks
        from . import _job, snapshot

        if snapshot.enabled():
            _job.set_default_dirs()
            _import_hooks.watch({"torch._dynamo": snapshot.attach})
    if graphs:
        from . import _graph, _job

        _graph.install(_job.job_now() or "")
    return replaced


def installed() -> bool:
    """Whether the remote cache classes of this process are kiln's."""
    return "patch" in _done


def graph_stats() -> dict[str, Any]:
    """What the graph path did in this process: fallbacks to an in-process compile by reason,
    each graph's record (how it was compiled, the tier that answered, compile seconds, calls),
    and Dynamo's trace of each frame (``traced``: seconds and nodes by compile id, what a wait
    reads before any compile shows this process's rate)."""
    from . import _deferred, _ledger

    return {**_ledger.stats(), "traced": _deferred.pieces.budget.traced_stats()}


def roi() -> Any:
    """Whether compiling has paid off for this job so far (:class:`kiln.TorchJobReturn`: step
    times eager and compiled, speedup, compile seconds charged and saved, steps to break even and
    a sentence), merged across the job's processes, ranks, hosts and restarts by the fleet cache
    (by kilnd alone without one); ``None`` when kilnd does not answer. Graphs are measured eagerly
    while kilnd compiles them (``KILN_TORCH_ASYNC=1``) or after (``KILN_TORCH_MEASURE=N``)."""
    from . import _ledger

    return _ledger.report()


def blocking() -> Any:
    """A context manager: graphs first compiled inside it wait for their compile even with
    ``KILN_TORCH_ASYNC=1`` (a graph whose eager run would not fit in memory, say)."""
    from . import _graph

    return _graph.blocking()


def snapshot_stats() -> dict[str, Any]:
    """What this process's torch.compile snapshot did: the job, the restore (files, bytes,
    seconds, how long the first compile waited for it) and every save (see
    :func:`kiln.torch.snapshot.stats`)."""
    from . import snapshot

    return snapshot.stats()
