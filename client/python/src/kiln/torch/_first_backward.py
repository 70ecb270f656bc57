"""Claims published at their graph's first backward.

torch compiles a training graph's backward lazily, at its first backward, and a claimed graph is
compiled here as torch would. Compiling the backward with the forward instead puts it where
Inductor's compile pool is still starting, and on 2 H200s a one-process job's backward compile
then took 5.35 s against 3.17 s (1.21x plain's cold first step). The backward's artifacts, and
AOTAutograd's cache entry, exist only once it compiled; so a claim stays open after its forward
compile and is published when the backward's compile ends. This module watches those compiles:
each is AOTAutograd's, numbered by its ``aot_id`` (a counter AOTAutograd draws from for each graph
it compiles, which names the graph's backward compile too), and Dynamo reports its end
(a ``LAZY_BACKWARD`` compile callback). Where the number cannot be read (another torch), the
claim is published when AOTAutograd saves the entry, matched by AOTAutograd's key; a graph
with neither is published at once, with its forward alone.

A claim whose backward never comes (a training graph only evaluated) is let go after
:data:`GIVE_UP_SECS`: its waiters then compile the graph themselves.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("kiln")

#: How long a claim waits for its graph's first backward before it is let go.
GIVE_UP_SECS = 600.0


@dataclass
class Compiled:
    """What one claimed forward compile drew from AOTAutograd: its cache keys and its graphs'
    ``aot_id``s (normally one of each; a compile that bypassed AOTAutograd's cache has no key)."""

    keys: list[str] = field(default_factory=list)
    aot_ids: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.keys or self.aot_ids)


@dataclass
class Pending:
    """A claim whose forward compiled here and whose backward has not yet."""

    #: Called with the graph's artifacts (forward and backward) once the backward compiled.
    publish: Callable[[bytes], None]
    #: Called when the claim is let go without a publish.
    release: Callable[[], None]
    #: The forward compile's artifacts.
    forward: bytes
    compiled: Compiled = field(default_factory=Compiled)
    #: How many artifacts the process had recorded when the backward compile began (or, before
    #: it begins, when the forward compile ended): those after it are the backward's.
    mark: int = 0
    timer: threading.Timer | None = field(default=None, repr=False)


_lock = threading.Lock()
_pending: list[Pending] = []
_compiling = threading.local()


@contextlib.contextmanager
def forward_compile() -> Iterator[Compiled]:
    """Collects what AOTAutograd draws on this thread inside the block: the claimed compile's own
    keys and ``aot_id``s (Dynamo compiles under one lock, so the ids drawn meanwhile are its)."""
    _install()
    compiled = Compiled()
    _compiling.current = compiled
    first = _next_aot_id()
    try:
        yield compiled
    finally:
        _compiling.current = None
        last = _next_aot_id()
        if first is not None and last is not None:
            compiled.aot_ids = list(range(first, last))


def _next_aot_id() -> int | None:
    """The ``aot_id`` AOTAutograd gives the next graph it compiles, read without drawing it (an
    ``itertools.count`` shows its next value as ``count(N)``); None on a torch without it."""
    try:
        from torch._functorch import aot_autograd

        text = repr(aot_autograd.AOT_COUNTER)
        return int(text[text.index("(") + 1 : text.index(")")].split(",")[0])
    except (ImportError, AttributeError, ValueError):
        return None


def saved_entry(artifacts: Any) -> bool:
    """Whether a compile's saved artifacts (``save_cache_artifacts``'s info) hold AOTAutograd's
    entry: its backward compiled with its forward (or it has none)."""
    info = artifacts[1] if artifacts is not None else None
    return bool(getattr(info, "aot_autograd_artifacts", None))


def wait(pending: Pending) -> None:
    """Holds ``pending`` until its graph's backward compiled."""
    from torch.compiler._cache import CacheArtifactManager

    pending.mark = len(CacheArtifactManager._seen_artifacts)
    pending.timer = threading.Timer(GIVE_UP_SECS, _give_up, args=(pending,))
    pending.timer.daemon = True
    with _lock:
        _pending.append(pending)
    pending.timer.start()


def _take(match: Callable[[Pending], bool]) -> list[Pending]:
    with _lock:
        taken = [p for p in _pending if match(p)]
        _pending[:] = [p for p in _pending if not match(p)]
    return taken


def _give_up(pending: Pending) -> None:
    if _take(lambda p: p is pending):
        log.info("kiln: a claimed torch.compile graph saw no backward within %.0f s: let go, not shared", GIVE_UP_SECS)
        pending.release()


def _backward_aot_id() -> int | None:
    """The ``aot_id`` of the backward AOTAutograd compiles now (it names it ``<id>_backward``)."""
    try:
        from torch._functorch._aot_autograd import logging_utils

        (name,) = logging_utils.graph_being_compiled
        number, _, kind = name.partition("_")
        return int(number) if kind == "backward" else None
    except (ImportError, AttributeError, ValueError):
        return None


def _lazy_backward(args: Any) -> bool:
    return getattr(getattr(args, "callback_trigger", None), "name", "") == "LAZY_BACKWARD"


def _backward_starts(args: Any) -> None:
    """Dynamo's compile callback: a lazy backward compile begins. What is recorded from here on
    is that backward's (and AOTAutograd's entry of its graph). Never raises."""
    try:
        aot_id = _backward_aot_id() if _lazy_backward(args) else None
        if aot_id is None:
            return
        from torch.compiler._cache import CacheArtifactManager

        with _lock:
            for p in _pending:
                if aot_id in p.compiled.aot_ids:
                    p.mark = len(CacheArtifactManager._seen_artifacts)
    except Exception:  # noqa: BLE001 - never a reason to fail the job's backward
        log.warning("kiln: following a claimed torch.compile graph's backward failed", exc_info=True)


def _backward_compiled(args: Any) -> None:
    """Dynamo's compile callback: a lazy backward compile ended; a claim of that graph is
    published. Runs inside torch's compile, so it never raises."""
    try:
        aot_id = _backward_aot_id() if _lazy_backward(args) else None
        if aot_id is not None:
            for pending in _take(lambda p: aot_id in p.compiled.aot_ids):
                _settle(pending)
    except Exception:  # noqa: BLE001 - never a reason to fail the job's backward
        log.warning("kiln: settling a claimed torch.compile graph after its backward failed", exc_info=True)


def _saved(key: str) -> None:
    """AOTAutograd saved the entry of ``key``: publish its claim, where the backward's compile
    could not be followed by number."""
    for pending in _take(lambda p: not p.compiled.aot_ids and key in p.compiled.keys):
        _settle(pending)


def _settle(pending: Pending) -> None:
    """Publishes a claim with the forward's artifacts and its backward's (and AOTAutograd's entry
    where it saved one)."""
    if pending.timer is not None:
        pending.timer.cancel()
    try:
        from torch.compiler._cache import CacheArtifactManager, _serialize_single_cache
        from torch.utils._appending_byte_serializer import AppendingByteSerializer

        merged: dict[str, list[Any]] = {}
        for kind, artifacts in (CacheArtifactManager.deserialize(pending.forward) or {}).items():
            merged.setdefault(kind, []).extend(artifacts)
        for artifact in list(CacheArtifactManager._seen_artifacts)[pending.mark :]:
            merged.setdefault(artifact.type(), []).append(artifact)
        serializer = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
        serializer.extend(merged.items())
        data = serializer.to_bytes()
    except Exception:  # noqa: BLE001 - a publish is best effort: the process has its compile
        log.warning("kiln: a claimed torch.compile graph's artifacts could not be gathered; not shared", exc_info=True)
        pending.release()
        return
    pending.publish(data)


_installed = False


def _install() -> None:
    """Wraps AOTAutograd's key function (to learn a claim's key) and its cache save (to learn when
    the entry exists), and follows Dynamo's lazy backward compiles; each wrapper only reports,
    and calls torch's own."""
    global _installed
    if _installed:
        return
    from torch._functorch._aot_autograd import autograd_cache

    key_of = autograd_cache.autograd_cache_key
    save = autograd_cache.AOTAutogradCache.save

    @functools.wraps(key_of)
    def autograd_cache_key(*args: Any, **kwargs: Any) -> Any:
        result = key_of(*args, **kwargs)
        compiled = getattr(_compiling, "current", None)
        if compiled is not None:
            compiled.keys.append(result[0])
        return result

    @functools.wraps(save)
    def save_and_tell(key: str, *args: Any, **kwargs: Any) -> Any:
        result = save(key, *args, **kwargs)
        try:
            if _pending:
                _saved(key)
        except Exception:  # noqa: BLE001 - never a reason to fail the job's compile
            log.warning("kiln: publishing a claimed torch.compile graph after its backward failed", exc_info=True)
        return result

    autograd_cache.autograd_cache_key = autograd_cache_key
    autograd_cache.AOTAutogradCache.save = staticmethod(save_and_tell)  # type: ignore[method-assign]
    try:
        from torch._dynamo import callback

        callback.on_compile_start(_backward_starts)
        callback.on_compile_end(_backward_compiled)
    except (ImportError, AttributeError):  # a torch without the callbacks: the entry's save alone
        log.debug("kiln: Dynamo has no compile callbacks", exc_info=True)
    _installed = True
