"""A model from a library people use, compiled whole: Hugging Face ``transformers``'
``LlamaForCausalLM`` built from its config with random weights, so nothing is downloaded. Its
attention, rotary embedding and output types are the library's, not ours."""

import common
import torch
from transformers import LlamaConfig, LlamaForCausalLM

job = common.start()
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=common.VOCAB,
    hidden_size=common.WIDTH,
    intermediate_size=4 * common.WIDTH,
    num_hidden_layers=common.BLOCKS,
    num_attention_heads=common.HEADS,
    num_key_value_heads=common.HEADS,
    max_position_embeddings=max(128, 2 * common.SEQ),
    attn_implementation="sdpa",
)
llama = LlamaForCausalLM(config).to(job.device)
common.mark("model")
net = common.wrap(job, llama, blocks=llama.model.layers)
forward = common.compiled(net)
common.train(job, common.next_token_loss(lambda tokens: forward(input_ids=tokens).logits), common.adamw(net))
