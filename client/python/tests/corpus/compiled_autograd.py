"""The compiled model with its backward under compiled autograd, as torchtitan's
``compile.compiled_autograd`` option runs it: ``loss.backward()`` inside
``torch._dynamo.utils.maybe_enable_compiled_autograd``, so Dynamo traces the autograd graph
itself at each backward and hands it to Inductor through a backend of torch's own (not
torch.compile's Inductor entry point), with dynamic shapes."""

import common
import torch
from torch._dynamo.utils import maybe_enable_compiled_autograd

job = common.start()
net = common.wrap(job, common.model(job))
model = common.compiled(net)
opt = common.adamw(net)
loss_of = common.next_token_loss(model)


def step(i: int) -> torch.Tensor:
    loss = loss_of(common.batch(job, i))
    with maybe_enable_compiled_autograd(common.COMPILE):
        loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


common.run_steps(job, step)
