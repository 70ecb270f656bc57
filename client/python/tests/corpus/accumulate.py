"""Gradient accumulation: two micro-batches a step, gradients synchronised only on the last (DDP's
``no_sync()``, FSDP2's ``set_requires_gradient_sync``)."""

import contextlib

import common
import torch

MICRO = 2
job = common.start()
net = common.wrap(job, common.model(job))
forward = common.compiled(net)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)


def no_sync(last: bool) -> contextlib.AbstractContextManager[None]:
    if last or common.LAYOUT == "single":
        return contextlib.nullcontext()
    if common.LAYOUT == "ddp":
        return net.no_sync()  # type: ignore[operator]
    net.set_requires_gradient_sync(False)  # type: ignore[operator]
    return contextlib.nullcontext()


def step(i: int) -> torch.Tensor:
    total = torch.zeros((), device=job.device)
    for m in range(MICRO):
        last = m == MICRO - 1
        if common.LAYOUT == "fsdp2":
            net.set_requires_gradient_sync(last)  # type: ignore[operator]
        b = common.batch(job, MICRO * i + m)
        with no_sync(last):
            loss = common.cross_entropy(forward(b[:, :-1]), b[:, 1:]) / MICRO
            loss.backward()
        total += loss.detach()
    opt.step()
    opt.zero_grad()
    return total


common.run_steps(job, step)
