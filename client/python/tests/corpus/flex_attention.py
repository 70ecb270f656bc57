"""A transformer whose attention is ``flex_attention`` (as torchtitan and gpt-fast use it),
compiled whole: a causal block mask made once by ``create_block_mask``, and a score modifier
that adds a per-head ALiBi bias read from a tensor the modifier closes over. Dynamo traces the
modifier and the mask into subgraphs of a higher-order op.

On a GPU the job trains. torch has no backward for flex_attention on a CPU, so there it
evaluates the same model under ``no_grad``: the forward graph with the same subgraphs."""

import common
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

job = common.start()
width, heads = common.WIDTH, common.HEADS
slopes = torch.tensor([2.0 ** (-(h + 1)) for h in range(heads)], device=job.device)


def alibi(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return score - slopes[h] * (q - kv)


def causal(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    return q >= kv


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(common.VOCAB, width)
        self.q = torch.nn.Linear(width, width, bias=False)
        self.k = torch.nn.Linear(width, width, bias=False)
        self.v = torch.nn.Linear(width, width, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.norm = torch.nn.RMSNorm(width)
        self.head = torch.nn.Linear(width, common.VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor, mask: object) -> torch.Tensor:
        x = self.embed(tokens)
        b, t, _ = x.shape
        h = self.norm(x)
        q, k, v = (proj(h).view(b, t, heads, width // heads).transpose(1, 2) for proj in (self.q, self.k, self.v))
        a = flex_attention(q, k, v, score_mod=alibi, block_mask=mask)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, width))
        return self.head(F.gelu(x))


torch.manual_seed(0)
net = Net().to(job.device)
common.mark("model")
mask = create_block_mask(causal, None, None, common.SEQ, common.SEQ, device=str(job.device))
model = common.compiled(common.wrap(job, net, blocks=torch.nn.ModuleList()))
opt = common.adamw(net)


def loss_of(b: torch.Tensor) -> torch.Tensor:
    return common.cross_entropy(model(b[:, :-1], mask), b[:, 1:])


if job.device.type == "cuda":
    common.train(job, loss_of, opt)
else:
    with torch.no_grad():
        common.run_steps(job, lambda i: loss_of(common.batch(job, i)))
