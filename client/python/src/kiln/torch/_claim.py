"""A cold torch.compile graph claimed by this process: compiled here, as torch would compile it,
and shared through kilnd for every other process, rank and host that asks for it.

kilnd grants the claim (``ClaimTorchGraph``) where no tier holds the graph and nobody compiles
it; the claim lasts as long as its stream. The process compiles with its own warm compile pool,
takes the artifacts of this compile alone and the C++ it built, and publishes them
(``PublishTorchGraph``) from a background thread while its first step runs; the waiters load
them. ``KILN_TORCH_CLAIM=0`` leaves every compile to kilnd's workers instead (:func:`mode`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import settings
from .._warn import warn_once
from . import _first_backward
from ._answer import bundle as make_bundle
from ._answer import native_files
from ._ledger import GraphRecord

log = logging.getLogger("kiln")


@dataclass
class Grant:
    """kilnd's claim: nobody has the graph, and this process compiles it for everyone."""

    claim: Any
    key: str


@contextlib.contextmanager
def backward_now() -> Iterator[None]:
    """AOTAutograd compiles a graph's backward with its forward, not at its first backward: its
    cache entry, which the other processes load, is saved only once both exist. functorch's config
    switch for it is part of AOTAutograd's cache key, which must stay the one every process
    computes, so it is set where AOTAutograd copies it into the compile's own settings (as kilnd's
    workers set it)."""
    from torch._functorch import aot_autograd

    prepare = aot_autograd.prepare_aot_module_simplified
    if "force_non_lazy_backward_lowering" not in inspect.signature(prepare).parameters:
        yield
        return

    @functools.wraps(prepare)
    def prepare_backward_now(*args: Any, **kwargs: Any) -> Any:
        kwargs["force_non_lazy_backward_lowering"] = True
        return prepare(*args, **kwargs)

    aot_autograd.prepare_aot_module_simplified = prepare_backward_now
    try:
        yield
    finally:
        aot_autograd.prepare_aot_module_simplified = prepare


def backward_with_forward(compile_here: Callable[[], Any]) -> Callable[[], Any]:
    """``compile_here`` with AOTAutograd compiling the backward with the forward, as a claimed
    rank's graph does. The ranks of a job meet in collectives: where one compiled its backward at
    the forward and another at the first backward, the two compiles ran one after the other
    instead of side by side (FSDP2 on 2 H200s: 1.16x plain's first step)."""

    def both() -> Any:
        with backward_now():
            return compile_here()

    return both


#: How a cold graph that nobody has is compiled (:func:`mode`): in this process, as torch would,
#: and shared; or by kilnd's torch workers.
CLAIM = "claim"
WORKERS = "workers"


def mode() -> str:
    """How this process has a cold graph compiled. Claimed, unless ``KILN_TORCH_CLAIM=0`` leaves
    every one to kilnd's workers. The process's own compile is torch's, with its traced graph and
    its own compile pool; a worker must rebuild both and send the result back, and on the record
    (tests/gpu/RESULTS.md) even a warm worker's compile of one process's graph cost that process
    1.01-1.12 of plain torch.compile's cold first step, where workers started for the job would
    also take its cores."""
    return CLAIM if settings.TORCH_CLAIM.switch() else WORKERS


def splits(layout: str) -> bool:
    """Whether the ranks and hosts of this job split its cold compile: a rank waits for a graph
    another rank or host claimed rather than compile it too (``KILN_TORCH_SPLIT``).

    Unset, a job of several ranks on several hosts splits (see :func:`hosts`; one process's
    graphs wait for the fleet's claimant in any case), and a job on one host waits for nobody.
    DDP's pieces are traced together, so each falls to one host, which the others leave it to,
    and the hosts compile their shares at once: a rank's first step ends when the slowest share
    lands. FSDP2's graphs (any other job's of several ranks) are traced one at a time, at their
    first call: the first rank in the fleet to reach one claims it and the others wait for it,
    so the fleet compiles it once, where each host would otherwise compile it beside the others
    (on a 2-core CPU fleet, 0.73x plain's first step against 1.14x unsplit, tests/gpu/RESULTS.md).
    Either way a rank waits for another's compile no longer than its own compile of the graph
    would take (kiln.torch._budget), and compiles it itself past that. On one host there is
    nothing to split across: only the first GPU's rank can share its code, and a rank that
    waited would add the other's publish and load to its own start. ``1`` splits every layout's
    graphs; ``0`` none."""
    value = settings.TORCH_SPLIT.value()
    if value in (None, ""):
        return layout in ("ddp", "multi-rank") and hosts()[0] > 1
    return settings.TORCH_SPLIT.switch()


def hosts() -> tuple[int, int]:
    """The job's hosts and this process's among them (see :func:`placement`); (1, 0) where the
    environment does not tell."""
    where = placement()
    return (where[0], where[1]) if where is not None else (1, 0)


def placement() -> tuple[int, int, int, int] | None:
    """Where this process is in its job: (hosts, its host, ranks of a host, its rank there), from
    torchrun's ``GROUP_WORLD_SIZE`` and ``GROUP_RANK`` (else ``WORLD_SIZE`` and ``RANK`` over
    ``LOCAL_WORLD_SIZE``) and ``LOCAL_RANK``; None where a variable does not read as a number."""
    env = os.environ
    try:
        local_world = max(1, int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1"))))
        local_rank = int(env.get("LOCAL_RANK", env.get("RANK", "0"))) % local_world
        count = max(1, int(env.get("GROUP_WORLD_SIZE", int(env.get("WORLD_SIZE", "1")) // local_world)))
        host = int(env.get("GROUP_RANK", int(env.get("RANK", "0")) // local_world)) % count
    except ValueError:
        return None
    return count, host, local_world, local_rank


def has_backward(torch: Any, gm: Any, inputs: list[Any]) -> bool:
    """Whether AOTAutograd compiles a backward for this graph: grad is on and an input or a
    parameter requires it. A graph without one is published as soon as its forward compiled."""
    if not torch.is_grad_enabled():
        return False
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)] + list(gm.parameters())
    return any(t.requires_grad for t in tensors)


def compile_to_share(
    torch: Any, grant: Grant, record: GraphRecord, compile_here: Callable[[], Any], publish_timeout: float, *, backward_at_once: bool = True
) -> Any:
    """Compiles a claimed graph here, as torch would (with this process's own compile pool), and
    publishes what it left in the background: torch's cache artifacts of this compile alone and
    the C++ it built. The claim ends when the publish lands (or fails, or the compile does),
    releasing the processes that wait for it. ``backward_at_once``: AOTAutograd compiles the graph's
    backward with its forward, so that the publish comes at once (a DDP piece's waiters block in
    collectives until it does); without it the backward compiles at the first backward, as torch
    would, and the claim is published then (:mod:`kiln.torch._first_backward`)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    from torch.compiler._cache import CacheArtifactManager

    began, wall = time.perf_counter(), time.time()
    try:
        with CacheArtifactManager.with_fresh_cache(), backward_now() if backward_at_once else _first_backward.forward_compile() as drawn:
            compiled = compile_here()
            compiled_at = time.perf_counter()
            saved = torch.compiler.save_cache_artifacts()
    except BaseException:
        grant.claim.close()
        raise
    seconds = time.perf_counter() - began
    record.phases.update(compile=compiled_at - began, save=seconds - (compiled_at - began))
    record.how = "kilnd"
    record.answered("compiled", grant.key, seconds, time.perf_counter())
    directory = cache_dir()

    def publish(artifacts: bytes) -> None:
        args = (grant, record, artifacts, directory, wall, seconds, publish_timeout)
        _publishes.start(threading.Thread(target=_publish, args=args, name="kiln-graph-publish", daemon=True))

    if saved is None:
        # Nothing to share (a graph that generates no code, say): compiled here, as torch would.
        # The empty answer is published all the same, so that a process that asks for the graph
        # later, or waits for this claim, compiles it at once instead of claiming it again.
        record.how, record.tier = "in-process", ""
        log.info("kiln: torch saved no cache artifacts for graph %s: nothing of it is shared", record.name)
        publish(b"")
        return compiled

    if drawn and not _first_backward.saved_entry(saved):
        _first_backward.wait(_first_backward.Pending(publish, grant.claim.close, saved[0], drawn))
    else:
        publish(saved[0])
    return compiled


class _Publishes:
    """The publishes in flight, which the process's exit waits for (at most
    :data:`EXIT_WAIT_SECS`): a short job, or one whose graphs publish at their first backward,
    would otherwise end before its compiles are shared."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.registered = False

    def start(self, thread: threading.Thread) -> None:
        with self.lock:
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            if not self.registered:
                atexit.register(self.wait)
                self.registered = True
        thread.start()

    def wait(self) -> None:
        deadline = time.monotonic() + EXIT_WAIT_SECS
        with self.lock:
            threads = list(self.threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


#: The longest a process's exit waits for its publishes in flight.
EXIT_WAIT_SECS = 30.0
_publishes = _Publishes()


def _publish(grant: Grant, record: GraphRecord, artifacts: bytes, directory: str, since: float, seconds: float, timeout: float) -> None:
    from .. import _fleet, errors

    began = time.perf_counter()
    try:
        # Two seconds of slack for file systems that keep coarse modification times.
        # An empty answer (nothing to share) carries no files: any built since are another graph's.
        files = native_files(directory, since - 2.0) if artifacts else []
        record.native_files = [path for path, _ in files]
        data = make_bundle(artifacts, files)
        _fleet.client().publish_torch_graph(grant.key, data, seconds, timeout=timeout)
        record.phases["publish"] = time.perf_counter() - began
    except (errors.KilnError, OSError) as e:
        warn_once("torch-graph:publish", "kiln: a torch.compile graph compiled here was not shared through kilnd: %s", e)
    finally:
        grant.claim.close()
