"""cq4p.model.architecture on the families of issue 17: the released models'
config.json files (MODELS.md) parse into the numbers the graph writer
needs, their checkpoints' tensor names and shapes check, and what cq4p
cannot run is refused by name."""

import math

import numpy as np
import pytest

from cq4p.model import architecture as arch
from cq4p.model import reference as rf
from cq4p.model import synthetic

SLIDING, FULL = "sliding_attention", "full_attention"

# --- the released models' config.json (MODELS.md) ---------------------------

GEMMA4_E2B_TEXT = {
    "model_type": "gemma4_text", "vocab_size": 262144, "hidden_size": 1536,
    "intermediate_size": 6144, "num_hidden_layers": 35, "num_attention_heads": 8,
    "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512,
    "num_global_key_value_heads": None, "attention_k_eq_v": False,
    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
    "attention_dropout": 0.0, "sliding_window": 512,
    "layer_types": [FULL if i % 5 == 4 else SLIDING for i in range(35)],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1000000.0}},
    "final_logit_softcapping": 30.0, "vocab_size_per_layer_input": 262144,
    "hidden_size_per_layer_input": 256, "num_kv_shared_layers": 20,
    "use_double_wide_mlp": True, "enable_moe_block": False, "num_experts": None,
    "top_k_experts": None, "moe_intermediate_size": None, "pad_token_id": 0,
    "eos_token_id": 1, "bos_token_id": 2,
}
GEMMA4_E2B = {
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "text_config": GEMMA4_E2B_TEXT,
    "vision_config": {"model_type": "gemma4_vision"},
    "audio_config": {"model_type": "gemma4_audio"},
    "tie_word_embeddings": True, "boi_token_id": 255999, "eoi_token_id": 258882,
    "image_token_id": 258880, "video_token_id": 258884, "boa_token_id": 256000,
    "eoa_token_id": 258883, "audio_token_id": 258881, "eos_token_id": [1, 106],
}
LFM2_350M = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "vocab_size": 65536,
    "hidden_size": 1024, "block_dim": 1024, "conv_dim": 1024, "conv_dim_out": 1024,
    "num_hidden_layers": 16, "num_attention_heads": 16, "num_heads": 16,
    "num_key_value_heads": 8, "block_ff_dim": 6656, "intermediate_size": 6656,
    "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0,
    "block_multiple_of": 256, "block_mlp_init_scale": 1.0, "block_out_init_scale": 1.0,
    "block_use_swiglu": True, "block_use_xavier_init": True, "block_norm_eps": 1e-5,
    "norm_eps": 1e-5, "conv_L_cache": 3, "conv_bias": False, "conv_use_xavier_init": True,
    "full_attn_idxs": [2, 5, 8, 10, 12, 14], "rope_theta": 1000000.0,
    "max_position_embeddings": 128000, "tie_embedding": True, "use_pos_enc": True,
    "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 7, "pad_token_id": 0,
}
LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
    "mlp_bias": False, "max_position_embeddings": 131072, "pretraining_tp": 1,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": True, "bos_token_id": 128000, "eos_token_id": 128001,
    "torch_dtype": "bfloat16", "use_cache": True,
}
LLAMA32_3B = dict(LLAMA32_1B, hidden_size=3072, num_hidden_layers=28, num_attention_heads=24,
                  head_dim=128)
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936,
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_act": "silu",
    "attention_dropout": 0.0, "max_position_embeddings": 32768, "max_window_layers": 24,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": 32768,
    "use_sliding_window": False, "tie_word_embeddings": True, "bos_token_id": 151643,
    "eos_token_id": 151643, "torch_dtype": "bfloat16", "use_cache": True,
}
SMOLLM2_360M = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
    "hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32,
    "num_attention_heads": 15, "num_key_value_heads": 5, "hidden_act": "silu",
    "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
    "max_position_embeddings": 8192, "pretraining_tp": 1, "rms_norm_eps": 1e-5,
    "rope_theta": 100000, "rope_scaling": None, "rope_interleaved": False,
    "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0,
    "torch_dtype": "bfloat16", "use_cache": True,
}
SMOLLM2_135M = dict(SMOLLM2_360M, hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3)
GEMMA3_4B = {  # the text part of a Gemma3ForConditionalGeneration config
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
    "mm_tokens_per_image": 256, "initializer_range": 0.02,
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                    "model_type": "gemma3_text", "num_hidden_layers": 34,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16,
                      "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False},
}


def shapes_of(spec):
    return dict(spec.expected_shapes())


# --- Gemma 4 -----------------------------------------------------------------

def test_gemma4_e2b_spec():
    spec = arch.model_spec(GEMMA4_E2B)
    assert (spec.architecture, spec.model_type, spec.vocab, spec.hidden, spec.num_layers) == \
        ("gemma4", "gemma4_text", 262144, 1536, 35)
    full = [i for i, layer in enumerate(spec.layers) if layer.layer_type == FULL]
    assert full == [4, 9, 14, 19, 24, 29, 34]
    for i, layer in enumerate(spec.layers):
        d = 512 if i in full else 256
        assert (layer.head_dim, layer.num_kv_heads, layer.q_width, layer.kv_width) == \
            (d, 1, 8 * d, d)
        assert layer.window == (0 if i in full else 512)
        assert layer.attention_scale == 1.0
        assert layer.ffn == (6144 if i < 15 else 12288)
        assert layer.kv_donor == (None if i < 15 else 14 if i in full else 13)
        assert len(layer.inv_freq) == d // 2
    assert spec.kv_cache_layers == tuple(range(15))
    sliding, global_ = spec.layers[0], spec.layers[4]
    assert (sliding.rope_type, global_.rope_type) == ("default", "proportional")
    assert sliding.inv_freq[1] == pytest.approx(10000.0 ** (-2 / 256), rel=1e-15)
    # Proportional: 64 of 256 pairs rotate, the exponent over the full 512.
    assert sum(f > 0 for f in global_.inv_freq) == 64
    assert global_.inv_freq[63] == pytest.approx(1e6 ** (-126 / 512), rel=1e-15)
    assert set(global_.inv_freq[64:]) == {0.0}
    assert spec.embedding_scale == 39.25 and not spec.unit_offset and spec.v_norm
    assert spec.qk_norm and spec.sandwich_norms and spec.layer_scalar and spec.tied
    assert (spec.ple_width, spec.ple_vocab, spec.ple_embedding_scale) == (256, 262144, 16.0)
    assert spec.ple_projection_scale == 1536 ** -0.5 and spec.ple_mix_scale == 2 ** -0.5
    assert spec.final_logit_softcapping == 30.0 and spec.activation == "gelu_tanh"


def gemma4_checkpoint_shapes(spec, shared_kv=False, towers=True):
    shapes = {"model.language_model." + name[len(spec.prefix):]: shape
              for name, shape in shapes_of(spec).items()}
    if shared_kv:
        for i in range(15, 35):
            d = spec.layers[i].head_dim
            p = f"model.language_model.layers.{i}.self_attn."
            shapes.update({p + "k_proj.weight": (d, 1536), p + "v_proj.weight": (d, 1536),
                           p + "k_norm.weight": (d,)})
    if towers:
        shapes.update({"model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight": (3072, 768),
                       "model.embed_vision.embedding_projection.weight": (1536, 768),
                       "model.audio_tower.layers.0.self_attn.q_proj.linear.weight": (1024, 1024),
                       "model.embed_audio.embedding_projection.weight": (1536, 1536)})
    return shapes


@pytest.mark.parametrize("shared_kv", [False, True])
def test_gemma4_e2b_tensors(shared_kv):
    spec = arch.model_spec(GEMMA4_E2B)
    shapes = gemma4_checkpoint_shapes(spec, shared_kv)
    spec = arch.with_checkpoint_names(spec, shapes)
    assert spec.prefix == "model.language_model."
    names = spec.check_tensors(shapes)
    p = "model.language_model."
    expected = {p + "embed_tokens_per_layer.weight": (262144, 8960),
                p + "per_layer_model_projection.weight": (8960, 1536),
                p + "per_layer_projection_norm.weight": (256,),
                p + "layers.3.self_attn.q_proj.weight": (2048, 1536),
                p + "layers.4.self_attn.q_proj.weight": (4096, 1536),
                p + "layers.4.self_attn.k_norm.weight": (512,),
                p + "layers.20.mlp.down_proj.weight": (1536, 12288),
                p + "layers.20.per_layer_input_gate.weight": (256, 1536),
                p + "layers.20.per_layer_projection.weight": (1536, 256),
                p + "layers.34.layer_scalar": (1,)}
    for name, shape in expected.items():
        assert name in names and shapes[name] == shape
    assert not [n for n in names if "tower" in n or "embed_vision" in n or "embed_audio" in n]
    # A shared layer's k/v tensors are accepted when present and never converted.
    assert not [n for n in names if ".layers.20.self_attn.k" in n
                or ".layers.20.self_attn.v" in n]
    roles = spec.layer_tensors(20)
    assert "k" not in roles and "k_norm" not in roles and "q_norm" in roles
    assert spec.tensor_name(20, "layer_scalar") == p + "layers.20.layer_scalar"
    assert spec.tensor_name(0, "v") == p + "layers.0.self_attn.v_proj.weight"
    assert spec.final_norm_name == p + "norm.weight" and spec.output_name == \
        p + "embed_tokens.weight"
    # A fork's lm_head copy is tolerated.
    assert spec.check_tensors({**shapes, "lm_head.weight": (262144, 1536)}) == names


def test_gemma4_text_only_config_and_defaults():
    text_only = dict(GEMMA4_E2B_TEXT, architectures=["Gemma4ForCausalLM"])
    spec = arch.model_spec(text_only)
    assert spec.num_layers == 35 and spec.skipped_prefixes  # towers skipped by name anyway
    # Without PLE (hidden_size_per_layer_input 0), no PLE tensors.
    plain = arch.model_spec(dict(text_only, hidden_size_per_layer_input=0))
    assert plain.ple_width == 0 and plain.ple_embedding_name is None
    assert "ple_gate" not in plain.layer_tensors(0)
    # Gemma4TextConfig's defaults: layer types 5:1, last forced full, the
    # default rope parameters, no sharing.
    bare = {"model_type": "gemma4_text", "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 4}
    spec = arch.model_spec(bare)
    assert [layer.layer_type for layer in spec.layers] == [SLIDING] * 3 + [FULL]
    assert spec.layers[3].rope_type == "proportional" and spec.layers[3].head_dim == 512
    assert all(layer.kv_donor is None for layer in spec.layers)


@pytest.mark.parametrize("changes, message", [
    ({"enable_moe_block": True}, "enable_moe_block true is not supported"),
    ({"attention_k_eq_v": True}, "attention_k_eq_v true is not supported"),
    ({"use_bidirectional_attention": "vision"},
     "use_bidirectional_attention 'vision' is not supported (only null)"),
    ({"num_kv_shared_layers": 35}, "num_kv_shared_layers (35) leaves no layer"),
    ({"num_kv_shared_layers": 31}, "layer 4 (full_attention) shares keys and values, but no "
                                   "earlier full_attention layer owns any"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
     "is not supported (expected an object per layer type"),
    ({"rope_parameters": {SLIDING: {"rope_type": "yarn", "factor": 2.0},
                          FULL: {"rope_type": "default"}}},
     "rope_parameters.sliding_attention type 'yarn' is not supported"),
])
def test_gemma4_refusals(changes, message):
    with pytest.raises(arch.ArchitectureError, match=message.replace("(", r"\(")
                       .replace(")", r"\)")):
        arch.model_spec(dict(GEMMA4_E2B, text_config=dict(GEMMA4_E2B_TEXT, **changes)))


def test_gemma4_wrapper_refusals():
    with pytest.raises(arch.ArchitectureError, match="architecture 'Gemma4ForCausalLM' is not "
                       "supported for model_type 'gemma4'"):
        arch.model_spec(dict(GEMMA4_E2B, architectures=["Gemma4ForCausalLM"]))
    with pytest.raises(arch.ArchitectureError, match="without a text_config"):
        arch.model_spec({"model_type": "gemma4"})


# --- LFM2 --------------------------------------------------------------------

def test_lfm2_350m_spec():
    spec = arch.model_spec(LFM2_350M)
    assert (spec.architecture, spec.hidden, spec.num_heads, spec.num_kv_heads,
            spec.head_dim) == ("lfm2", 1024, 16, 8, 64)
    assert spec.ffn == 4608 and spec.ffn_from_checkpoint  # 6656 -> 4437 -> 4608
    attention = [i for i, layer in enumerate(spec.layers) if layer.is_attention]
    assert attention == [2, 5, 8, 10, 12, 14] and spec.kv_cache_layers == tuple(attention)
    assert spec.conv_layers == tuple(i for i in range(16) if i not in attention)
    assert spec.conv_kernel == 3 and spec.tied and spec.qk_norm and not spec.unit_offset
    assert spec.epsilon == 1e-5 and spec.activation == "silu"
    layer = spec.layers[2]
    assert (layer.q_width, layer.kv_width, layer.window, layer.attention_scale) == \
        (1024, 512, 0, 0.125)
    assert layer.inv_freq[1] == pytest.approx(1e6 ** (-2 / 64), rel=1e-15)
    conv = spec.layers[0]
    assert (conv.kind, conv.layer_type, conv.inv_freq, conv.kv_width) == ("conv", "conv", (), 0)
    assert spec.final_norm_name == "model.embedding_norm.weight"
    roles = spec.layer_tensors(0)
    assert roles["conv_in"] == ("model.layers.0.conv.in_proj.weight", (3072, 1024), "linear")
    assert roles["conv"] == ("model.layers.0.conv.conv.weight", (1024, 1, 3), "conv")
    assert roles["conv_out"] == ("model.layers.0.conv.out_proj.weight", (1024, 1024), "linear")
    assert roles["gate"][0] == "model.layers.0.feed_forward.w1.weight"
    assert roles["up"][0] == "model.layers.0.feed_forward.w3.weight"
    assert roles["down"] == ("model.layers.0.feed_forward.w2.weight", (1024, 4608), "linear")
    roles = spec.layer_tensors(2)
    assert roles["attn_norm"][0] == "model.layers.2.operator_norm.weight"
    assert roles["q_norm"] == ("model.layers.2.self_attn.q_layernorm.weight", (64,), "norm")
    assert roles["k_norm"][0] == "model.layers.2.self_attn.k_layernorm.weight"
    assert roles["o"][0] == "model.layers.2.self_attn.out_proj.weight"
    assert roles["ffn_norm"][0] == "model.layers.2.ffn_norm.weight"
    shapes = shapes_of(spec)
    assert spec.check_tensors({**shapes, "lm_head.weight": (65536, 1024)}) == list(shapes)


def test_lfm2_ffn_width_comes_from_the_w1_tensor():
    spec = arch.model_spec(LFM2_350M)
    for width in (4608, 4864):
        widened = arch.with_checkpoint_names(spec, {
            name: ((width,) + shape[1:] if ".w1." in name or ".w3." in name else
                   (shape[0], width) if ".w2." in name else shape)
            for name, shape in shapes_of(spec).items()})
        assert widened.ffn == width and {layer.ffn for layer in widened.layers} == {width}
        widened.check_tensors(shapes_of(widened))
    # Without auto-adjust the config's width is explicit: a tensor that
    # disagrees is refused.
    explicit = arch.model_spec(dict(LFM2_350M, block_auto_adjust_ff_dim=False,
                                    block_ff_dim=4608, intermediate_size=4608))
    assert explicit.ffn == 4608 and not explicit.ffn_from_checkpoint
    shapes = {name: ((4864, 1024) if name.endswith(".w1.weight") else shape)
              for name, shape in shapes_of(explicit).items()}
    with pytest.raises(arch.ArchitectureError, match=r"tensor model.layers.0.feed_forward.w1."
                       r"weight has shape \[4864, 1024\], expected \[4608, 1024\]"):
        arch.with_checkpoint_names(explicit, shapes).check_tensors(shapes)
    # The formula, for the other released sizes.
    for ff_dim, width in ((10240, 6912), (12288, 8192)):
        assert arch.model_spec(dict(LFM2_350M, block_ff_dim=ff_dim)).ffn == width


def test_lfm2_config_variants():
    newer = {k: v for k, v in LFM2_350M.items()
             if k not in ("full_attn_idxs", "block_dim", "num_heads", "block_ff_dim", "theta",
                          "tie_embedding", "block_norm_eps", "rope_theta")}
    newer.update(layer_types=["conv" if i not in (2, 5, 8, 10, 12, 14) else FULL
                              for i in range(16)],
                 rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"},
                 tie_word_embeddings=True)
    a, b = arch.model_spec(LFM2_350M), arch.model_spec(newer)
    assert a.layers == b.layers and (a.ffn, a.tied, a.epsilon) == (b.ffn, b.tied, b.epsilon)
    # The original keys alone (no Hugging Face names), theta among them.
    original = {k: v for k, v in LFM2_350M.items()
                if k not in ("hidden_size", "num_attention_heads", "intermediate_size",
                             "norm_eps", "rope_theta")}
    original["theta"] = 10000.0
    spec = arch.model_spec(original)
    assert (spec.hidden, spec.num_heads, spec.ffn) == (1024, 16, 4608)
    assert spec.layers[2].theta == 10000.0
    # Neither layer_types nor full_attn_idxs: every layer is attention.
    every = arch.model_spec({k: v for k, v in LFM2_350M.items() if k != "full_attn_idxs"})
    assert all(layer.is_attention for layer in every.layers)
    # tie_embedding false: an lm_head is needed.
    untied = arch.model_spec(dict(LFM2_350M, tie_embedding=False))
    assert "lm_head.weight" in shapes_of(untied)


@pytest.mark.parametrize("changes, message", [
    ({"conv_bias": True}, "conv_bias true is not supported"),
    ({"layer_types": ["conv"] * 15 + ["mamba"]}, "layer_types[15] 'mamba' is not supported"),
    ({"full_attn_idxs": [2, 16]}, "config field 'full_attn_idxs' is [2, 16], expected layer "
                                  "indices below 16"),
    ({"architectures": ["Lfm2VlForConditionalGeneration"]},
     "architecture 'Lfm2VlForConditionalGeneration' is not supported for model_type 'lfm2'"),
])
def test_lfm2_refusals(changes, message):
    with pytest.raises(arch.ArchitectureError) as error:
        arch.model_spec(dict(LFM2_350M, **changes))
    assert message in str(error.value)


# --- Llama 3.x, Qwen2.5, SmolLM2, Gemma 3 multimodal -------------------------

def smoothed(inv, factor=32.0, low=1.0, high=4.0, original=8192):
    wavelength = 2 * math.pi / inv
    s = (original / wavelength - low) / (high - low)
    return (1 - s) * inv / factor + s * inv


@pytest.mark.parametrize("config, head_dim, counts, band", [
    (LLAMA32_1B, 64, (15, 3, 14), range(15, 18)),
    (LLAMA32_3B, 128, (29, 6, 29), range(29, 35)),
])
def test_llama3_rope_scaling(config, head_dim, counts, band):
    spec = arch.model_spec(config)
    assert spec.head_dim == head_dim and spec.tied and "lm_head.weight" not in shapes_of(spec)
    layer = spec.layers[0]
    assert layer.rope_type == "llama3" and layer.theta == 500000.0 and layer.scaling == 1.0
    base = [500000.0 ** (-2 * j / head_dim) for j in range(head_dim // 2)]
    kept = [j for j in range(head_dim // 2)
            if layer.inv_freq[j] == pytest.approx(base[j], rel=1e-12)]
    divided = [j for j in range(head_dim // 2) if layer.inv_freq[j] == pytest.approx(
        base[j] / 32, rel=1e-12)]
    assert (len(kept), head_dim // 2 - len(kept) - len(divided), len(divided)) == counts
    for j in band:
        assert layer.inv_freq[j] == pytest.approx(smoothed(base[j]), rel=1e-12)
    # By hand, head_dim 64, j = 16: inv = 5e5^-0.5, wavelength 4442.883, s = 0.2812826.
    if head_dim == 64:
        inv = 500000.0 ** -0.5
        s = (8192 / (2 * math.pi / inv) - 1) / 3
        assert s == pytest.approx(0.2812826, abs=1e-7)
        assert layer.inv_freq[16] == pytest.approx((1 - s) * inv / 32 + s * inv, rel=1e-12)
    # The oracle computes the same frequencies on its own.
    np.testing.assert_allclose(rf.Config(config).inv_freqs[0], layer.inv_freq, rtol=1e-13)


def test_llama3_rope_scaling_spellings():
    expected = arch.model_spec(LLAMA32_1B).layers
    scaling = dict(LLAMA32_1B["rope_scaling"])
    older = dict(scaling, type=scaling.pop("rope_type"))
    assert arch.model_spec(dict(LLAMA32_1B, rope_scaling=older)).layers == expected
    newer = {k: v for k, v in LLAMA32_1B.items() if k not in ("rope_scaling", "rope_theta")}
    newer["rope_parameters"] = dict(LLAMA32_1B["rope_scaling"], rope_theta=500000.0)
    assert arch.model_spec(newer).layers == expected
    # original_max_position_embeddings falls back to max_position_embeddings.
    missing = {k: v for k, v in LLAMA32_1B["rope_scaling"].items()
               if k != "original_max_position_embeddings"}
    spec = arch.model_spec(dict(LLAMA32_1B, rope_scaling=missing,
                                max_position_embeddings=8192))
    assert spec.layers == expected


def test_qwen25_spec():
    spec = arch.model_spec(QWEN25_05B)
    assert (spec.architecture, spec.hidden, spec.num_heads, spec.num_kv_heads,
            spec.head_dim) == ("qwen2", 896, 14, 2, 64)
    assert spec.qkv_bias and not spec.qk_norm and spec.tied and spec.padded_hidden == 896
    roles = spec.layer_tensors(0)
    assert roles["q_bias"] == ("model.layers.0.self_attn.q_proj.bias", (896,), "bias")
    assert roles["k_bias"] == ("model.layers.0.self_attn.k_proj.bias", (128,), "bias")
    assert roles["v_bias"] == ("model.layers.0.self_attn.v_proj.bias", (128,), "bias")
    assert "o_bias" not in roles
    shapes = shapes_of(spec)
    assert spec.check_tensors(shapes) == list(shapes)
    with pytest.raises(arch.ArchitectureError, match="missing tensors: "
                       "model.layers.0.self_attn.q_proj.bias"):
        spec.check_tensors({k: v for k, v in shapes.items() if not k.endswith("q_proj.bias")})
    with pytest.raises(arch.ArchitectureError, match="use_sliding_window true is not supported"):
        arch.model_spec(dict(QWEN25_05B, use_sliding_window=True))


@pytest.mark.parametrize("config, hidden, padded", [(SMOLLM2_360M, 960, 1024),
                                                    (SMOLLM2_135M, 576, 640)])
def test_smollm2_widths_are_padded_not_refused(config, hidden, padded):
    spec = arch.model_spec(config)
    assert (spec.hidden, spec.padded_hidden, spec.head_dim) == (hidden, padded, 64)
    assert spec.layers[0].q_width == hidden and spec.padded(spec.layers[0].q_width) == padded
    assert spec.padded(spec.ffn) == spec.ffn  # 2560, 1536: multiples of 128 already
    shapes = shapes_of(spec)
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (hidden, hidden)
    assert shapes["model.layers.0.input_layernorm.weight"] == (hidden,)
    assert spec.check_tensors(shapes) == list(shapes)


def test_gemma3_multimodal_text_part():
    spec = arch.model_spec(GEMMA3_4B)
    assert (spec.architecture, spec.vocab, spec.hidden, spec.num_layers, spec.num_heads,
            spec.num_kv_heads, spec.head_dim) == ("gemma3", 262208, 2560, 34, 8, 4, 256)
    assert [layer.window for layer in spec.layers[:6]] == [1024] * 5 + [0]
    assert (spec.layers[5].theta, spec.layers[5].scaling) == (1e6, 8.0)
    text = {"language_model.model." + name[len("model."):]: shape
            for name, shape in shapes_of(spec).items()}
    towers = {"vision_tower.vision_model.embeddings.patch_embedding.weight": (1152, 3, 14, 14),
              "multi_modal_projector.mm_input_projection_weight": (1152, 2560),
              "multi_modal_projector.mm_soft_emb_norm.weight": (1152,)}
    fitted = arch.with_checkpoint_names(spec, {**text, **towers})
    assert fitted.prefix == "language_model.model."
    assert fitted.check_tensors({**text, **towers}) == list(text)
    newer = {"model.language_model." + name[len("model."):]: shape
             for name, shape in shapes_of(spec).items()}
    newer.update({"model." + name: shape for name, shape in towers.items()})
    fitted = arch.with_checkpoint_names(spec, newer)
    assert fitted.check_tensors(newer) == [n for n in newer if "language_model" in n]


# --- every synthetic family loads --------------------------------------------

@pytest.mark.parametrize("family", synthetic.FAMILIES)
def test_synthetic_families_check(synthetic_family, family):
    config, tensors = synthetic_family(family)
    shapes = {name: value.shape for name, value in tensors.items()}
    spec = arch.with_checkpoint_names(arch.model_spec(config), shapes)
    names = spec.check_tensors(shapes)
    assert sorted(names) == sorted(tensors)
    assert {name: tuple(shape) for name, shape in shapes.items()} == shapes_of(spec)
    if family == "gemma4":
        # Shared layers' k/v tensors and the towers: accepted, not converted.
        more = synthetic.with_towers(config, synthetic.with_shared_kv_tensors(config, tensors))
        shapes = {name: value.shape for name, value in more.items()}
        assert len(more) == len(tensors) + 10
        assert sorted(spec.check_tensors(shapes)) == sorted(tensors)


@pytest.mark.parametrize("family", synthetic.FAMILIES)
def test_synthetic_configs_at_the_real_sizes(family):
    """The generator's configs at the released models' sizes parse into
    the released models' specs."""
    real = {"llama32": LLAMA32_1B, "qwen25": QWEN25_05B, "smollm2": SMOLLM2_360M,
            "lfm2": LFM2_350M, "gemma4": GEMMA4_E2B}[family]
    ours = arch.model_spec(synthetic.model_config(family, synthetic.real_shape(family)))
    theirs = arch.model_spec(real)
    assert ours.layers == theirs.layers
    for field in ("vocab", "hidden", "ffn", "num_heads", "num_kv_heads", "head_dim", "tied",
                  "qkv_bias", "ple_width", "conv_kernel", "final_logit_softcapping"):
        assert getattr(ours, field) == getattr(theirs, field), field


def test_the_synthetic_command_writes_the_families(tmp_path, capsys):
    from cq4p.cli import main as cli
    from cq4p.io import safetensors as st

    status = cli.main(["synthetic", "--arch", "lfm2", "--out", str(tmp_path / "lfm2"),
                       "--layers", "3"])
    out = capsys.readouterr().out
    assert status == 0 and "lfm2 checkpoint, hidden 256, ffn 512" in out
    config = cv_config(tmp_path / "lfm2")
    assert config["full_attn_idxs"] == [2] and config["block_ff_dim"] == 768
    shapes = {e.name: e.shape for p in sorted((tmp_path / "lfm2").glob("*.safetensors"))
              for e in st.read_header(str(p))}
    assert shapes["model.layers.0.conv.conv.weight"] == (256, 1, 3)
    arch.with_checkpoint_names(arch.model_spec(config), shapes).check_tensors(shapes)
    # Widths that are not multiples of 128 are the families' to have.
    assert cli.main(["synthetic", "--arch", "smollm2", "--out", str(tmp_path / "smol"),
                     "--layers", "1", "--vocab", "128", "--ffn", "256"]) == 0
    assert cv_config(tmp_path / "smol")["hidden_size"] == 960
    assert cli.main(["synthetic", "--arch", "llama", "--hidden", "960", "--out",
                     str(tmp_path / "llama")]) == 2


def cv_config(directory):
    import json

    return json.loads((directory / "config.json").read_text())
