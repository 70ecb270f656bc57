"""A compiled model and a compiled optimizer step under a learning-rate schedule, as torch's
tutorial on compiling the optimizer writes it: the learning rate is a tensor (so that a new value
is not a recompile), and a warm-up and cosine ``LambdaLR`` changes it at every step; plus a
Python float (a loss scale that grows each step) passed into the compiled model's loss, which
Dynamo turns into a graph input after it changes."""

import math

import common
import torch

job = common.start()
net = common.wrap(job, common.model(job))
opt = torch.optim.AdamW(net.parameters(), lr=torch.tensor(1e-3), foreach=False)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2) * 0.5 * (1 + math.cos(math.pi * s / 10)))
model = common.compiled(net)


@common.compiled
def loss_of(b: torch.Tensor, scale: float) -> torch.Tensor:
    return common.cross_entropy(model(b[:, :-1]), b[:, 1:]) * scale


@common.compiled
def opt_step() -> None:
    opt.step()


def step(i: int) -> torch.Tensor:
    loss = loss_of(common.batch(job, i), 1.0 + 0.25 * i)
    loss.backward()
    opt_step()
    sched.step()
    opt.zero_grad()
    return loss.detach()


common.run_steps(job, step)
