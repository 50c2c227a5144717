"""Small synthetic checkpoints in the Hugging Face layout.

The demo and the end-to-end tests need a model to convert without fetching
one: a llama-shaped set of random weights (token embedding, attention and
MLP projections, norms, an untied lm_head) written as config.json and
sharded *.safetensors, in BF16 by default as real checkpoints are.
"""

import json
import os

import numpy as np

from cq4p import safetensors as st


def llama_tensors(hidden=128, ffn=256, vocab=256, layers=2, seed=0):
    """name -> fp64 array of a llama-shaped model."""
    rng = np.random.default_rng(seed)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden)) * 0.02}
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        for name, shape in (("self_attn.q_proj", (hidden, hidden)),
                            ("self_attn.k_proj", (hidden // 2, hidden)),
                            ("self_attn.v_proj", (hidden // 2, hidden)),
                            ("self_attn.o_proj", (hidden, hidden)),
                            ("mlp.gate_proj", (ffn, hidden)), ("mlp.up_proj", (ffn, hidden)),
                            ("mlp.down_proj", (hidden, ffn))):
            tensors[prefix + name + ".weight"] = rng.standard_normal(shape) * 0.05
        tensors[prefix + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(hidden)
        tensors[prefix + "post_attention_layernorm.weight"] = np.ones(hidden)
    tensors["model.norm.weight"] = np.ones(hidden)
    tensors["lm_head.weight"] = rng.standard_normal((vocab, hidden)) * 0.02
    return tensors


def llama_config(hidden, ffn, vocab, layers):
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
            "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": ffn,
            "num_hidden_layers": layers, "tie_word_embeddings": False}


def write_checkpoint(directory, tensors, config, shards=2, dtype="BF16"):
    """Writes `tensors` as `shards` safetensors files plus config.json."""
    os.makedirs(directory, exist_ok=True)
    names = list(tensors)
    for shard in range(shards):
        part = {name: tensors[name] for name in names[shard::shards]}
        st.write(os.path.join(directory, f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"),
                 part, dtype)
    with open(os.path.join(directory, "config.json"), "w") as out:
        json.dump(config, out)
    return config


def write_llama(directory, hidden=128, ffn=256, vocab=256, layers=2, seed=0, dtype="BF16"):
    """A complete llama-shaped checkpoint in `directory`."""
    return write_checkpoint(directory, llama_tensors(hidden, ffn, vocab, layers, seed),
                            llama_config(hidden, ffn, vocab, layers), dtype=dtype)
