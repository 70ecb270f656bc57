"""Which torch.compile graphs kiln.torch sends to kilnd, by the layout the process trains in.

kiln on must never cost a job time. Where the record (``tests/gpu/RESULTS.md``: cold first steps,
kiln against plain torch.compile, side by side) does not yet show kilnd's cold compile of a
layout's graphs at least as fast as the process's own, that layout's graphs compile in the
process by default, as plain torch would; torch's remote caches through kiln, the Triton kernels
and the snapshots stay on. ``KILN_TORCH_GRAPHS`` decides instead of the record:

- unset: the layouts in :data:`DEFAULT_LAYOUTS`;
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
from typing import Any

GRAPHS_ENV = "KILN_TORCH_GRAPHS"
LAYOUTS = ("single", "ddp", "multi-rank")
#: Layouts sent to kilnd when ``KILN_TORCH_GRAPHS`` is unset. None: on the record (2 GPUs, torch
#: 2.11) every layout's cold first step was slower through kilnd than plain torch.compile's, and
#: so was the CPU's (its C++ built twice); a layout joins once its row shows otherwise.
DEFAULT_LAYOUTS: frozenset[str] = frozenset()


class BadSetting(ValueError):
    """``KILN_TORCH_GRAPHS`` names something that is not a layout."""


def chosen() -> frozenset[str]:
    """The layouts whose graphs go to kilnd in this process."""
    value = os.environ.get(GRAPHS_ENV)
    if value is None or value.strip() == "":
        return DEFAULT_LAYOUTS
    value = value.strip()
    if value == "0":
        return frozenset()
    if value == "1":
        return frozenset(LAYOUTS)
    names = frozenset(n.strip() for n in value.split(",") if n.strip())
    unknown = sorted(names - set(LAYOUTS))
    if unknown:
        raise BadSetting(f"{GRAPHS_ENV}={value!r} names {', '.join(unknown)}: it takes 0, 1 or layouts among {', '.join(LAYOUTS)}")
    return names


def of_graph(torch: Any) -> str:
    """The layout of the graph being compiled now (called from inside torch.compile's backend)."""
    context = torch._guards.TracingContext.try_get()
    if context is not None and getattr(context, "ddp_optimizer_ctx", None) is not None:
        return "ddp"
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return "multi-rank"
    return "single"
