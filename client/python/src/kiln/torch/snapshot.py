"""torch.compile on a fresh host as warm as on the host that compiled: the job's Inductor and
Triton cache directories, restored before the first compile and saved after each
(``KILN_TORCH=1``; ``KILN_TORCH_SNAPSHOT=0`` turns this part off).

Remote-cache hits still leave a fresh process to rebuild what a warm host keeps on disk; on an
H100, a copy of a warm host's cache directories at the same absolute path made a fresh process
as fast as the warm host (one at another path was no faster than torch's Redis caches). So:

- **At interpreter start-up** (``kiln-torch.pth`` -> :mod:`kiln._autoinstall`) the cache
  directories are made the same on every host (:mod:`kiln.torch._job`), and the restore of the
  job's snapshot starts in the background, overlapping ``import torch`` and building the model:
  in a process of its own (:mod:`kiln.torch._restore`), since a thread of the job's interpreter
  contends with ``import torch`` for the GIL. Ranks of one host restore once (the restore's
  host lock).
- **At the first compile** it is joined, waiting at most ``KILN_TORCH_RESTORE_WAIT_SECS``
  (default 120; past it the restore is stopped before it places anything, and the compile runs
  cold).
  The join point is Dynamo's compile-start callback (``torch._dynamo.callback.on_compile_start``,
  registered when ``torch._dynamo`` is imported): in torch 2.11 ``import torch`` imports no
  ``torch._dynamo``/``torch._inductor`` module, ``torch.compile()`` imports them and only creates
  the Inductor directory, and every cache read (AOTAutograd, FX graph, Triton, Dynamo's PGO)
  happens inside a compile, after that callback (checked on an H100 with an audit hook on file
  opens). Without a job at start-up (``-c``; ``python -m`` without ``KILN_TORCH_JOB``, or of
  a helper module: :func:`kiln.torch._job.job_at_startup`) the restore runs there.
- **After every compile** (Dynamo's compile-end callback: a frame's compile, a lazy backward
  compile, a CUDA graph recording) a background thread saves the directories when their files
  changed since the last save, and once more at exit. It waits until no compile has run for
  ``SAVE_DELAY_SECS``, so a training step's forward and backward compiles make one save, taken
  after the step rather than during it; saving right after the first step matters, since
  preemption often kills a process without ``atexit``. kilnd unions saves, so a script that
  compiles several models keeps every set. One process per host saves (a non-blocking
  ``flock``); the other ranks skip.
- **The source hashes** of torch and Triton, which every first compile computes (about half a
  second on an H100), travel in the snapshot too: the saver writes them into the Inductor
  directory, the restore checks they belong to this host's packages, and the first compile is
  handed them (:mod:`kiln.torch._source_keys`).

Everything is a warning at most, never an exception in the job: kilnd down is a cold start and
one warning. :func:`stats` says what this process restored and saved.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from .. import settings
from . import _callbacks, _job, _source_keys

log = logging.getLogger("kiln")

SWITCH_ENV = settings.TORCH_SNAPSHOT.name
WAIT_ENV = settings.TORCH_RESTORE_WAIT_SECS.name
DEFAULT_WAIT_SECS = float(settings.TORCH_RESTORE_WAIT_SECS.default)
#: How long exit waits for a save in flight, and for its own.
EXIT_SAVE_SECS = 120.0
#: Quiet time after a compile before a save starts.
SAVE_DELAY_SECS = 1.0
#: Deadline of each call of a save, so a kilnd that hangs never holds the process (at exit).
SAVE_CALL_SECS = 120.0
#: How long a restore told to stop (SIGTERM) has to stop before it is killed.
STOP_SECS = 2.0


def enabled() -> bool:
    return settings.TORCH_SNAPSHOT.switch()


def wait_secs() -> float:
    return settings.TORCH_RESTORE_WAIT_SECS.number(DEFAULT_WAIT_SECS)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.job: str | None = None
        #: The restore process (a ``subprocess.Popen``), until the first compile waits for it.
        self.restore_proc: Any = None
        self.restore_started = 0.0
        self.restore_roots: dict[str, str] | None = None
        #: What the restore reported (see kiln.torch._restore), and how long it was waited for.
        self.restore: dict[str, Any] = {}
        self.joined = False
        self.save_thread: threading.Thread | None = None
        #: Signals compile starts and ends to the save thread (under ``lock``).
        self.changed = threading.Condition(self.lock)
        #: Compiles running in this process now: Dynamo's (its callbacks pair at the outermost
        #: frame) and kiln's own outside Dynamo's window (:func:`compiling`).
        self.compiling = 0
        self.last_compile = 0.0
        self.dirty = False
        #: (root, path, size, mtime) of every file at the last save, or at the first compile.
        self.fingerprint: frozenset[tuple[str, str, int, int]] | None = None
        self.saver: bool | None = None
        self.saves: list[dict[str, Any]] = []
        self.digests: Any = None
        self.exit_hook = False


_state = _State()


# -- restore --


def _start_restore(job: str) -> None:
    """Starts :mod:`kiln.torch._restore` for ``job`` and the cache directories as they are now.
    ``KILN_TORCH=0`` keeps kiln's start-up hook out of it."""
    import subprocess

    roots = _job.roots()
    _state.job, _state.restore_roots, _state.restore = job, roots, {}
    request = json.dumps({"job": job, "roots": roots})
    env = {**os.environ, "KILN_TORCH": "0"}
    _state.restore_started = time.perf_counter()
    _state.restore_proc = subprocess.Popen(
        [sys.executable, "-m", "kiln.torch._restore", request],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )


def _wait_restore() -> None:
    """Waits for the restore process (at most ``KILN_TORCH_RESTORE_WAIT_SECS``; then it is told to
    stop), records what it reported, and logs its warnings and error (one warning when kilnd
    is unreachable, as everywhere in kiln)."""
    import subprocess

    proc = _state.restore_proc
    if proc is None:
        return
    _state.restore_proc = None
    try:
        out, err = proc.communicate(timeout=wait_secs())
    except subprocess.TimeoutExpired:
        _state.restore["timed_out"] = True
        log.warning(
            "kiln: the job's torch.compile snapshot did not arrive within %.0f s (%s); compiling without it", wait_secs(), WAIT_ENV
        )
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=STOP_SECS)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    _state.restore["process_s"] = time.perf_counter() - _state.restore_started
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        if _state.restore.get("timed_out"):
            report = {"cancelled": True}  # killed: it stopped too slowly
        else:
            why = f"the restore process exited with {proc.returncode}: {err.strip()[-500:]}"
            report = {"error": {"code": None, "details": why}}
    _state.restore.update(report)
    for warning in report.get("warnings", []):
        log.warning("kiln: torch.compile snapshot of job %r: %s", _state.job, warning)
    if (error := report.get("error")) is not None:
        from .. import _fleet, errors

        _fleet.client()  # names the daemon in the warning
        _fleet.failed(errors.from_code(error["code"], error["details"]), "torch.compile snapshot restore")


def start() -> None:
    """At interpreter start-up: the same cache directories on every host, and the restore under
    way when the job is known already. Never raises."""
    try:
        if not enabled() or _job.is_helper(sys.argv):
            return
        _job.set_default_dirs()
        job = _job.job_at_startup(sys.argv)
        if job is not None:
            _start_restore(job)
    except Exception:  # noqa: BLE001
        log.warning("kiln: starting the torch.compile snapshot restore failed; compiling cold", exc_info=True)


def join() -> None:
    """At the first compile: waits for the restore (bounded), starting it first when start-up
    did not, or again when the job moved its cache directories since start-up."""
    with _state.lock:
        if _state.joined or not enabled():
            return
        _state.joined = True
    started = time.perf_counter()
    if _state.restore_roots is not None and _state.restore_roots != _job.roots():
        _wait_restore()
        _start_restore(_state.job or "")
    elif _state.restore_roots is None:
        job = _job.job_now()
        if job is None:
            return
        _start_restore(job)
    _wait_restore()
    _state.restore["waited_s"] = time.perf_counter() - started
    if _state.restore.get("source_keys"):
        _state.restore["source_keys_given"] = _source_keys.give(_state.restore["source_keys"])
    _state.fingerprint = _fingerprint(_save_roots())
    if not _state.exit_hook:
        _state.exit_hook = True
        atexit.register(_at_exit)


# -- save --


def _save_roots() -> dict[str, str]:
    return {name: path for name, path in _job.roots().items() if os.path.isdir(path)}


def _fingerprint(roots: dict[str, str]) -> frozenset[tuple[str, str, int, int]]:
    from .._snapshot_walk import walk

    seen: set[tuple[str, str, int, int]] = set()
    for name, path in roots.items():
        try:
            found, _, _ = walk(path, _job.exclude)
        except OSError:
            continue
        seen.update((name, f.rel, f.size, f.mtime_ns) for f in found)
    return frozenset(seen)


def _is_saver() -> bool:
    """Whether this process saves for its host: the first to take a non-blocking ``flock`` on
    ``<parent of the Inductor dir>/.kiln-torch-save-<job and dir hash>.lock`` keeps it for life."""
    if _state.saver is None:
        from .._snapshot_place import try_flock

        inductor = _job.roots()["inductor"]
        tag = hashlib.sha256(f"{_state.job}\0{inductor}".encode()).hexdigest()[:16]
        parent = os.path.dirname(inductor)
        os.makedirs(parent, exist_ok=True)
        _state.saver = try_flock(os.path.join(parent, f".kiln-torch-save-{tag}.lock")) is not None
        if not _state.saver:
            log.debug("kiln: another process of this host saves the job's torch.compile snapshot")
    return _state.saver


def _remember_source_keys() -> None:
    """Puts torch's and Triton's source hashes into the Inductor directory, so that the save
    carries them (fingerprinted by the restore process; none if no restore ran)."""
    prints = _state.restore.get("fingerprints")
    inductor = _save_roots().get("inductor")
    if not prints or inductor is None or not _source_keys.enabled():
        return
    try:
        _source_keys.remember(inductor, prints)
    except Exception:  # noqa: BLE001 - the save goes on without them
        log.debug("kiln: remembering the source hashes failed", exc_info=True)


def _save_if_changed() -> None:
    from .. import _fleet, snapshot
    from .._snapshot_walk import DigestCache

    if _state.job is None or not _is_saver():
        return
    _remember_source_keys()
    roots = _save_roots()
    fingerprint = _fingerprint(roots)
    if not roots or fingerprint == _state.fingerprint:
        return
    if _state.digests is None:
        _state.digests = DigestCache()
    job = _state.job
    result = _fleet.call(
        "torch.compile snapshot save",
        lambda c: snapshot.save(
            c, job, roots, _job.keys(), exclude=_job.exclude, digests=_state.digests, timeout=SAVE_CALL_SECS
        ),
        None,
    )
    if result is not None:
        _state.fingerprint = fingerprint
        _state.saves.append({
            "files": result.files, "bytes": result.bytes, "files_uploaded": result.files_uploaded,
            "bytes_uploaded": result.bytes_uploaded, "files_added": result.files_added, "changed": result.changed,
            "seconds": result.seconds, "at": time.time(),
        })


def _lowest_priority() -> None:
    """Makes the calling thread the host's last claim on a core (nice 19; on Linux a thread has
    its own). A save walks and hashes the cache directories while the job's other ranks may still
    compile: on a 2-core machine a DDP rank's save, taken while it waited for its peer, ran in the
    middle of that peer's compile, which every rank then waited for."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not allowed: it runs at the job's priority
        pass


def _saver() -> None:
    _lowest_priority()
    while True:
        with _state.changed:
            while True:
                if not _state.dirty:
                    _state.save_thread = None
                    return
                quiet = _state.last_compile + SAVE_DELAY_SECS - time.monotonic()
                if not _state.compiling and quiet <= 0:
                    break
                _state.changed.wait(None if _state.compiling else quiet)
            _state.dirty = False
        try:
            _save_if_changed()
        except Exception:  # noqa: BLE001
            log.warning("kiln: saving the job's torch.compile snapshot failed", exc_info=True)


def compile_started() -> None:
    with _state.changed:
        _state.compiling += 1


def request_save() -> None:
    """Ends a compile; saves in the background once no compile has run for ``SAVE_DELAY_SECS``
    (coalesced: one save at a time, one more if asked meanwhile)."""
    with _state.changed:
        # An end without its start (callbacks hooked in mid-compile) ends nothing more.
        _state.compiling = max(0, _state.compiling - 1)
        _state.last_compile = time.monotonic()
        _state.changed.notify_all()
        if not _state.joined or _state.job is None:
            return
        _state.dirty = True
        if _state.save_thread is not None:
            return
        _state.save_thread = threading.Thread(target=_saver, name="kiln-snapshot-save", daemon=True)
        _state.save_thread.start()


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Marks a compile kiln runs outside Dynamo's compile window (a DDP piece compiled or
    loaded at its first call, an async graph's swap): no save starts while it runs. A save walks,
    hashes and uploads the cache directories on a thread of this process, and beside a compile it
    took the interpreter from it: on the record a DDP rank's compile ran 1.5-1.8 times slower."""
    compile_started()
    try:
        yield
    finally:
        request_save()


def wait_for_saves(timeout: float | None = None) -> bool:
    """Waits until no save is in flight; ``False`` if one still is after ``timeout``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while (t := _state.save_thread) is not None:
        t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            return False
    return True


def _at_exit() -> None:
    try:
        wait_for_saves(EXIT_SAVE_SECS)
        _save_if_changed()
    except Exception:  # noqa: BLE001 - exiting; the next process compiles what is missing
        log.warning("kiln: saving the job's torch.compile snapshot at exit failed", exc_info=True)


# -- Dynamo --


def _on_compile_start(*_: object) -> None:
    try:
        join()
        compile_started()
    except Exception:  # noqa: BLE001 - this runs inside torch's compile: it must never raise
        log.warning("kiln: joining the torch.compile snapshot restore failed", exc_info=True)


def _on_compile_end(*_: object) -> None:
    try:
        request_save()
    except Exception:  # noqa: BLE001
        log.warning("kiln: scheduling the torch.compile snapshot save failed", exc_info=True)


def attach(dynamo: ModuleType) -> None:
    """Hooks the restore's join and the saves into ``torch._dynamo``'s compile callbacks, kept
    across ``torch._dynamo.reset()``."""
    if not enabled():
        return
    _callbacks.keep(dynamo, start=_on_compile_start, end=_on_compile_end)


def stats() -> dict[str, Any]:
    """What this process restored (files, bytes, seconds, how long the first compile waited) and
    saved (one entry per save), for reports and the GPU harness."""
    proc = _state.restore_proc
    return {
        "enabled": enabled(),
        "job": _state.job,
        "roots": dict(_state.restore_roots or {}),
        "restore": {**_state.restore, "running": proc is not None and proc.poll() is None},
        "joined": _state.joined,
        "saver": _state.saver,
        "saves": list(_state.saves),
        "saving": _state.save_thread is not None,
    }
