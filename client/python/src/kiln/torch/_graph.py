"""torch.compile graphs compiled once per fleet through kilnd, and optionally never waited for.

With ``KILN_TORCH=1``, :func:`install` routes torch.compile's Inductor backend through kiln, and
the graphs of the layouts chosen (:mod:`kiln.torch._layout`) go through kilnd. Each graph Dynamo
captured is serialized (torch's graph pickler, every op admitted, with its inputs' metadata and
the process's Inductor and functorch config; :mod:`kiln.torch._payload`) and asked for
(:mod:`kiln.torch._ask`). Then, blocking:

- kilnd holds the graph (its tiers, the fleet): the process loads torch's own cache artifacts and
  the C++ the compile built, and calls Inductor as it would have, which now finds its AOTAutograd
  and FX graph caches filled: no tracing of the joint graph, no code generation, no kernel
  compile;
- another process, rank or host compiles it: the process waits for that compile (bounded by its
  own compile's time), then loads it;
- nobody has it: the process **claims** it and compiles it itself, exactly as torch would, then
  shares what the compile left (:mod:`kiln.torch._claim`).

A graph on another GPU than the job's first travels as it reads on ``cuda:0``
(:mod:`kiln.torch._device`): its process cannot share its own compile (its code names its GPU),
so it loads a stored answer or compiles the graph itself at once. DDP's pieces are compiled or
loaded at their first call, and async graphs (``KILN_TORCH_ASYNC=1``) run eagerly until kilnd's
answer arrives (:mod:`kiln.torch._deferred`); ``with kiln.torch.blocking():`` around a graph's
first call compiles that graph the blocking way.

Every failure compiles in-process, as torch would, with one warning per reason, and is counted
by reason: never a wrong result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import settings
from .._warn import warn_once
from . import _callbacks, _claim, _compiled_autograd, _deferred, _device, _inductor, _layout
from ._ask import COMPILE_WAIT_SECS, Answer, Request, ask, fallback, load, nothing_shared
from ._claim import Grant, compile_to_share
from ._deferred import AsyncGraph
from ._ledger import GraphRecord, _ledger, report_at_exit, traced
from ._ledger import report_soon as _report_soon
from ._payload import Unserializable, serialize

log = logging.getLogger("kiln")

ASYNC_ENV = settings.TORCH_ASYNC.name


async_enabled = _layout.async_enabled


_blocking = threading.local()


@contextlib.contextmanager
def blocking() -> Iterator[None]:
    """Graphs first compiled inside this block are compiled the blocking way, even with
    ``KILN_TORCH_ASYNC=1``: for a graph whose eager run would not fit in memory, say."""
    before = getattr(_blocking, "on", False)
    _blocking.on = True
    try:
        yield
    finally:
        _blocking.on = before


def _frame_function() -> str:
    """The function whose frame Dynamo is compiling (``forward``, ``train_step``; a resume after
    a graph break is ``torch_dynamo_resume_in_forward_at_16``), or empty outside a trace."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        return str(InstructionTranslator.current_tx().f_code.co_name)
    except Exception:  # noqa: BLE001 - a name is a label: never a reason to fail a compile
        return ""


def _graph_name(gm: Any) -> str:
    """Which graph this is, for people: the function Dynamo compiled, its compile id and, where
    Dynamo's DDP optimizer split the frame's graph into one piece per bucket (each piece keeps the
    frame's compile id), the bucket: ``forward:0/0``, ``forward:1/0 bucket 3``. Without a frame,
    the graph's class stands for the function; another piece of one name gets ``piece N``."""
    import torch

    cid = gm.meta.get("dynamo_compile_id") if hasattr(gm, "meta") else None
    function = _frame_function() or gm.__class__.__name__
    name = f"{function}:{cid}" if cid is not None else function
    ddp = _layout.of_graph(torch) == "ddp"
    with _ledger.lock:
        pieces = sum(1 for g in _ledger.graphs if g.name == name or g.name.startswith((f"{name} piece ", f"{name} bucket ")))
    if ddp:
        return f"{name} bucket {pieces + 1}"
    return f"{name} piece {pieces + 1}" if pieces else name


def _compile_id(torch: Any, gm: Any) -> str | None:
    """The id of the Dynamo compile that traced ``gm`` (``"0/0"``), as its callbacks name it."""
    cid = torch._guards.CompileContext.current_compile_id()
    if cid is None and hasattr(gm, "meta"):
        cid = gm.meta.get("dynamo_compile_id")
    return None if cid is None else str(cid)


def _frame_started(args: Any) -> None:
    """Dynamo's start callback: a frame's compile began (see _budget)."""
    if getattr(args, "callback_trigger", None) is not None and args.callback_trigger.name == "DYNAMO":
        _deferred.pieces.budget.frame_started(str(args.compile_id))


def compile_graph(gm: Any, example_inputs: list[Any], inductor: Callable[[Any, list[Any]], Any], config: dict[str, Any]) -> Any:
    """kiln's Inductor backend: what torch.compile runs for each graph Dynamo captured."""
    import torch

    # Here, not at install: kiln installs while torch._dynamo imports, before Inductor's cache
    # module can be imported.
    _device.install(torch)
    _inductor.same_ptxas()
    record = GraphRecord(_graph_name(gm))
    with _ledger.lock:
        _ledger.graphs.append(record)
    report_at_exit()
    started = time.perf_counter()
    layout = _layout.of_graph(torch)
    device = _layout.device_of(example_inputs)
    # Dynamo's trace of this graph's frame ends here: what a wait's bound reads before any
    # compile has shown this process's rate (see _budget).
    _deferred.pieces.budget.graph_traced(_compile_id(torch, gm), len(gm.graph.nodes), device)

    def here() -> Any:
        # Every compile here waits for kiln's early pick of the CPU's vector instructions: beside
        # it, Inductor would pick again, a second round of subprocesses that each import torch.
        _inductor.vec_isa_picked(example_inputs)
        return inductor(gm, example_inputs)

    refusal = _choice.refusal(layout)
    if refusal is not None:
        fallback("not_chosen", refusal)
        return _in_process(record, started, gm, here)
    _inductor.pick_vec_isa_early(example_inputs)
    unserializable: Unserializable | None = None
    try:
        payload = serialize(gm, example_inputs, config)
    except Unserializable as e:
        unserializable = e
    record.phases["prepare"] = time.perf_counter() - started
    runs_async = async_enabled() and not getattr(_blocking, "on", False)
    if unserializable is not None:
        if runs_async:
            fallback("unserializable", unserializable, eager=True)
            return _eager(record, started, gm)
        fallback("unserializable", unserializable)
        return _in_process(record, started, gm, here)
    if runs_async:
        request = Request(payload, record.name)
        return AsyncGraph(gm, example_inputs, request, inductor, record, started, waits=False)
    how = _claim.mode()
    shares = how == _claim.CLAIM and _device.moved_index(gm, example_inputs) is None
    splits = _claim.splits(layout)
    waits = layout == "single" or splits
    request = blocking_request(payload, record.name, how=how, shares=shares, waits=waits, splits=splits)
    if not waits:
        # Exactly torch's compile, on torch's schedule (a backward at the first backward), for
        # every rank: a claim is shared once its backward has compiled too.
        return _finish(torch, record, started, gm, example_inputs, _asked(record, request), here, backward_now=False)
    if layout == "ddp":
        # Dynamo's DDP optimizer traces and compiles its pieces one after another before the
        # frame runs. Each piece asks kilnd as it is traced and is compiled (or loaded) at its
        # first call, so every rank has claimed its pieces before the first runs, and compiles
        # those first (see _Pieces). Every rank of every host traces the same pieces in the same
        # order, and the first to ask would claim them all (a host that starts half a second
        # ahead traces every piece before another asks for one). So each piece falls to one of
        # the processes that can share their compile (every rank on the CPU; on GPUs only each
        # host's first GPU's rank) by its number, and the others leave it to that one for a
        # moment before claiming it themselves: the hosts and ranks split the pieces.
        falls = _falls_to(record.name, ranks_share=device == "cpu") if shares else "here"
        if falls != "here":
            request = dataclasses.replace(request, wait_for_claim=SPLIT_WAIT_SECS if falls == "host" else HOST_SPLIT_WAIT_SECS)
        return AsyncGraph(gm, example_inputs, request, inductor, record, started, waits=True)
    # One process's graph compiles its backward at its first backward, as torch would; the
    # ranks of a job block in collectives while they wait, so theirs publish at once.
    return _waited(torch, record, started, gm, example_inputs, request, here, backward_now=layout != "single")


#: The shortest a blocking graph's wait is bounded to. Its bound covers kilnd's first answer to
#: the ask itself (a grant where nobody holds the graph), a round trip that a small graph's
#: estimated compile, a fraction of a second, could cut short on a busy host: the graph would
#: then compile unshared (``late``) though nobody else was compiling it.
ANSWER_FLOOR_SECS = 1.0


def _waited(
    torch: Any,
    record: GraphRecord,
    started: float,
    gm: Any,
    inputs: list[Any],
    request: Request,
    here: Callable[[], Any],
    *,
    backward_now: bool,
) -> Any:
    """A graph that may wait for another process's compile of it (its claim held on this host or
    by another host of a split job), as :func:`_finish` makes it ready. The wait lasts no longer
    than this process's own compile of it would take (the process's :class:`WaitBudget`, which
    DDP's pieces share); past it, the process compiles it itself (``late``). The wait, and the
    compile loaded or paid here, tell the budget what the next graph may wait."""
    budget = _deferred.pieces.budget
    nodes = len(gm.graph.nodes)
    answer = _asked(record, request, bound=max(_deferred.pieces.bound(nodes), ANSWER_FLOOR_SECS))
    if isinstance(answer, Answer) or answer == "late":
        budget.waited(record.phases.get("ask", 0.0), nodes)
    began = time.perf_counter()
    compiled = _finish(torch, record, started, gm, inputs, answer, here, backward_now=backward_now)
    if isinstance(answer, Answer) and record.how == "kilnd":
        budget.compiled_elsewhere(answer.compile_s, nodes)
    elif isinstance(answer, Grant) or record.how == "in-process":
        budget.compiled_here(time.perf_counter() - began, nodes)
    return compiled


def blocking_request(payload: bytes, name: str, *, how: str, shares: bool, waits: bool, splits: bool) -> Request:
    """What a graph that does not run eagerly asks kilnd.

    A graph whose payload is its own code (on the CPU, or the job's first GPU) is claimed: where
    nobody has it, this process compiles it, as torch would, and shares it. A rank on another GPU
    cannot share its compile (its code names its GPU). It loads a stored answer, and otherwise
    compiles the graph itself at once: its twin on the first GPU traces the graph beside it, so
    waiting for the twin's compile would add its publish and the load. A rank waits for nobody
    unless the job splits its cold compile (see _claim.splits); then such a rank leaves the graph
    to its twin (:data:`TWIN_WAIT_SECS`) and waits for that claim (or whoever compiles it in the fleet),
    so that each graph is compiled once in the fleet rather than once more per GPU. No worker
    compiles a blocking graph cold beside the job's own compiles unless the setting asks
    (KILN_TORCH_CLAIM=0), or a split job's rank on another GPU finds nobody claimed it."""
    if how == _claim.CLAIM and splits and not shares:
        return Request(payload, name, wait_for_claim=TWIN_WAIT_SECS)
    return Request(payload, name, claim=shares, no_worker=how == _claim.CLAIM and not (shares and waits))


def _asked(record: GraphRecord, request: Request, *, bound: float | None = None) -> Answer | Grant | str:
    """:func:`ask`, its round trip (and any wait for another process's compile) charged to the
    graph's ``ask`` phase."""
    began = time.perf_counter()
    try:
        return ask(request, bound=bound)
    finally:
        record.phases["ask"] = time.perf_counter() - began


#: How long a rank leaves a DDP piece that falls to another rank of its host for that rank to
#: claim: the ranks trace each piece within a second of each other.
SPLIT_WAIT_SECS = 2.0
#: The same for a piece that falls to another host. Hosts start a job less together: on the H200
#: host, two hosts' set-up before their first step differed by up to 2.5 s, so a 2 s wait had
#: one host claim every piece. The wait runs beside the tracing, and a rank first needs the
#: piece after compiling its own share, so it costs nothing unless the other host is that late.
HOST_SPLIT_WAIT_SECS = 8.0
#: How long a split job's rank on another GPU leaves a graph to its twin on the first GPU (the
#: wait ends as soon as the twin claims it). Longer than the twin's own wait for another host's
#: claim, so that when neither claims it the twin does, never a kilnd worker: on the H200 host a
#: first GPU's rank began its first step 1.3 s after its twin, past a 2 s wait, and kilnd's
#: workers compiled that host's share instead. kilnd waits at most 10 s for a claim.
TWIN_WAIT_SECS = HOST_SPLIT_WAIT_SECS + SPLIT_WAIT_SECS


def _falls_to(name: str, *, ranks_share: bool) -> str:
    """Where the DDP piece ``name`` (``forward:0/0 bucket 3``) falls among the job's processes
    that can share their compiles: piece N to host (N - 1) mod the hosts, and within it to
    sharer (N - 1) // the hosts, mod its sharers. ``here`` (this
    process, or a graph that is no piece), ``host`` (another rank of this host) or ``fleet``
    (another host). ``ranks_share``: every rank of a host shares (on the CPU), so the sharers
    are each host's ranks in turn; on GPU hosts only the first GPU's rank shares, one a host.
    Hosts are torchrun's ``GROUP_RANK`` of ``GROUP_WORLD_SIZE`` (else ``RANK`` and
    ``WORLD_SIZE`` over ``LOCAL_WORLD_SIZE``), ranks its ``LOCAL_RANK`` of ``LOCAL_WORLD_SIZE``."""
    try:
        piece = int(name.rsplit(" bucket ", 1)[1])
    except (IndexError, ValueError):
        return "here"
    where = _claim.placement()
    if where is None:
        return "here"
    hosts, host, local_world, local_rank = where
    # The hosts first, then a host's ranks: hosts have cores of their own, where a host's ranks
    # share theirs, so a job with fewer pieces than sharers spreads them over the hosts.
    per_host = local_world if ranks_share else 1
    owner = (piece - 1) % (hosts * per_host)
    if owner % hosts != host:
        return "fleet"
    return "here" if owner // hosts == (local_rank if ranks_share else 0) else "host"


def _in_process(record: GraphRecord, started: float, gm: Any, compile_here: Callable[[], Any], *, backward_now: bool = False) -> Any:
    """Compiles the graph in this process, as torch would, and charges it to the ledger: a
    fallback's compile is what the process paid, and its calls are the job's compiled steps.
    ``backward_now``: the backward compiles with the forward (:func:`kiln.torch._claim.backward_with_forward`)."""
    compiled = _inductor.in_process(_claim.backward_with_forward(compile_here) if backward_now else compile_here)
    record.how = "in-process"
    record.phases["compile"] = time.perf_counter() - started
    return _ready(record, started, gm, compiled)


def _eager(record: GraphRecord, started: float, gm: Any) -> Any:
    """An async graph that cannot travel to kilnd, run eagerly for the rest of the process, as an
    async graph whose compile failed is: compiled here it would stall the step of its first call
    for the whole compile (a dynamic-shape graph 11.4 s on an H100, an optimizer step holding its
    state 9.5 s), and it cannot compile beside the steps: AOTAutograd's and Inductor's traces
    patch torch's module calls process-wide, which broke the eager steps of the training thread
    when a test compiled such a graph on another thread."""
    record.how = "eager"
    record.compile_s = time.perf_counter() - started

    def run(*args: Any) -> Any:
        if not traced(args):
            record.called("eager")
        return gm(*args)

    return run


def _ready(record: GraphRecord, started: float, gm: Any, compiled: Any) -> Any:
    record.compile_s = time.perf_counter() - started
    record.ready_after_s = record.compile_s
    _report_soon()

    def run(*args: Any) -> Any:
        return record.run(compiled, gm, args)

    return run


def _finish(
    torch: Any,
    record: GraphRecord,
    started: float,
    gm: Any,
    inputs: list[Any],
    answer: Answer | Grant | str,
    here: Callable[[], Any],
    *,
    backward_now: bool,
) -> Any:
    """The compiled graph from kilnd's answer: a grant compiled here and shared, an answer
    loaded, or a fallback compiled here."""
    if isinstance(answer, str):
        return _in_process(record, started, gm, here, backward_now=backward_now)
    if isinstance(answer, Grant):
        _inductor.vec_isa_picked(inputs)
        at_once = backward_now or not _claim.has_backward(torch, gm, inputs)
        compiled = compile_to_share(torch, answer, record, lambda: _inductor.in_process(here), COMPILE_WAIT_SECS, backward_at_once=at_once)
        nothing_shared(record)
        return _ready(record, started, gm, compiled)
    answered = time.perf_counter()
    compiled, hit = load(torch, answer, record, inputs, here)
    if not hit:
        fallback("not_reused", "torch's caches missed kilnd's artifacts; compiled here")
    record.how = "kilnd" if hit else "in-process"
    record.answered(answer.tier if hit else "", answer.key, answer.compile_s, answered)
    return _ready(record, started, gm, compiled)


# -- installation -----------------------------------------------------------------------------

_installed = False
#: The graphs that go to kilnd (see kiln.torch._layout), read once at install.
_choice = _layout.Choice(frozenset())


def install(job: str) -> bool:
    """Routes torch.compile's Inductor backend through kiln in this process; idempotent. Returns
    whether it is installed (``KILN_TORCH_GRAPHS=0``, or a value that names no layout, leaves it
    out). Graphs of layouts that stay in the process still pass through, to be counted."""
    global _installed, _choice
    try:
        _choice = _layout.chosen()
    except _layout.BadSetting as e:
        warn_once("torch-graph-setting", "kiln: %s; every graph compiles in this process", e)
        return False
    if _layout.switched_off():
        return False
    import torch

    _ledger.job = job
    if _installed:
        return True
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is None:  # a torch without torch.compile's Inductor entry point: nothing to route
        return False
    original: Any = wrapper.__call__

    def __call__(self: Any, model_: Any, inputs_: Any) -> Any:
        return compile_graph(model_, list(inputs_), lambda gm, inputs: original(self, gm, inputs), dict(self.config))

    wrapper.__call__ = __call__
    _installed = True
    _callbacks.keep(torch._dynamo, start=_frame_started)
    # kiln's gRPC client, imported here on the thread that imports Dynamo, before any thread of
    # kiln's (publishes, reports, the snapshot's save) or Inductor's (remote cache lookups) needs
    # it. Imported first by two threads at once, it tripped Python's import-deadlock avoidance,
    # which handed one thread a partly initialized grpc: the stubs' version check raised, and a
    # rank's compile failed. The import (about 0.1 s) is the one the first compile would pay.
    from .. import _fleet, errors  # noqa: F401
    # Async graphs are compiled by kilnd's workers, which import torch for seconds: start them
    # now, in the background. A blocking graph nobody has is compiled by its own process: workers
    # started for it would take its cores while it imports torch and compiles.
    if _choice.layouts and async_enabled():
        threading.Thread(target=_start_workers, name="kiln-graph-warm", daemon=True).start()
        # An async job's first step runs eagerly: Inductor is imported after it, off the
        # training thread, not by torch.compile()'s call before it.
        _inductor.defer_compile_fx(torch)
        from .. import _import_hooks

        _import_hooks.watch({_compiled_autograd.MODULE: _compiled_autograd.attach})
    return True


def _start_workers() -> None:
    from .. import _fleet, errors

    try:
        if _fleet.available():
            _fleet.client().warm_torch_workers(start=True, timeout=5.0)
    except errors.KilnError as e:
        log.debug("kiln: kilnd did not start its torch workers: %s", e)
