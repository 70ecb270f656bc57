"""Dynamic shapes: the sequence length changes from step to step, so torch recompiles with a
dynamic length (automatic dynamic); with ``MARK_DYNAMIC=1`` the length is marked dynamic
(``torch._dynamo.mark_dynamic``) from the first step."""

import os

import common
import torch

LENGTHS = (common.SEQ, common.SEQ + 8, common.SEQ + 16)
job = common.start()
net = common.wrap(job, common.model(job))
forward = common.compiled(net)
opt = common.adamw(net)


def step(i: int) -> torch.Tensor:
    b = common.batch(job, i, seq=LENGTHS[i % len(LENGTHS)])
    x, y = b[:, :-1].contiguous(), b[:, 1:]
    if os.environ.get("MARK_DYNAMIC") == "1":
        torch._dynamo.mark_dynamic(x, 1)
    loss = common.cross_entropy(forward(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


common.run_steps(job, step, steps=max(common.STEPS, len(LENGTHS) + 1))
