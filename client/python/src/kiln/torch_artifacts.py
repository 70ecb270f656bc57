"""Warm starts for torch.compile on a fresh host: the whole set of a job's compile artifacts.

torch's remote caches (which :mod:`kiln.torch` backs with kilnd) answer one lookup at a time,
and a hit still leaves the process to rebuild what a warm host keeps on local disk: Inductor
writes and compiles the output code, AOTAutograd and the Triton bundle are re-emitted. On an
H100, a GPT-2 training step's first call took 4.3 s that way against 2.7 s with warm local
caches. torch 2.11's "mega-cache" (``torch.compiler.save_cache_artifacts`` /
``load_cache_artifacts``) serializes every artifact a process compiled and hot-loads them into
the local caches, which is what a warm host has.

So a process that compiled stores its artifacts in kilnd when it exits (namespace
``torch-artifacts``), and the next process of the same job on any host loads them into its
empty local caches at its first remote-cache lookup, before torch reads them. The job is
``KILN_TORCH_JOB`` when set, else the content of the main script (its path differs between
hosts, its bytes do not). ``KILN_TORCH_ARTIFACTS=0`` turns this off. A stored set is replaced
only by a process that compiled something the loaded set did not hold. Every failure is a
warning and a cold start, never an exception in the job.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import sys
import threading
import time

log = logging.getLogger("kiln")

NAMESPACE = "torch-artifacts"
JOB_ENV = "KILN_TORCH_JOB"
SWITCH_ENV = "KILN_TORCH_ARTIFACTS"

_lock = threading.Lock()
_state: dict = {"restored": None, "tried": False, "exit_hook": False, "seconds": 0.0, "bytes": 0}


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1") != "0"


def job_key() -> bytes | None:
    """The job's key, or ``None`` where there is no job to name (an interactive session, or a
    compile worker, whose main script is torch's own)."""
    job = os.environ.get(JOB_ENV)
    if job:
        return b"job:" + job.encode()
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not os.path.isfile(path) or f"{os.sep}torch{os.sep}" in os.path.abspath(path):
        return None
    with open(path, "rb") as f:
        return b"script:" + hashlib.sha256(f.read()).hexdigest().encode()


def tool_version() -> str:
    import torch

    try:
        import triton

        return f"{torch.__version__}+triton-{triton.__version__}"
    except ImportError:
        return str(torch.__version__)


def restore_once() -> None:
    """Loads the job's stored artifacts into the local caches, once per process, and arranges
    for this process's own to be stored at exit."""
    with _lock:
        if _state["tried"] or not enabled():
            return
        _state["tried"] = True
        key = job_key()
        if key is None:
            return
        started = time.perf_counter()
        try:
            _restore(key)
        except Exception:  # noqa: BLE001 - a cold start, never a failed job
            log.warning("kiln: loading the job's torch.compile artifacts failed; compiling cold", exc_info=True)
        _state["seconds"] = time.perf_counter() - started
        if not _state["exit_hook"]:
            _state["exit_hook"] = True
            atexit.register(_save_at_exit, key)


def _restore(key: bytes) -> None:
    from . import _fleet

    entries = _fleet.call(
        "torch artifacts lookup", lambda c: c.get_blobs(NAMESPACE, tool_version(), [key], timeout=60.0), [None]
    )
    entry = entries[0] if entries else None
    data = entry.files.get("") if entry is not None else None
    if not data:
        return
    import torch

    torch.compiler.load_cache_artifacts(data)
    _state["restored"] = hashlib.sha256(data).digest()
    _state["bytes"] = len(data)


def _save_at_exit(key: bytes) -> None:
    try:
        import torch

        save = getattr(getattr(torch, "compiler", None), "save_cache_artifacts", None)
        if save is None:
            return
        saved = save()
        if saved is None:
            return
        data = saved[0]
        if not data or hashlib.sha256(data).digest() == _state["restored"]:
            return
        from . import _fleet

        _fleet.call(
            "torch artifacts store",
            lambda c: c.put_blob(NAMESPACE, tool_version(), key, bytes(data), timeout=120.0),
            None,
        )
    except Exception:  # noqa: BLE001 - exiting; the next process compiles cold
        log.warning("kiln: storing this job's torch.compile artifacts failed", exc_info=True)


def stats() -> dict:
    """What this process loaded: seconds spent (inside its first compile) and bytes."""
    return {"seconds": _state["seconds"], "bytes": _state["bytes"], "loaded": _state["restored"] is not None}
