"""Which torch.compile graphs kiln.torch sends to kilnd, by the layout the process trains in.

kiln on must never cost a job time. Where the record (``tests/gpu/RESULTS.md``: cold first steps,
kiln against plain torch.compile, side by side) does not yet show a layout's cold start through
kilnd at least as fast as plain torch.compile's, that layout's graphs compile in the process by
default, as plain torch would (counted as ``layout_off``); torch's remote caches through kiln,
the Triton kernels and the snapshots stay on. ``KILN_TORCH_GRAPHS`` decides instead of the
record (a layout it leaves out is counted as ``not_chosen``):

- unset: the layouts in :data:`DEFAULT_LAYOUTS` (one process's graphs), on the devices in
  :data:`DEFAULT_DEVICES`, where kilnd's torch workers were up before the process started
  (:data:`DEFAULT_WARM_ONLY`); with ``KILN_TORCH_ASYNC=1``, every layout (:data:`ASYNC_LAYOUTS`);
- ``1``: every layout; ``0``: none;
- a comma-separated list of layout names (``single,ddp``): those.

The layouts, as the backend sees a graph:

- ``single``: a process that is not one rank of several (one GPU, or a herd of processes);
- ``ddp``: a piece of a graph that Dynamo's DDP optimizer split at DDP's bucket boundaries;
- ``multi-rank``: any other graph of one rank of several: FSDP2 (``fully_shard``), DDP whose
  graph fits one bucket, tensor parallelism.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import settings

GRAPHS_ENV = settings.TORCH_GRAPHS.name
LAYOUTS = ("single", "ddp", "multi-rank")
#: The layouts of a process that is one rank of several.
MANY_RANK_LAYOUTS: frozenset[str] = frozenset({"ddp", "multi-rank"})
#: Layouts sent to kilnd when ``KILN_TORCH_GRAPHS`` is unset: those whose cold first step through
#: kilnd is, on the record, no slower than plain torch.compile's (tests/gpu/RESULTS.md, torch 2.11,
#: each ratio within one run). One process's graph compiled by kilnd's warm workers: 0.96 of plain's
#: at the median of five (2 H200s, 32 cores, runs 48 and 52), and a herd of four such processes 0.70
#: of four plain ones, where claiming the graph and compiling it in the process took 1.07-1.15. Not
#: yet: FSDP2 (``multi-rank``) through the workers 1.04 and 1.10 (run 50), claimed 1.03-1.06 (run
#: 49), its block graphs reaching kilnd one after the other; DDP's pieces through the workers 1.07
#: and 1.06 (run 51). Kept in the process they cost 0.95 and 1.00 (medians of three). A layout joins
#: once its row shows it below 1.0. Through kilnd with today's graph path (every graph claimed or
#: loaded, waits bounded; 2 H200s, the corpus's compiled loss function, one run each): one process
#: 1.14, DDP 1.30, FSDP2 1.22 of plain's cold first step, so the default stays as it was.
DEFAULT_LAYOUTS: frozenset[str] = frozenset({"single"})
#: Of those, the layouts sent by default only where kilnd's torch workers were up before the
#: process started: workers started for it import torch and start their compile pools beside its
#: own compile, and a claim compiled in the process is slower than plain's (the figures above).
DEFAULT_WARM_ONLY: frozenset[str] = frozenset({"single"})
#: And only graphs on these devices: the record is the GPU's. On the CPU (Inductor's C++ backend)
#: kilnd's cold compile was slower than the process's own.
DEFAULT_DEVICES: frozenset[str] = frozenset({"cuda"})
#: With ``KILN_TORCH_ASYNC=1`` and ``KILN_TORCH_GRAPHS`` unset: every layout, on every device. An
#: async graph runs eagerly until kilnd's compile arrives, so sending it never makes a step wait
#: for a compile, where keeping it in the process would.
ASYNC_LAYOUTS: frozenset[str] = frozenset(LAYOUTS)


class BadSetting(ValueError):
    """``KILN_TORCH_GRAPHS`` names something that is not a layout."""


@dataclass(frozen=True)
class Choice:
    """Which graphs go to kilnd: those of ``layouts``, on ``devices`` (None: on any device); of
    ``warm_only``'s layouts, only where kilnd's torch workers were up before the process started.
    ``by_default``: the record chose, not ``KILN_TORCH_GRAPHS`` (a graph left out is then counted
    as ``layout_off``, else as ``not_chosen``)."""

    layouts: frozenset[str]
    devices: frozenset[str] | None = None
    warm_only: frozenset[str] = frozenset()
    by_default: bool = False

    @property
    def reason(self) -> str:
        """The fallback a graph left out is counted as."""
        return "layout_off" if self.by_default else "not_chosen"

    def sends(self, layout: str, device_type: str, workers_were_up: Callable[[], bool] = lambda: True) -> bool:
        return self.refusal(layout, device_type, workers_were_up) is None

    def refusal(self, layout: str, device_type: str, workers_were_up: Callable[[], bool] = lambda: True) -> str | None:
        """Why a graph of ``layout`` on ``device_type`` stays in the process, or None: it goes."""
        if layout not in self.layouts or (self.devices is not None and device_type not in self.devices):
            if not self.by_default:
                return f"{GRAPHS_ENV}={os.environ.get(GRAPHS_ENV, '')!r} leaves out {layout} graphs: compiled in the process"
            return f"{layout} graphs on {device_type} stay in the process ({GRAPHS_ENV}=1 sends them to kilnd)"
        if layout in self.warm_only and not workers_were_up():
            return (
                f"{layout} graphs go to kilnd's torch workers only where they were up before the process started "
                f"(kilnd's torch_prestart), and they were not ({GRAPHS_ENV}=1 sends them all the same)"
            )
        return None

    def describe(self) -> str:
        if not self.layouts:
            return "none (each stays in the process; KILN_TORCH_GRAPHS=1 sends all)"
        on = f" on {', '.join(sorted(self.devices))}" if self.devices is not None else ""
        warm = f" ({', '.join(sorted(self.warm_only))} where kilnd's torch workers were up first)" if self.warm_only else ""
        return f"{', '.join(sorted(self.layouts))}{on}{warm}"


def async_enabled() -> bool:
    """Whether ``KILN_TORCH_ASYNC`` asks for async graphs (which also widens the default)."""
    return os.environ.get(settings.TORCH_ASYNC.name, "0").strip() not in ("", "0")


def switched_off() -> bool:
    """Whether ``KILN_TORCH_GRAPHS=0`` turns the graph path off altogether (not merely leaves
    every layout out): read here, with the rest of the variable, so one module owns it."""
    return os.environ.get(GRAPHS_ENV, "").strip() == "0"


def chosen() -> Choice:
    """The graphs that go to kilnd in this process."""
    value = os.environ.get(GRAPHS_ENV)
    if value is None or value.strip() == "":
        if async_enabled():
            return Choice(ASYNC_LAYOUTS, by_default=True)
        return Choice(DEFAULT_LAYOUTS, DEFAULT_DEVICES, DEFAULT_WARM_ONLY, by_default=True)
    value = value.strip()
    if value == "0":
        return Choice(frozenset())
    if value == "1":
        return Choice(frozenset(LAYOUTS))
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
