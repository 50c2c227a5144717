"""The model architectures cq4p runs, read from a Hugging Face config.json.

`model_spec` turns a config into a `ModelSpec`: the numbers and choices the
graph writer needs (sizes, norms, attention windows, rotary frequencies,
which layers are attention and which short convolutions, which layers read
another layer's KV cache), with Hugging Face's defaults for fields a config
may leave out. `with_checkpoint_names` then fits the spec to a checkpoint's
tensor names (a nested decoder's prefix; LFM2's FFN width read from its w1
tensor), and `ModelSpec.check_tensors` matches the checkpoint's tensors
against what the architecture needs. Anything cq4p cannot run is refused by
name with a one-line `ArchitectureError`: an unknown model_type, a config
field whose value changes the computation in a way the graph has no op for,
a missing or misshapen tensor.

Supported:
- llama (and mistral, whose sliding window applies to every layer), with
  rope_scaling linear or llama3 (Llama 3.x; the frequencies computed here);
  SmolLM2's widths that are not multiples of 128 (the converter zero-pads
  K, `ModelSpec.padded_hidden`);
- qwen2 (Qwen2.5: q/k/v biases) and qwen3 (per-head q/k RMSNorm);
- gemma3 text models (unit-offset RMSNorm everywhere, sandwich norms around
  attention and MLP, scaled embeddings, interleaved sliding-window and
  global layers with their own rotary bases), also as the text part of a
  Gemma3ForConditionalGeneration checkpoint (its vision tower skipped);
- gemma4 text decoders (Gemma 4 E2B/E4B: plain RMSNorm, attention scale 1,
  a weightless V norm, per-layer-type head dims, proportional RoPE on full
  layers, KV sharing, double-wide MLPs on shared layers, per-layer
  embeddings, layer_scalar, final logit softcapping), nested in a
  Gemma4ForConditionalGeneration checkpoint (vision and audio towers
  skipped) or on their own;
- lfm2 (LiquidAI LFM2: short-convolution and attention layers, q/k
  layernorms, w1/w2/w3 MLPs).
"""

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gemma4_text",
                         "lfm2")
ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
                 "gemma3_text": "gemma3", "gemma4_text": "gemma4", "lfm2": "lfm2"}
CAUSAL_LM_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                     "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                     "gemma3_text": "Gemma3ForCausalLM", "gemma4_text": "Gemma4ForCausalLM",
                     "lfm2": "Lfm2ForCausalLM"}
# Multimodal wrappers whose text decoder cq4p runs: model_type -> (the text
# config's model_type, the wrapper's class, the tower tensors skipped).
WRAPPERS = {
    "gemma3": ("gemma3_text", "Gemma3ForConditionalGeneration",
               ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                "model.multi_modal_projector.")),
    "gemma4": ("gemma4_text", "Gemma4ForConditionalGeneration",
               ("model.vision_tower.", "model.embed_vision.", "model.audio_tower.",
                "model.embed_audio.", "vision_tower.", "embed_vision.", "audio_tower.",
                "embed_audio.")),
}
# config activation name -> the graph's cq4p.glu activation
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
SLIDING, FULL, CONV = "sliding_attention", "full_attention", "conv"
ATTENTION = "attention"  # LayerSpec.kind of an attention layer (CONV: a short convolution)
ROPE_TYPES = ("default", "linear", "llama3", "proportional")
# Every projection's K is padded to a multiple of this by the converter
# (the Hadamard group size and the orthogonal panels' virtual group).
K_MULTIPLE = 128
# Checkpoint tensors that are derived buffers, not weights.
IGNORED_TENSOR = re.compile(r"\.rotary_emb\.inv_freq$")

# Hugging Face's defaults (the config classes' constructors) for the fields
# a config.json may omit.
DEFAULTS = {
    "llama": dict(hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
                  tie_word_embeddings=False),
    "mistral": dict(hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
                    tie_word_embeddings=False, sliding_window=4096),
    "qwen2": dict(hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
                  tie_word_embeddings=False),
    "qwen3": dict(hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
                  tie_word_embeddings=False, head_dim=128),
    "gemma3_text": dict(hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                        rope_theta=1000000.0, rope_local_base_freq=10000.0,
                        tie_word_embeddings=True, head_dim=256, query_pre_attn_scalar=256,
                        sliding_window=4096, sliding_window_pattern=6, vocab_size=262208,
                        num_attention_heads=8, num_key_value_heads=4),
    "gemma4_text": dict(hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                        tie_word_embeddings=True, head_dim=256, global_head_dim=512,
                        sliding_window=512, vocab_size=262144, num_attention_heads=8,
                        num_key_value_heads=4, vocab_size_per_layer_input=262144,
                        hidden_size_per_layer_input=256, num_kv_shared_layers=0,
                        use_double_wide_mlp=False),
    "lfm2": dict(norm_eps=1e-5, num_key_value_heads=8, vocab_size=65536, conv_L_cache=3,
                 block_multiple_of=256, block_ffn_dim_multiplier=1.0,
                 block_auto_adjust_ff_dim=True, tie_word_embeddings=True, rope_theta=1000000.0),
}


FLOAT32_TINY = 2.0 ** -126  # float32's smallest normal number


class ArchitectureError(ValueError):
    """A config or checkpoint cq4p cannot run; the message is one line."""


def padded(k):
    """k rounded up to a multiple of K_MULTIPLE: the K a projection whose
    input width is k is stored with (the converter zero-pads the columns
    k..padded(k)-1, and the activation is zero-padded to match)."""
    return -(-int(k) // K_MULTIPLE) * K_MULTIPLE


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer. `model_spec` sets every field; the fields after
    the first three have defaults only so that a LayerSpec built by hand
    with (window, theta, scaling) keeps its old meaning (an attention layer
    with the model's head_dim, heads and FFN width: 0 and () there stand
    for "the model's").

    window: the attention window in positions (0: none); query i sees key j
        iff j <= i and i - j < window. On a KV-shared layer, the window
        applies to the donor's keys.
    theta, scaling: the rotary base and linear position scaling, meaning
        inv_freq[j] = theta^(-2j/head_dim) / scaling. They describe the
        frequencies only when rope_type is "default" or "linear"; for
        "llama3" and "proportional" they are the base theta and 1.0, and
        `inv_freq` is the definition. Conv layers carry the model's values,
        unused.
    kind: "attention" or "conv" (an LFM2 short-convolution block).
    layer_type: the config's name for it: "full_attention",
        "sliding_attention" or "conv".
    head_dim: this layer's attention head width (Gemma 4: head_dim on
        sliding layers, global_head_dim on full ones); 0 on conv layers.
    num_kv_heads: this layer's key/value heads; 0 on conv layers.
    q_width: num_heads * head_dim: the q projection's N, the o projection's
        K (before padding); 0 on conv layers.
    kv_width: num_kv_heads * head_dim: the k and v projections' N and the
        width of one KV cache row of this layer; 0 on conv layers.
    rope_type: "default", "linear", "llama3" or "proportional" (None on
        conv layers).
    inv_freq: the rotary inverse frequencies, a tuple of head_dim / 2
        Python floats (computed in float64): dimension pairs (j, j +
        head_dim/2) of each head rotate by the angle position * inv_freq[j]
        (rotate-half pairing). Pairs that do not rotate (proportional RoPE
        past its partial_rotary_factor) have 0.0: cos 1, sin 0. Every rope
        type is expressed this way. () on conv layers.
    attention_scale: the factor on q.k before the softmax (1/sqrt(head_dim)
        for Llama, Qwen and LFM2; query_pre_attn_scalar^-0.5 for Gemma 3;
        1.0 for Gemma 4); 0.0 on conv layers.
    kv_donor: None when the layer computes its own keys and values (and
        has its own KV cache); otherwise the index of the earlier layer
        whose KV cache this layer attends over (Gemma 4 KV sharing: the
        last non-shared layer of the same layer_type). A shared layer runs
        no k/v projections, k norm or v norm, has no cache of its own, and
        applies its own window and causal mask to the donor's cached keys
        and values (already normed and rotated).
    ffn: this layer's MLP width (the gate/up N, the down K before padding;
        Gemma 4 doubles it on KV-shared layers with use_double_wide_mlp).
    """

    window: int
    theta: float
    scaling: float
    kind: str = ATTENTION
    layer_type: str = FULL
    head_dim: int = 0
    num_kv_heads: int = 0
    q_width: int = 0
    kv_width: int = 0
    rope_type: Optional[str] = "default"
    inv_freq: tuple = ()
    attention_scale: float = 0.0
    kv_donor: Optional[int] = None
    ffn: int = 0

    @property
    def is_attention(self):
        return self.kind == ATTENTION

    @property
    def is_conv(self):
        return self.kind == CONV

    @property
    def owns_kv(self):
        """An attention layer that computes and caches its own K and V."""
        return self.kind == ATTENTION and self.kv_donor is None


@dataclass(frozen=True)
class ModelSpec:
    """Everything the graph writer needs to write a model's forward pass.

    Model-wide fields (per-layer values are in `layers`):
    architecture: "llama", "qwen2", "qwen3", "gemma3", "gemma4" or "lfm2".
    model_type: the (text) config's model_type.
    vocab, hidden: the vocabulary and the residual stream's (true) width.
    ffn: the config's MLP width (LFM2: after block_auto_adjust_ff_dim, or
        the w1 tensor's once `with_checkpoint_names` saw the checkpoint);
        layers may differ: LayerSpec.ffn.
    num_heads: query heads (every attention layer).
    num_kv_heads, head_dim: the config's (Gemma 4: of sliding layers);
        per layer: LayerSpec.num_kv_heads / head_dim.
    epsilon: every RMSNorm's epsilon.
    activation: cq4p.glu's, "silu" or "gelu_tanh".
    tied: the logits use the embedding table (`output_name`).
    attention_scale: the config's (LayerSpec.attention_scale per layer).
    embedding_scale: None (rows as stored) or the factor on embedding rows
        (Gemma: sqrt(hidden) rounded to bf16).
    unit_offset: RMSNorm weights w act as (1 + w) (Gemma 3 only).
    qk_norm: per-head RMSNorm of q and k (weights `q_norm`/`k_norm`,
        LFM2's `q_layernorm`/`k_layernorm`) before the rotary embedding.
    sandwich_norms: norms on the attention and MLP outputs too (Gemma 3/4).
    layers: LayerSpec per layer.
    prefix: of the decoder's tensors ("model.", "model.language_model.").
    lm_head_name: the untied output's tensor.

    Fields added for the families of issue 17 (defaults: the older
    families' behaviour):
    qkv_bias: the q, k and v projections have biases (Qwen2), added to
        their outputs before any norm or rotary embedding (tensors
        `q_bias`/`k_bias`/`v_bias` of `layer_tensors`).
    v_norm: v is RMS-normalised per head with no weight (Gemma 4), before
        it is cached.
    ple_width: the per-layer embedding width (Gemma 4's
        hidden_size_per_layer_input; 0: no per-layer embeddings). With PLE,
        once per step: tok = ple_table[ids] * ple_embedding_scale
        ([M, layers * ple_width]); ctx = (x0 @ ple_projection^T) *
        ple_projection_scale, where x0 is the scaled embedding;
        ctx = RMSNorm per group of ple_width (ple_norm weight, epsilon);
        P = (ctx + tok) * ple_mix_scale; layer i reads columns
        [i * ple_width, (i + 1) * ple_width) of P. In layer i after the MLP
        residual: x = x + RMSNorm(((gelu_tanh(x @ ple_gate^T)) * P_i) @
        ple_projection_i^T; ple_norm_i).
    ple_vocab: rows of the per-layer embedding table (0: no PLE).
    ple_embedding_scale: sqrt(ple_width) rounded to bf16 (None: no PLE).
    ple_projection_scale: hidden^-0.5 (0.0: no PLE).
    ple_mix_scale: 2^-0.5 (0.0: no PLE).
    layer_scalar: each layer ends by multiplying the residual stream by its
        `layer_scalar` tensor (shape [1], Gemma 4), after the PLE residual.
    final_logit_softcapping: None, or c: logits = c * tanh(logits / c).
    conv_kernel: the short convolution's width L (LFM2's conv_L_cache;
        0: no conv layers). A conv layer: BCx = in_proj(x) [M, 3 * hidden],
        B, C, xx = its thirds in that order; Bx = B * xx; y[t, c] =
        sum_{k<L} w[c, 0, k] * Bx[t - (L-1) + k, c] over the sequence so far
        (zeros before position 0; the last L-1 rows of Bx are the layer's
        state, carried across steps); out_proj(C * y).
    ffn_from_checkpoint: the MLP width is the checkpoint's (LFM2 with
        block_auto_adjust_ff_dim): `with_checkpoint_names` reads it from the
        first layer's w1 tensor.
    skipped_prefixes: checkpoint tensors starting with one of these
        (vision/audio towers) are not part of the text model: check_tensors
        accepts and leaves them out.

    Derived: `padded_hidden` (the K of projections that read the residual
    stream as stored: hidden rounded up to a multiple of 128; norms and the
    residual stay at `hidden`), `padded(k)` for any other K.
    """

    architecture: str
    model_type: str
    vocab: int
    hidden: int
    ffn: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    epsilon: float
    activation: str  # cq4p.glu's: "silu" or "gelu_tanh"
    tied: bool
    attention_scale: float
    embedding_scale: Optional[float]  # None: rows as stored
    unit_offset: bool  # RMSNorm weights w act as (1 + w)
    qk_norm: bool
    sandwich_norms: bool  # gemma3/4: norms on the attention and MLP outputs too
    layers: tuple  # LayerSpec per layer
    prefix: str = "model."  # of the decoder's tensors
    lm_head_name: str = "lm_head.weight"
    qkv_bias: bool = False
    v_norm: bool = False
    ple_width: int = 0
    ple_vocab: int = 0
    ple_embedding_scale: Optional[float] = None
    ple_projection_scale: float = 0.0
    ple_mix_scale: float = 0.0
    layer_scalar: bool = False
    final_logit_softcapping: Optional[float] = None
    conv_kernel: int = 0
    ffn_from_checkpoint: bool = False
    skipped_prefixes: tuple = ()

    @property
    def num_layers(self):
        return len(self.layers)

    @property
    def q_width(self):
        return self.num_heads * self.head_dim

    @property
    def kv_width(self):
        return self.num_kv_heads * self.head_dim

    @property
    def padded_hidden(self):
        """hidden rounded up to a multiple of 128: the stored K of every
        projection that reads the residual stream (q/k/v, gate/up, conv
        in_proj, the PLE gate and context projection, the lm_head or tied
        embedding); the converter
        zero-pads the weights' columns and the graph the activations, after
        the norm (whose mean stays over `hidden`)."""
        return padded(self.hidden)

    @staticmethod
    def padded(k):
        """Any projection's stored K for a true K of k (see `padded`)."""
        return padded(k)

    @property
    def kv_cache_layers(self):
        """Indices of the layers that own a KV cache (attention layers
        that read no other layer's cache): the only ones the runtime keeps
        caches for, each kv_width wide."""
        return tuple(i for i, layer in enumerate(self.layers) if layer.owns_kv)

    @property
    def conv_layers(self):
        """Indices of the short-convolution layers (each has a state of
        conv_kernel - 1 rows of width hidden)."""
        return tuple(i for i, layer in enumerate(self.layers) if layer.is_conv)

    # -- tensor names --

    @property
    def embedding_name(self):
        return self.prefix + "embed_tokens.weight"

    @property
    def final_norm_name(self):
        """The norm after the last layer (LFM2 calls it embedding_norm)."""
        part = "embedding_norm" if self.architecture == "lfm2" else "norm"
        return self.prefix + part + ".weight"

    @property
    def output_name(self):
        """The tensor the logits are computed with."""
        return self.embedding_name if self.tied else self.lm_head_name

    @property
    def ple_embedding_name(self):
        """The per-layer embedding table [ple_vocab, layers * ple_width]
        (None without PLE)."""
        return self.prefix + "embed_tokens_per_layer.weight" if self.ple_width else None

    @property
    def ple_projection_name(self):
        """The PLE context projection [layers * ple_width, hidden]."""
        return self.prefix + "per_layer_model_projection.weight" if self.ple_width else None

    @property
    def ple_norm_name(self):
        """The PLE context norm [ple_width], applied per layer's group."""
        return self.prefix + "per_layer_projection_norm.weight" if self.ple_width else None

    def split_tables(self):
        """{tensor name: R} of the tables stored as R rows per checkpoint
        row: Gemma 4's per-layer embeddings, one row per token and layer
        ([ple_vocab * layers, ple_width]), so that a token's rows share one
        ple_width x ple_width rotation."""
        if not self.ple_width:
            return {}
        return {self.ple_embedding_name: self.num_layers}

    def global_tensors(self):
        """{role: (name, shape)} of the tensors outside the layers: "embed",
        "ple_embed", "ple_projection", "ple_norm", "final_norm", "lm_head"
        (those the model has)."""
        tensors = {"embed": (self.embedding_name, (self.vocab, self.hidden))}
        if self.ple_width:
            width = self.num_layers * self.ple_width
            tensors["ple_embed"] = (self.ple_embedding_name, (self.ple_vocab, width))
            tensors["ple_projection"] = (self.ple_projection_name, (width, self.hidden))
            tensors["ple_norm"] = (self.ple_norm_name, (self.ple_width,))
        tensors["final_norm"] = (self.final_norm_name, (self.hidden,))
        if not self.tied:
            tensors["lm_head"] = (self.lm_head_name, (self.vocab, self.hidden))
        return tensors

    def layer_tensor(self, layer, part):
        """`{prefix}layers.{layer}.{part}.weight`."""
        return f"{self.prefix}layers.{layer}.{part}.weight"

    def layer_tensors(self, layer):
        """The tensors layer `layer` uses, in forward-pass order:
        {role: (name, shape, kind)}, kind "linear" (a projection [N, K],
        CQ4), "norm" (an RMSNorm weight), "bias", "conv" (the depthwise
        kernel [hidden, 1, conv_kernel]) or "scalar" ([1]).

        Roles: "attn_norm" (input_layernorm / LFM2 operator_norm); on an
        attention layer "q", "k", "v" (not on KV-shared layers), "q_bias",
        "k_bias", "v_bias" (qkv_bias), "q_norm", "k_norm" (qk_norm; k_norm
        not on KV-shared layers), "o" (o_proj / LFM2 self_attn.out_proj),
        "post_attn_norm" (sandwich norms); on a conv layer "conv_in" (in_proj
        [3 hidden, hidden]), "conv" (conv.conv.weight), "conv_out"
        (out_proj [hidden, hidden]); then "ffn_norm" (the MLP's input norm:
        post_attention_layernorm for Llama/Qwen, pre_feedforward_layernorm
        for Gemma, ffn_norm for LFM2), "gate", "up", "down" (LFM2 w1, w3,
        w2), "post_ffn_norm" (sandwich norms); "ple_gate" [ple_width,
        hidden], "ple_projection" [hidden, ple_width], "ple_norm" [hidden]
        (PLE); "layer_scalar" (Gemma 4, named without .weight)."""
        spec = self.layers[layer]
        hidden = self.hidden
        lfm2 = self.architecture == "lfm2"
        head_dim = spec.head_dim or self.head_dim
        q_width = spec.q_width or self.q_width
        kv_width = spec.kv_width or self.kv_width
        ffn = spec.ffn or self.ffn
        out = {}

        def add(role, part, shape, kind, suffix=".weight"):
            out[role] = (f"{self.prefix}layers.{layer}.{part}{suffix}", tuple(shape), kind)

        add("attn_norm", "operator_norm" if lfm2 else "input_layernorm", (hidden,), "norm")
        if spec.is_conv:
            add("conv_in", "conv.in_proj", (3 * hidden, hidden), "linear")
            add("conv", "conv.conv", (hidden, 1, self.conv_kernel), "conv")
            add("conv_out", "conv.out_proj", (hidden, hidden), "linear")
        else:
            shared = spec.kv_donor is not None
            add("q", "self_attn.q_proj", (q_width, hidden), "linear")
            if not shared:
                add("k", "self_attn.k_proj", (kv_width, hidden), "linear")
                add("v", "self_attn.v_proj", (kv_width, hidden), "linear")
            if self.qkv_bias:
                add("q_bias", "self_attn.q_proj", (q_width,), "bias", ".bias")
                if not shared:
                    add("k_bias", "self_attn.k_proj", (kv_width,), "bias", ".bias")
                    add("v_bias", "self_attn.v_proj", (kv_width,), "bias", ".bias")
            if self.qk_norm:
                norm = "layernorm" if lfm2 else "norm"
                add("q_norm", f"self_attn.q_{norm}", (head_dim,), "norm")
                if not shared:
                    add("k_norm", f"self_attn.k_{norm}", (head_dim,), "norm")
            add("o", "self_attn.out_proj" if lfm2 else "self_attn.o_proj", (hidden, q_width),
                "linear")
            if self.sandwich_norms:
                add("post_attn_norm", "post_attention_layernorm", (hidden,), "norm")
        if lfm2:
            add("ffn_norm", "ffn_norm", (hidden,), "norm")
            add("gate", "feed_forward.w1", (ffn, hidden), "linear")
            add("up", "feed_forward.w3", (ffn, hidden), "linear")
            add("down", "feed_forward.w2", (hidden, ffn), "linear")
        else:
            add("ffn_norm", "pre_feedforward_layernorm" if self.sandwich_norms
                else "post_attention_layernorm", (hidden,), "norm")
            add("gate", "mlp.gate_proj", (ffn, hidden), "linear")
            add("up", "mlp.up_proj", (ffn, hidden), "linear")
            add("down", "mlp.down_proj", (hidden, ffn), "linear")
        if self.sandwich_norms:
            add("post_ffn_norm", "post_feedforward_layernorm", (hidden,), "norm")
        if self.ple_width:
            add("ple_gate", "per_layer_input_gate", (self.ple_width, hidden), "linear")
            add("ple_projection", "per_layer_projection", (hidden, self.ple_width), "linear")
            add("ple_norm", "post_per_layer_input_norm", (hidden,), "norm")
        if self.layer_scalar:
            add("layer_scalar", "layer_scalar", (1,), "scalar", "")
        return out

    def tensor_name(self, layer, role):
        """The name of layer `layer`'s tensor of `role` (`layer_tensors`)."""
        return self.layer_tensors(layer)[role][0]

    def unused_layer_tensors(self, layer):
        """{name: shape} of tensors a checkpoint may carry for layer `layer`
        that the model never uses (a KV-shared layer's k/v projections and
        k norm, present in some Gemma 4 checkpoints and absent in others):
        accepted when present, never converted."""
        spec = self.layers[layer]
        if spec.kind != ATTENTION or spec.kv_donor is None:
            return {}
        kv_width, head_dim = spec.kv_width, spec.head_dim
        names = {self.layer_tensor(layer, "self_attn.k_proj"): (kv_width, self.hidden),
                 self.layer_tensor(layer, "self_attn.v_proj"): (kv_width, self.hidden),
                 self.layer_tensor(layer, "self_attn.k_norm"): (head_dim,),
                 self.layer_tensor(layer, "self_attn.v_norm"): (head_dim,)}
        if self.qkv_bias:
            names[f"{self.prefix}layers.{layer}.self_attn.k_proj.bias"] = (kv_width,)
            names[f"{self.prefix}layers.{layer}.self_attn.v_proj.bias"] = (kv_width,)
        return names

    def layer_parts(self, layer=0):
        """(part, kind) of layer `layer`'s tensors, kind "linear" or "norm"
        (and "bias", "conv", "scalar" for the newer families), in the order
        the forward pass uses them; part is the name between
        `layers.{i}.` and `.weight`."""
        parts = []
        start = len(f"{self.prefix}layers.{layer}.")
        for name, _, kind in self.layer_tensors(layer).values():
            part = name[start:]
            if part.endswith(".weight"):
                part = part[:-len(".weight")]
            parts.append((part, kind))
        return parts

    def expected_shapes(self):
        """{tensor name: shape} of every tensor the model needs, in the
        order the forward pass uses them (true shapes, before any K
        padding)."""
        globals_ = self.global_tensors()
        shapes = {}
        for role in ("embed", "ple_embed", "ple_projection", "ple_norm"):
            if role in globals_:
                name, shape = globals_[role]
                shapes[name] = shape
        for layer in range(self.num_layers):
            for name, shape, _ in self.layer_tensors(layer).values():
                shapes[name] = shape
        for role in ("final_norm", "lm_head"):
            if role in globals_:
                name, shape = globals_[role]
                shapes[name] = shape
        return shapes

    def is_skipped(self, name):
        """A tower's tensor (vision/audio), not part of the text model."""
        return any(name.startswith(prefix) for prefix in self.skipped_prefixes)

    def check_tensors(self, shapes):
        """Checks a checkpoint's {name: shape} against the architecture;
        returns the names to convert, in the checkpoint's order (a tied
        lm_head copy, towers' tensors, derived buffers and a KV-shared
        layer's unused k/v tensors are left out)."""
        expected = self.expected_shapes()
        missing = [name for name in expected if name not in shapes]
        if missing:
            raise ArchitectureError(f"missing tensors: {_listing(missing)}")
        unused = {}
        for layer in range(self.num_layers):
            unused.update(self.unused_layer_tensors(layer))
        for table in (expected, unused):
            for name, shape in table.items():
                if name not in shapes:
                    continue
                found = tuple(shapes[name])
                if found != shape:
                    raise ArchitectureError(f"tensor {name} has shape {list(found)}, expected "
                                            f"{list(shape)} from config.json")
        tied_copy = {self.lm_head_name} if self.tied else set()
        unexpected = [name for name in shapes if name not in expected and name not in tied_copy
                      and name not in unused and not IGNORED_TENSOR.search(name)
                      and not self.is_skipped(name)]
        if unexpected:
            raise ArchitectureError(f"unexpected tensors for a {self.model_type} model: "
                                    f"{_listing(unexpected)}")
        return [name for name in shapes if name in expected]


def _listing(names, shown=4):
    text = ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


# --- reading a config --------------------------------------------------------

class _Fields:
    """A config's fields with the model type's defaults; typed getters that
    refuse a wrong value by the field's name."""

    def __init__(self, config, model_type):
        self.config = config
        self.defaults = DEFAULTS[model_type]

    def has(self, key):
        return self.config.get(key) is not None or key in self.defaults

    def raw(self, key):
        value = self.config.get(key)
        return self.defaults.get(key) if value is None else value

    def first(self, *keys):
        """The first of `keys` the config sets (its name), else the last."""
        for key in keys:
            if self.config.get(key) is not None:
                return key
        return keys[-1]

    def integer(self, key, default=None, minimum=1):
        value = self.raw(key)
        if value is None:
            value = default
        if value is None:
            raise ArchitectureError(f"config field '{key}' is missing")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ArchitectureError(f"config field '{key}' is {value!r}, expected {what}")
        return value

    def number(self, key):
        value = self.raw(key)
        if value is None:
            raise ArchitectureError(f"config field '{key}' is missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value > 0):
            raise ArchitectureError(f"config field '{key}' is {value!r}, expected a positive "
                                    f"number")
        if value < FLOAT32_TINY:
            raise ArchitectureError(f"config field '{key}' is {value!r}, below float32's "
                                    f"smallest normal number ({FLOAT32_TINY:.8g}): the kernels "
                                    f"flush it to zero")
        return float(value)

    def flag(self, key):
        value = self.raw(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise ArchitectureError(f"config field '{key}' is {value!r}, expected true or false")
        return value

    def refuse_true(self, key):
        if self.flag(key):
            raise ArchitectureError(f"{key} true is not supported")

    def refuse_set(self, key):
        if self.config.get(key) is not None:
            raise ArchitectureError(f"{key} {self.config[key]!r} is not supported (only null)")


def _text_config(config):
    """The text decoder's config of a multimodal wrapper (gemma3, gemma4):
    its text_config, with the wrapper's tie_word_embeddings when the text
    config has none; other configs as they are. Returns (config, the
    wrapper's tower prefixes)."""
    wrapper = WRAPPERS.get(config.get("model_type"))
    if wrapper is None:
        return config, ()
    text_type, wrapper_class, towers = wrapper
    model_type = config["model_type"]
    for name in config.get("architectures") or []:
        if name != wrapper_class:
            raise ArchitectureError(f"architecture {name!r} is not supported for model_type "
                                    f"{model_type!r} (supported: {wrapper_class})")
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ArchitectureError(f"model_type {model_type!r} without a text_config object is "
                                f"not supported")
    merged = dict(text)
    merged["model_type"] = text.get("model_type") or text_type
    if merged["model_type"] != text_type:
        raise ArchitectureError(f"model_type {model_type!r} with a text_config of model_type "
                                f"{merged['model_type']!r} is not supported")
    if "tie_word_embeddings" not in merged and "tie_word_embeddings" in config:
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    return merged, towers


# --- rotary embeddings -------------------------------------------------------

@dataclass(frozen=True)
class Rope:
    """One rotary setting: its type, base, linear factor (1 unless linear)
    and inverse frequencies (float64, head_dim / 2 of them)."""

    rope_type: str
    theta: float
    scaling: float
    inv_freq: tuple


def _positive(entry, key, field, default=None):
    value = entry.get(key)
    if value is None:
        value = default
    if value is None:
        raise ArchitectureError(f"{field} {key} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ArchitectureError(f"{field} {key} {value!r} is not a positive number")
    return float(value)


def rope_frequencies(rope_type, theta, head_dim, entry=None, field="rope_scaling",
                     max_positions=None):
    """inv_freq (a tuple of head_dim / 2 floats, float64 arithmetic) of a
    rope type, as Hugging Face's modeling_rope_utils defines it:
    default: theta^(-2j/d); linear: that / factor; llama3 (Llama 3.x):
    each frequency kept (wavelength < original / high_freq_factor), divided
    by factor (wavelength > original / low_freq_factor), or in between
    (boundaries included) (1 - s) inv/factor + s inv with s = (original /
    wavelength - low) / (high - low); proportional (Gemma 4 full layers):
    the first int(partial_rotary_factor * d // 2) pairs theta^(-2j/d) (the
    exponent over the full d), the others 0, all / factor (default 1)."""
    entry = entry or {}
    d = head_dim
    j = np.arange(d // 2, dtype=np.float64)
    base = theta ** (-2.0 * j / d)
    if rope_type == "default":
        inv = base
    elif rope_type == "linear":
        inv = base / _positive(entry, "factor", field)
    elif rope_type == "llama3":
        factor = _positive(entry, "factor", field)
        low = _positive(entry, "low_freq_factor", field)
        high = _positive(entry, "high_freq_factor", field)
        original = _positive(entry, "original_max_position_embeddings", field, max_positions)
        if high <= low:
            raise ArchitectureError(f"{field} high_freq_factor ({high}) must exceed "
                                    f"low_freq_factor ({low})")
        wavelength = 2 * math.pi / base
        smooth = (original / wavelength - low) / (high - low)
        inv = np.where(wavelength > original / low, base / factor, base)
        smoothed = (1 - smooth) * inv / factor + smooth * inv
        middle = ~(wavelength < original / high) & ~(wavelength > original / low)
        inv = np.where(middle, smoothed, inv)
    elif rope_type == "proportional":
        proportion = entry.get("partial_rotary_factor", 1.0)
        if isinstance(proportion, bool) or not isinstance(proportion, (int, float)) or not (
                0 <= proportion <= 1):
            raise ArchitectureError(f"{field} partial_rotary_factor {proportion!r} is not a "
                                    f"number in [0, 1]")
        angles = int(proportion * d // 2)
        inv = np.where(j < angles, base, 0.0) / _positive(entry, "factor", field, 1.0)
    else:
        raise ArchitectureError(f"{field} type {rope_type!r} is not supported (supported: "
                                f"linear, llama3)")
    return tuple(float(value) for value in inv)


def _rope_entry(entry, field, head_dim, default_theta, max_positions, types=ROPE_TYPES):
    """A Rope from one rope_scaling / rope_parameters object (None: default
    rope at default_theta)."""
    if entry is None:
        entry = {}
    if not isinstance(entry, dict):
        raise ArchitectureError(f"{field} {entry!r} is not supported (expected null or an "
                                f"object)")
    rope_type = entry.get("rope_type", entry.get("type", "default"))
    if rope_type not in types:
        supported = ", ".join(t for t in types if t != "default")
        raise ArchitectureError(f"{field} type {rope_type!r} is not supported (supported: "
                                f"{supported})")
    theta = default_theta if entry.get("rope_theta") is None else entry["rope_theta"]
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise ArchitectureError(f"{field} rope_theta {theta!r} is not a positive number")
    factor = entry.get("partial_rotary_factor")
    if rope_type != "proportional" and factor is not None and factor != 1:
        raise ArchitectureError(f"{field} partial_rotary_factor {factor!r} is not supported "
                                f"(only 1, or with rope_type proportional)")
    inv_freq = rope_frequencies(rope_type, float(theta), head_dim, entry, field, max_positions)
    scaling = float(entry["factor"]) if rope_type == "linear" else 1.0
    return Rope(rope_type, float(theta), scaling, inv_freq)


def rope_settings(fields, model_type, head_dim):
    """(Rope of the global layers, Rope of sliding gemma3 layers or None),
    from rope_theta / rope_scaling (or a newer config's rope_parameters)."""
    max_positions = fields.config.get("max_position_embeddings")
    parameters = fields.config.get("rope_parameters")
    types = ROPE_TYPES[:3]
    if parameters is None:
        global_rope = _rope_entry(fields.config.get("rope_scaling"), "rope_scaling", head_dim,
                                  fields.number("rope_theta"), max_positions, types)
        local_rope = None
        if model_type == "gemma3_text":
            local_rope = _rope_entry(None, "rope_local_base_freq", head_dim,
                                     fields.number("rope_local_base_freq"), max_positions)
        return global_rope, local_rope
    if not isinstance(parameters, dict):
        raise ArchitectureError(f"rope_parameters {parameters!r} is not supported (expected "
                                f"an object)")
    if model_type == "gemma3_text" and FULL in parameters:
        return (_rope_entry(parameters[FULL], f"rope_parameters.{FULL}", head_dim, None,
                            max_positions, types),
                _rope_entry(parameters.get(SLIDING), f"rope_parameters.{SLIDING}", head_dim,
                            None, max_positions, types))
    return _rope_entry(parameters, "rope_parameters", head_dim, fields.raw("rope_theta"),
                       max_positions, types), None


def layer_types(fields, model_type, layers):
    """Each layer's attention: sliding_attention or full_attention."""
    types = fields.config.get("layer_types")
    if types is None:
        if model_type != "gemma3_text":
            return [FULL] * layers
        pattern = fields.integer("sliding_window_pattern")
        return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers)]
    return _checked_types(types, layers, (SLIDING, FULL))


def _checked_types(types, layers, allowed):
    if not isinstance(types, list) or len(types) != layers:
        raise ArchitectureError(f"config field 'layer_types' lists "
                                f"{len(types) if isinstance(types, list) else types!r} layers, "
                                f"expected {layers} (num_hidden_layers)")
    for i, kind in enumerate(types):
        if kind not in allowed:
            raise ArchitectureError(f"layer_types[{i}] {kind!r} is not supported (supported: "
                                    f"{', '.join(allowed)})")
    return list(types)


def bf16_round(value):
    """value as float32, rounded to bfloat16 (nearest even), as a float."""
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return float(np.array(rounded, dtype=np.uint32).view(np.float32))


def _head_sizes(fields, hidden, heads_key="num_attention_heads"):
    heads = fields.integer(heads_key)
    kv_heads = fields.integer("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ArchitectureError(f"num_attention_heads ({heads}) is not a multiple of "
                                f"num_key_value_heads ({kv_heads})")
    if fields.raw("head_dim") is None and hidden % heads:
        raise ArchitectureError(f"hidden_size ({hidden}) is not a multiple of "
                                f"num_attention_heads ({heads}) and there is no head_dim")
    head_dim = fields.integer("head_dim", hidden // heads)
    if head_dim % 2:
        raise ArchitectureError(f"head_dim ({head_dim}) is odd: rotary embedding pairs need "
                                f"an even head_dim")
    return heads, kv_heads, head_dim


def _activation(fields, key):
    activation = fields.raw(key)
    if activation not in ACTIVATIONS:
        raise ArchitectureError(f"{key} {activation!r} is not supported "
                                f"(supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[activation]


def _attention_layer(kind, window, rope, heads, kv_heads, head_dim, scale, ffn, donor=None):
    return LayerSpec(window=window, theta=rope.theta, scaling=rope.scaling, kind=ATTENTION,
                     layer_type=kind, head_dim=head_dim, num_kv_heads=kv_heads,
                     q_width=heads * head_dim, kv_width=kv_heads * head_dim,
                     rope_type=rope.rope_type, inv_freq=rope.inv_freq,
                     attention_scale=scale, kv_donor=donor, ffn=ffn)


def model_spec(config):
    """The ModelSpec of a config.json's contents; ArchitectureError when
    cq4p cannot run the model it describes."""
    if not isinstance(config, dict):
        raise ArchitectureError("config.json is not a JSON object")
    config, towers = _text_config(config)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        supported = sorted(SUPPORTED_MODEL_TYPES + tuple(WRAPPERS))
        raise ArchitectureError(f"model_type {model_type!r} is not supported (supported: "
                                f"{', '.join(supported)})")
    for name in config.get("architectures") or []:
        if name != CAUSAL_LM_CLASSES[model_type]:
            raise ArchitectureError(f"architecture {name!r} is not supported for model_type "
                                    f"{model_type!r} (supported: "
                                    f"{CAUSAL_LM_CLASSES[model_type]})")
    fields = _Fields(config, model_type)
    if model_type == "lfm2":
        return _lfm2_spec(fields)
    if model_type == "gemma4_text":
        return _gemma4_spec(fields, towers)
    return _decoder_spec(fields, model_type, towers)


def _decoder_spec(fields, model_type, towers):
    """llama, mistral, qwen2, qwen3, gemma3_text."""
    config = fields.config
    gemma = model_type == "gemma3_text"
    fields.refuse_true("attention_bias")
    fields.refuse_true("mlp_bias")
    if model_type in ("qwen2", "qwen3"):
        fields.refuse_true("use_sliding_window")
    if gemma:
        fields.refuse_set("final_logit_softcapping")
        fields.refuse_set("attn_logit_softcapping")
    factor = config.get("partial_rotary_factor")
    if factor is not None and factor != 1:
        raise ArchitectureError(f"partial_rotary_factor {factor!r} is not supported (only 1)")
    activation = _activation(fields, "hidden_activation" if gemma and
                             fields.has("hidden_activation") else "hidden_act")

    vocab = fields.integer("vocab_size")
    hidden = fields.integer("hidden_size")
    ffn = fields.integer("intermediate_size")
    layers = fields.integer("num_hidden_layers")
    heads, kv_heads, head_dim = _head_sizes(fields, hidden)

    global_rope, local_rope = rope_settings(fields, model_type, head_dim)
    types = layer_types(fields, model_type, layers)
    if not gemma and SLIDING in types:
        raise ArchitectureError(f"{model_type} sliding_attention layers are not supported")
    window = 0
    # Mistral's window (every layer) defaults to 4096 when the field is
    # absent; an explicit null means none.
    if model_type == "mistral" and ("sliding_window" not in config
                                    or config["sliding_window"] is not None):
        window = fields.integer("sliding_window")
    if SLIDING in types:
        window = fields.integer("sliding_window")
    scale = (fields.number("query_pre_attn_scalar") if gemma else head_dim) ** -0.5
    layer_specs = []
    for kind in types:
        if gemma and kind == SLIDING:
            layer_specs.append(_attention_layer(kind, window, local_rope, heads, kv_heads,
                                                head_dim, scale, ffn))
        elif gemma:
            layer_specs.append(_attention_layer(kind, 0, global_rope, heads, kv_heads,
                                                head_dim, scale, ffn))
        else:
            layer_specs.append(_attention_layer(kind, window, global_rope, heads, kv_heads,
                                                head_dim, scale, ffn))

    return ModelSpec(
        architecture=ARCHITECTURES[model_type], model_type=model_type, vocab=vocab,
        hidden=hidden, ffn=ffn, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        epsilon=fields.number("rms_norm_eps"), activation=activation,
        tied=fields.flag("tie_word_embeddings"), attention_scale=scale,
        embedding_scale=bf16_round(hidden ** 0.5) if gemma else None, unit_offset=gemma,
        qk_norm=model_type in ("qwen3", "gemma3_text"), sandwich_norms=gemma,
        layers=tuple(layer_specs), qkv_bias=model_type == "qwen2",
        skipped_prefixes=towers)


def lfm2_ffn(fields):
    """(LFM2's MLP width from the config, whether it was auto-adjusted):
    block_ff_dim (or intermediate_size); with block_auto_adjust_ff_dim,
    int(2 ff / 3), then (when block_ffn_dim_multiplier is set) int(multiplier
    * ff) rounded up to a multiple of block_multiple_of, as Hugging Face's
    Lfm2MLP computes it."""
    key = fields.first("block_ff_dim", "intermediate_size")
    ffn = fields.integer(key)
    auto = fields.flag("block_auto_adjust_ff_dim")
    if auto:
        ffn = int(2 * ffn / 3)
        multiplier = fields.raw("block_ffn_dim_multiplier")
        if multiplier is not None:
            if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or \
                    not multiplier > 0:
                raise ArchitectureError(f"config field 'block_ffn_dim_multiplier' is "
                                        f"{multiplier!r}, expected a positive number")
            multiple = fields.integer("block_multiple_of")
            ffn = int(multiplier * ffn)
            ffn = multiple * ((ffn + multiple - 1) // multiple)
    return ffn, auto


def _lfm2_spec(fields):
    """LFM2: attention and short-convolution layers (layer_types, or
    full_attn_idxs in the original configs), the original key names
    (block_dim, num_heads, block_ff_dim, block_norm_eps, theta,
    tie_embedding) as well as Hugging Face's."""
    config = fields.config
    fields.refuse_true("conv_bias")
    fields.refuse_true("attention_bias")
    vocab = fields.integer("vocab_size")
    hidden = fields.integer(fields.first("hidden_size", "block_dim"))
    layers = fields.integer("num_hidden_layers")
    heads_key = fields.first("num_attention_heads", "num_heads")
    heads, kv_heads, head_dim = _head_sizes(fields, hidden, heads_key)
    ffn, auto = lfm2_ffn(fields)
    kernel = fields.integer("conv_L_cache")
    if kernel < 2:
        raise ArchitectureError(f"conv_L_cache ({kernel}) must be at least 2")
    epsilon = fields.number(fields.first("norm_eps", "block_norm_eps"))
    tie_key = fields.first("tie_embedding", "tie_word_embeddings")
    tied = fields.flag(tie_key)

    types = config.get("layer_types")
    if types is not None:
        types = _checked_types(types, layers, (CONV, FULL))
    else:
        indices = config.get("full_attn_idxs")
        if indices is None:
            indices = list(range(layers))
        if not isinstance(indices, list) or any(
                isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                for i in indices):
            raise ArchitectureError(f"config field 'full_attn_idxs' is {indices!r}, expected "
                                    f"layer indices below {layers} (num_hidden_layers)")
        types = [FULL if i in indices else CONV for i in range(layers)]

    if config.get("theta") is not None and config.get("rope_theta") is None:
        # The original key (Lfm2Config reads theta first).
        fields = _Fields(dict(config, rope_theta=config["theta"]), "lfm2")
    rope, _ = rope_settings(fields, "lfm2", head_dim)
    scale = head_dim ** -0.5
    layer_specs = []
    for kind in types:
        if kind == FULL:
            layer_specs.append(_attention_layer(kind, 0, rope, heads, kv_heads, head_dim,
                                                scale, ffn))
        else:
            layer_specs.append(LayerSpec(window=0, theta=rope.theta, scaling=1.0, kind=CONV,
                                         layer_type=CONV, rope_type=None, ffn=ffn))
    return ModelSpec(
        architecture="lfm2", model_type="lfm2", vocab=vocab, hidden=hidden, ffn=ffn,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, epsilon=epsilon,
        activation="silu", tied=tied, attention_scale=scale, embedding_scale=None,
        unit_offset=False, qk_norm=True, sandwich_norms=False, layers=tuple(layer_specs),
        conv_kernel=kernel, ffn_from_checkpoint=auto)


def _gemma4_spec(fields, towers):
    """The Gemma 4 text decoder (Gemma4TextConfig's fields and defaults)."""
    config = fields.config
    fields.refuse_true("enable_moe_block")
    fields.refuse_true("attention_k_eq_v")
    fields.refuse_true("attention_bias")
    fields.refuse_set("use_bidirectional_attention")
    fields.refuse_set("attn_logit_softcapping")
    if config.get("partial_rotary_factor") is not None:
        raise ArchitectureError(f"partial_rotary_factor {config['partial_rotary_factor']!r} is "
                                f"not supported at the top level of a gemma4 config (only in "
                                f"rope_parameters)")
    activation = _activation(fields, "hidden_activation")
    vocab = fields.integer("vocab_size")
    hidden = fields.integer("hidden_size")
    ffn = fields.integer("intermediate_size")
    layers = fields.integer("num_hidden_layers")
    heads = fields.integer("num_attention_heads")
    kv_heads = fields.integer("num_key_value_heads")
    if heads % kv_heads:
        raise ArchitectureError(f"num_attention_heads ({heads}) is not a multiple of "
                                f"num_key_value_heads ({kv_heads})")
    head_dims = {SLIDING: fields.integer("head_dim"), FULL: fields.integer("global_head_dim")}
    for key, value in (("head_dim", head_dims[SLIDING]),
                       ("global_head_dim", head_dims[FULL])):
        if value % 2:
            raise ArchitectureError(f"{key} ({value}) is odd: rotary embedding pairs need an "
                                    f"even head dim")

    types = config.get("layer_types")
    if types is None:
        types = [SLIDING if (i + 1) % 6 else FULL for i in range(layers)]
    types = _checked_types(types, layers, (SLIDING, FULL))
    types[-1] = FULL  # Gemma4TextConfig forces the last layer to full attention

    parameters = config.get("rope_parameters")
    if parameters is None:
        parameters = {SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
                      FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                             "rope_theta": 1000000.0}}
    if not isinstance(parameters, dict) or not set(types) <= set(parameters):
        raise ArchitectureError(f"rope_parameters {parameters!r} is not supported (expected "
                                f"an object per layer type: {', '.join(sorted(set(types)))})")
    max_positions = config.get("max_position_embeddings")
    ropes = {kind: _rope_entry(parameters[kind], f"rope_parameters.{kind}", head_dims[kind],
                               10000.0, max_positions) for kind in set(types)}

    shared = fields.integer("num_kv_shared_layers", minimum=0)
    first_shared = layers - shared
    if shared and first_shared <= 0:
        raise ArchitectureError(f"num_kv_shared_layers ({shared}) leaves no layer that owns "
                                f"its keys and values ({layers} layers)")
    double = fields.flag("use_double_wide_mlp")
    window = fields.integer("sliding_window") if SLIDING in types else 0
    layer_specs = []
    for index, kind in enumerate(types):
        donor = None
        if shared and index >= first_shared:
            owners = [i for i in range(first_shared) if types[i] == kind]
            if not owners:
                raise ArchitectureError(f"layer {index} ({kind}) shares keys and values, but "
                                        f"no earlier {kind} layer owns any")
            donor = owners[-1]
        width = 2 * ffn if double and donor is not None else ffn
        layer_specs.append(_attention_layer(kind, window if kind == SLIDING else 0, ropes[kind],
                                            heads, kv_heads, head_dims[kind], 1.0, width, donor))

    ple = fields.integer("hidden_size_per_layer_input", minimum=0)
    softcap = config.get("final_logit_softcapping")
    if softcap is not None:
        softcap = fields.number("final_logit_softcapping")
    return ModelSpec(
        architecture="gemma4", model_type="gemma4_text", vocab=vocab, hidden=hidden, ffn=ffn,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dims[SLIDING],
        epsilon=fields.number("rms_norm_eps"), activation=activation,
        tied=fields.flag("tie_word_embeddings"), attention_scale=1.0,
        embedding_scale=bf16_round(hidden ** 0.5), unit_offset=False, qk_norm=True,
        sandwich_norms=True, layers=tuple(layer_specs), v_norm=True, ple_width=ple,
        ple_vocab=fields.integer("vocab_size_per_layer_input") if ple else 0,
        ple_embedding_scale=bf16_round(ple ** 0.5) if ple else None,
        ple_projection_scale=hidden ** -0.5 if ple else 0.0,
        ple_mix_scale=2.0 ** -0.5 if ple else 0.0, layer_scalar=True,
        final_logit_softcapping=softcap, skipped_prefixes=towers or WRAPPERS["gemma4"][2])


# What cq4p-compile and the runtime take (lib/Dialect/CQ4P: the verifiers and
# --cq4p-lower-model; runtime/src/Model.cpp): a model outside these converts
# to a bundle no library can be compiled for, or one that cannot run.
WIDTH_MULTIPLE = 16  # the row kernels (norm, columns, scale, softcap, conv)
MAX_CONV_KERNEL = 16  # cq4p.short_conv: 1 <= L <= 16
MIN_VOCAB = 2


def check_limits(spec):
    """Refuses (ArchitectureError naming the config field, its value and
    the limit) a model whose bundle cq4p-compile or the runtime would refuse:
    widths the kernels need in multiples of 16 (hidden, every MLP, head_dim,
    Gemma 4's per-layer width, the vocabulary under a logit soft-cap), a
    short convolution of at most 16 taps, at least one layer with its own
    KV cache, and at least two tokens."""
    def refuse(field, value, limit):
        raise ArchitectureError(f"{field} ({value}) {limit}")

    if spec.vocab < MIN_VOCAB:
        refuse("vocab_size", spec.vocab, f"must be at least {MIN_VOCAB}: a model chooses among "
                                         f"its tokens")
    if spec.hidden % WIDTH_MULTIPLE:
        refuse("hidden_size", spec.hidden, f"must be a multiple of {WIDTH_MULTIPLE} "
                                           f"(cq4p-compile's row kernels)")
    for index, layer in enumerate(spec.layers):
        if layer.ffn % WIDTH_MULTIPLE:
            refuse("intermediate_size" if layer.ffn == spec.ffn else f"layer {index}'s MLP width",
                   layer.ffn, f"must be a multiple of {WIDTH_MULTIPLE} (cq4p-compile's row "
                              f"kernels)")
        if layer.is_attention and layer.head_dim % WIDTH_MULTIPLE:
            refuse(f"head_dim of layer {index}", layer.head_dim,
                   f"must be a multiple of {WIDTH_MULTIPLE} (cq4p.cached_attention)")
    if spec.ple_width % WIDTH_MULTIPLE:
        refuse("hidden_size_per_layer_input", spec.ple_width,
               f"must be a multiple of {WIDTH_MULTIPLE} (cq4p-compile's row kernels)")
    if spec.final_logit_softcapping is not None and spec.vocab % WIDTH_MULTIPLE:
        refuse("vocab_size", spec.vocab, f"must be a multiple of {WIDTH_MULTIPLE} with "
                                         f"final_logit_softcapping (cq4p.softcap)")
    if spec.conv_kernel > MAX_CONV_KERNEL:
        refuse("conv_L_cache", spec.conv_kernel, f"must be at most {MAX_CONV_KERNEL} "
                                                 f"(cq4p.short_conv)")
    if not any(layer.owns_kv for layer in spec.layers):
        raise ArchitectureError(f"no attention layer among the {spec.num_layers} layers "
                                f"(layer_types, full_attn_idxs): the runtime needs at least "
                                f"one layer with a KV cache")


def with_checkpoint_names(spec, names):
    """The spec fitted to a checkpoint's tensor names (a list, or a
    {name: shape} mapping): the tensor prefix of a checkpoint whose decoder
    is nested (`language_model.model.`, `model.language_model.`), and, when
    shapes are given and the spec takes its MLP width from the checkpoint
    (LFM2 with block_auto_adjust_ff_dim), that width, read from the first
    layer's w1 tensor."""
    embeddings = [name for name in names if name.endswith("embed_tokens.weight")
                  and not spec.is_skipped(name)]
    if len(embeddings) == 1:
        prefix = embeddings[0][:-len("embed_tokens.weight")]
        lm_head = "lm_head.weight"
        if prefix.endswith("model.") and prefix[:-len("model.")] + lm_head in names:
            lm_head = prefix[:-len("model.")] + lm_head
        spec = dataclasses.replace(spec, prefix=prefix, lm_head_name=lm_head)
    if spec.ffn_from_checkpoint and hasattr(names, "get"):
        w1 = names.get(spec.layer_tensor(0, "feed_forward.w1"))
        if w1 is not None and len(w1) == 2 and isinstance(w1[0], int) and w1[0] > 0 \
                and w1[0] != spec.ffn:
            ffn = int(w1[0])
            spec = dataclasses.replace(spec, ffn=ffn, layers=tuple(
                dataclasses.replace(layer, ffn=ffn) for layer in spec.layers))
    return spec
