"""Small synthetic checkpoints in the Hugging Face layout (config.json and
sharded BF16 *.safetensors) of every architecture cq4p runs: llama, qwen3
and gemma3 (`write_model`), and the families of issue 17 shaped like the
released models (`FAMILIES`): llama32 (Llama-3.2-1B: tied, head_dim 64,
llama3 rope scaling), qwen25 (Qwen2.5-0.5B: hidden 896, 14/2 heads, q/k/v
biases, tied), smollm2 (SmolLM2-360M: hidden 960, 15/5 heads, tied), lfm2
(LFM2-350M: conv and attention layers, original config keys) and gemma4
(Gemma 4 E2B's text decoder in its multimodal wrapper).

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
- every attention (or LFM2 conv block), every other MLP and every Gemma 4
  per-layer-embedding branch is random, scaled (by measuring the model's
  own forward pass, `cq4p.model.reference`) to add about 35% of the residual
  stream's RMS, so the layers, the attention over earlier tokens (and a
  donor's cache), the convolution's state, rotary positions and windows
  all move the logits.
"""

import dataclasses

import json
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from cq4p.io import safetensors as st
from cq4p.model import reference as rf

ARCHITECTURES = ("llama", "qwen3", "gemma3")
FAMILIES = ("llama32", "qwen25", "smollm2", "lfm2", "gemma4")
ALL_ARCHITECTURES = ARCHITECTURES + FAMILIES
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
    half of them (the families: their models' ratio). window: the sliding
    window of gemma3/gemma4 (None: 8 for gemma3, E2B's 512 for gemma4);
    gemma4's global head dim is 2 head_dim."""

    hidden: int = 256
    ffn: int = 512
    vocab: int = 512
    layers: int = 2
    heads: Optional[int] = None
    kv_heads: Optional[int] = None
    head_dim: int = 64
    window: Optional[int] = None

    def resolved(self, k_multiple=True):
        """With heads and kv_heads set; k_multiple: refuse widths that are
        not multiples of 128 (the original architectures' synthetic
        models; the families may have them, as SmolLM2 does)."""
        heads = self.heads or max(1, self.hidden // self.head_dim)
        kv_heads = self.kv_heads or max(1, heads // 2)
        shape = Shape(self.hidden, self.ffn, self.vocab, self.layers, heads, kv_heads,
                      self.head_dim, self.window)
        for name, value in (("hidden", self.hidden), ("ffn", self.ffn),
                            ("heads * head_dim", heads * self.head_dim)):
            if k_multiple and value % 128:
                raise ValueError(f"{name} ({value}) must be a multiple of 128: it is the K of "
                                 f"a projection")
        if heads % kv_heads:
            raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
        return shape


def default_shape(arch, **sizes):
    """The default Shape of `arch` (gemma3: 3 layers, two sliding and one
    global; the families: FAMILY_DEFAULTS), with `sizes` (None: default)
    applied."""
    if arch in FAMILIES:
        return _family_shape(arch, **sizes)
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r} (expected one of "
                         f"{ALL_ARCHITECTURES})")
    sizes = {name: value for name, value in sizes.items() if value is not None}
    return Shape(**{"layers": DEFAULT_LAYERS[arch], **sizes})


def model_config(arch, shape):
    """config.json of a synthetic `arch` model, with the field names real
    configs use."""
    if arch in FAMILIES:
        return _family_config(arch, _family_shape(arch, **dataclasses.asdict(shape)).resolved(
            k_multiple=False))
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
                "query_pre_attn_scalar": 48, "sliding_window": s.window or 8,
                "sliding_window_pattern": pattern, "layer_types": types,
                "final_logit_softcapping": None, "attn_logit_softcapping": None,
                "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1}
    raise ValueError(f"unknown architecture {arch!r} (expected one of {ALL_ARCHITECTURES})")


def covered_tokens(config):
    """The tokens whose successor the lookup table knows."""
    return min(text_config(config)["vocab_size"], _last_ffn(config))


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
    if arch in FAMILIES:
        return _family_tensors(arch, _family_shape(arch, **dataclasses.asdict(shape)).resolved(
            k_multiple=False), seed)
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


# --- the families of issue 17 ------------------------------------------------
#
# Each is shaped like a released model (MODELS.md): llama32 like
# Llama-3.2-1B, qwen25 like Qwen2.5-0.5B, smollm2 like SmolLM2-360M, lfm2 like
# LFM2-350M, gemma4 like Gemma 4 E2B; real head dims, head ratios, layer-type
# patterns, rotary settings and config formats, with fewer layers and a
# smaller vocabulary and FFN by default (the real sizes through Shape).

# arch -> (default Shape fields, query heads per KV head); heads default to
# hidden / head_dim (gemma4: 8).
FAMILY_DEFAULTS = {
    "llama32": (dict(hidden=512, ffn=1024, vocab=512, layers=2, head_dim=64), 4),
    "qwen25": (dict(hidden=896, ffn=1024, vocab=512, layers=2, head_dim=64), 7),
    "smollm2": (dict(hidden=960, ffn=1024, vocab=512, layers=2, head_dim=64), 3),
    "lfm2": (dict(hidden=256, ffn=512, vocab=512, layers=4, head_dim=64), 2),
    "gemma4": (dict(hidden=256, ffn=512, vocab=512, layers=7, head_dim=256, heads=8,
                    window=512), 8),
}
# The real models' sizes (`real_shape`), for config tests and benchmarks.
REAL_SHAPES = {
    "llama32": dict(hidden=2048, ffn=8192, vocab=128256, layers=16, heads=32, kv_heads=8,
                    head_dim=64),
    "qwen25": dict(hidden=896, ffn=4864, vocab=151936, layers=24, heads=14, kv_heads=2,
                   head_dim=64),
    "smollm2": dict(hidden=960, ffn=2560, vocab=49152, layers=32, heads=15, kv_heads=5,
                    head_dim=64),
    "lfm2": dict(hidden=1024, ffn=4608, vocab=65536, layers=16, heads=16, kv_heads=8,
                 head_dim=64),
    "gemma4": dict(hidden=1536, ffn=6144, vocab=262144, layers=35, heads=8, kv_heads=1,
                   head_dim=256, window=512),
    # Qwen3-1.7B (MODELS.md section 4): an architecture of its own here, not
    # a family; model_config("qwen3", real_shape("qwen3")) is its config.
    "qwen3": dict(hidden=2048, ffn=6144, vocab=151936, layers=28, heads=16, kv_heads=8,
                  head_dim=128),
}
LFM2_ATTENTION = (2, 5, 8, 10, 12, 14)  # LFM2-350M/700M/1.2B full_attn_idxs
LFM2_BLOCK_FF_DIM = {4608: 6656, 6912: 10240, 8192: 12288}  # the released block_ff_dim
GEMMA4_PLE = 256  # hidden_size_per_layer_input
GEMMA4_SOFTCAP = 30.0
BIAS_GAIN = 0.5  # qwen25 q/k/v biases, relative to the projections' output RMS
CONV_GAIN = 0.6  # lfm2 conv kernel entries
LAST_PLE_SHARE = 0.15  # gemma4: the last layer's PLE branch, small beside the lookup
GEMMA4_MATCH = 3.0  # gemma4: the lookup's matching gate, measured (its residual is noisier)
GEMMA4_BRANCH_SHARE = 0.25  # gemma4's 3 branches a layer: each a little smaller
GEMMA4_LOOKUP = 2.0  # gemma4: the lookup's output RMS relative to its residual's


def real_shape(arch):
    """The Shape of the released model `arch` imitates."""
    return Shape(**REAL_SHAPES[arch])


def _family_shape(arch, **sizes):
    defaults, ratio = FAMILY_DEFAULTS[arch]
    fields = {**defaults, **{k: v for k, v in sizes.items() if v is not None}}
    heads = fields.get("heads") or max(1, fields["hidden"] // fields["head_dim"])
    fields["heads"] = heads
    fields["kv_heads"] = fields.get("kv_heads") or max(1, heads // ratio)
    return Shape(**fields)


def gemma4_layer_types(layers):
    """E2B's pattern: full attention at every fifth layer and the last."""
    return ["full_attention" if (i + 1) % 5 == 0 or i == layers - 1 else "sliding_attention"
            for i in range(layers)]


def gemma4_shared_layers(layers):
    """E2B shares KV in its last 20 of 35 layers; fewer layers share
    proportionally, leaving both layer types a donor (the first 5 layers
    own their KV)."""
    return max(0, min(layers * 20 // 35, layers - 5))


def lfm2_ff_dim(ffn):
    """The block_ff_dim whose auto-adjusted width (int(2 ff / 3) rounded up
    to 256) is ffn."""
    if ffn % 256:
        raise ValueError(f"lfm2 ffn ({ffn}) must be a multiple of 256 (block_multiple_of)")
    return LFM2_BLOCK_FF_DIM.get(ffn, ffn * 3 // 2)


def _family_config(arch, s):
    common = {"vocab_size": s.vocab, "hidden_size": s.hidden, "intermediate_size": s.ffn,
              "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
              "num_key_value_heads": s.kv_heads, "torch_dtype": "bfloat16"}

    def ids(bos, eos):
        return {"bos_token_id": bos if bos < s.vocab else 1,
                "eos_token_id": eos if eos < s.vocab else 2}

    if arch == "llama32":
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **common,
                "head_dim": s.head_dim, "hidden_act": "silu", "attention_bias": False,
                "attention_dropout": 0.0, "mlp_bias": False, "initializer_range": 0.02,
                "max_position_embeddings": 131072, "pretraining_tp": 1, "rms_norm_eps": 1e-5,
                "rope_theta": 500000.0,
                "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                                 "low_freq_factor": 1.0,
                                 "original_max_position_embeddings": 8192,
                                 "rope_type": "llama3"},
                "tie_word_embeddings": True, "use_cache": True, **ids(128000, 128001)}
    if arch == "qwen25":
        return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **common,
                "hidden_act": "silu", "attention_dropout": 0.0, "initializer_range": 0.02,
                "max_position_embeddings": 32768, "max_window_layers": s.layers,
                "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
                "sliding_window": 32768, "use_sliding_window": False,
                "tie_word_embeddings": True, "use_cache": True, **ids(151643, 151643)}
    if arch == "smollm2":
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **common,
                "head_dim": s.head_dim, "hidden_act": "silu", "attention_bias": False,
                "attention_dropout": 0.0, "mlp_bias": False, "initializer_range": 0.02,
                "max_position_embeddings": 8192, "pretraining_tp": 1, "rms_norm_eps": 1e-5,
                "rope_theta": 100000.0, "rope_scaling": None, "rope_interleaved": False,
                "tie_word_embeddings": True, "use_cache": True, **ids(0, 0)}
    if arch == "lfm2":
        # The original LFM2 keys (block_*, num_heads, theta, tie_embedding,
        # full_attn_idxs) beside Hugging Face's, as LFM2-350M ships them.
        ff_dim = lfm2_ff_dim(s.ffn)
        return {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2",
                "vocab_size": s.vocab, "hidden_size": s.hidden, "block_dim": s.hidden,
                "conv_dim": s.hidden, "conv_dim_out": s.hidden,
                "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
                "num_heads": s.heads, "num_key_value_heads": s.kv_heads,
                "block_ff_dim": ff_dim, "intermediate_size": ff_dim,
                "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0,
                "block_multiple_of": 256, "block_mlp_init_scale": 1.0,
                "block_out_init_scale": 1.0, "block_use_swiglu": True,
                "block_use_xavier_init": True, "block_norm_eps": 1e-5, "norm_eps": 1e-5,
                "conv_L_cache": 3, "conv_bias": False, "conv_use_xavier_init": True,
                "full_attn_idxs": [i for i in LFM2_ATTENTION if i < s.layers],
                "theta": 1000000.0, "rope_theta": 1000000.0,
                "max_position_embeddings": 128000, "tie_embedding": True,
                "use_pos_enc": True, "initializer_range": 0.02, "torch_dtype": "bfloat16",
                "use_cache": True, "bos_token_id": 1, "eos_token_id": 7, "pad_token_id": 0}
    if arch == "gemma4":
        shared = gemma4_shared_layers(s.layers)
        text = {"model_type": "gemma4_text", **common, "head_dim": s.head_dim,
                "global_head_dim": 2 * s.head_dim, "num_global_key_value_heads": None,
                "attention_k_eq_v": False, "hidden_activation": "gelu_pytorch_tanh",
                "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                "tie_word_embeddings": True, "attention_bias": False,
                "attention_dropout": 0.0, "sliding_window": s.window,
                "layer_types": gemma4_layer_types(s.layers),
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "proportional",
                                       "partial_rotary_factor": 0.25,
                                       "rope_theta": 1000000.0}},
                "final_logit_softcapping": GEMMA4_SOFTCAP,
                "vocab_size_per_layer_input": s.vocab,
                "hidden_size_per_layer_input": GEMMA4_PLE,
                "num_kv_shared_layers": shared, "use_double_wide_mlp": True,
                "enable_moe_block": False, "num_experts": None, "top_k_experts": None,
                "moe_intermediate_size": None, "pad_token_id": 0, "eos_token_id": 1,
                "bos_token_id": 2}
        text.pop("torch_dtype")
        return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
                "text_config": text,
                "vision_config": {"model_type": "gemma4_vision", "hidden_size": 768},
                "audio_config": {"model_type": "gemma4_audio", "hidden_size": 1024},
                "tie_word_embeddings": True, "torch_dtype": "bfloat16",
                "boi_token_id": 255999, "eoi_token_id": 258882, "image_token_id": 258880,
                "video_token_id": 258884, "boa_token_id": 256000, "eoa_token_id": 258883,
                "audio_token_id": 258881, "eos_token_id": [1, 106]}
    raise ValueError(f"unknown architecture {arch!r} (expected one of {ALL_ARCHITECTURES})")


def text_config(config):
    """The decoder's fields of a config (a wrapper's text_config)."""
    return config["text_config"] if "text_config" in config else config


def _last_ffn(config):
    text = text_config(config)
    ffn = text["intermediate_size"]
    if text.get("model_type") == "lfm2":
        ffn = lfm2_effective_ffn(text)
    if text.get("use_double_wide_mlp") and text.get("num_kv_shared_layers"):
        ffn *= 2
    return ffn


def lfm2_effective_ffn(config):
    ff = int(2 * config["block_ff_dim"] / 3)
    multiple = config["block_multiple_of"]
    ff = int(config["block_ffn_dim_multiplier"] * ff)
    return multiple * ((ff + multiple - 1) // multiple)


def _family_tensors(arch, shape, seed):
    """name -> fp64 array of a synthetic model of a newer family (the
    module docstring's design)."""
    config = model_config(arch, shape)
    text = text_config(config)
    s = shape
    rng = np.random.default_rng(seed)
    h, v = s.hidden, s.vocab
    gemma4, lfm2 = arch == "gemma4", arch == "lfm2"
    prefix = "model.language_model." if gemma4 else "model."

    directions = rng.standard_normal((v, h))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    scale = float(rf.bf16(h ** 0.5)) if gemma4 else 1.0
    row_norm = (np.sqrt(h) / scale) if gemma4 else RESIDUAL_RMS * np.sqrt(h)
    covered = covered_tokens(config)
    cycle = rng.permutation(covered)
    successor = np.empty(covered, dtype=np.int64)
    successor[cycle] = np.roll(cycle, -1)
    oracle = rf.Config(config)

    tensors = {prefix + "embed_tokens.weight": directions * row_norm}
    if gemma4:
        width = s.layers * GEMMA4_PLE
        tensors[prefix + "embed_tokens_per_layer.weight"] = rng.standard_normal((v, width)) / 16
        tensors[prefix + "per_layer_model_projection.weight"] = _gaussian(rng, width, h)
        tensors[prefix + "per_layer_projection_norm.weight"] = _norm_weight(rng, GEMMA4_PLE,
                                                                            False)
    first_shared = s.layers - text.get("num_kv_shared_layers", 0) if gemma4 else s.layers
    for layer in range(s.layers):
        p = f"{prefix}layers.{layer}."
        last = layer == s.layers - 1
        double = gemma4 and layer >= first_shared
        f = _last_ffn(config) if last else (2 * s.ffn if double else s.ffn)
        if last:
            gate = _gaussian(rng, f, h, 0.3)
            gate[:covered] = directions[:covered] * (MATCH_LOGIT / np.sqrt(h))
            up = gate + _gaussian(rng, f, h, 0.3)
            down = _gaussian(rng, h, f, 0.1)
            down[:, :covered] = (SUCCESSOR_WEIGHT * directions[successor]
                                 - SELF_WEIGHT * directions[:covered]).T
        else:
            gate, up, down = _gaussian(rng, f, h), _gaussian(rng, f, h), _gaussian(rng, h, f)
        if lfm2:
            tensors.update({p + "operator_norm.weight": _norm_weight(rng, h, False),
                            p + "feed_forward.w1.weight": gate,
                            p + "feed_forward.w3.weight": up,
                            p + "feed_forward.w2.weight": down,
                            p + "ffn_norm.weight": _norm_weight(rng, h, False)})
        else:
            tensors.update({p + "input_layernorm.weight": _norm_weight(rng, h, False),
                            p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                            p + "mlp.down_proj.weight": down,
                            p + "post_attention_layernorm.weight": _norm_weight(rng, h, False)})
        if lfm2 and oracle.kinds[layer] == "conv":
            tensors[p + "conv.in_proj.weight"] = _gaussian(rng, 3 * h, h)
            tensors[p + "conv.conv.weight"] = CONV_GAIN * rng.standard_normal((h, 1, 3))
            tensors[p + "conv.out_proj.weight"] = _gaussian(rng, h, h)
            continue
        d = oracle.head_dims[layer]
        q_width, kv_width = s.heads * d, s.kv_heads * d
        tensors[p + "self_attn.q_proj.weight"] = _gaussian(rng, q_width, h, 1.2)
        owns = not gemma4 or layer < first_shared
        if owns:
            tensors[p + "self_attn.k_proj.weight"] = _gaussian(rng, kv_width, h, 1.2)
            tensors[p + "self_attn.v_proj.weight"] = _gaussian(rng, kv_width, h)
        output = "self_attn.out_proj" if lfm2 else "self_attn.o_proj"
        tensors[p + output + ".weight"] = _gaussian(rng, h, q_width)
        if arch == "qwen25":
            tensors[p + "self_attn.q_proj.bias"] = BIAS_GAIN * 1.2 * rng.standard_normal(q_width)
            tensors[p + "self_attn.k_proj.bias"] = BIAS_GAIN * 1.2 * rng.standard_normal(
                kv_width)
            tensors[p + "self_attn.v_proj.bias"] = BIAS_GAIN * rng.standard_normal(kv_width)
        if lfm2:
            tensors[p + "self_attn.q_layernorm.weight"] = _norm_weight(rng, d, False)
            tensors[p + "self_attn.k_layernorm.weight"] = _norm_weight(rng, d, False)
        if gemma4:
            # Scale 1.0 on unit-RMS q and k: the k norm carries 1 / sqrt(d)
            # (as Gemma 4's trained k norms do), the q norm a gain of 1.2.
            tensors[p + "self_attn.q_norm.weight"] = 1.2 * _norm_weight(rng, d, False)
            if owns:
                tensors[p + "self_attn.k_norm.weight"] = (1.2 / np.sqrt(d)) * _norm_weight(
                    rng, d, False)
            tensors[p + "pre_feedforward_layernorm.weight"] = _norm_weight(rng, h, False)
            tensors[p + "post_feedforward_layernorm.weight"] = _norm_weight(rng, h, False)
            tensors[p + "per_layer_input_gate.weight"] = _gaussian(rng, GEMMA4_PLE, h)
            tensors[p + "per_layer_projection.weight"] = _gaussian(rng, h, GEMMA4_PLE)
            tensors[p + "post_per_layer_input_norm.weight"] = _norm_weight(rng, h, False)
            tensors[p + "layer_scalar"] = rng.uniform(0.8, 1.25, size=1)
    final = "embedding_norm" if lfm2 else "norm"
    tensors[prefix + final + ".weight"] = _norm_weight(rng, h, False)
    _calibrate_family(config, tensors, prefix, row_norm * scale, rng)
    return tensors


def _calibrate_family(config, tensors, prefix, embedding_norm, rng):
    """`_calibrate` for the newer families: each layer's branches, first to
    last, scaled to their target RMS on the model's own forward pass (the
    out projection's weight, or the post-norm's for Gemma 4, whose
    post-norms set a branch's RMS)."""
    text = text_config(config)
    ids = prompt(config, seed=int(rng.integers(1 << 31)))
    layers = text["num_hidden_layers"]
    hidden = text["hidden_size"]
    gemma4 = text["model_type"] == "gemma4_text"
    lfm2 = text["model_type"] == "lfm2"
    kinds = rf.Config(config).kinds
    model = rf.Reference(config, tensors)
    lookup_rms = np.hypot(SUCCESSOR_WEIGHT, SELF_WEIGHT) * embedding_norm / np.sqrt(hidden)

    def rms(x):
        return float(np.sqrt(np.mean(np.square(x))))

    for layer in range(layers):
        p = f"{prefix}layers.{layer}."
        last = layer == layers - 1
        if gemma4:
            branches = (("attention", "post_attention_layernorm"),
                        ("mlp", "post_feedforward_layernorm"),
                        ("ple", "post_per_layer_input_norm"))
        elif lfm2:
            branches = (("attention", "conv.out_proj" if kinds[layer] == "conv"
                         else "self_attn.out_proj"), ("mlp", "feed_forward.w2"))
        else:
            branches = (("attention", "self_attn.o_proj"), ("mlp", "mlp.down_proj"))
        for branch, tensor in branches:
            record = model.trace(ids)[layer]
            if gemma4 and last and branch == "mlp":
                _sharpen_lookup(model, tensors, p, record, ids, text["rms_norm_eps"])
                record = model.trace(ids)[layer]
            residual = record["residual"]
            if branch in ("mlp", "ple"):
                residual = residual + record["attention"]
            if branch == "ple":
                residual = residual + record["mlp"]
            if branch == "mlp" and last:
                # Gemma 4's residual grows over its many branches (and
                # layer_scalars): the lookup keeps pace with it.
                target = max(lookup_rms, GEMMA4_LOOKUP * rms(residual)) if gemma4 else lookup_rms
            elif branch == "ple" and last:
                target = LAST_PLE_SHARE * rms(residual)
            else:
                target = (GEMMA4_BRANCH_SHARE if gemma4 else BRANCH_SHARE) * rms(residual)
            name = p + tensor + ".weight"
            if gemma4:
                tensors[name] = target * (1.0 + 0.1 * rng.standard_normal(hidden))
            else:
                tensors[name] = tensors[name] * (target / rms(record[branch]))
            model.weights[name] = np.asarray(tensors[name], dtype=np.float32)


def _sharpen_lookup(model, tensors, p, record, ids, epsilon):
    """Scales the lookup's matching gate (and the gate part of its up
    rows) so that the current token's unit gates at GEMMA4_MATCH on
    average, measured on the MLP's real input."""
    x = record["residual"] + record["attention"]
    y = rf.rms_norm(x, model.weights[p + "pre_feedforward_layernorm.weight"], epsilon, False)
    gate = tensors[p + "mlp.gate_proj.weight"]
    matched = np.einsum("td,td->t", y, gate[ids]).mean()
    factor = GEMMA4_MATCH / matched
    covered = min(gate.shape[0], len(model.weights[model.output]))
    extra = (factor - 1.0) * gate[:covered]
    for name in ("mlp.gate_proj", "mlp.up_proj"):
        tensors[p + name + ".weight"] = tensors[p + name + ".weight"].copy()
        tensors[p + name + ".weight"][:covered] += extra
        model.weights[p + name + ".weight"] = np.asarray(tensors[p + name + ".weight"],
                                                         dtype=np.float32)


def with_shared_kv_tensors(config, tensors, seed=0):
    """`tensors` plus k/v projections and k norms for a gemma4 model's
    KV-shared layers, as some Gemma 4 checkpoints carry them (unused: the
    model's output does not change)."""
    text = text_config(config)
    rng = np.random.default_rng(seed)
    layers, hidden = text["num_hidden_layers"], text["hidden_size"]
    out = dict(tensors)
    for layer in range(layers - text.get("num_kv_shared_layers", 0), layers):
        full = text["layer_types"][layer] == "full_attention"
        d = text["global_head_dim"] if full else text["head_dim"]
        width = text["num_key_value_heads"] * d
        p = f"model.language_model.layers.{layer}.self_attn."
        out[p + "k_proj.weight"] = _gaussian(rng, width, hidden)
        out[p + "v_proj.weight"] = _gaussian(rng, width, hidden)
        out[p + "k_norm.weight"] = _norm_weight(rng, d, False)
    return out


def with_towers(config, tensors, seed=0):
    """`tensors` plus a few small tensors of a multimodal wrapper's vision
    (and for gemma4 audio) towers, named as real checkpoints name them:
    a converter skips them."""
    rng = np.random.default_rng(seed)
    towers = {"gemma3": ("vision_tower.vision_model.embeddings.patch_embedding.weight",
                         "multi_modal_projector.mm_soft_emb_norm.weight"),
              "gemma4": ("model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight",
                         "model.embed_vision.embedding_projection.weight",
                         "model.audio_tower.layers.0.self_attn.q_proj.linear.weight",
                         "model.embed_audio.embedding_projection.weight")}
    out = dict(tensors)
    for name in towers.get(config.get("model_type"), ()):
        out[name] = rng.standard_normal((32, 16))
    return out


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


# A tokenizer for a synthetic checkpoint, so that text and chat run end to
# end without a real model's files: byte-level BPE (GPT-2's byte alphabet at
# ids 0-255, then merges of lowercase letters and spaces, shortest first, to
# fill the vocabulary) and ChatML's two markers as the last ids, <|im_end|>
# the end of turn. The model's replies are still noise: its weights are not
# trained on these tokens.
CHAT_MARKERS = ("<|im_start|>", "<|im_end|>")
TOKENIZER_MIN_VOCAB = 256 + len(CHAT_MARKERS)
_MERGE_ALPHABET = "\u0120etaoinsrhldcumfpgwybvkxjqz"  # Ġ (a space) first
CHATML_TEMPLATE = ("{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + "
                   "'\\n' + message['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"
                   "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
                   "{%- endif -%}")


def byte_character(byte):
    """GPT-2's byte-to-character map (byte-level BPE's alphabet)."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    if byte in printable:
        return chr(byte)
    return chr(256 + [b for b in range(256) if b not in printable].index(byte))


def _merges(count):
    """`count` merges (left, right): every pair of the alphabet, then each
    merged piece followed by a letter, and so on."""
    merges, pieces = [], list(_MERGE_ALPHABET)
    while len(merges) < count:
        longer = []
        for left in pieces:
            for right in _MERGE_ALPHABET:
                if len(merges) == count:
                    return merges
                merges.append((left, right))
                longer.append(left + right)
        pieces = longer
    return merges


def write_tokenizer(directory, vocab):
    """tokenizer.json and tokenizer_config.json (ChatML template) of a
    byte-level BPE tokenizer with `vocab` ids, for a synthetic checkpoint
    of that vocabulary."""
    if vocab < TOKENIZER_MIN_VOCAB:
        raise ValueError(f"a synthetic tokenizer needs a vocabulary of at least "
                         f"{TOKENIZER_MIN_VOCAB} (256 bytes and {len(CHAT_MARKERS)} chat "
                         f"markers), found {vocab}")
    pieces = {byte_character(b): b for b in range(256)}
    merges = _merges(vocab - len(CHAT_MARKERS) - len(pieces))
    for left, right in merges:
        pieces[left + right] = len(pieces)
    added = [{"id": len(pieces) + i, "content": marker, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, marker in enumerate(CHAT_MARKERS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": pieces, "merges": [list(merge) for merge in merges]}}
    with open(os.path.join(directory, "tokenizer.json"), "w") as out:
        json.dump(tokenizer, out, ensure_ascii=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as out:
        json.dump({"eos_token": CHAT_MARKERS[-1], "chat_template": CHATML_TEMPLATE}, out,
                  indent=1)


# The llama model in the sizes the tensor-level tests use.

def llama_tensors(hidden=128, ffn=256, vocab=256, layers=2, seed=0):
    return model_tensors("llama", Shape(hidden, ffn, vocab, layers), seed)


def llama_config(hidden, ffn, vocab, layers):
    return model_config("llama", Shape(hidden, ffn, vocab, layers))


def write_llama(directory, hidden=128, ffn=256, vocab=256, layers=2, seed=0, dtype="BF16"):
    return write_model(directory, "llama", Shape(hidden, ffn, vocab, layers), seed, dtype)
