"""A small training job in the layouts users run, for the graph path's tests and the GPU run's
layout table: LAYOUT=single (one process), ddp (``DDP(torch.compile(model))`` with buckets small
enough that Dynamo's DDP optimizer splits the graph) or fsdp2 (``fully_shard`` on each block and
the whole, each block ``.compile()``d). Distributed layouts take RANK, WORLD_SIZE and MASTER_PORT
from the environment: gloo on the CPU, NCCL with one GPU a rank under DEVICE=cuda.

MODEL=mlp (default: residual MLP blocks, SGD, float32) or llama (RMSNorm, causal attention and a
SwiGLU MLP per block, AdamW, bf16 autocast); COMPILE=0 runs eagerly. Prints one JSON line: the
losses, the first step's seconds (from the start of main, after the imports), the steady step,
and what kiln's graph path did (``kiln.torch.graph_stats()``; empty without kiln)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).with_name("corpus")))
import common as corpus_common  # noqa: E402 - the corpus's directory is put on the path first

STEPS = int(os.environ.get("STEPS", "3"))
LAYOUT = os.environ.get("LAYOUT", "single")
MODEL = os.environ.get("MODEL", "mlp")
WIDTH = int(os.environ.get("WIDTH", "512"))  # 512: 1 MiB a layer, the smallest DDP bucket torch takes


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(WIDTH, WIDTH)
        self.down = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def LlamaBlock() -> torch.nn.Module:
    """The corpus's Llama-style block (RMSNorm, causal attention, SwiGLU), 8 heads."""
    return corpus_common.Block(width=WIDTH, heads=8)


#: With DEBUG_FX_KEYS=1: each FX graph cache key this process computed, with the hash of each
#: part torch hashed into it, and on a GPU other than the first the key kiln's device move computed
#: (as the graph reads on cuda:0): which part differs when a rank misses the first rank's entry.
FX_KEYS: list[dict[str, object]] | None = None


def record_fx_keys() -> None:
    global FX_KEYS
    from torch._inductor import codecache

    FX_KEYS = []
    keys, hash_graph = FX_KEYS, codecache.compiled_fx_graph_hash

    def parts(lines: list[str]) -> list[str]:
        return [line[: line.index("]") + 1] + line[line.index("]") + 1 :].split(":")[0] for line in lines]

    def compiled_fx_graph_hash(gm, example_inputs, fx_kwargs, inputs_to_check):  # type: ignore[no-untyped-def]
        key, lines = hash_graph(gm, example_inputs, fx_kwargs, inputs_to_check)
        entry: dict[str, object] = {"key": key, "parts": parts(lines)}
        try:
            from kiln.torch import _device

            index = _device.graph_device(example_inputs)
            if index:
                with _device.normalizing(index):
                    pickler, details = _device._fx_graph_pickler(torch, gm, example_inputs, fx_kwargs, inputs_to_check)
                    entry["moved"] = "f" + pickler.get_hash(details)
                    entry["moved_parts"] = parts(pickler.debug_lines(details))
        except ImportError:
            pass
        keys.append(entry)
        return key, lines

    codecache.compiled_fx_graph_hash = compiled_fx_graph_hash
    # AOTAutograd's keys too: a piece that misses them traces its joint graph again.
    from torch._functorch._aot_autograd import autograd_cache

    aot_key = autograd_cache.autograd_cache_key

    def autograd_cache_key(*args, **kwargs):  # type: ignore[no-untyped-def]
        key, lines = aot_key(*args, **kwargs)
        keys.append({"aot_key": key, "lines": [line[:400] for line in lines]})
        return key, lines

    autograd_cache.autograd_cache_key = autograd_cache_key


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    block = LlamaBlock if MODEL == "llama" else Block
    return torch.nn.Sequential(*[block() for _ in range(int(os.environ.get("BLOCKS", "2")))])


def every_rank_swapped() -> bool:
    """STOP_WHEN_SWAPPED=1 (async jobs): whether every rank has run each of its graphs compiled,
    agreed across the ranks so that they stop at the same step (after at least 3; STEPS is the
    cap)."""
    import kiln.torch

    graphs = kiln.torch.graph_stats()["graphs"]
    mine = torch.tensor([1 if graphs and all(g["calls"].get("compiled", 0) > 0 for g in graphs) else 0])
    if dist.is_initialized():
        dist.all_reduce(mine, op=dist.ReduceOp.MIN)
    time.sleep(float(os.environ.get("SLEEP", "0")))
    return bool(mine.item())


def main() -> None:
    started = time.perf_counter()
    if os.environ.get("PROBE_LAZY_BACKWARD") == "1":
        # A measurement only: a claimed graph's backward compiled at its first backward, as
        # plain torch does, to see what compiling it with the forward costs.
        import contextlib

        import kiln.torch._claim

        kiln.torch._claim._backward_now = contextlib.nullcontext
    if os.environ.get("DEBUG_FX_KEYS") == "1":
        record_fx_keys()
    cuda = os.environ.get("DEVICE") == "cuda"
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    net = model().to(device)
    compile_on = os.environ.get("COMPILE", "1") != "0"
    if LAYOUT == "single":
        step = torch.compile(net) if compile_on else net
    else:
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]), device_id=device if cuda else None)
        if LAYOUT == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            step = DistributedDataParallel(torch.compile(net) if compile_on else net, bucket_cap_mb=1)
        elif LAYOUT == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            for block in net:
                fully_shard(block)
                if compile_on:
                    block.compile()
            step = fully_shard(net)
        else:
            raise SystemExit(f"LAYOUT={LAYOUT!r}: single, ddp or fsdp2")
    if MODEL == "llama":
        opt: torch.optim.Optimizer = torch.optim.AdamW(step.parameters(), lr=1e-3)
        torch.manual_seed(1)
        x = torch.randn(int(os.environ.get("BATCH", "8")), int(os.environ.get("SEQ", "256")), WIDTH, device=device)
    else:
        opt = torch.optim.SGD(step.parameters(), lr=0.01)
        torch.manual_seed(1)
        x = torch.randn(8, WIDTH, device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=MODEL == "llama")
    losses, first, times, inductor_at_first = [], None, [], False
    for _ in range(STEPS):
        t0 = time.perf_counter()
        with autocast:
            loss = step(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if first is None:
            first = time.perf_counter() - started
            # Whether the first step (or torch.compile() before it) imported Inductor's compile_fx.
            inductor_at_first = "torch._inductor.compile_fx" in sys.modules
        if os.environ.get("STOP_WHEN_SWAPPED") == "1" and len(losses) >= 3 and every_rank_swapped():
            break
    stats: dict[str, object] = {}
    if os.environ.get("KILN_TORCH", "0") not in ("", "0"):
        import kiln.torch

        stats = kiln.torch.graph_stats()
        # What the first compile waited for the snapshot's restore (a cold host: its lookup).
        stats["restore"] = kiln.torch.snapshot_stats()["restore"]
    if dist.is_initialized():
        dist.destroy_process_group()
    from torch._dynamo.utils import counters

    caches = {k: v for k, v in {**counters["aot_autograd"], **counters["inductor"]}.items() if "cache" in k}
    caches.update(counters["kiln"])  # kiln's device move, on a rank whose GPU is not the first
    if FX_KEYS is not None:
        caches["fx_keys"] = FX_KEYS
    steady = sorted(times[-10:])[len(times[-10:]) // 2]
    # torch's own phase timers (dynamo_timed), seconds summed by phase: where a compile's time went.
    from torch._dynamo.utils import compilation_time_metrics

    timed = {k: round(sum(v), 3) for k, v in compilation_time_metrics.items()}
    print(json.dumps({"losses": losses, "first": first, "inductor_at_first": inductor_at_first, "steady": steady, "times": times, "graphs": stats, "caches": caches, "timed": timed}))


if __name__ == "__main__":
    main()
