"""The compiled model with its backward under compiled autograd, as torchtitan's
``compile.compiled_autograd`` option runs it: ``loss.backward()`` inside
``torch._dynamo.utils.maybe_enable_compiled_autograd``, so Dynamo traces the autograd graph
itself at each backward and hands it to Inductor through a backend of torch's own (not
torch.compile's Inductor entry point), with dynamic shapes. ``CA_SCOPE=loop`` enters it once
around the whole loop instead, as torch's own example of ``_enable`` does."""

import contextlib
import os

import common
import torch
from torch._dynamo.utils import maybe_enable_compiled_autograd

job = common.start()
net = common.wrap(job, common.model(job))
model = common.compiled(net)
opt = common.adamw(net)
loss_of = common.next_token_loss(model)
around_loop = os.environ.get("CA_SCOPE", "step") == "loop"


def step(i: int) -> torch.Tensor:
    loss = loss_of(common.batch(job, i))
    with contextlib.nullcontext() if around_loop else maybe_enable_compiled_autograd(common.COMPILE):
        loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


with maybe_enable_compiled_autograd(common.COMPILE and around_loop):
    common.run_steps(job, step)
