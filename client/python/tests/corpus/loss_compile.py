"""A compiled loss function around the (wrapped) model: bf16 autocast, a graph break inside, and
inputs that are slices of one batch (views with a storage offset)."""

import common
import torch

job = common.start()
net = common.wrap(job, common.model(job))


@common.compiled
def loss_fn(b: torch.Tensor) -> torch.Tensor:
    x, y = b[:, :-1], b[:, 1:]
    with torch.autocast(job.device.type, dtype=torch.bfloat16):
        logits = net(x)
    torch._dynamo.graph_break()
    return common.cross_entropy(logits, y)


common.train(job, loss_fn, common.adamw(net))
