"""Triton's source hash, computed in the background before the first compile needs it
(``KILN_TORCH=1``; ``KILN_TORCH_PREWARM=0`` turns this part off).

A process's first compile computes two keys before it can look anything up in a cache:
Inductor's ``torch_key()`` (a hash of torch's Python sources) and Triton's ``triton_key()`` (a
hash of Triton's sources and of ``libtriton.so``, about 400 MB). Each is computed once per
process and memoized, so a warm host pays them on every start too. On an H100 (GPT-2 training
step, warm caches, torch 2.11, Triton 3.6) they took 0.10-0.14 s and 0.38-0.43 s of a 2.6-2.9 s
first call, and computing both before the first call made it 0.59 s shorter (median of three
against three; tests/gpu/first_call_keys).

So when ``torch.compile()`` imports ``torch._inductor.codecache`` (it does, before the first
call), a daemon thread calls ``triton_key()``: Triton's own memo keeps the value, and the first
compile finds it ready. That work is reading 1 MiB chunks and SHA-256 over them, both of which
release the GIL, so the thread runs beside the job's Python: 0.45-0.58 s in the background on the
H100 against 0.38-0.43 s in the job's thread. ``torch_key()`` is left to the compile: it reads
some two thousand small files, and each read gives the GIL away and waits up to the interpreter's
switch interval (5 ms) to get it back while the job's thread runs Python. In a thread it took
3.5-5.1 s on the H100 instead of 0.1 s, and the first compile, asking before it was done,
computed it again.

The thread imports nothing: it runs only when ``triton.runtime.cache`` is already imported, and
Triton's package walk then finds every package imported already. If the first compile asks
before the thread is done, it computes the key itself, as it would without kiln (the memo has no
lock): never wrong, only not faster. Inductor's compile workers and other helper processes are
left alone.
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


def _run() -> None:
    try:
        cache = _imported("triton.runtime.cache")
        if cache is not None and callable(getattr(cache, "triton_key", None)):
            _timed("triton_key", cache.triton_key)
        else:
            _stats["triton_key"] = "skipped: triton.runtime.cache not imported"
    except Exception as e:  # noqa: BLE001 - the compile computes the keys itself
        _stats["error"] = f"{type(e).__name__}: {e}"
        log.debug("kiln: precomputing Triton's source hash failed", exc_info=True)
    finally:
        _stats["done"] = True


def start(_codecache: ModuleType) -> None:
    """Hook for ``torch._inductor.codecache``: starts the thread, once per process."""
    global _thread
    if not enabled() or _torch_job.is_helper(sys.argv):
        return
    with _lock:
        if _thread is not None:
            return
        _stats.update({"started_wall": time.time(), "done": False})
        _thread = threading.Thread(target=_run, name="kiln-torch-prewarm", daemon=True)
        _thread.start()


def wait(timeout: float | None = None) -> bool:
    """Waits for the thread (tests and reports); whether it is done, or never started."""
    thread = _thread
    if thread is not None:
        thread.join(timeout)
        return not thread.is_alive()
    return True


def stats() -> dict[str, Any]:
    """Seconds the key took in the background, or why it was skipped."""
    return dict(_stats)
