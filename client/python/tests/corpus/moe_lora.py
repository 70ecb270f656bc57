"""A mixture-of-experts model fine-tuned with LoRA, compiled whole, as a user writes one who
never heard of kiln: the base weights are frozen (``requires_grad=False``) and only small
low-rank adapters train; a router picks two experts a token (``topk``) and every expert's
output is weighted by its gate, so each expert gets a gradient every step; a ``BatchNorm1d``
in training mode updates its running statistics inside the graph; and the load-balancing
figures are read back to Python (``.tolist()``), which breaks the graph in the middle of
the forward."""

import common
import torch
import torch.nn.functional as F

job = common.start()
width, experts = common.WIDTH, 4


class LoRALinear(torch.nn.Module):
    """A frozen linear layer plus a trainable low-rank update, as ``peft`` adds one."""

    def __init__(self, n_in: int, n_out: int, rank: int = 4) -> None:
        super().__init__()
        self.base = torch.nn.Linear(n_in, n_out, bias=False)
        self.base.weight.requires_grad_(False)
        self.a = torch.nn.Parameter(torch.randn(rank, n_in) / n_in)
        self.b = torch.nn.Parameter(torch.zeros(n_out, rank) + 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(x, self.a), self.b)


class MoE(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = torch.nn.Linear(width, experts, bias=False)
        self.experts = torch.nn.ModuleList(LoRALinear(width, width) for _ in range(experts))
        self.load: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gates = self.router(x).softmax(-1)
        top, chosen = gates.topk(2, dim=-1)
        weights = torch.zeros_like(gates).scatter(-1, chosen, top / top.sum(-1, keepdim=True))
        self.load = torch.bincount(chosen.flatten(), minlength=experts).tolist()
        return sum(weights[..., e : e + 1] * expert(x) for e, expert in enumerate(self.experts))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(common.VOCAB, width)
        self.embed.weight.requires_grad_(False)
        self.norm = torch.nn.BatchNorm1d(width)
        self.moe = MoE()
        self.head = LoRALinear(width, common.VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x + self.moe(x))


torch.manual_seed(0)
net = Net().to(job.device)
common.mark("model")
model = common.compiled(common.wrap(job, net, blocks=torch.nn.ModuleList()))
opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-3)
common.train(job, common.next_token_loss(model), opt)
