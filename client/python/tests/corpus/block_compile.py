"""``block.compile()`` on each block before the layout wraps the model, as torchtitan does."""

import common

job = common.start()
net = common.wrap(job, common.model(job, compile_blocks=True))
common.train(job, common.next_token_loss(net), common.adamw(net))
