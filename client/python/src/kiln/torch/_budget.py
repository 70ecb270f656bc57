"""How long a DDP piece may wait for another process's compile of it: never longer than this
process would take to compile it itself.

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
Before any rate is known (the first piece this rank needs was compiled elsewhere: by its twin on
the host's first GPU, or by another host while this rank had no share) there is no estimate, and
the caller's fixed bound applies (for a claimant alive and stuck; one that dies loses its claim
with its connection or its fleet lease).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class WaitBudget:
    #: (seconds, nodes) of each piece compiled here, forward and backward.
    own: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds, nodes) of each piece loaded: its claimant's compile.
    loaded: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds, nodes) of each wait for another process's compile, ended.
    waits: list[tuple[float, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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

    def bound(self, nodes: int) -> float | None:
        """How long a piece of ``nodes`` nodes may wait: its own estimated compile, plus what the
        earlier waits left unspent of theirs. None where no rate is known yet."""
        rate = self.rate()
        if rate is None:
            return None
        with self.lock:
            unspent = sum(rate * n - s for s, n in self.waits)
        return max(0.0, unspent) + rate * max(1, nodes)
