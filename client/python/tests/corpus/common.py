"""What every job of the corpus shares: the layout it trains in, its model, its batch and the
one JSON line it prints.

A job file is the shape of one training (or serving) loop as users write it: what it compiles
and how it calls it. This module supplies the rest from the environment, so each shape runs
alone, under DDP and under FSDP2 unchanged:

- ``LAYOUT``: ``single`` (one process), ``ddp`` (``DistributedDataParallel`` with small buckets,
  ``BUCKET_MB``, so Dynamo's DDP optimizer splits a compiled model into pieces) or ``fsdp2`` (``fully_shard``
  on each block and on the whole). The distributed layouts take ``RANK``, ``WORLD_SIZE``,
  ``MASTER_ADDR`` and ``MASTER_PORT`` as torchrun sets them: gloo on the CPU, NCCL with one GPU a
  rank under ``DEVICE=cuda``.
- ``WIDTH``, ``BLOCKS``, ``SEQ``, ``BATCH``, ``STEPS``: the sizes (tiny by default, for the CPU).
- ``COMPILE=0``: every ``torch.compile`` of the job is left out (the eager baseline).

The printed line holds the losses, when the first step ended (seconds from the start of
``main``, after the imports, and the wall clock, for skew across ranks and hosts), every step's
seconds, and what kiln's graph path did (``kiln.torch.graph_stats()``; empty without kiln).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

LAYOUT = os.environ.get("LAYOUT", "single")
WIDTH = int(os.environ.get("WIDTH", "64"))
BLOCKS = int(os.environ.get("BLOCKS", "2"))
SEQ = int(os.environ.get("SEQ", "16"))
BATCH = int(os.environ.get("BATCH", "4"))
STEPS = int(os.environ.get("STEPS", "3"))
#: DDP's bucket cap: at least torch's first bucket's 1 MiB, so a tiny model needs a vocabulary of
#: 4096 (a 1 MiB embedding and head) for Dynamo's DDP optimizer to split its graph into pieces,
#: as it splits a real model's.
BUCKET_MB = float(os.environ.get("BUCKET_MB", "1"))
HEADS = 4
VOCAB = int(os.environ.get("VOCAB", "4096"))
COMPILE = os.environ.get("COMPILE", "1") != "0"
#: Whether torch.compile records CUDA graphs (``MODE=reduce-overhead``): a graph's outputs then
#: live in memory the next replay overwrites.
CUDA_GRAPHS = COMPILE and os.environ.get("MODE") == "reduce-overhead"


class Block(torch.nn.Module):
    """A Llama-style block: RMSNorm, causal attention and a SwiGLU MLP."""

    def __init__(self, checkpointed: bool = False, width: int = WIDTH, heads: int = HEADS) -> None:
        super().__init__()
        self.checkpointed = checkpointed
        self.heads = heads
        self.norm1 = torch.nn.RMSNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.norm2 = torch.nn.RMSNorm(width)
        self.gate = torch.nn.Linear(width, 4 * width, bias=False)
        self.up = torch.nn.Linear(width, 4 * width, bias=False)
        self.down = torch.nn.Linear(4 * width, width, bias=False)

    def attention(self, x: torch.Tensor, cache: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        causal = cache is None or t > 1
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out(a.transpose(1, 2).reshape(b, t, d))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm2(x)
        return self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x)
        return x + self.mlp(x)

    def forward(self, x: torch.Tensor, cache: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        if cache is not None:
            x = x + self.attention(x, cache)
            return x + self.mlp(x)
        if self.checkpointed:
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self.inner, x, use_reentrant=False)  # type: ignore[no-any-return]
        return self.inner(x)


class Model(torch.nn.Module):
    """A tiny language model: embedding, blocks, norm and head."""

    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList([Block(checkpointed) for _ in range(BLOCKS)])
        self.norm = torch.nn.RMSNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor, caches: list[dict[str, torch.Tensor]] | None = None) -> torch.Tensor:
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(self.norm(x))  # type: ignore[no-any-return]


#: Seconds from the job's start to each point of its set-up (``mark``): where the time before
#: the first step goes, in the job's line.
MARKS: dict[str, float] = {}
_T0 = time.perf_counter()


def mark(name: str) -> None:
    MARKS[name] = round(time.perf_counter() - _T0, 3)


@dataclass
class Job:
    """The job's place: its device and rank, and what it wrapped the model in."""

    device: torch.device
    rank: int
    world: int
    started: float = field(default_factory=time.perf_counter)

    @property
    def distributed(self) -> bool:
        return LAYOUT != "single"


def start() -> Job:
    """The process's device and rank; joins the process group of a distributed layout."""
    global _T0
    started = _T0 = time.perf_counter()
    cuda = os.environ.get("DEVICE") == "cuda"
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        mark("device")
    if LAYOUT not in ("single", "ddp", "fsdp2"):
        raise SystemExit(f"LAYOUT={LAYOUT!r}: single, ddp or fsdp2")
    if LAYOUT != "single":
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world, device_id=device if cuda else None)
        mark("process group")
    return Job(device, rank, world, started)


def model(job: Job, *, checkpointed: bool = False, compile_blocks: bool = False) -> Model:
    """The model on the job's device, the same weights on every rank; ``compile_blocks`` compiles
    each block (``block.compile()``, as torchtitan does) before the layout wraps it."""
    torch.manual_seed(0)
    net = Model(checkpointed).to(job.device)
    mark("model")
    if compile_blocks and COMPILE:
        for block in net.blocks:
            block.compile()
        mark("torch.compile")
    return net


def wrap(job: Job, net: torch.nn.Module, blocks: torch.nn.ModuleList | None = None) -> torch.nn.Module:
    """The model in the job's layout: itself, DDP, or FSDP2 on each block (``blocks``, by
    default the corpus model's own) and the whole."""
    if LAYOUT == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(net, bucket_cap_mb=BUCKET_MB)
    elif LAYOUT == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for block in net.blocks if blocks is None else blocks:  # type: ignore[union-attr]
            fully_shard(block)
        net = fully_shard(net)
    mark("wrapped")
    return net


def compiled(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """``torch.compile(fn)`` in the job's ``MODE`` (``max-autotune-no-cudagraphs``,
    ``reduce-overhead``; unset: torch's default), or ``fn`` itself with ``COMPILE=0``."""
    mode = os.environ.get("MODE")
    if mode:
        kwargs.setdefault("mode", mode)
    if not COMPILE:
        return fn
    out = torch.compile(fn, **kwargs)
    mark("torch.compile")
    return out


def batch(job: Job, step: int, seq: int = SEQ) -> torch.Tensor:
    """One batch of tokens, ``seq + 1`` long (inputs and targets are slices of it), the same on
    every run and different on every rank."""
    g = torch.Generator().manual_seed(1000 * job.rank + step)
    return torch.randint(0, VOCAB, (BATCH, seq + 1), generator=g).to(job.device)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))


def adamw(net: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(net.parameters(), lr=1e-3)


def train(job: Job, loss_of: Callable[[torch.Tensor], torch.Tensor], opt: torch.optim.Optimizer, steps: int = STEPS) -> None:
    """The usual loop: each step's batch to ``loss_of``, backward, the optimizer's step; then the
    job's line."""

    def step(i: int) -> torch.Tensor:
        loss = loss_of(batch(job, i))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    run_steps(job, step, steps)


def run_steps(job: Job, step: Callable[[int], torch.Tensor], steps: int = STEPS) -> None:
    """``step`` run ``steps`` times, timed, then the job's line: a script's loop where it has
    nothing of its own to add to the line."""
    timed = Steps(job)
    timed.run(step, steps)
    timed.done()


def next_token_loss(forward: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The language model's loss of a batch: inputs and targets are slices of it."""
    return lambda b: cross_entropy(forward(b[:, :-1]), b[:, 1:])


class Steps:
    """Times each step and keeps its loss; :meth:`done` prints the job's line."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.losses: list[float] = []
        self.times: list[float] = []
        self.first: float | None = None
        self.first_wall: float | None = None

    def run(self, step: Callable[[int], torch.Tensor], steps: int = STEPS) -> None:
        for i in range(steps):
            if i == 0:
                mark("step 0")
            began = time.perf_counter()
            loss = step(i)
            self.losses.append(float(loss.item()))
            self.times.append(time.perf_counter() - began)
            if self.first is None:
                self.first = time.perf_counter() - self.job.started
                self.first_wall = time.time()

    def done(self, **extra: Any) -> None:
        stats: dict[str, Any] = {}
        restored: dict[str, Any] = {}
        if os.environ.get("KILN_TORCH", "0") not in ("", "0"):
            import kiln.torch

            stats = kiln.torch.graph_stats()
            restored = kiln.torch.snapshot_stats().get("restore", {})
        if dist.is_initialized():
            dist.destroy_process_group()
        from torch._dynamo.utils import compilation_time_metrics, counters

        caches = {k: v for k, v in {**counters["aot_autograd"], **counters["inductor"]}.items() if "cache" in k}
        timed = {k: round(sum(v), 3) for k, v in compilation_time_metrics.items()}
        later = sorted(self.times[1:]) or [0.0]
        line = {
            "losses": self.losses,
            "first": self.first,
            "first_wall": self.first_wall,
            "median": later[len(later) // 2],
            "longest_later": later[-1],
            "times": self.times,
            "graphs": stats,
            "restore": restored,
            "caches": caches,
            "timed": timed,
            "marks": MARKS,
            **extra,
        }
        print(json.dumps(line), flush=True)
