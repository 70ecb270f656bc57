"""Graphs compiled or loaded after Dynamo's compile returned: DDP's pieces, made ready at their
first call once every piece this process was granted is compiled (:class:`Pieces`), and async
graphs, which run eagerly until kilnd's answer arrives (:class:`AsyncGraph`)."""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import settings
from .._warn import warn_once
from . import _claim, _device, _inductor, _layout, snapshot
from ._ask import COMPILE_WAIT_SECS, Answer, Request, ask, ask_patiently, fallback, load, nothing_shared, wait_bound
from ._budget import WaitBudget
from ._claim import Grant, compile_to_share
from ._ledger import GraphRecord, traced
from ._ledger import report_soon as _report_soon


class Pieces:
    """The graphs of this process that compile or load at their first call (DDP's pieces), in
    the order they were traced.

    A piece's first call first compiles every piece this process was granted and has not
    compiled, in order: the other ranks and hosts wait for those, while this process would
    otherwise wait for theirs. Then it waits for its own answer (another process's compile), no
    longer than this process would take to compile the piece itself (:class:`WaitBudget`), and
    compiles it itself past that. ``KILN_TORCH_GRAPH_WAIT_SECS`` sets a fixed bound instead."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.pending: list[AsyncGraph] = []
        self.budget = WaitBudget()

    def add(self, graph: AsyncGraph) -> None:
        with self.changed:
            self.pending.append(graph)

    def answered(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def granted(self) -> list[AsyncGraph]:
        with self.changed:
            return [g for g in self.pending if g.compiled is None and isinstance(g.answer, Grant)]

    def prepare(self, graph: AsyncGraph) -> None:
        """Makes ``graph`` ready to run: compiled, loaded or, past the bound, compiled here."""
        with snapshot.compiling():
            self._prepare(graph)

    def bound(self, nodes: int) -> float:
        """How long a graph of ``nodes`` nodes may wait for another process's compile (see
        :class:`WaitBudget`): the fixed bound where ``KILN_TORCH_GRAPH_WAIT_SECS`` sets one, or
        where no rate is known, not even one read off Dynamo's traces."""
        if settings.TORCH_GRAPH_WAIT_SECS.value() not in (None, ""):
            return wait_bound()
        estimate = self.budget.bound(nodes)
        return wait_bound() if estimate is None else estimate

    def _prepare(self, graph: AsyncGraph) -> None:
        waited = 0.0
        while graph.compiled is None:
            for granted in self.granted():
                self._swap(granted)
            if graph.compiled is not None or graph.answer is not None:
                break
            # Read again each turn: a rate becomes known as this process's or others' compiles land.
            bound = self.bound(graph.nodes)
            if waited >= bound:
                graph.give_up(bound)
                break
            began = time.perf_counter()
            with self.changed:
                if graph.answer is None and not self.granted_locked():
                    self.changed.wait(min(bound - waited, 0.5))
            waited += time.perf_counter() - began
        graph.record.compile_s += waited
        if isinstance(graph.answer, Answer) or graph.answer == "late":
            # A wait for another's compile: loaded (what it left unspent goes to the next piece)
            # or given up. A piece compiled here for another reason was no wait.
            self.budget.waited(waited, graph.nodes)
        if graph.compiled is None:
            self._swap(graph)
        with self.changed:
            self.pending = [g for g in self.pending if g.compiled is None]

    def _swap(self, graph: AsyncGraph) -> None:
        """``graph``'s swap, its compile's seconds counted for the budget: this process's own
        (a grant, a fallback) or the claimant's of a loaded answer."""
        began = time.perf_counter()
        graph.swap()
        if isinstance(graph.answer, Answer) and graph.record.how == "kilnd":
            self.budget.compiled_elsewhere(graph.answer.compile_s, graph.nodes)
        elif graph.record.how == "in-process" or isinstance(graph.answer, Grant):
            self.budget.compiled_here(time.perf_counter() - began, graph.nodes)

    def granted_locked(self) -> bool:
        return any(g.compiled is None and isinstance(g.answer, Grant) for g in self.pending)


pieces = Pieces()


class Turns:
    """Swaps on the training thread, spaced out: after one that took d seconds (its load and
    first compiled call), the next waits d seconds, so that the swaps of a DDP job's pieces,
    answered together, stall many steps a little instead of one step for all of them."""

    def __init__(self) -> None:
        self.next_at = 0.0

    def free(self) -> bool:
        return time.perf_counter() >= self.next_at

    def took(self, seconds: float) -> None:
        self.next_at = time.perf_counter() + seconds


turns = Turns()


class AsyncGraph:
    """A graph that runs eagerly until kilnd's compile of it arrives, then compiled; or, when it
    ``waits``, one made ready at its first call instead of running eagerly (:class:`Pieces`)."""

    def __init__(
        self,
        gm: Any,
        example_inputs: list[Any],
        request: Request,
        inductor: Callable[[Any, list[Any]], Any],
        record: GraphRecord,
        started: float,
        waits: bool,
    ) -> None:
        import torch

        self.gm = gm
        #: The graph's size, by which a wait for another's compile of it is bounded (Pieces).
        self.nodes = len(getattr(getattr(gm, "graph", None), "nodes", ()))
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
        self.answer: Answer | Grant | str | None = None
        #: Set at the graph's second call: the first step has run, so the training thread has
        #: traced the frames around this graph and no longer needs Dynamo's compile lock.
        self.second_call = threading.Event()
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
        #: Whether the swap runs on the training thread, at a call: a graph moved from another
        #: GPU's key, whose load traces it again (make_fx patches torch's module calls
        #: process-wide), and a DDP piece, whose load on the fetching thread broke the eager steps
        #: beside it ("using FX to symbolically trace a dynamo-optimized function").
        self.swaps_at_call = getattr(self.context, "ddp_optimizer_ctx", None) is not None or bool(_device.graph_device(example_inputs))
        record.how = "pending" if waits else "eager"
        # It pays its serialization here and the swap later; a graph that waits, its wait too.
        record.async_compile, record.compile_s = not waits, time.perf_counter() - started
        if waits:
            pieces.add(self)
        self.thread = threading.Thread(target=self._fetch, args=(request,), name="kiln-graph", daemon=True)
        self.thread.start()

    def _fetch(self, request: Request) -> None:
        # A graph that runs eagerly meanwhile waits out kilnd's absence; one that waits does not.
        answer = ask(request) if self.waits else ask_patiently(request)
        with self.lock:
            if self.abandoned:
                if isinstance(answer, Grant):
                    answer.claim.close()
                return
            self.answer = answer
        self.record.answered_at = time.perf_counter()
        if not self.waits and isinstance(answer, Answer):
            # The load, and Inductor's import where torch.compile() left it out, take Dynamo's
            # compile lock: taken while the first step still traces the frames around this graph
            # (a graph break's resume, DDP's pieces), it stalled that step for the whole load.
            # After the first step the training thread traces nothing new, so they only share
            # the cores with the eager steps. A graph swapped at a call on the training thread
            # finds Inductor prepared here (imported, its keys computed), and runs eagerly until
            # it is.
            self.second_call.wait()
            try:
                _inductor.prepare()
                if not self.swaps_at_call:
                    self._swap_here()
            except Exception as e:  # noqa: BLE001 - a dead fetching thread would leave it eager unsaid
                _swap_failed(e)
                if self.compiled is None and not self.swaps_at_call:
                    self._stay_eager()
            if not self.swaps_at_call:
                # The load ran on this host's cores beside the eager steps: the compile's window,
                # which makes the eager samples taken in it contended, lasts until it is done.
                self.record.answered_at = time.perf_counter()
        pieces.answered()

    def _swap_here(self) -> None:
        """An async graph's swap, on the fetching thread where the load does not trace (loading
        kilnd's answer runs AOTAutograd and Inductor again over their filled caches, which on
        the training thread stalled a step; there the steps run on eagerly meanwhile), else on
        the training thread. Under Dynamo's compile lock, so it never overlaps a compile of the
        training thread's, on the graph's own GPU."""
        import torch
        from torch._dynamo.convert_frame import compile_lock

        # Inductor's CPU vector-instruction pick compiles test programs for seconds: waited for
        # outside the lock, so that the training thread's tracing never waits on it.
        _inductor.vec_isa_picked(self.example_inputs or [])
        device = _layout.device_of(self.example_inputs or [])
        index = next((t.device.index for t in self.example_inputs or [] if getattr(t, "device", None) is not None and t.device.type == device), None)
        # The graph's own GPU for the load, and the thread's current one back after it: on the
        # training thread the job's choice of device stays its own.
        on_device = torch.cuda.device(index) if device == "cuda" and index is not None else contextlib.nullcontext()
        with compile_lock, on_device:
            self.swap()

    def give_up(self, bound: float) -> None:
        """The first call waited ``bound`` seconds for another process's compile: compile here."""
        with self.lock:
            if self.answer is not None:
                return
            self.abandoned = True
            self.answer = "late"
        fallback("late", f"another process's compile did not land within {bound:.1f} s; compiled here")

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
        # On the training thread the swap stalls the step around it, so its warm-up opens now. On
        # the fetching thread it runs beside the eager steps, which are contended by it (the
        # compile's window covers it), not stalled: the warm-up opens as the swap ends.
        beside = threading.current_thread() is self.thread
        if not beside:
            self.record.swap_began(swap_started)
        context = torch._guards.tracing(self.context) if self.context is not None else contextlib.nullcontext()
        if self.context is not None:
            for tensor, symbolic in self.input_contexts:
                self.context.tensor_to_context[tensor] = symbolic
        try:
            with context:
                if isinstance(answer, Answer):
                    compiled, hit = load(torch, answer, self.record, inputs, self._compile(inputs))
                    if not hit:
                        fallback("not_reused", "torch's caches missed kilnd's artifacts; compiled here")
                    self.record.how = "kilnd" if hit else "in-process"
                    self.record.answered(answer.tier if hit else "", answer.key, answer.compile_s, swap_started)
                elif isinstance(answer, Grant):
                    _inductor.vec_isa_picked(inputs)
                    piece = self._compile(inputs)
                    compiled = compile_to_share(torch, answer, self.record, lambda: _inductor.in_process(piece), COMPILE_WAIT_SECS)
                    nothing_shared(self.record)
                else:
                    piece = self._compile(inputs)
                    compiled = _inductor.in_process(_claim.backward_with_forward(piece) if self.waits else piece)
                    self.record.how = "in-process"
                    self.record.phases["compile"] = time.perf_counter() - swap_started
        except Exception as e:  # noqa: BLE001 - the graph keeps running eagerly: never a wrong result
            if isinstance(answer, Grant):
                answer.claim.close()
            _swap_failed(e)
            self.record.how = "eager"
            self.record.swap_failed(time.perf_counter())
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
        if beside:
            self.record.swap_began(time.perf_counter())
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
            pieces.prepare(self)
        if (
            self.compiled is None
            and self.swaps_at_call
            and isinstance(self.answer, Answer)
            and turns.free()
            and _inductor.prepared()
            and _inductor.vec_isa_ready(self.example_inputs or [])
        ):
            # Between two calls of this graph the training thread traces nothing: the load runs
            # here, once, under Dynamo's lock, and the first compiled call (Triton's autotuning
            # benchmarks) right after it. Several pieces answered together take turns.
            began = time.perf_counter()
            try:
                self._swap_here()
            except Exception as e:  # noqa: BLE001 - on the training thread: never into the step
                _swap_failed(e)
            if self.compiled is None:
                self._stay_eager()
            try:
                return self(*args)
            finally:
                turns.took(time.perf_counter() - began)
        if self.compiled is None and self.answer is not None and not isinstance(self.answer, Answer):
            # A failed or refused async compile: the graph stays eager, never compiled on the
            # training thread (kiln on never stalls a step for a compile).
            self._stay_eager()
        if self.compiled is not None and not self.swapped:
            # The first compiled call: the time since the last eager call ran the swap's end.
            self.swapped = True
            self.record.restart()
        if self.compiled is None or self.compiled is self.gm:
            if traced(args):
                return self.gm(*args)
            if self.record.calls["eager"] >= 1:
                self.second_call.set()
            self.record.called("eager")
            return self.gm(*args)
        return self.record.run(self.compiled, self.gm, args)

    def _stay_eager(self) -> None:
        self.record.how = "eager"
        self.compiled = self.gm
        self.example_inputs = None
        self.input_contexts = []


def _swap_failed(e: BaseException) -> None:
    """Warns, once a process, that a graph's swap failed and it stays eager."""
    warn_once("torch-graph:swap", "kiln: a compiled graph could not replace its eager run (%s); it stays eager", e)
