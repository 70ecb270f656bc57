"""Claims published at their graph's first backward, for one process's graphs.

torch compiles a training graph's backward lazily, at its first backward, and a claimed graph is
compiled here as torch would. Compiling the backward with the forward instead (what a DDP piece
needs, whose waiters block in collectives) puts it where Inductor's compile pool is still
starting, and on 2 H200s a one-process job's backward compile then took 5.35 s against 3.17 s
(1.21x plain's cold first step). AOTAutograd saves the graph's cache entry, which the others
load, only once both exist; so a one-process graph's claim stays open after its forward compile,
and is published when AOTAutograd saves the entry: this module watches those saves, matched to
the claim by AOTAutograd's key, which the forward compile computes.

A graph whose backward compiled without AOTAutograd saving an entry (a compile torch's caches
bypass) is published when Dynamo's lazy-backward compile ends, with what it left; a claim whose
backward never comes (a training graph only evaluated) is let go after :data:`GIVE_UP_SECS`: its
waiters then compile the graph themselves.
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
class Pending:
    """A claim whose forward compiled here and whose backward has not yet."""

    #: Called with the graph's artifacts (forward and backward) once AOTAutograd saved its entry.
    publish: Callable[[bytes], None]
    #: Called when the claim is let go without a publish.
    release: Callable[[], None]
    #: The forward compile's artifacts.
    forward: bytes
    #: How many artifacts the process had recorded when the forward compile ended.
    mark: int
    #: Dynamo's compile id of the graph (its lazy backward compiles under the same).
    compile_id: str = ""
    timer: threading.Timer | None = field(default=None, repr=False)


_lock = threading.Lock()
_pending: dict[str, Pending] = {}
_keys = threading.local()


@contextlib.contextmanager
def aot_key() -> Iterator[list[str]]:
    """Collects the AOTAutograd keys computed on this thread inside the block: the claimed
    compile's own."""
    _install()
    keys: list[str] = []
    _keys.current = keys
    try:
        yield keys
    finally:
        _keys.current = None


def saved_entry(artifacts: Any) -> bool:
    """Whether a compile's saved artifacts (``save_cache_artifacts``'s info) hold AOTAutograd's
    entry: its backward compiled with its forward (or it has none)."""
    info = artifacts[1] if artifacts is not None else None
    return bool(getattr(info, "aot_autograd_artifacts", None))


def wait(key: str, pending: Pending) -> None:
    """Holds ``pending`` until AOTAutograd saves the entry of ``key``."""
    from torch.compiler._cache import CacheArtifactManager

    pending.mark = len(CacheArtifactManager._seen_artifacts)
    pending.timer = threading.Timer(GIVE_UP_SECS, _give_up, args=(key,))
    pending.timer.daemon = True
    with _lock:
        _pending[key] = pending
    pending.timer.start()


def _give_up(key: str) -> None:
    with _lock:
        pending = _pending.pop(key, None)
    if pending is not None:
        log.info("kiln: a claimed torch.compile graph saw no backward within %.0f s: let go, not shared", GIVE_UP_SECS)
        pending.release()


def _saved(key: str) -> None:
    """AOTAutograd saved the entry of ``key``: publish its claim."""
    with _lock:
        pending = _pending.pop(key, None)
    if pending is not None:
        _settle(pending)


def _backward_compiled(args: Any) -> None:
    """Dynamo's compile callback: a lazy backward compile ended. A claim of that compile still
    pending saved no entry: publish what its compiles left. Runs inside torch's compile, so it
    never raises."""
    try:
        if getattr(getattr(args, "callback_trigger", None), "name", "") != "LAZY_BACKWARD":
            return
        with _lock:
            keys = [k for k, p in _pending.items() if p.compile_id and p.compile_id == str(args.compile_id)]
            settled = [_pending.pop(k) for k in keys]
        for pending in settled:
            _settle(pending)
    except Exception:  # noqa: BLE001 - never a reason to fail the job's backward
        log.warning("kiln: settling a claimed torch.compile graph after its backward failed", exc_info=True)


def _settle(pending: Pending) -> None:
    """Publishes a claim with the forward's artifacts and those recorded since (the backward's,
    and AOTAutograd's entry where it saved one)."""
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
    the entry exists); each wrapper only reports, and calls torch's own."""
    global _installed
    if _installed:
        return
    from torch._functorch._aot_autograd import autograd_cache

    key_of = autograd_cache.autograd_cache_key
    save = autograd_cache.AOTAutogradCache.save

    @functools.wraps(key_of)
    def autograd_cache_key(*args: Any, **kwargs: Any) -> Any:
        result = key_of(*args, **kwargs)
        keys = getattr(_keys, "current", None)
        if keys is not None:
            keys.append(result[0])
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

        callback.on_compile_end(_backward_compiled)
    except (ImportError, AttributeError):  # a torch without the callbacks: the entry's save alone
        log.debug("kiln: Dynamo has no compile-end callbacks", exc_info=True)
    _installed = True
