"""Activation checkpointing inside the compiled region: each block's inner function is
recomputed in the backward (``torch.utils.checkpoint``, non-reentrant)."""

import common

job = common.start()
net = common.wrap(job, common.model(job, checkpointed=True))
common.train(job, common.next_token_loss(common.compiled(net)), common.adamw(net))
