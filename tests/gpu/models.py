"""The three models of the torch.compile warm-start measurement, in plain torch.nn (no downloads).

- ``gpt2``: GPT-2 small in size (12 layers, d=768, 12 heads, vocab 50257), batch 4 x seq 256,
  one training step under bf16 autocast: forward, loss, backward, AdamW step. The model is
  compiled whole with ``torch.compile``; the optimizer runs eagerly.
- ``regional``: the repeated-region model of PyTorch's regional-compilation recipe: a linear
  layer, then 64 copies of a small ``Layer`` (linear, ReLU, sigmoid, linear, ReLU), each copy
  wrapped in ``torch.compile`` (regional compilation: one graph, reused 64 times); inference.
- ``convnet``: a small ResNet (a 3x3 stem, then three stages of one basic block each, 32, 64
  and 128 channels, batch norm, global average pooling, a linear classifier) on a batch of 64
  32x32 images, one training step under bf16 autocast in channels-last: forward, loss,
  backward, SGD with momentum. Compiled whole; convolutions go to cuDNN, the batch norms,
  activations and residual adds become Triton kernels, each stage's at its own shapes.

``tiny=True`` shrinks them so the harness can run on a CPU in seconds (never for figures).
Weights come from a fixed seed, so every process builds the same model and its loss (or output
checksum) can be compared across variants.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 50257
    layers: int = 12
    heads: int = 12
    d: int = 768
    seq: int = 256
    batch: int = 4


TINY_GPT2 = GPT2Config(vocab=512, layers=2, heads=2, d=64, seq=32, batch=2)


class Attention(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.heads = c.heads
        self.c_attn = nn.Linear(c.d, 3 * c.d)
        self.c_proj = nn.Linear(c.d, c.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))


class MLP(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(c.d, 4 * c.d)
        self.c_proj = nn.Linear(4 * c.d, c.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.d)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.d)
        self.mlp = MLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.d)
        self.wpe = nn.Embedding(c.seq, c.d)
        self.h = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.d)
        self.lm_head = nn.Linear(c.d, c.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, mean=0.0, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


class Layer(nn.Module):
    """The recipe's repeated region."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(width, width)
        self.relu1 = nn.ReLU()
        self.linear2 = nn.Linear(width, width)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(self.relu1(self.linear1(x)))
        return self.relu2(self.linear2(a))


class RegionalModel(nn.Module):
    """A linear layer outside any compiled region, then ``layers`` compiled copies of Layer."""

    def __init__(self, width: int = 10, layers: int = 64, compile: bool = True) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.layers = nn.ModuleList(torch.compile(Layer(width)) if compile else Layer(width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        for layer in self.layers:
            x = layer(x)
        return x


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with batch norm, and a projected shortcut when
    the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ConvNet(nn.Module):
    """A small ResNet: stem, one basic block per stage, pooling, classifier."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128), classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x))
        logits = self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))
        return F.cross_entropy(logits.float(), targets)


#: The models torch_child.py and torch_warmstart.py know.
MODELS = ("gpt2", "regional", "convnet")


class Workload:
    """One model's first call, ready to time: ``step()`` runs it and returns a float on the host.
    ``compile=False`` runs the same model eagerly (no torch.compile anywhere)."""

    def __init__(self, model_name: str, device: str, tiny: bool, compile: bool = True) -> None:
        wrap = torch.compile if compile else (lambda m: m)
        self.device = device
        torch.manual_seed(1234)
        if model_name == "gpt2":
            c = TINY_GPT2 if tiny else GPT2Config()
            self.model = GPT2(c).to(device)
            self.model.train()
            g = torch.Generator().manual_seed(99)
            self.idx = torch.randint(0, c.vocab, (c.batch, c.seq), generator=g).to(device)
            self.targets = torch.randint(0, c.vocab, (c.batch, c.seq), generator=g).to(device)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
            self.compiled = wrap(self.model)
            self.step = self._train_step
        elif model_name == "convnet":
            self.model = ConvNet((8, 16) if tiny else (32, 64, 128)).to(device)
            self.model.train()
            g = torch.Generator().manual_seed(99)
            batch, size = (4, 16) if tiny else (64, 32)
            self.idx = torch.randn(batch, 3, size, size, generator=g).to(device)
            self.targets = torch.randint(0, 10, (batch,), generator=g).to(device)
            if device == "cuda":
                self.model = self.model.to(memory_format=torch.channels_last)
                self.idx = self.idx.contiguous(memory_format=torch.channels_last)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
            self.compiled = wrap(self.model)
            self.step = self._train_step
        elif model_name == "regional":
            self.model = RegionalModel(10, 8 if tiny else 64, compile).to(device)
            self.model.eval()
            self.x = torch.randn(10, 10, generator=torch.Generator().manual_seed(7)).to(device)
            self.step = self._infer
        else:
            raise ValueError(model_name)

    def _train_step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=self.device, dtype=torch.bfloat16):
            loss = self.compiled(self.idx, self.targets)
        loss.backward()
        self.opt.step()
        return float(loss.detach().float().item())

    def _infer(self) -> float:
        with torch.no_grad():
            out = self.model(self.x)
        return float(out.float().sum().item())
