"""A compiled train step: forward, loss and backward in one compiled function, fed slices of one
batch (the optimizer step stays outside it)."""

import common
import torch

job = common.start()
net = common.wrap(job, common.model(job))
opt = common.adamw(net)


@common.compiled
def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = common.cross_entropy(net(x), y)
    loss.backward()
    return loss.detach()


def step(i: int) -> torch.Tensor:
    b = common.batch(job, i)
    loss = train_step(b[:, :-1], b[:, 1:])
    opt.step()
    opt.zero_grad()
    return loss


common.run_steps(job, step)
