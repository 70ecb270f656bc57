"""The compiled model calling an operator the job defines itself with ``torch.library``
(``custom_op`` with its fake and its backward), as kernels written in Triton or CUDA and
wrapped for torch.compile are: an operator that exists only in the job's own process."""

import common
import torch


@torch.library.custom_op("corpus::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.nn.functional.gelu(x) * scale


@scaled_gelu.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _backward(ctx, grad: torch.Tensor):  # type: ignore[no-untyped-def]
    (x,) = ctx.saved_tensors
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(torch.nn.functional.gelu(x) * ctx.scale, x, grad)
    return g, None


def _setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


scaled_gelu.register_autograd(_backward, setup_context=_setup)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(common.VOCAB, common.WIDTH)
        self.up = torch.nn.Linear(common.WIDTH, 2 * common.WIDTH)
        self.head = torch.nn.Linear(2 * common.WIDTH, common.VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(scaled_gelu(self.up(self.embed(tokens)), 0.5))


job = common.start()
torch.manual_seed(0)
net = common.wrap(job, Net().to(job.device), blocks=torch.nn.ModuleList())
common.train(job, common.next_token_loss(common.compiled(net)), common.adamw(net))
