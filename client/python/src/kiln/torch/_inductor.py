"""This process's Inductor, set up as kiln's graph path needs it: no compile pool to load
kilnd's answer (and the pool back for a compile here), torch's own ptxas from the first graph on,
and the CPU's vector instructions picked while a graph waits for kilnd. Each is process-wide
state of torch's that :mod:`kiln.torch._graph` sets at the right moment."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kiln")


#: Inductor's compile threads before :func:`pool_off`: the pool an in-process compile gets.
own_threads: int | None = None


def pool_off() -> None:
    """Keeps Inductor from starting its pool of compile processes to load kilnd's artifacts.
    Loading a graph (and a DDP piece's backward, at its first backward) compiles nothing, yet
    Inductor's first kernel starts the pool: as many processes as the host has cores, up to 32,
    each importing torch, just as the job's first steps run. The setting is outside every cache
    key; a graph compiled in this process gets the pool back (:func:`in_process`)."""
    global own_threads
    import torch._inductor.config as config

    if own_threads is None:
        own_threads = config.compile_threads or config.decide_compile_threads()
        config.compile_threads = 1


def in_process(compile_here: Callable[[], Any]) -> Any:
    """Inductor's compile of a graph here, with the compile pool it would have had."""
    if own_threads is None:
        return compile_here()
    import torch._inductor.config as config

    with config.patch(compile_threads=own_threads):
        return compile_here()


def same_ptxas() -> None:
    """Has Triton assemble with torch's own ptxas in this process from its first graph on, as
    kilnd's workers do. Triton keys its cache with its ptxas, and torch sets its own only where a
    kernel compiles (in its pool's processes, or here just before), so a kernel the pool compiled
    was looked up here under Triton's bundled ptxas and compiled again, and a graph loaded
    from kilnd missed the kernels of an answer made under the other one."""
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
    except ImportError:
        return
    _set_triton_ptxas_path()


#: The thread picking Inductor's CPU vector instructions (:func:`pick_vec_isa_early`).
_vec_isa_pick: threading.Thread | None = None


def pick_vec_isa_early(example_inputs: list[Any]) -> None:
    """Starts Inductor's pick of the CPU's vector instructions in the background at a process's
    first CPU graph: one with a tensor input on the CPU. A graph with no tensor input at all (a
    resume function after a graph break that holds only Python values, say) is no CPU graph: on
    a GPU host it builds no C++, and picking for it cost a DDP rank 50 s on the record. Inductor picks once per process, the first time it builds or loads C++: it
    builds a test program for each candidate and loads each in a fresh interpreter that imports
    torch, seconds of subprocesses (7.4 s on a 2-core host). A process loading kilnd's answer
    would pay them after its wait; picked meanwhile, they cost it nothing. Mostly the pick
    waits on its subprocesses, so the thread holds the GIL little."""
    global _vec_isa_pick
    if _vec_isa_pick is not None or not cpu_graph(example_inputs):
        return

    def pick() -> None:
        try:
            from torch._inductor import cpu_vec_isa

            cpu_vec_isa.pick_vec_isa()
        except Exception:  # noqa: BLE001 - Inductor picks for itself when it needs to
            log.debug("kiln: Inductor's vector instructions were not picked ahead", exc_info=True)

    _vec_isa_pick = threading.Thread(target=pick, name="kiln-vec-isa", daemon=True)
    _vec_isa_pick.start()


def cpu_graph(example_inputs: list[Any]) -> bool:
    """Whether a graph computes on the CPU: a tensor input of it is there."""
    return any(getattr(getattr(t, "device", None), "type", None) == "cpu" for t in example_inputs)


def vec_isa_picked(example_inputs: list[Any]) -> None:
    """Waits for :func:`pick_vec_isa_early`'s pick before a CPU graph compiles or loads, so that
    Inductor does not pick again beside it; any other graph goes on."""
    if _vec_isa_pick is not None and cpu_graph(example_inputs):
        _vec_isa_pick.join()
