"""``torch.compile(model)``: the whole model, wrapped in its layout first."""

import common

job = common.start()
net = common.wrap(job, common.model(job))
common.train(job, common.next_token_loss(common.compiled(net)), common.adamw(net))
