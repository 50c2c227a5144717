"""Small synthetic checkpoints in the Hugging Face layout (config.json and
sharded BF16 *.safetensors) of every architecture cq4p runs: llama, qwen3
and gemma3 (`write_model`).

The weights are built so that greedy decoding is decided by the model, not
by quantization noise, while every part of the model still counts:

- token t has a random unit direction e_t; the embedding row is e_t (times a
  magnitude) and the lm_head row is e_t as well (tied, or an untied copy
  with a little noise), so the logits read the residual stream in the
  tokens' basis;
- the last layer's MLP is a lookup table: gate and up unit j match e_j (the
  GLU makes the match quadratic, so other units stay near zero) and down
  column j writes e_succ(j) - 0.7 e_j, where succ is one cycle over the
  tokens the table covers (min(vocab, ffn) of them). The next token is the
  current token's successor by a wide logit margin (`prompt` draws prompts
  from the covered tokens);
- every attention and every other MLP is random, scaled (by measuring the
  model's own forward pass, `cq4p.reference`) to add about 35% of the
  residual stream's RMS, so the layers, the attention over earlier tokens,
  rotary positions and windows all move the logits.
"""

import json
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from cq4p import reference as rf
from cq4p import safetensors as st

ARCHITECTURES = ("llama", "qwen3", "gemma3")
DEFAULT_LAYERS = {"llama": 2, "qwen3": 2, "gemma3": 3}
BRANCH_SHARE = 0.35  # what each random branch adds, relative to the residual's RMS
SUCCESSOR_WEIGHT = 1.0  # of e_succ(c) in the lookup's output, per unit of the embedding
SELF_WEIGHT = 0.7  # of e_c taken away by the lookup
MATCH_LOGIT = 5.0  # gate of a matching unit: about 5 / sqrt(hidden) * e_c . x
CALIBRATION_TOKENS = 40
RESIDUAL_RMS = 0.05  # llama/qwen3 embedding RMS (gemma3: 1 after its sqrt(hidden) scale)


@dataclass(frozen=True)
class Shape:
    """Model sizes; heads default to hidden / head_dim and kv_heads to
    half of them."""

    hidden: int = 256
    ffn: int = 512
    vocab: int = 512
    layers: int = 2
    heads: Optional[int] = None
    kv_heads: Optional[int] = None
    head_dim: int = 64

    def resolved(self):
        heads = self.heads or max(1, self.hidden // self.head_dim)
        kv_heads = self.kv_heads or max(1, heads // 2)
        shape = Shape(self.hidden, self.ffn, self.vocab, self.layers, heads, kv_heads,
                      self.head_dim)
        for name, value in (("hidden", self.hidden), ("ffn", self.ffn),
                            ("heads * head_dim", heads * self.head_dim)):
            if value % 128:
                raise ValueError(f"{name} ({value}) must be a multiple of 128: it is the K of "
                                 f"a projection")
        if heads % kv_heads:
            raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
        return shape


def default_shape(arch, **sizes):
    """The default Shape of `arch` (gemma3: 3 layers, two sliding and one
    global), with `sizes` (None: default) applied."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r} (expected one of {ARCHITECTURES})")
    sizes = {name: value for name, value in sizes.items() if value is not None}
    return Shape(**{"layers": DEFAULT_LAYERS[arch], **sizes})


def model_config(arch, shape):
    """config.json of a synthetic `arch` model, with the field names real
    configs use."""
    s = shape.resolved()
    common = {"vocab_size": s.vocab, "hidden_size": s.hidden, "intermediate_size": s.ffn,
              "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
              "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim,
              "attention_bias": False, "torch_dtype": "bfloat16"}
    if arch == "llama":
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **common,
                "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "rope_scaling": None, "mlp_bias": False,
                "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    if arch == "qwen3":
        return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **common,
                "hidden_act": "silu", "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0, "rope_scaling": None, "use_sliding_window": False,
                "sliding_window": None, "max_window_layers": s.layers,
                "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2}
    if arch == "gemma3":
        pattern = min(3, s.layers)
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                 for i in range(s.layers)]
        return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", **common,
                "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0},
                "query_pre_attn_scalar": 48, "sliding_window": 8,
                "sliding_window_pattern": pattern, "layer_types": types,
                "final_logit_softcapping": None, "attn_logit_softcapping": None,
                "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1}
    raise ValueError(f"unknown architecture {arch!r} (expected one of {ARCHITECTURES})")


def covered_tokens(config):
    """The tokens whose successor the lookup table knows."""
    return min(config["vocab_size"], config["intermediate_size"])


def prompt(config, length=CALIBRATION_TOKENS, seed=0):
    """A prompt of covered tokens."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, covered_tokens(config), length)]


def _norm_weight(rng, size, gemma):
    """Near-identity norm weights: w ~ 1 (gemma3 stores w with 1 + w applied)."""
    jitter = 0.1 * rng.standard_normal(size)
    return jitter if gemma else 1.0 + jitter


def _gaussian(rng, n, k, gain=1.0):
    return rng.standard_normal((n, k)) * (gain / np.sqrt(k))


def model_tensors(arch, shape, seed=0):
    """name -> fp64 array of a synthetic `arch` model (see the module's
    docstring)."""
    config = model_config(arch, shape)
    s = shape.resolved()
    gemma = arch == "gemma3"
    rng = np.random.default_rng(seed)
    h, f, v = s.hidden, s.ffn, s.vocab
    q_width, kv_width = s.heads * s.head_dim, s.kv_heads * s.head_dim

    directions = rng.standard_normal((v, h))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    # The residual starts as the embedding row: RMS 1 for gemma3 (after its
    # sqrt(hidden) scale), RESIDUAL_RMS otherwise.
    scale = float(rf.bf16(h ** 0.5)) if gemma else 1.0
    row_norm = (np.sqrt(h) / scale) if gemma else RESIDUAL_RMS * np.sqrt(h)
    covered = covered_tokens(config)
    cycle = rng.permutation(covered)
    successor = np.empty(covered, dtype=np.int64)
    successor[cycle] = np.roll(cycle, -1)

    tensors = {"model.embed_tokens.weight": directions * row_norm}
    for layer in range(s.layers):
        prefix = f"model.layers.{layer}."
        last = layer == s.layers - 1
        if last:
            gate = _gaussian(rng, f, h, 0.3)
            gate[:covered] = directions[:covered] * (MATCH_LOGIT / np.sqrt(h))
            up = gate + _gaussian(rng, f, h, 0.3)
            down = _gaussian(rng, h, f, 0.1)
            down[:, :covered] = (SUCCESSOR_WEIGHT * directions[successor]
                                 - SELF_WEIGHT * directions[:covered]).T
        else:
            gate, up, down = _gaussian(rng, f, h), _gaussian(rng, f, h), _gaussian(rng, h, f)
        weights = {"self_attn.q_proj": _gaussian(rng, q_width, h, 1.2),
                   "self_attn.k_proj": _gaussian(rng, kv_width, h, 1.2),
                   "self_attn.v_proj": _gaussian(rng, kv_width, h),
                   "self_attn.o_proj": _gaussian(rng, h, q_width),
                   "mlp.gate_proj": gate, "mlp.up_proj": up, "mlp.down_proj": down}
        for name, value in weights.items():
            tensors[prefix + name + ".weight"] = value
        tensors[prefix + "input_layernorm.weight"] = _norm_weight(rng, h, gemma)
        tensors[prefix + "post_attention_layernorm.weight"] = _norm_weight(rng, h, gemma)
        if arch != "llama":
            tensors[prefix + "self_attn.q_norm.weight"] = _norm_weight(rng, s.head_dim, gemma)
            tensors[prefix + "self_attn.k_norm.weight"] = _norm_weight(rng, s.head_dim, gemma)
        if gemma:
            tensors[prefix + "pre_feedforward_layernorm.weight"] = _norm_weight(rng, h, gemma)
            tensors[prefix + "post_feedforward_layernorm.weight"] = _norm_weight(rng, h, gemma)
    tensors["model.norm.weight"] = _norm_weight(rng, h, gemma)
    if arch == "llama":
        tensors["lm_head.weight"] = (directions + 0.05 * rng.standard_normal((v, h))
                                     / np.sqrt(h)) * row_norm
    _calibrate(config, tensors, row_norm * scale, gemma, rng)
    return tensors


def _calibrate(config, tensors, embedding_norm, gemma, rng):
    """Scales each layer's branches, first to last, to their target RMS,
    measured on the model's own forward pass: BRANCH_SHARE of the residual
    they add to, and for the lookup SUCCESSOR_WEIGHT and SELF_WEIGHT of the
    embedding's norm."""
    ids = prompt(config, seed=int(rng.integers(1 << 31)))
    layers = config["num_hidden_layers"]
    lookup_rms = np.hypot(SUCCESSOR_WEIGHT, SELF_WEIGHT) * embedding_norm / np.sqrt(
        config["hidden_size"])

    def rms(x):
        return float(np.sqrt(np.mean(np.square(x))))

    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        for branch, projection, post_norm in (
                ("attention", "self_attn.o_proj", "post_attention_layernorm"),
                ("mlp", "mlp.down_proj", "post_feedforward_layernorm")):
            record = rf.Reference(config, tensors).trace(ids)[layer]
            residual = record["residual"] + (record["attention"] if branch == "mlp" else 0)
            target = (lookup_rms if branch == "mlp" and layer == layers - 1
                      else BRANCH_SHARE * rms(residual))
            if gemma:
                # The post-norm sets the branch's RMS: that of its (1 + w).
                hidden = config["hidden_size"]
                tensors[prefix + post_norm + ".weight"] = (
                    target * (1.0 + 0.1 * rng.standard_normal(hidden)) - 1.0)
            else:
                tensors[prefix + projection + ".weight"] *= target / rms(record[branch])


def write_checkpoint(directory, tensors, config, shards=2, dtype="BF16"):
    """Writes `tensors` as `shards` safetensors files plus config.json."""
    os.makedirs(directory, exist_ok=True)
    names = list(tensors)
    for shard in range(shards):
        part = {name: tensors[name] for name in names[shard::shards]}
        st.write(os.path.join(directory, f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"),
                 part, dtype)
    with open(os.path.join(directory, "config.json"), "w") as out:
        json.dump(config, out, indent=1)
    return config


def write_model(directory, arch="llama", shape=None, seed=0, dtype="BF16"):
    """A complete synthetic `arch` checkpoint in `directory` (default
    sizes: `default_shape`); its config."""
    shape = shape or default_shape(arch)
    return write_checkpoint(directory, model_tensors(arch, shape, seed),
                            model_config(arch, shape), dtype=dtype)


# The llama model in the sizes the tensor-level tests use.

def llama_tensors(hidden=128, ffn=256, vocab=256, layers=2, seed=0):
    return model_tensors("llama", Shape(hidden, ffn, vocab, layers), seed)


def llama_config(hidden, ffn, vocab, layers):
    return model_config("llama", Shape(hidden, ffn, vocab, layers))


def write_llama(directory, hidden=128, ffn=256, vocab=256, layers=2, seed=0, dtype="BF16"):
    return write_model(directory, "llama", Shape(hidden, ffn, vocab, layers), seed, dtype)
