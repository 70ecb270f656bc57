"""A vision model with batch norm, trained and evaluated in turns: ``torch.compile(model)`` where
BatchNorm's running statistics are buffers the graph mutates, and each evaluation under
``torch.no_grad()`` in ``eval()`` mode is another graph of the same model (Dynamo guards on
``training``), so the job switches between two compiled graphs every other step."""

import common
import torch
from torch import nn

CHANNELS = max(8, common.WIDTH // 4)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, CHANNELS, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1, bias=False), nn.BatchNorm2d(CHANNELS), nn.ReLU())
            for _ in range(common.BLOCKS)
        )
        self.head = nn.Linear(CHANNELS, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean((2, 3)))


job = common.start()
torch.manual_seed(0)
net = ConvNet().to(job.device)
common.mark("model")
model = common.wrap(job, net, net.blocks)
forward = common.compiled(model)
opt = common.adamw(model)


def images(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * job.rank + step)
    x = torch.randn(common.BATCH, 3, 16, 16, generator=g)
    y = torch.randint(0, 10, (common.BATCH,), generator=g)
    return x.to(job.device), y.to(job.device)


def step(i: int) -> torch.Tensor:
    x, y = images(i)
    model.train()
    loss = nn.functional.cross_entropy(forward(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if i % 2 == 1:
        # The evaluation a job runs between training steps: the same model in eval mode.
        model.eval()
        with torch.no_grad():
            loss = nn.functional.cross_entropy(forward(x), y)
    return loss


common.run_steps(job, step, max(common.STEPS, 4))
