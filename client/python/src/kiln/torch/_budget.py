"""How long a graph may wait for another process's compile: never longer than this process would
take to compile it itself.

A split cold start (each piece compiled by one rank of the fleet, every other rank loading it)
pays off when the piece's claimant, which compiles it beside this process's own share, lands it
before this process would have compiled it. A claimant that is slow, stuck, or on a host that
started late must not make the job slower than plain torch.compile: the wait ends where this
process's own compile of the piece would have ended, and the process compiles the piece itself
(``late``), keeping whichever lands first.

The estimate is a rate, seconds of compile per graph node, times the piece's nodes. The rate
comes from the pieces this process compiled itself (forward and backward at once, as a claim
compiles them) and from the compiles it loaded (their claimant's seconds); the slower rate is
used, so that an estimate errs toward waiting. What counts is the first step's total, not each
piece's: a piece that arrived before it was needed leaves its unspent estimate to the next.

Before any compile has shown a rate (the first graph this rank needs was compiled elsewhere: by
another host while this rank had no share, or an FSDP2 rank's first block), the rate is read off
Dynamo's trace of the graph's frame: on the record, AOTAutograd's and Inductor's compile of a
frame, forward and backward, took 8 to 18 times as long as Dynamo's trace of it on a GPU (every
shape of the corpus, H100 and H200) and 40 to 90 times on a CPU (the C++ compiler's share is
larger). :data:`TRACE_TO_COMPILE` takes about the largest, and the wait is at least
:data:`TRACE_FLOOR_SECS`, so that this estimate errs toward waiting too, yet a claimant alive and
stuck holds a rank for about its own compile rather than the fixed bound. Only where no frame's
trace was seen (a graph compiled outside Dynamo) does the caller's fixed bound apply.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

#: Seconds of a frame's compile (AOTAutograd and Inductor, forward and backward) per second of
#: Dynamo's trace of it, by the device its graphs run on: about the largest ratio on the record.
TRACE_TO_COMPILE = {"cuda": 18.0, "cpu": 90.0}
#: The shortest wait a rate read off traces gives: a process's first compile pays fixed costs
#: (the rest of Inductor's imports, its compile workers, the C++ compiler's first runs) that a
#: small graph's trace does not scale to: on a CPU, a 9-node graph traced in 0.1 s compiled in
#: 15 to 37 s.
TRACE_FLOOR_SECS = 30.0


@dataclass
class WaitBudget:
    #: (seconds, nodes) of each piece compiled here, forward and backward.
    own: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds, nodes) of each piece loaded: its claimant's compile.
    loaded: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds, nodes) of each wait for another process's compile, ended.
    waits: list[tuple[float, int]] = field(default_factory=list)
    #: When Dynamo began compiling each frame (``perf_counter``), by compile id.
    frames: dict[str, float] = field(default_factory=dict)
    #: [trace seconds, nodes] of each frame whose graphs reached kiln: the seconds from the
    #: frame's start to its first graph, and the nodes of every graph it handed over.
    traced: dict[str, list[float]] = field(default_factory=dict)
    #: Compile seconds per trace second for this process's graphs (:data:`TRACE_TO_COMPILE`).
    trace_factor: float = TRACE_TO_COMPILE["cuda"]
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def frame_started(self, compile_id: str) -> None:
        """Dynamo began compiling a frame (its start callback, on the compiling thread)."""
        with self.lock:
            self.frames[compile_id] = time.perf_counter()

    def graph_traced(self, compile_id: str | None, nodes: int, device: str) -> None:
        """A graph of the frame ``compile_id`` reached kiln: the first one ends the frame's trace
        (a DDP frame's pieces come one after another, each after its predecessor's handling)."""
        with self.lock:
            started = self.frames.get(compile_id or "")
            if started is None:
                return
            self.trace_factor = TRACE_TO_COMPILE["cpu" if device == "cpu" else "cuda"]
            seen = self.traced.setdefault(compile_id or "", [time.perf_counter() - started, 0])
            seen[1] += max(1, nodes)

    def compiled_here(self, seconds: float, nodes: int) -> None:
        with self.lock:
            self.own.append((seconds, max(1, nodes)))

    def compiled_elsewhere(self, seconds: float, nodes: int) -> None:
        if seconds > 0:
            with self.lock:
                self.loaded.append((seconds, max(1, nodes)))

    def waited(self, seconds: float, nodes: int) -> None:
        with self.lock:
            self.waits.append((seconds, max(1, nodes)))

    def rate(self) -> float | None:
        """Seconds of compile per node, the slower of this process's own and its claimants', or
        None before either is known."""
        with self.lock:
            rates = [sum(s for s, _ in xs) / sum(n for _, n in xs) for xs in (self.own, self.loaded) if xs]
        return max(rates, default=None)

    def traced_rate(self) -> float | None:
        """The rate read off Dynamo's traces of this process's frames (:data:`TRACE_TO_COMPILE`
        times their trace seconds per node), or None before any frame's graph reached kiln."""
        with self.lock:
            if not self.traced:
                return None
            seconds = sum(s for s, _ in self.traced.values())
            nodes = sum(n for _, n in self.traced.values())
            return self.trace_factor * seconds / nodes

    def traced_stats(self) -> dict[str, list[float]]:
        """[trace seconds, nodes] of each frame, by compile id, for :func:`kiln.torch.graph_stats`."""
        with self.lock:
            return {cid: [round(s, 4), int(n)] for cid, (s, n) in self.traced.items()}

    def bound(self, nodes: int) -> float | None:
        """How long a piece of ``nodes`` nodes may wait: its own estimated compile, plus what the
        earlier waits left unspent of theirs; while the rate is only read off Dynamo's traces, at
        least what earlier waits left of :data:`TRACE_FLOOR_SECS`. None where no rate is known,
        not even from a trace."""
        rate, floor = self.rate(), 0.0
        if rate is None:
            rate, floor = self.traced_rate(), TRACE_FLOOR_SECS
        if rate is None:
            return None
        with self.lock:
            unspent = sum(rate * n - s for s, n in self.waits)
            # The floor is the first step's, not each piece's: what earlier waits spent of it is gone.
            floor -= sum(s for s, _ in self.waits)
        return max(floor, max(0.0, unspent) + rate * max(1, nodes))
