"""This process's Inductor, set up as kiln's graph path needs it: no compile pool to load
kilnd's answer (and the pool back for a compile here), torch's own ptxas from the first graph on,
the CPU's vector instructions picked while a graph waits for kilnd, and, for an async job,
Inductor's ``compile_fx`` imported and torch's source keys computed after the first step, off
the training thread, rather than by ``torch.compile()`` and the first load. Each
is process-wide state of torch's that :mod:`kiln.torch._graph` sets at the right moment."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
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


def vec_isa_ready(example_inputs: list[Any]) -> bool:
    """Whether a graph's load would start at once: :func:`vec_isa_picked` would not wait. An
    async graph swapped on the training thread waits for this first, since the pick's seconds of
    subprocesses would otherwise stall the step of the swap (23 s for a DDP piece on a 2-core
    host), and the eager steps go on meanwhile."""
    return _vec_isa_pick is None or not _vec_isa_pick.is_alive() or not cpu_graph(example_inputs)


def cpu_graph(example_inputs: list[Any]) -> bool:
    """Whether a graph computes on the CPU: a tensor input of it is there."""
    return any(getattr(getattr(t, "device", None), "type", None) == "cpu" for t in example_inputs)


def vec_isa_picked(example_inputs: list[Any]) -> None:
    """Waits for :func:`pick_vec_isa_early`'s pick before a CPU graph compiles or loads, so that
    Inductor does not pick again beside it; any other graph goes on."""
    if _vec_isa_pick is not None and cpu_graph(example_inputs):
        _vec_isa_pick.join()


class DeferredConfig(Mapping[str, Any]):
    """Inductor's patched config, as ``torch.compile()`` reads it for its public
    ``get_compiler_config()``, read at first use instead of at the call.

    Reading it imports Inductor's ``compile_fx`` and with it most of Inductor: about 650 modules,
    2.5 s of ``torch.compile()``'s call on an H100 host and 0.6 s on a 2-core CPU, all before
    the job's first step. torch keeps the value only for that API and for pickling a compiled
    function; nothing in Dynamo's trace reads it. An async job's first step runs eagerly and
    needs no Inductor, so there the import waits until the swap (:func:`prepare`)."""

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read = read
        self._value: dict[str, Any] | None = None

    def _config(self) -> dict[str, Any]:
        if self._value is None:
            self._value = dict(self._read())
        return self._value

    def __getitem__(self, key: str) -> Any:
        return self._config()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._config())

    def __len__(self) -> int:
        return len(self._config())

    def __repr__(self) -> str:
        return repr(self._config())

    def copy(self) -> dict[str, Any]:
        return dict(self._config())

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as the dict torch would have kept.
        return (dict, (self._config(),))


def defer_compile_fx(torch: Any) -> None:
    """Has ``torch.compile()`` leave Inductor's ``compile_fx`` unimported (see
    :class:`DeferredConfig`); idempotent."""
    wrapper: Any = getattr(torch, "_TorchCompileInductorWrapper", None)
    read = getattr(wrapper, "get_compiler_config", None)
    if wrapper is None or read is None or getattr(read, "_kiln", False):
        return

    def get_compiler_config(self: Any) -> DeferredConfig:
        return DeferredConfig(lambda: read(self))

    get_compiler_config._kiln = True  # type: ignore[attr-defined]
    wrapper.get_compiler_config = get_compiler_config


#: Set once :func:`prepare` has run in this process.
_prepared = threading.Event()
_preparing = threading.Lock()


def prepare() -> None:
    """Does, off the training thread and after the job's first step, what a process's first load
    of a graph would otherwise do on it, once per process:

    - imports Inductor's ``compile_fx`` (where ``torch.compile()`` left it out), under Dynamo's
      compile lock, so that no Dynamo trace of the training thread runs beside the import: two
      threads importing one package's modules at once is how Python hands one of them a partly
      initialized module;
    - computes the source hashes every cache key of torch's holds, ``torch_key()`` and Triton's
      ``triton_key()`` (memoized): 0.7 s of a DDP piece's first swap on a 2-core host, 0.5 s on
      an H100. Files hashed, nothing traced: outside the lock. A key the job's snapshot gave
      (:mod:`kiln.torch._source_keys`) is read, not computed.

    An async graph swapped on the training thread waits for this (:func:`prepared`), running
    eagerly meanwhile. Each step that fails is left to the load, which does it as torch would."""
    with _preparing:
        if _prepared.is_set():
            return
        try:
            from torch._dynamo.convert_frame import compile_lock

            with compile_lock:
                import torch._inductor.compile_fx  # noqa: F401
        except Exception:  # noqa: BLE001 - the swap imports it itself
            log.debug("kiln: Inductor's compile_fx was not imported ahead", exc_info=True)
        try:
            from torch._inductor.codecache import torch_key
            from torch._inductor.runtime.triton_compat import HAS_TRITON, triton_key

            torch_key()
            if HAS_TRITON:
                triton_key()
        except Exception:  # noqa: BLE001 - the first cache lookup computes them itself
            log.debug("kiln: torch's source keys were not computed ahead", exc_info=True)
        _prepared.set()


def prepared() -> bool:
    """Whether :func:`prepare` has run: else a swap on the training thread would stall a step for
    its work, and the graph runs eagerly a little longer instead."""
    return _prepared.is_set()
