"""A small training job in the layouts users run, for the graph path's tests: LAYOUT=single
(one process), ddp (``DDP(torch.compile(model))`` with buckets small enough that Dynamo's DDP
optimizer splits the graph) or fsdp2 (``fully_shard`` on each block and the whole, each block
``.compile()``d). Distributed layouts run over gloo on the CPU with RANK, WORLD_SIZE and
MASTER_PORT from the environment. Prints one JSON line: the losses, the first step's seconds and
what kiln's graph path did (``kiln.torch.graph_stats()``; empty without kiln)."""

from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("STEPS", "3"))
LAYOUT = os.environ.get("LAYOUT", "single")
WIDTH = 512  # 1 MiB a layer: torch refuses a DDP bucket below 1 MiB, and each layer fills one


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(WIDTH, WIDTH)
        self.down = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[Block() for _ in range(int(os.environ.get("BLOCKS", "2")))])


def main() -> None:
    started = time.perf_counter()
    net = model()
    if LAYOUT == "single":
        step = torch.compile(net)
    else:
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        if LAYOUT == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            step = DistributedDataParallel(torch.compile(net), bucket_cap_mb=1)
        elif LAYOUT == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            for block in net:
                fully_shard(block)
                block.compile()
            step = fully_shard(net)
        else:
            raise SystemExit(f"LAYOUT={LAYOUT!r}: single, ddp or fsdp2")
    opt = torch.optim.SGD(step.parameters(), lr=0.01)
    torch.manual_seed(1)
    x = torch.randn(8, WIDTH)
    losses, first = [], None
    for _ in range(STEPS):
        loss = step(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if first is None:
            first = time.perf_counter() - started
    stats: dict[str, object] = {}
    if os.environ.get("KILN_TORCH", "0") not in ("", "0"):
        import kiln.torch

        stats = kiln.torch.graph_stats()
    if dist.is_initialized():
        dist.destroy_process_group()
    from torch._dynamo.utils import counters

    caches = {k: v for k, v in {**counters["aot_autograd"], **counters["inductor"]}.items() if "cache" in k}
    print(json.dumps({"losses": losses, "first": first, "graphs": stats, "caches": caches}))


if __name__ == "__main__":
    main()
