"""Which torch.compile graphs kiln.torch sends to kilnd, by the layout the process trains in.

``KILN_TORCH=1`` alone sends the graphs of every layout. A rank waits for nobody's compile
(unless the job splits its cold compile: a DDP job on several hosts, or ``KILN_TORCH_SPLIT=1``;
see kiln.torch._claim.splits): it loads what kilnd has stored,
and otherwise compiles the graph as torch would, on torch's schedule, sharing it once its
backward compiled too; so no rank waits on another's compile (what kiln adds is its own work
beside the compile), and a restarted or added host loads what the first compiled.
``KILN_TORCH_GRAPHS`` narrows it:

- unset or ``1``: every layout; ``0``: none (the graph path is off: every graph compiles in the
  process; snapshots and the Triton kernel cache stay on);
- a comma-separated list of layout names (``single,ddp``): those; a graph of a layout it leaves
  out compiles in the process, counted as ``not_chosen``.

The layouts, as the backend sees a graph:

- ``single``: a process that is not one rank of several (one GPU, or a herd of processes);
- ``ddp``: a piece of a graph that Dynamo's DDP optimizer split at DDP's bucket boundaries;
- ``multi-rank``: any other graph of one rank of several: FSDP2 (``fully_shard``), DDP whose
  graph fits one bucket, tensor parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import settings

GRAPHS_ENV = settings.TORCH_GRAPHS.name
LAYOUTS = ("single", "ddp", "multi-rank")
#: The layouts of a process that is one rank of several.
MANY_RANK_LAYOUTS: frozenset[str] = frozenset({"ddp", "multi-rank"})


class BadSetting(ValueError):
    """``KILN_TORCH_GRAPHS`` names something that is not a layout."""


@dataclass(frozen=True)
class Choice:
    """Which graphs go to kilnd: those of ``layouts``; a graph left out is counted as
    ``not_chosen``."""

    layouts: frozenset[str]

    def sends(self, layout: str) -> bool:
        return self.refusal(layout) is None

    def refusal(self, layout: str) -> str | None:
        """Why a graph of ``layout`` stays in the process, or None: it goes."""
        if layout in self.layouts:
            return None
        return f"{GRAPHS_ENV}={settings.TORCH_GRAPHS.value() or ''!r} leaves out {layout} graphs: compiled in the process"

    def describe(self) -> str:
        if not self.layouts:
            return "none (each stays in the process)"
        return ", ".join(sorted(self.layouts))


def async_enabled() -> bool:
    """Whether ``KILN_TORCH_ASYNC`` asks for async graphs."""
    return settings.TORCH_ASYNC.switch()


def switched_off() -> bool:
    """Whether ``KILN_TORCH_GRAPHS=0`` turns the graph path off altogether (not merely leaves
    every layout out): read here, with the rest of the variable, so one module owns it."""
    return (settings.TORCH_GRAPHS.value() or "").strip() == "0"


def chosen() -> Choice:
    """The graphs that go to kilnd in this process."""
    value = (settings.TORCH_GRAPHS.value() or "").strip()
    if value in ("", "1"):
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
