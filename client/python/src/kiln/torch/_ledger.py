"""What this process's torch.compile graphs cost, and whether the compile pays for itself.

Each graph's calls are timed from one call to the next (so a sample spans the whole step:
backward, optimizer and data included), eagerly and compiled. The process reports its whole
account to kilnd 30 s after a graph compiles and at exit, under a random process id, so a report
received twice counts once; kilnd merges it into the job's ledger and sends it on to the fleet
cache, which merges every process, rank, host and restart of the job (see
``kiln_proto::torch_ledger``). At exit the process prints one line with the job's return unless
``KILN_TORCH_QUIET=1``.

Honest figures:

- an eager sample taken while a compile this process asked for ran on this host (kilnd's answer
  came from its compile or another request's on this host, not from a stored answer) is
  *contended*: the compile took the CPU. The ledger uses uncontended samples where there are any,
  and says when it had to use contended ones;
- a graph served warm is charged what this process spent (serialization, round trip, load), and
  its stored compile seconds count as saved; the cold compile counts once per graph key;
- ``KILN_TORCH_MEASURE=N`` runs N calls of each graph eagerly after it is compiled (async or
  blocking), spread out and never while a compile is in flight, so a job that never runs eagerly
  still gets an eager baseline. Off by default: an eager step can need more memory than a
  compiled one (Inductor frees and fuses what eager keeps), and a job sized to the compiled
  graph's memory could run out.
"""

from __future__ import annotations

import atexit
import bisect
import functools
import logging
import os
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import settings

log = logging.getLogger("kiln")

MEASURE_ENV = settings.TORCH_MEASURE.name
QUIET_ENV = settings.TORCH_QUIET.name
#: Seconds after a graph's compile before the process reports (its first compiled calls timed).
REPORT_AFTER_S = 30.0
#: Samples kept per graph and way; past it the older half goes.
MAX_SAMPLES = 512
#: Compiled calls after the swap before the first measured eager call, and between two.
MEASURE_AFTER = 5
MEASURE_EVERY = 10

#: Tiers whose answer was stored: no compile ran on this host for it.
STORED_TIERS = ("memory", "disk", "remote")


class Intervals:
    """Spans of time, merged and sorted once, so that whether a sample overlaps one is a
    bisection: a report tests every sample of every graph (up to 512 each way) against every
    graph's compile window and warm-up, on a thread that shares the training thread's GIL."""

    def __init__(self, spans: Sequence[tuple[float, float]]) -> None:
        merged: list[tuple[float, float]] = []
        for start, stop in sorted(spans):
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
            else:
                merged.append((start, stop))
        self._merged = merged
        self._starts = [start for start, _ in merged]

    def overlap(self, sample: tuple[float, float]) -> bool:
        """Whether a sample (its end, its seconds) overlaps any span."""
        end, seconds = sample
        # The last span to start before the sample ends: the one reaching furthest of those.
        i = bisect.bisect_left(self._starts, end) - 1
        return i >= 0 and end - seconds < self._merged[i][1]


def measure_calls() -> int:
    """``KILN_TORCH_MEASURE``: eager calls to run of each graph after its compile (0: off)."""
    return int(settings.TORCH_MEASURE.number(0))


def traced(args: Sequence[Any]) -> bool:
    """Whether a graph's call runs on Dynamo's fake tensors rather than a step's: Dynamo's DDP
    optimizer calls each compiled piece so while it traces the frame, inside the first step. A
    call's tensors are all fake or none is, so its first tensor says. Every step's call asks,
    so the classes are looked up once."""
    tensor, fake = _tensor_classes()
    first = next((a for a in args if isinstance(a, tensor)), None)
    return isinstance(first, fake)


@functools.cache
def _tensor_classes() -> tuple[type, type]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    return torch.Tensor, FakeTensor


@dataclass
class GraphRecord:
    """One graph's life in this process: how it was compiled, and what its calls cost."""

    name: str
    how: str = "pending"  # kilnd | in-process | eager
    tier: str = ""
    #: The stored key kilnd answered under.
    key: str = ""
    #: Seconds this process paid: serialization, a blocking wait for kilnd, the load.
    compile_s: float = 0.0
    #: The worker's compile seconds, as stored with the answer (the cold compile's, on a hit).
    stored_compile_s: float = 0.0
    #: Whether the graph ran eagerly while kilnd compiled it.
    async_compile: bool = False
    #: (end, seconds) from one call to the next, by the way the earlier call ran.
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {"eager": [], "compiled": []})
    calls: dict[str, int] = field(default_factory=lambda: {"eager": 0, "compiled": 0})
    ready_after_s: float | None = None
    #: Compiled C++ kilnd's answer carried, by path under Inductor's cache (none on a GPU, mostly).
    native_files: list[str] = field(default_factory=list)
    #: Seconds of each step of this process's own work on the graph: ``prepare`` (kiln's work
    #: before it asks kilnd: the graph's layout and device, the payload's pickle, or the attempt
    #: that found it cannot travel), ``ask`` (the round trip, and any wait for another process's
    #: compile), and where it did more than load an answer, a claimed graph's ``compile``
    #: (Inductor, here), ``save`` (torch's artifacts of it) and ``publish`` (the C++ found, the
    #: bundle and the RPC, in the background). Where a cold start through kilnd costs more than
    #: torch's own, these say which part.
    phases: dict[str, float] = field(default_factory=dict)
    #: When the graph was first asked for, and when kilnd's answer (or its fallback) came back.
    created: float = field(default_factory=time.perf_counter)
    answered_at: float | None = None
    #: Eager calls run after the compile to measure, and those still to run.
    measured: int = 0
    measure_left: int = field(default_factory=measure_calls)
    #: When the graph's warm-up began and when its second compiled call began. The warm-up is
    #: the first compiled call's autotuning and first backward, which a step around them pays
    #: once, and the load before them where it ran on the training thread (a load on the fetching
    #: thread runs beside the eager steps: they are contended then, not stalled). Another graph's
    #: sample that spans it times this warm-up, not a step.
    warm_from: float | None = None
    warm_until: float | None = None
    #: Whether older samples were dropped, by way (the first no longer holds the warm-up then).
    trimmed: dict[str, bool] = field(default_factory=lambda: {"eager": False, "compiled": False})
    _last: tuple[str, float] | None = None
    _compiled_since_measure: int = 0

    def called(self, mode: str) -> None:
        now = time.perf_counter()
        if self._last is not None:
            _ledger.first_step_ended()
            samples = self.samples[self._last[0]]
            samples.append((now, now - self._last[1]))
            if len(samples) > MAX_SAMPLES:
                del samples[: MAX_SAMPLES // 2]
                self.trimmed[self._last[0]] = True
        self._last = (mode, now)
        if mode == "compiled" and self.calls["compiled"] == 1 and self.warm_from is not None and self.warm_until is None:
            self.warm_until = now
        self.calls[mode] += 1

    def restart(self) -> None:
        """Forgets when the last call started: the time since was not a step's."""
        self._last = None

    def swap_began(self, at: float) -> None:
        """The swap to the compiled graph began: its warm-up window opens."""
        if self.warm_from is None:
            self.warm_from = at

    def swap_failed(self, at: float) -> None:
        """The swap failed and the graph runs on eagerly: its warm-up window closes, or it would
        stay open, with no second compiled call to close it, over every later sample."""
        if self.warm_from is not None and self.warm_until is None:
            self.warm_until = at

    def warm_up(self, now: float) -> tuple[float, float] | None:
        """The swap's warm-up window (still open until the graph's second compiled call)."""
        if self.warm_from is None:
            return None
        return (self.warm_from, now if self.warm_until is None else self.warm_until)

    def answered(self, tier: str, key: str, stored_compile_s: float, at: float) -> None:
        """kilnd's answer: the tier that served it, its key and its stored compile seconds."""
        self.tier, self.key, self.stored_compile_s = tier, key, stored_compile_s
        if self.answered_at is None:
            self.answered_at = at

    def run(self, compiled: Callable[..., Any], eager: Callable[..., Any], args: Sequence[Any]) -> Any:
        """Runs one call of the compiled graph, or, when a measurement is due (KILN_TORCH_MEASURE),
        of the eager one; and times it. A call on fake tensors is no step: it runs, untimed."""
        if traced(args):
            return compiled(*args)
        if self.measure_left > 0 and self._measure_due():
            self.measure_left -= 1
            self.measured += 1
            self._compiled_since_measure = 0
            self.called("eager")
            return eager(*args)
        self._compiled_since_measure += 1
        self.called("compiled")
        return compiled(*args)

    def _measure_due(self) -> bool:
        wait = MEASURE_AFTER if self.measured == 0 else MEASURE_EVERY
        return self._compiled_since_measure >= wait and not _ledger.compiling()

    def window(self, now: float) -> tuple[float, float] | None:
        """When a compile for this graph ran on this host as this process saw it: from its request
        to kilnd's answer (still open while waiting), unless the answer was a stored one."""
        if self.answered_at is None:
            return (self.created, now) if self.how in ("pending", "eager") else None
        if self.tier in STORED_TIERS:
            return None
        return (self.created, self.answered_at)

    def served(self) -> str:
        if self.how == "kilnd":
            return "cold" if self.tier == "compiled" else self.tier
        if self.how in ("in-process", "eager"):
            return self.how
        return ""

    def cost(self, windows: Sequence[tuple[float, float]], warm_ups: Sequence[tuple[float, float]] = ()) -> Any:
        """What this graph's calls cost. ``windows``: when a compile ran on this host (an eager
        sample in one is contended); ``warm_ups``: every graph's swap warm-up (a sample that
        spans one, another graph's too, timed the swap, not a step, and counts neither way)."""
        from .results import TorchGraphCost

        compiling, warming = Intervals(windows), Intervals(warm_ups)

        def values(mode: str, keep: Callable[[tuple[float, float]], bool] = lambda _: True) -> list[float]:
            samples = self.samples[mode]
            # The first interval each way holds the swap or the first step's warm-up; a graph's
            # one compiled interval is its warm-up, not a figure.
            if (len(samples) > 1 or mode == "compiled") and not self.trimmed[mode]:
                samples = samples[1:]
            return [d for sample in samples if keep(sample) and not warming.overlap(sample) for d in (sample[1],)]

        contended = compiling.overlap

        def median(v: list[float]) -> float:
            return statistics.median(v) if v else 0.0

        alone = values("eager", lambda s: not contended(s))
        crowded = values("eager", contended)
        compiled = values("compiled")
        return TorchGraphCost(
            name=self.name,
            eager_calls=self.calls["eager"],
            compiled_calls=self.calls["compiled"],
            eager_median_s=median(alone),
            compiled_median_s=median(compiled),
            compile_s=self.compile_s,
            key=self.key,
            served=self.served(),
            stored_compile_s=self.stored_compile_s,
            async_compile=self.async_compile,
            eager_samples=len(alone),
            eager_contended_samples=len(crowded),
            eager_contended_median_s=median(crowded),
            compiled_samples=len(compiled),
            measured_calls=self.measured,
        )


class _Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fallbacks: dict[str, int] = {}
        self.unreported: dict[str, int] = {}
        self.graphs: list[GraphRecord] = []
        self.job = ""
        #: This process, as the ledgers know it: a random id new at each start.
        self.process = secrets.token_hex(8)
        self.started_unix_ms = int(time.time() * 1000)
        #: When the process's first step ended, by its clock: the first time one of its graphs was
        #: called again (0 until then). The job's ledger spreads these across ranks: rank skew.
        self.first_step_unix_ms = 0
        #: Backwards compiled autograd captured while a graph ran eagerly, run uncompiled
        #: (:mod:`kiln.torch._compiled_autograd`).
        self.eager_backwards = 0

    def first_step_ended(self) -> None:
        if not self.first_step_unix_ms:
            self.first_step_unix_ms = max(int(time.time() * 1000), self.started_unix_ms)

    def running_eagerly(self) -> bool:
        """Whether any of this process's graphs runs eagerly now (async, kilnd's compile not
        swapped in, or one that cannot travel)."""
        with self.lock:
            return any(g.how == "eager" for g in self.graphs)

    def compiling(self) -> bool:
        """Whether a compile this process asked for is still in flight."""
        now = time.perf_counter()
        return any(g.answered_at is None and g.window(now) is not None for g in list(self.graphs))

    def costs(self) -> list[Any]:
        now = time.perf_counter()
        with self.lock:
            graphs = list(self.graphs)
        windows = [w for g in graphs if (w := g.window(now)) is not None]
        warm_ups = [w for g in graphs if (w := g.warm_up(now)) is not None]
        return [g.cost(windows, warm_ups) for g in graphs]


_ledger = _Ledger()


def rank() -> int:
    """This process's rank (torchrun's ``RANK``), -1 when unknown."""
    try:
        return int(os.environ.get("RANK", "-1"))
    except ValueError:
        return -1


def stats() -> dict[str, Any]:
    """What the graph path did in this process: fallbacks by reason, each graph's record, and
    the seconds kiln's set-up took by the import that ran it."""
    from .. import _import_hooks

    with _ledger.lock:
        return {
            "fallbacks": {k: v for k, v in _ledger.fallbacks.items() if v},
            "process": _ledger.process,
            "first_step_unix_ms": _ledger.first_step_unix_ms,
            "eager_backwards": _ledger.eager_backwards,
            "setup_s": {k: round(v, 4) for k, v in _import_hooks.spent.items()},
            "graphs": [
                {
                    "name": g.name,
                    "how": g.how,
                    "tier": g.tier,
                    "key": g.key,
                    "compile_s": g.compile_s,
                    "stored_compile_s": g.stored_compile_s,
                    "calls": dict(g.calls),
                    "measured": g.measured,
                    "ready_after_s": g.ready_after_s,
                    "native_files": list(g.native_files),
                    "phases": dict(g.phases),
                }
                for g in _ledger.graphs
            ],
        }


def report(*, ended: bool = False) -> Any:
    """Sends this process's fallbacks (since the last report) and its graphs' costs (from its
    start) to kilnd; returns the job's return (:class:`kiln.TorchJobReturn`), the fleet's when
    kilnd reached it, or ``None`` when kilnd does not answer."""
    # One report at a time, so the final one (at exit) is sent after any the background thread
    # has in flight, not beside it (kilnd also ignores a process's report that arrives after its
    # final one).
    with _send_lock:
        return _send(ended)


_send_lock = threading.Lock()


def _send(ended: bool) -> Any:
    """One report (:func:`report`), under ``_send_lock``."""
    from .. import _fleet

    costs = _ledger.costs()
    with _ledger.lock:
        fallbacks, _ledger.unreported = _ledger.unreported, {}
        job = _ledger.job
    answer = _fleet.call(
        "torch graph report",
        lambda c: c.report_torch_graphs(
            job,
            fallbacks,
            costs,
            process=_ledger.process,
            rank=rank(),
            started_unix_ms=_ledger.started_unix_ms,
            first_step_unix_ms=_ledger.first_step_unix_ms,
            ended=ended,
            timeout=10,
        ),
        None,
    )
    if answer is None:
        with _ledger.lock:
            for k, v in fallbacks.items():
                _ledger.unreported[k] = _ledger.unreported.get(k, 0) + v
    return answer


def _count(n: float) -> str:
    return f"{round(n):,}"


def exit_line(r: Any) -> str:
    """The one line a process prints at exit: what the compile cost the job and what it has
    saved, and when it pays for itself, or what to do when it does not."""
    job = f" (job {r.job}, {r.processes} processes)" if r.processes > 1 else ""
    cost = f"kiln: torch.compile cost this job {r.compile_s:.1f} s"
    if r.speedup <= 0:
        why = r.verdict.removeprefix("not measured yet: ")
        return f"{cost} over {_count(r.steps)} steps{job}; not measured yet: {why}"
    saved = (r.eager_step_s - r.compiled_step_s) * r.steps
    if r.compiled_step_s >= r.eager_step_s:
        return (
            f"{cost} and saves nothing over {_count(r.steps)} steps{job}: a compiled step ({r.compiled_step_s * 1e3:.2f} ms) "
            f"is no faster than an eager one ({r.eager_step_s * 1e3:.2f} ms); run it eagerly"
        )
    line = f"{cost} and has saved {saved:.1f} s over {_count(r.steps)} steps{job}"
    needed = _count(r.break_even_steps + 0.4999)
    if r.steps >= r.break_even_steps:
        return f"{line}; it paid for itself after {needed} steps"
    if r.ended:
        return f"{line}; it needed {needed} steps to pay for itself: run it eagerly, or with KILN_TORCH_ASYNC=1"
    return f"{line}; it pays for itself after {needed} steps"


def _at_exit() -> None:
    ret = report(ended=True)
    if ret is None or settings.TORCH_QUIET.switch():
        return
    # Every process with a graph prints it, whatever happened to its graphs: a job whose graphs
    # all compiled in the process is the one whose compile the line is most for.
    with _ledger.lock:
        any_graph = bool(_ledger.graphs)
    if any_graph and ret.graphs:
        print(exit_line(ret), file=sys.stderr, flush=True)


_report_lock = threading.Lock()
_report_due = threading.Event()
_reporter: threading.Thread | None = None


def report_soon() -> None:
    """Reports in the background, after the graph's first compiled calls have been timed."""
    global _reporter
    report_at_exit()
    _report_due.set()
    with _report_lock:
        if _reporter is None:
            _reporter = threading.Thread(target=_report_loop, name="kiln-graph-report", daemon=True)
            _reporter.start()


_exit_watched = False


def report_at_exit() -> None:
    """Has the process report (and print its line) at exit: called at its first graph, so a
    process reports whatever became of its graphs (one still running eagerly too)."""
    global _exit_watched
    with _report_lock:
        if not _exit_watched:
            _exit_watched = True
            atexit.register(_at_exit)


def _report_loop() -> None:
    while True:
        _report_due.wait()
        _report_due.clear()
        time.sleep(REPORT_AFTER_S)
        report()
        _report_due.set()
