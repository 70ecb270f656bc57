"""Inference as a server runs it: a ``torch.inference_mode()`` decode loop with a KV cache, the
prompt's forward (prefill) then one token a step, greedy; the compiled model sees a cache that
grows each step. One process (the distributed layouts serve the same way, rank by rank)."""

import common
import torch

job = common.start()
net = common.model(job).eval()
forward = common.compiled(net)
caches: list[dict[str, torch.Tensor]] = [{} for _ in range(common.BLOCKS)]
tokens = common.batch(job, 0)[:, : common.SEQ]


def step(i: int) -> torch.Tensor:
    global tokens
    with torch.inference_mode():
        logits = forward(tokens if i == 0 else tokens[:, -1:], caches)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        return logits[:, -1].float().logsumexp(-1).mean()


steps = common.Steps(job)
steps.run(step, steps=max(common.STEPS, 6))
steps.done(tokens=tokens.tolist())
