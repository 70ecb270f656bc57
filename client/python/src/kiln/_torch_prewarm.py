"""The source hashes of a first torch.compile, computed in the background before it needs them
(``KILN_TORCH=1``; ``KILN_TORCH_PREWARM=0`` turns this part off).

A process's first compile computes two keys before it can look anything up in a cache:
Inductor's ``torch_key()`` (a hash of torch's Python sources) and Triton's ``triton_key()`` (a
hash of Triton's sources and of ``libtriton.so``, about 400 MB). Each is computed once per process
and memoized, so a warm host pays them on every start too. On an H100 (GPT-2 training step, warm
caches, torch 2.11, Triton 3.6) they took 0.10-0.14 s and 0.38-0.43 s of a 2.6-2.9 s first call,
and computing them before the first call made it 0.59 s shorter (median of three against three).

So when ``torch.compile()`` imports ``torch._inductor.codecache`` (it does, before the first
call), a daemon thread calls both functions: their own memoization keeps the values, and the
first compile finds them ready. Most of the work is file reads and SHA-256 over large buffers,
which release the GIL, so the thread runs beside the job's Python rather than in its way. The
thread imports nothing: ``torch_key()`` walks file finders without importing, and
``triton_key()`` is only called when ``triton.runtime.cache`` is already imported (its package
walk then finds every package imported already). If the first compile asks before the thread is
done, it computes the key itself, as it would without kiln (the memo has no lock): never wrong,
only not faster. Inductor's compile workers and other helper processes are left alone; their
parent hands them what they need.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from types import ModuleType
from typing import Any

from . import _torch_job

log = logging.getLogger("kiln")

SWITCH_ENV = "KILN_TORCH_PREWARM"

_lock = threading.Lock()
_thread: threading.Thread | None = None
_stats: dict[str, Any] = {}


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1") != "0"


def _imported(name: str) -> ModuleType | None:
    """The module, if it is imported and done initialising."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def _timed(name: str, fn: Any) -> None:
    started = time.perf_counter()
    fn()
    _stats[f"{name}_s"] = round(time.perf_counter() - started, 4)


def _run(codecache: ModuleType) -> None:
    try:
        _timed("torch_key", codecache.torch_key)
        cache = _imported("triton.runtime.cache")
        if cache is not None and callable(getattr(cache, "triton_key", None)):
            _timed("triton_key", cache.triton_key)
        else:
            _stats["triton_key"] = "skipped: triton.runtime.cache not imported"
    except Exception as e:  # noqa: BLE001 - the compile computes the keys itself
        _stats["error"] = f"{type(e).__name__}: {e}"
        log.debug("kiln: precomputing torch.compile's source hashes failed", exc_info=True)
    finally:
        _stats["done"] = True


def start(codecache: ModuleType) -> None:
    """Hook for ``torch._inductor.codecache``: starts the thread, once per process."""
    global _thread
    if not enabled() or _torch_job.is_helper(sys.argv):
        return
    with _lock:
        if _thread is not None:
            return
        _stats.update({"started_wall": time.time(), "done": False})
        _thread = threading.Thread(target=_run, args=(codecache,), name="kiln-torch-prewarm", daemon=True)
        _thread.start()


def wait(timeout: float | None = None) -> bool:
    """Waits for the thread (tests and reports); whether it is done, or never started."""
    thread = _thread
    if thread is not None:
        thread.join(timeout)
        return not thread.is_alive()
    return True


def stats() -> dict[str, Any]:
    """Seconds each key took in the background, or why it was skipped."""
    return dict(_stats)
