"""Two compiled models trained against each other, as a GAN trains: a generator and a
discriminator, each ``torch.compile``'d and wrapped in the layout, each with its own optimizer.
The discriminator's step sees a batch half real, half generated (detached: it needs no grad);
the generator's step then calls the discriminator again on generated samples, which need grad,
so Dynamo traces the discriminator a second time, after its parameters hold gradients."""

import common
import torch

NOISE = 32


class MLP(torch.nn.Module):
    """A user's own module (Dynamo traces its forward under DDP's, as it would not a bare
    ``nn.Sequential``'s: torch's own modules are skipped as frames of their own)."""

    def __init__(self, inputs: int, outputs: int, act: torch.nn.Module, last: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(inputs, 2 * common.WIDTH)
        self.act = act
        self.out = torch.nn.Linear(2 * common.WIDTH, outputs)
        self.last = last or torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(self.out(self.act(self.inp(x))))  # type: ignore[no-any-return]


job = common.start()
torch.manual_seed(0)
width = common.WIDTH
generator = MLP(NOISE, width, torch.nn.ReLU(), torch.nn.Tanh()).to(job.device)
discriminator = MLP(width, 1, torch.nn.LeakyReLU(0.2)).to(job.device)
common.mark("model")
# FSDP2 shards each model whole: neither has blocks of its own.
g = common.compiled(common.wrap(job, generator, blocks=torch.nn.ModuleList()))
d = common.compiled(common.wrap(job, discriminator, blocks=torch.nn.ModuleList()))
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = torch.nn.functional.binary_cross_entropy_with_logits
half = common.BATCH // 2


def step(i: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * job.rank + i)
    real = torch.randn(common.BATCH, width, generator=gen).tanh().to(job.device)
    noise = torch.randn(common.BATCH, NOISE, generator=gen).to(job.device)
    fake = g(noise)
    labels = torch.cat([torch.ones(half, 1), torch.zeros(common.BATCH - half, 1)]).to(job.device)
    loss_d = bce(d(torch.cat([real[:half], fake.detach()[half:]])), labels)
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = bce(d(fake), torch.ones(common.BATCH, 1, device=job.device))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    return loss_d.detach() + loss_g.detach()


common.run_steps(job, step)
