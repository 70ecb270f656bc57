"""A GPT as nanoGPT and Meta's Llama reference code write one, compiled whole: the head's weight
is the embedding's (tied), rotary embeddings go through complex numbers (``view_as_complex``
and a complex64 buffer that is not saved), one block is torch's own
``TransformerEncoderLayer``, one step of it a custom ``autograd.Function``, and the model takes
its targets as a keyword and returns a dict."""

import common
import torch
import torch.nn.functional as F

job = common.start()
width, heads = common.WIDTH, common.HEADS


class Halve(torch.autograd.Function):
    """A user's own op with its own backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        return x * 0.5

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def,override]
        return grad * 0.5


def rotations(dim: int, length: int) -> torch.Tensor:
    """Each position's rotation of each pair of channels, as a complex number."""
    freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    return torch.polar(torch.ones(length, dim // 2), torch.outer(torch.arange(length).float(), freqs))


def rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * rot[: x.shape[1]].view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)


class GPT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(common.VOCAB, width)
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.encoder = torch.nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, common.VOCAB, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("rot", rotations(width // heads, 2 * common.SEQ), persistent=False)

    def forward(self, tokens: torch.Tensor, *, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.embed(tokens)
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, heads, width // heads).unbind(2)
        q, k = rotate(q, self.rot), rotate(k, self.rot)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + Halve.apply(self.out(a.transpose(1, 2).reshape(b, t, width)))
        logits = self.head(self.norm(self.encoder(x)))
        return {"loss": common.cross_entropy(logits, targets), "logits": logits}


torch.manual_seed(0)
net = GPT().to(job.device)
common.mark("model")
# FSDP2 shards the model whole: the tied weight is one parameter of it.
model = common.compiled(common.wrap(job, net, blocks=torch.nn.ModuleList()))
opt = common.adamw(net)


def step(i: int) -> torch.Tensor:
    b = common.batch(job, i)
    loss = model(b[:, :-1], targets=b[:, 1:])["loss"]
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


common.run_steps(job, step)
