"""A compiled model and a compiled optimizer step (``torch.compile`` around ``opt.step()``)."""

import common
import torch

job = common.start()
net = common.wrap(job, common.model(job))
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=True)


class CompiledStep:
    """The optimizer as the loop sees it, its step compiled."""

    def __init__(self) -> None:
        self.step = common.compiled(opt.step)
        self.zero_grad = opt.zero_grad


common.train(job, common.next_token_loss(common.compiled(net)), CompiledStep())  # type: ignore[arg-type]
