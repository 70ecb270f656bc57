"""torch.compile graphs compiled once per fleet through kilnd, and optionally never waited for.

With ``KILN_TORCH=1``, :func:`install` routes torch.compile's Inductor backend through kiln, and
the graphs of the layouts chosen (:mod:`kiln.torch._layout`) go through kilnd. Each graph Dynamo
captured is serialized (torch's graph pickler, every op admitted, with its inputs' metadata and
the process's Inductor and functorch config; :mod:`kiln.torch._payload`), and kilnd keys it with
the process's torch, Triton, Python and CUDA and the host's GPUs. Then, blocking:

- kilnd holds the graph (its tiers, the fleet): the process loads torch's own cache artifacts
  (``torch.compiler.save_cache_artifacts``) and the C++ the compile built
  (:mod:`kiln.torch._answer`), and calls Inductor as it would have, which now finds its
  AOTAutograd and FX graph caches filled: no tracing of the joint graph, no code generation, no
  kernel compile;
- another process, rank or host compiles it: the process waits for that compile, then loads it;
- nobody has it: the process **claims** it and compiles it itself, exactly as torch would (it
  holds the traced graph and its own warm compile pool, which anyone else would have to rebuild),
  then publishes what the compile left while its first step runs. So a cold start costs what
  torch alone costs, and every other rank, process and host waits for this one compile.

A piece of a DDP graph goes to kilnd's workers instead, with every other piece at once: Dynamo's
DDP optimizer compiles them one at a time, and kilnd's workers side by side.

A graph on another GPU than the job's first travels as it reads on ``cuda:0``
(:mod:`kiln.torch._device`): its process cannot share its own compile (its code names its GPU),
so it waits for a twin's claim, and kilnd's torch workers compile it where none claims it in time.

Async (``KILN_TORCH_ASYNC=1``): a graph kilnd has not answered yet runs eagerly (Dynamo's traced
graph, autograd intact) while kilnd's workers compile it in the background; the compiled graph
replaces it at the first call after the answer arrived. ``with kiln.torch.blocking():`` around a
graph's first call compiles that graph the blocking way.

Every failure compiles in-process, as torch would, with one warning per reason, and is counted
by reason (:data:`FALLBACK_REASONS`; :func:`stats`): never a wrong result.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..client import TorchGraphClaim
from . import _claim, _device, _inductor, _layout, snapshot
from ._answer import BadBundle, Bundle, place
from ._answer import parse as parse_bundle
from ._claim import Grant, compile_to_share
from ._ledger import GraphRecord, _ledger, report_at_exit
from ._ledger import report_soon as _report_soon
from ._payload import Unserializable, serialize

log = logging.getLogger("kiln")

ASYNC_ENV = settings.TORCH_ASYNC.name
#: The longest a graph's call to kilnd lasts: a claim's life while its process compiles and
#: publishes, and an async graph's wait for kilnd's workers (a cold GPT-2 graph takes tens of
#: seconds). A blocking wait for another process's compile is bounded by :func:`wait_bound`.
COMPILE_WAIT_SECS = 1800.0

#: Why a graph was compiled in-process instead of by kilnd. Each is counted and named; none
#: costs the job more than torch's own compile of the graph (plus the round trip that found it).
FALLBACK_REASONS = (
    "kilnd_unreachable",  # no answer from kilnd (down, or backing off after it was)
    "unserializable",  # the graph or its inputs cannot travel (dynamic shapes, tensor subclasses...)
    "worker_failed",  # kilnd's worker crashed, timed out or raised
    "torch_mismatch",  # kilnd's torch workers run another torch
    "not_reused",  # kilnd's artifacts did not give torch a cache hit here
    "no_torch_worker",  # kilnd has no interpreter with torch for its workers
    "late",  # another process's compile of it did not land within the wait bound (wait_bound)
    "unshared",  # its code names its own GPU and no tier had it, or its compile left nothing to share
    "not_chosen",  # KILN_TORCH_GRAPHS names other layouts than the graph's: no warning
    "layout_off",  # by default, the graph's layout stays in the process (kiln.torch._layout): no warning
)
#: Reasons that are what the user asked for, the default, or what torch itself would do: logged,
#: not warned.
QUIET_REASONS = frozenset({"not_chosen", "layout_off", "unshared"})


async_enabled = _layout.async_enabled


# -- what this process did (kiln.torch._ledger) ------------------------------------------------


def _fallback(reason: str, detail: object) -> None:
    from .. import _fleet

    with _ledger.lock:
        _ledger.fallbacks[reason] = _ledger.fallbacks.get(reason, 0) + 1
        _ledger.unreported[reason] = _ledger.unreported.get(reason, 0) + 1
    # Reported like every graph's cost, even by a process none of whose graphs reached kilnd.
    _report_soon()
    if reason in QUIET_REASONS:
        log.info("kiln: a torch.compile graph is compiled in this process (%s): %s", reason, detail)
        return
    _fleet.warn_once(
        f"torch-graph:{reason}",
        "kiln: a torch.compile graph is compiled in this process instead of by kilnd (%s): %s",
        reason,
        detail,
    )


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


# -- kilnd ------------------------------------------------------------------------------------


@dataclass
class _Answer:
    bundle: Bundle
    tier: str
    compile_s: float
    key: str = ""


@dataclass(frozen=True)
class _Request:
    """What this process asks kilnd for one graph, and how.

    ``claim``: the process can share its own compile (its code is what every process of the
    graph runs), so where nobody has the graph it is granted the claim and compiles it;
    ``no_worker``: the process cannot share its compile, so it takes a stored answer and
    otherwise compiles the graph for itself at once, as torch would."""

    payload: bytes
    name: str
    claim: bool = False
    wait_for_claim: float = 0.0
    no_worker: bool = False


def wait_bound() -> float:
    """How long a graph waits for another process's compile of it before compiling it itself.

    The waiter would otherwise compile the graph itself, in about the time the process it waits
    for takes: that one started first, so waiting ends sooner unless it stalls or died. A dead
    claimant's claim ends with its connection (kilnd hands the compile to the next); the bound
    covers one that is alive and stuck. ``KILN_TORCH_GRAPH_WAIT_SECS`` sets it; unset, it is
    twice the longest compile this process has paid itself, and at least :data:`MIN_WAIT_SECS`
    (a cold GPT-2 graph takes about 30 s on an H100)."""
    raw = os.environ.get(settings.TORCH_GRAPH_WAIT_SECS.name, "").strip()
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            from .. import _fleet

            _fleet.warn_once("torch-graph-wait", "kiln: %s=%r is not a number of seconds; using the default", settings.TORCH_GRAPH_WAIT_SECS.name, raw)
    with _ledger.lock:
        own = [g.phases.get("compile", 0.0) for g in _ledger.graphs]
    return max(MIN_WAIT_SECS, 2.0 * max(own, default=0.0))


#: The shortest default wait for another process's compile (see :func:`wait_bound`).
MIN_WAIT_SECS = 120.0


def _ask(request: _Request, *, bound: float | None = None) -> _Answer | Grant | str:
    """kilnd's answer (for a ``claim``, maybe the compile itself), or the fallback reason
    (already counted). ``bound`` (seconds) is how long to wait for the answer: past it the process
    compiles the graph itself (``late``)."""
    import torch

    from .. import _fleet, errors

    if not _fleet.available():
        _fallback("kilnd_unreachable", "kilnd did not answer recently")
        return "kilnd_unreachable"
    try:
        triton_version, python_version, cuda_version = _environment()
        client = _fleet.client()
        ask: Callable[..., Any] = (
            functools.partial(
                client.claim_torch_graph,
                answer_within=bound,
                wait_for_claim=request.wait_for_claim,
            )
            if request.claim
            else functools.partial(
                client.compile_torch_graph, wait_for_claim=request.wait_for_claim, no_worker=request.no_worker
            )
        )
        timeout = COMPILE_WAIT_SECS if request.claim or bound is None else min(bound + request.wait_for_claim, COMPILE_WAIT_SECS)
        asked = ask(
            request.payload,
            torch.__version__,
            job=_ledger.job,
            name=request.name,
            timeout=timeout,
            triton_version=triton_version,
            python_version=python_version,
            cuda_version=cuda_version,
        )
        if isinstance(asked, TorchGraphClaim):
            if asked.answer.compile_here:
                return Grant(asked, asked.answer.key)
            asked.close()
            asked = asked.answer
        answer = asked
    except errors.DeadlineExceeded as e:
        _fallback("late", f"no answer within {bound or COMPILE_WAIT_SECS:.0f} s ({e.details}); compiled here")
        return "late"
    except errors.KilnError as e:
        details = e.details or ""
        if any(f"{part}_version" in details for part in ("torch", "triton", "python", "cuda")):
            reason = "torch_mismatch"
        elif "no torch worker" in details:
            reason = "no_torch_worker"
        else:
            _fleet.failed(e, "torch graph compile")
            reason = "kilnd_unreachable"
        _fallback(reason, details)
        return reason
    if answer.compile_here:
        _fallback("unshared", "nobody had it or claimed it, and its code names this process's GPU")
        return "unshared"
    if not answer.ok:
        last = answer.log.strip().splitlines()[-1:] or ["no log"]
        _fallback("worker_failed", last[0])
        log.debug("kiln: the torch worker's log for graph %s:\n%s", request.name, answer.log)
        return "worker_failed"
    try:
        bundle = parse_bundle(answer.artifacts)
    except BadBundle as e:
        _fallback("worker_failed", f"kilnd's answer does not read: {e}")
        return "worker_failed"
    return _Answer(bundle, answer.tier.name.lower(), answer.compile_seconds, answer.key)


@functools.cache
def _environment() -> tuple[str, str, str]:
    """This process's Triton, Python and CUDA versions, as kilnd's workers report theirs."""
    import sys

    import torch

    try:
        import triton

        triton_version = str(triton.__version__)
    except ImportError:
        triton_version = ""
    return triton_version, sys.version.split()[0], torch.version.cuda or ""


def _load(torch: Any, answer: _Answer, record: GraphRecord, inputs: list[Any], compile_in_process: Callable[[], Any]) -> tuple[Any, bool]:
    """Loads kilnd's artifacts and lets Inductor find them: (compiled, whether torch used them).

    torch hits at one of two levels. A graph hits AOTAutograd's cache, a DDP piece too (the
    worker makes its inputs fake, as here): nothing is traced again. A graph on another GPU than
    the first misses it (its key names the device), so AOTAutograd traces it again here and its
    forward and backward graphs hit Inductor's FX graph cache with the entries moved from
    ``cuda:0`` (:mod:`kiln.torch._device`): no code generation and no kernel compile."""
    import torch._dynamo.utils
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    place(answer.bundle.files, cache_dir())
    record.native_files = [path for path, _ in answer.bundle.files]
    torch.compiler.load_cache_artifacts(answer.bundle.artifacts)

    def lookups() -> tuple[int, int, int]:
        counters = torch._dynamo.utils.counters
        inductor = counters["inductor"]
        fx_misses = inductor["fxgraph_cache_miss"] + inductor["fxgraph_cache_bypass"]
        return counters["aot_autograd"]["autograd_cache_miss"], fx_misses, inductor["fxgraph_cache_hit"]

    before = lookups()
    _inductor.pool_off()
    _inductor.vec_isa_picked(inputs)
    compiled = compile_in_process()
    aot_misses, fx_misses, fx_hits = (after - was for after, was in zip(lookups(), before, strict=True))
    # Code generation is what a miss would cost: Inductor found the graph's code (an AOTAutograd
    # miss that hits the FX graph cache only traced the joint graph again).
    return compiled, fx_misses == 0 and (aot_misses == 0 or fx_hits > 0)


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

    def here() -> Any:
        return inductor(gm, example_inputs)

    refusal = _choice.refusal(layout)
    if refusal is not None:
        _fallback(_choice.reason, refusal)
        return _in_process(record, started, gm, here)
    _inductor.pick_vec_isa_early(example_inputs)
    try:
        payload = serialize(gm, example_inputs, config)
    except Unserializable as e:
        _fallback("unserializable", e)
        return _in_process(record, started, gm, here)
    if async_enabled() and not getattr(_blocking, "on", False):
        request = _Request(payload, record.name)
        return _AsyncGraph(gm, example_inputs, request, inductor, record, started, waits=False)
    # A graph whose payload is its own code (on the CPU, or the job's first GPU) is claimed: where
    # nobody has it, this process compiles it, as torch would, and shares it. A rank on another
    # GPU cannot share its compile (its code names its GPU): it loads a stored answer, and
    # otherwise compiles the graph itself at once. Its twin on the first GPU traces the graph
    # beside it, so waiting for the twin's compile would only add its publish and the load. No
    # worker compiles a blocking graph cold beside the job's own compiles unless the setting asks
    # (KILN_TORCH_CLAIM=0).
    how = _claim.mode()
    shares = how == _claim.CLAIM and _device.moved_index(gm, example_inputs) is None
    request = _Request(
        payload,
        record.name,
        claim=shares,
        no_worker=not shares and how == _claim.CLAIM,
    )
    if layout == "ddp":
        # Dynamo's DDP optimizer traces and compiles its pieces one after another before the
        # frame runs. Each piece asks kilnd as it is traced and is compiled (or loaded) at its
        # first call, so every rank has claimed its pieces before the first runs, and compiles
        # those first (see _Pieces). The ranks of a host trace the same pieces in the same order:
        # where each can share its compile (on the CPU; on GPUs only the first GPU's rank can),
        # each piece falls to one of them by its number, and the others leave it to that rank for
        # a moment before claiming it themselves, so the host's ranks split the pieces.
        if shares and device == "cpu" and not _falls_to_this_rank(record.name):
            request = dataclasses.replace(request, wait_for_claim=SPLIT_WAIT_SECS)
        return _AsyncGraph(gm, example_inputs, request, inductor, record, started, waits=True)
    # One process's graph compiles its backward at its first backward, as torch would; the
    # ranks of a job block in collectives while they wait, so theirs publish at once.
    answer = _ask(request, bound=wait_bound())
    return _finish(torch, record, started, gm, example_inputs, answer, here, backward_now=layout != "single")


#: How long a rank leaves a DDP piece that falls to another rank of its host for that rank to
#: claim: the ranks trace each piece within a second of each other.
SPLIT_WAIT_SECS = 2.0


def _falls_to_this_rank(name: str) -> bool:
    """Whether the DDP piece ``name`` (``forward:0/0 bucket 3``) falls to this process among its
    host's ranks (torchrun's ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``): piece N to local rank
    (N - 1) mod the host's ranks."""
    try:
        piece = int(name.rsplit(" bucket ", 1)[1])
        local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    except (IndexError, ValueError):
        return True
    return local_world <= 1 or (piece - 1) % local_world == local_rank % local_world


def _nothing_shared(record: GraphRecord) -> None:
    """Counts a claimed graph whose compile left torch no cache artifacts to share (one that
    generated no code): compiled here as torch would, and nobody else's to load."""
    if record.how == "in-process":
        _fallback("unshared", "its compile left no cache artifacts to share")


def _in_process(record: GraphRecord, started: float, gm: Any, compile_here: Callable[[], Any], *, backward_now: bool = False) -> Any:
    """Compiles the graph in this process, as torch would, and charges it to the ledger: a
    fallback's compile is what the process paid, and its calls are the job's compiled steps.
    ``backward_now``: the backward compiles with the forward (:func:`_backward_with_forward`)."""
    compiled = _inductor.in_process(_backward_with_forward(compile_here) if backward_now else compile_here)
    record.how = "in-process"
    record.phases["compile"] = time.perf_counter() - started
    return _ready(record, started, gm, compiled)


def _backward_with_forward(compile_here: Callable[[], Any]) -> Callable[[], Any]:
    """``compile_here`` with AOTAutograd compiling the backward with the forward, as a claimed
    rank's graph does. The ranks of a job meet in collectives: where one compiled its backward at
    the forward and another at the first backward, the two compiles ran one after the other
    instead of side by side (FSDP2 on 2 H200s: 1.16x plain's first step)."""

    def both() -> Any:
        with _claim.backward_now():
            return compile_here()

    return both


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
    answer: _Answer | Grant | str,
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
        compiled = compile_to_share(torch, answer, record, lambda: _inductor.in_process(here), COMPILE_WAIT_SECS, backward_at_once=backward_now)
        _nothing_shared(record)
        return _ready(record, started, gm, compiled)
    answered = time.perf_counter()
    compiled, hit = _load(torch, answer, record, inputs, here)
    if not hit:
        _fallback("not_reused", "torch's caches missed kilnd's artifacts; compiled here")
    record.how = "kilnd" if hit else "in-process"
    record.answered(answer.tier if hit else "", answer.key, answer.compile_s, answered)
    return _ready(record, started, gm, compiled)


class _Pieces:
    """The graphs of this process that compile or load at their first call (DDP's pieces), in
    the order they were traced.

    A piece's first call first compiles every piece this process was granted and has not
    compiled, in order: the other ranks and hosts wait for those, while this process would
    otherwise wait for theirs. Then it waits for its own answer (another process's compile),
    at most :func:`wait_bound` beyond its own compiles, and compiles it itself past that."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.pending: list[_AsyncGraph] = []

    def add(self, graph: _AsyncGraph) -> None:
        with self.changed:
            self.pending.append(graph)

    def answered(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def granted(self) -> list[_AsyncGraph]:
        with self.changed:
            return [g for g in self.pending if g.compiled is None and isinstance(g.answer, Grant)]

    def prepare(self, graph: _AsyncGraph) -> None:
        """Makes ``graph`` ready to run: compiled, loaded or, past the bound, compiled here."""
        with snapshot.compiling():
            self._prepare(graph)

    def _prepare(self, graph: _AsyncGraph) -> None:
        waited = 0.0
        bound = wait_bound()
        while graph.compiled is None:
            for granted in self.granted():
                granted.swap()
            if graph.compiled is not None or graph.answer is not None:
                break
            if waited >= bound:
                graph.give_up(bound)
                break
            began = time.perf_counter()
            with self.changed:
                if graph.answer is None and not self.granted_locked():
                    self.changed.wait(min(bound - waited, 0.5))
            waited += time.perf_counter() - began
        graph.record.compile_s += waited
        if graph.compiled is None:
            graph.swap()
        with self.changed:
            self.pending = [g for g in self.pending if g.compiled is None]

    def granted_locked(self) -> bool:
        return any(g.compiled is None and isinstance(g.answer, Grant) for g in self.pending)


_pieces = _Pieces()


class _AsyncGraph:
    """A graph that runs eagerly until kilnd's compile of it arrives, then compiled; or, when it
    ``waits``, one made ready at its first call instead of running eagerly (:class:`_Pieces`)."""

    def __init__(
        self,
        gm: Any,
        example_inputs: list[Any],
        request: _Request,
        inductor: Callable[[Any, list[Any]], Any],
        record: GraphRecord,
        started: float,
        waits: bool,
    ) -> None:
        import torch

        self.gm = gm
        # Dynamo's own inputs, kept until the swap: its tracing context knows them (and that their
        # shapes are static), where the next call's tensors would be traced as dynamic.
        self.example_inputs: list[Any] | None = example_inputs
        self.inductor = inductor
        self.record = record
        self.started = started
        self.waits = waits
        self.compiled: Any = None
        #: Whether a call has seen the compiled graph yet.
        self.swapped = False
        self.answer: _Answer | Grant | str | None = None
        #: Set when the first call stopped waiting for the answer: a grant that comes later is
        #: handed back at once (nobody would compile it).
        self.abandoned = False
        self.lock = threading.Lock()
        # Dynamo's tracing context (its fake tensors and the graph's inputs' origins): the
        # compile at the swap runs inside it, as it would have inside Dynamo.
        self.context = torch._guards.TracingContext.try_get()
        # How Dynamo fakified each input (static shapes, mostly). Dynamo forgets this when its
        # compile returns; without it the swap's AOTAutograd would make every dimension dynamic.
        known = self.context.tensor_to_context if self.context is not None else {}
        self.input_contexts = [(t, known[t]) for t in example_inputs if isinstance(t, torch.Tensor) and t in known]
        record.how = "pending" if waits else "eager"
        # It pays its serialization here and the swap later; a graph that waits, its wait too.
        record.async_compile, record.compile_s = not waits, time.perf_counter() - started
        if waits:
            _pieces.add(self)
        self.thread = threading.Thread(target=self._fetch, args=(request,), name="kiln-graph", daemon=True)
        self.thread.start()

    def _fetch(self, request: _Request) -> None:
        answer = _ask(request)
        with self.lock:
            if self.abandoned:
                if isinstance(answer, Grant):
                    answer.claim.close()
                return
            self.answer = answer
        self.record.answered_at = time.perf_counter()
        if not self.waits and isinstance(answer, _Answer):
            self._swap_here()
            # The load ran on this host's cores beside the eager steps: the compile's window,
            # which makes the eager samples taken in it contended, lasts until it is done.
            self.record.answered_at = time.perf_counter()
        _pieces.answered()

    def _swap_here(self) -> None:
        """An async graph's swap, on this background thread: loading kilnd's answer runs
        AOTAutograd and Inductor again over their filled caches (seconds on a CPU), which on the
        training thread stalled a step; here the steps run on eagerly meanwhile. Under Dynamo's
        compile lock, so it never overlaps a compile of the training thread's, on the graph's
        own GPU (a thread starts on the first)."""
        import torch
        from torch._dynamo.convert_frame import compile_lock

        device = _layout.device_of(self.example_inputs or [])
        index = next((t.device.index for t in self.example_inputs or [] if getattr(t, "device", None) is not None and t.device.type == device), None)
        with compile_lock:
            if device == "cuda" and index is not None:
                torch.cuda.set_device(index)
            self.swap()

    def give_up(self, bound: float) -> None:
        """The first call waited ``bound`` seconds for another process's compile: compile here."""
        with self.lock:
            if self.answer is not None:
                return
            self.abandoned = True
            self.answer = "late"
        _fallback("late", f"another process's compile did not land within {bound:.0f} s; compiled here")

    def swap(self) -> None:
        """Replaces the eager graph with its compile: kilnd's answer loaded, a grant compiled here
        and shared, or (any fallback) Inductor's compile here."""
        with snapshot.compiling():
            self._swap()

    def _swap(self) -> None:
        import torch

        answer, inputs = self.answer, self.example_inputs or []
        self.example_inputs = None
        swap_started = time.perf_counter()
        context = torch._guards.tracing(self.context) if self.context is not None else contextlib.nullcontext()
        if self.context is not None:
            for tensor, symbolic in self.input_contexts:
                self.context.tensor_to_context[tensor] = symbolic
        try:
            with context:
                if isinstance(answer, _Answer):
                    compiled, hit = _load(torch, answer, self.record, inputs, self._compile(inputs))
                    if not hit:
                        _fallback("not_reused", "torch's caches missed kilnd's artifacts; compiled here")
                    self.record.how = "kilnd" if hit else "in-process"
                    self.record.answered(answer.tier if hit else "", answer.key, answer.compile_s, swap_started)
                elif isinstance(answer, Grant):
                    _inductor.vec_isa_picked(inputs)
                    piece = self._compile(inputs)
                    compiled = compile_to_share(torch, answer, self.record, lambda: _inductor.in_process(piece), COMPILE_WAIT_SECS)
                    _nothing_shared(self.record)
                else:
                    piece = self._compile(inputs)
                    compiled = _inductor.in_process(_backward_with_forward(piece) if self.waits else piece)
                    self.record.how = "in-process"
                    self.record.phases["compile"] = time.perf_counter() - swap_started
        except Exception as e:  # noqa: BLE001 - the graph keeps running eagerly: never a wrong result
            from .. import _fleet

            if isinstance(answer, Grant):
                answer.claim.close()
            _fleet.warn_once("torch-graph:swap", "kiln: a compiled graph could not replace its eager run (%s); it stays eager", e)
            self.record.how = "eager"
            self.compiled = self.gm
            return
        finally:
            # As Dynamo does after its compile: weak references here block swap_tensors.
            known: Any = self.context.tensor_to_context if self.context is not None else {}
            for tensor, _ in self.input_contexts:
                known.pop(tensor, None)
            self.input_contexts = []
        self.record.compile_s += time.perf_counter() - swap_started
        self.record.ready_after_s = time.perf_counter() - self.started
        self.compiled = compiled
        _report_soon()

    def _compile(self, inputs: list[Any]) -> Callable[[], Any]:
        """Inductor's compile of the graph, as Dynamo would have run it. A piece of Dynamo's DDP
        optimizer compiles under a tracing context of its own: AOTAutograd compiles a piece's
        backward at its first backward, from the forward's metadata the DDP optimizer stacks in
        the context as it compiles each piece (and it compiled none here). One stack entry a piece
        keeps pieces swapped at different steps from taking each other's."""
        import torch

        context = self.context
        ddp = getattr(context, "ddp_optimizer_ctx", None)
        if context is None or ddp is None:
            return lambda: self.inductor(self.gm, inputs)

        def compile_piece() -> Any:
            own = copy.copy(context)
            own.fakify_first_call = False
            own.ddp_optimizer_ctx = type(ddp)()
            with torch._guards.tracing(own):
                compiled = self.inductor(self.gm, inputs)
            if own.fw_metadata is not None:
                own.ddp_optimizer_ctx.curr_bucket = 0
                own.ddp_optimizer_ctx.metadata_per_bucket = [own.fw_metadata]
            return compiled

        return compile_piece

    def __call__(self, *args: Any) -> Any:
        if self.compiled is None and self.waits:
            _pieces.prepare(self)
        if self.compiled is None and self.answer is not None and not isinstance(self.answer, _Answer):
            # A failed or refused async compile: the graph stays eager, never compiled on the
            # training thread (kiln on never stalls a step for a compile).
            self._stay_eager()
        if self.compiled is not None and not self.swapped:
            # The first compiled call: the time since the last eager call ran the swap's end.
            self.swapped = True
            self.record.restart()
        if self.compiled is None or self.compiled is self.gm:
            self.record.called("eager")
            return self.gm(*args)
        return self.record.run(self.compiled, self.gm, args)

    def _stay_eager(self) -> None:
        self.record.how = "eager"
        self.compiled = self.gm
        self.example_inputs = None
        self.input_contexts = []


# -- installation -----------------------------------------------------------------------------

_installed = False
#: The graphs that go to kilnd (see kiln.torch._layout), read once at install.
_choice = _layout.Choice(frozenset())


def install(job: str) -> bool:
    """Routes torch.compile's Inductor backend through kiln in this process; idempotent. Returns
    whether it is installed (``KILN_TORCH_GRAPHS=0``, or a value that names no layout, leaves it
    out). Graphs of layouts that stay in the process still pass through, to be counted."""
    global _installed, _choice
    from .. import _fleet

    try:
        _choice = _layout.chosen()
    except _layout.BadSetting as e:
        _fleet.warn_once("torch-graph-setting", "kiln: %s; every graph compiles in this process", e)
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
    # Async graphs are compiled by kilnd's workers, which import torch for seconds: start them
    # now, in the background. A blocking graph nobody has is compiled by its own process: workers
    # started for it would take its cores while it imports torch and compiles.
    if _choice.layouts and async_enabled():
        threading.Thread(target=_start_workers, name="kiln-graph-warm", daemon=True).start()
    return True


def _start_workers() -> None:
    from .. import _fleet, errors

    try:
        if _fleet.available():
            _fleet.client().warm_torch_workers(start=True, timeout=5.0)
    except errors.KilnError as e:
        log.debug("kiln: kilnd did not start its torch workers: %s", e)
