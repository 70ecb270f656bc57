"""Inference as a server runs it: a ``torch.inference_mode()`` decode loop with a KV cache, the
prompt's forward (prefill) then one token a step, greedy; the compiled model sees a cache that
grows each step. One process (the distributed layouts serve the same way, rank by rank).

Under ``MODE=reduce-overhead`` (CUDA graphs) the loop does what torch asks of a server that keeps
a graph's outputs across calls: it marks each step's start and copies the cache out of the
graph's memory, which the next replay overwrites."""

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
        if common.CUDA_GRAPHS:
            torch.compiler.cudagraph_mark_step_begin()
        logits = forward(tokens if i == 0 else tokens[:, -1:], caches)
        if common.CUDA_GRAPHS:
            for cache in caches:
                cache.update((name, t.clone()) for name, t in cache.items())
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        return logits[:, -1].float().logsumexp(-1).mean()


steps = common.Steps(job)
steps.run(step, steps=max(common.STEPS, 6))
steps.done(tokens=tokens.tolist())
