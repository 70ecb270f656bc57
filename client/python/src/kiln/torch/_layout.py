"""Which torch.compile graphs kiln.torch sends to kilnd, by the layout the process trains in.

``KILN_TORCH=1`` alone sends the graphs of every layout whose cold start through kilnd the record
(``tests/gpu/RESULTS.md``, kiln against plain torch.compile side by side) shows no slower than
plain torch.compile's: one process's graphs and FSDP2's (``multi-rank``). DDP's pieces compile in
the process by default, as plain torch's would (counted as ``layout_off``); the job's snapshots
still make a fresh host as warm as the one that compiled. ``KILN_TORCH_GRAPHS`` decides instead:

- unset: :data:`DEFAULT_LAYOUTS` (every layout with ``KILN_TORCH_ASYNC=1``); ``1``: every layout; ``0``: none (the graph path is off: every
  graph compiles in the process; snapshots and the Triton kernel cache stay on);
- a comma-separated list of layout names (``single,ddp``): those; a graph of a layout it leaves
  out compiles in the process, counted as ``not_chosen``.

The layouts, as the backend sees a graph:

- ``single``: a process that is not one rank of several (one GPU, or a herd of processes);
- ``ddp``: a piece of a graph that Dynamo's DDP optimizer split at DDP's bucket boundaries;
- ``multi-rank``: any other graph of one rank of several: FSDP2 (``fully_shard``), DDP whose
  graph fits one bucket, tensor parallelism.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .. import settings

GRAPHS_ENV = settings.TORCH_GRAPHS.name
LAYOUTS = ("single", "ddp", "multi-rank")
#: The layouts of a process that is one rank of several.
MANY_RANK_LAYOUTS: frozenset[str] = frozenset({"ddp", "multi-rank"})
#: Layouts sent when ``KILN_TORCH_GRAPHS`` is unset. On the record (2 H200s, the corpus's compiled
#: loss function, torch 2.11, cold first step against plain torch.compile's within one run): one
#: process 1.02, 0.82 and 0.82, FSDP2 0.90 and 1.09 (its compile step 0.72-0.94). DDP's pieces
#: 1.21 and 1.24 (0.84 once): a piece's backward must compile with its forward to be shared
#: (other hosts' ranks wait for it in collectives), and that runs while Inductor's compile pool is
#: still starting, where torch compiles it at the first backward; kept in the process they cost
#: 0.86-1.00.
DEFAULT_LAYOUTS: frozenset[str] = frozenset({"single", "multi-rank"})


class BadSetting(ValueError):
    """``KILN_TORCH_GRAPHS`` names something that is not a layout."""


@dataclass(frozen=True)
class Choice:
    """Which graphs go to kilnd: those of ``layouts``. ``by_default``: the record chose, not
    ``KILN_TORCH_GRAPHS`` (a graph left out is then counted as ``layout_off``, else as
    ``not_chosen``)."""

    layouts: frozenset[str]
    by_default: bool = False

    @property
    def reason(self) -> str:
        """The fallback a graph left out is counted as."""
        return "layout_off" if self.by_default else "not_chosen"

    def sends(self, layout: str) -> bool:
        return self.refusal(layout) is None

    def refusal(self, layout: str) -> str | None:
        """Why a graph of ``layout`` stays in the process, or None: it goes."""
        if layout in self.layouts:
            return None
        if self.by_default:
            return f"{layout} graphs stay in the process by default ({GRAPHS_ENV}=1 sends them to kilnd)"
        return f"{GRAPHS_ENV}={os.environ.get(GRAPHS_ENV, '')!r} leaves out {layout} graphs: compiled in the process"

    def describe(self) -> str:
        if not self.layouts:
            return "none (each stays in the process)"
        return ", ".join(sorted(self.layouts))


def async_enabled() -> bool:
    """Whether ``KILN_TORCH_ASYNC`` asks for async graphs."""
    return os.environ.get(settings.TORCH_ASYNC.name, "0").strip() not in ("", "0")


def switched_off() -> bool:
    """Whether ``KILN_TORCH_GRAPHS=0`` turns the graph path off altogether (not merely leaves
    every layout out): read here, with the rest of the variable, so one module owns it."""
    return os.environ.get(GRAPHS_ENV, "").strip() == "0"


def chosen() -> Choice:
    """The graphs that go to kilnd in this process."""
    value = (os.environ.get(GRAPHS_ENV) or "").strip()
    if value == "":
        # An async graph runs eagerly until kilnd's compile arrives: sending it never makes a step
        # wait for a compile, where keeping it in the process would.
        return Choice(frozenset(LAYOUTS) if async_enabled() else DEFAULT_LAYOUTS, by_default=True)
    if value == "1":
        return Choice(frozenset(LAYOUTS))
    if value == "0":
        return Choice(frozenset())
    names = frozenset(n.strip() for n in value.split(",") if n.strip())
    unknown = sorted(names - set(LAYOUTS))
    if unknown:
        raise BadSetting(f"{GRAPHS_ENV}={value!r} names {', '.join(unknown)}: it takes 0, 1 or layouts among {', '.join(LAYOUTS)}")
    return Choice(names)


def device_of(example_inputs: list[Any]) -> str:
    """The device type a graph runs on, as its tensor inputs say (``cpu`` when none does)."""
    for t in example_inputs:
        device = getattr(t, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            return str(device.type)
    return "cpu"


def of_graph(torch: Any) -> str:
    """The layout of the graph being compiled now (called from inside torch.compile's backend)."""
    context = torch._guards.TracingContext.try_get()
    if context is not None and getattr(context, "ddp_optimizer_ctx", None) is not None:
        return "ddp"
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return "multi-rank"
    return "single"
