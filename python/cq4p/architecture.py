"""The model architectures cq4p runs, read from a Hugging Face config.json.

`model_spec` turns a config into a `ModelSpec`: the numbers and choices the
graph writer needs (sizes, norms, attention windows, rotary frequencies),
with Hugging Face's defaults for fields a config may leave out.
`ModelSpec.check_tensors` then matches a checkpoint's tensors against what
the architecture needs. Anything cq4p cannot run is refused by name with a
one-line `ArchitectureError`: an unknown model_type, a config field whose
value changes the computation in a way the graph has no op for, a missing
or misshapen tensor, a projection whose K is not a multiple of 128.

Supported: llama (and mistral, whose sliding window applies to every
layer), qwen3 (per-head q/k RMSNorm) and gemma3 text models (unit-offset
RMSNorm everywhere, sandwich norms around attention and MLP, scaled
embeddings, interleaved sliding-window and global layers with their own
rotary bases).
"""

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen3", "gemma3_text")
ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen3": "qwen3",
                 "gemma3_text": "gemma3"}
CAUSAL_LM_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                     "qwen3": "Qwen3ForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}
# config activation name -> the graph's cq4p.glu activation
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
SLIDING, FULL = "sliding_attention", "full_attention"
# Every projection's K must be a multiple of this (the Hadamard group size
# and the orthogonal panels' virtual group).
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
    "qwen3": dict(hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
                  tie_word_embeddings=False, head_dim=128),
    "gemma3_text": dict(hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                        rope_theta=1000000.0, rope_local_base_freq=10000.0,
                        tie_word_embeddings=True, head_dim=256, query_pre_attn_scalar=256,
                        sliding_window=4096, sliding_window_pattern=6),
}


class ArchitectureError(ValueError):
    """A config or checkpoint cq4p cannot run; the message is one line."""


@dataclass(frozen=True)
class LayerSpec:
    """What differs between layers: the attention window (0: none) and the
    rotary base and linear position scaling."""

    window: int
    theta: float
    scaling: float


@dataclass(frozen=True)
class ModelSpec:
    architecture: str  # "llama", "qwen3" or "gemma3"
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
    sandwich_norms: bool  # gemma3: norms on the attention and MLP outputs too
    layers: tuple  # LayerSpec per layer
    prefix: str = "model."  # of the decoder's tensors
    lm_head_name: str = "lm_head.weight"

    @property
    def num_layers(self):
        return len(self.layers)

    @property
    def q_width(self):
        return self.num_heads * self.head_dim

    @property
    def kv_width(self):
        return self.num_kv_heads * self.head_dim

    # -- tensor names --

    @property
    def embedding_name(self):
        return self.prefix + "embed_tokens.weight"

    @property
    def final_norm_name(self):
        return self.prefix + "norm.weight"

    @property
    def output_name(self):
        """The tensor the logits are computed with."""
        return self.embedding_name if self.tied else self.lm_head_name

    def layer_tensor(self, layer, part):
        return f"{self.prefix}layers.{layer}.{part}.weight"

    def layer_parts(self):
        """(part, kind) of one layer, kind "linear" or "norm", in the order
        the forward pass uses them."""
        parts = [("input_layernorm", "norm"), ("self_attn.q_proj", "linear"),
                 ("self_attn.k_proj", "linear"), ("self_attn.v_proj", "linear")]
        if self.qk_norm:
            parts += [("self_attn.q_norm", "norm"), ("self_attn.k_norm", "norm")]
        parts += [("self_attn.o_proj", "linear"), ("post_attention_layernorm", "norm")]
        if self.sandwich_norms:
            parts.append(("pre_feedforward_layernorm", "norm"))
        parts += [("mlp.gate_proj", "linear"), ("mlp.up_proj", "linear"),
                  ("mlp.down_proj", "linear")]
        if self.sandwich_norms:
            parts.append(("post_feedforward_layernorm", "norm"))
        return parts

    def expected_shapes(self):
        """{tensor name: shape} of every tensor the model needs, in the
        order the forward pass uses them."""
        linear = {"self_attn.q_proj": (self.q_width, self.hidden),
                  "self_attn.k_proj": (self.kv_width, self.hidden),
                  "self_attn.v_proj": (self.kv_width, self.hidden),
                  "self_attn.o_proj": (self.hidden, self.q_width),
                  "mlp.gate_proj": (self.ffn, self.hidden),
                  "mlp.up_proj": (self.ffn, self.hidden),
                  "mlp.down_proj": (self.hidden, self.ffn)}
        shapes = {self.embedding_name: (self.vocab, self.hidden)}
        for layer in range(self.num_layers):
            for part, kind in self.layer_parts():
                if kind == "linear":
                    shape = linear[part]
                elif part.startswith("self_attn."):
                    shape = (self.head_dim,)
                else:
                    shape = (self.hidden,)
                shapes[self.layer_tensor(layer, part)] = shape
        shapes[self.final_norm_name] = (self.hidden,)
        if not self.tied:
            shapes[self.lm_head_name] = (self.vocab, self.hidden)
        return shapes

    def check_tensors(self, shapes):
        """Checks a checkpoint's {name: shape} against the architecture;
        returns the names to convert (a tied lm_head copy is left out)."""
        expected = self.expected_shapes()
        missing = [name for name in expected if name not in shapes]
        if missing:
            raise ArchitectureError(f"missing tensors: {_listing(missing)}")
        for name, shape in expected.items():
            found = tuple(shapes[name])
            if found != shape:
                raise ArchitectureError(f"tensor {name} has shape {list(found)}, expected "
                                        f"{list(shape)} from config.json")
            if len(shape) == 2 and shape[1] % K_MULTIPLE:
                raise ArchitectureError(f"tensor {name}: K ({shape[1]}) is not a multiple of "
                                        f"{K_MULTIPLE}")
        tied_copy = {self.lm_head_name} if self.tied else set()
        unexpected = [name for name in shapes if name not in expected and name not in tied_copy
                      and not IGNORED_TENSOR.search(name)]
        if unexpected:
            raise ArchitectureError(f"unexpected tensors for a {self.model_type} model: "
                                    f"{_listing(unexpected)}")
        return [name for name in shapes if name not in tied_copy]


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

    def integer(self, key, default=None):
        value = self.raw(key)
        if value is None:
            value = default
        if value is None:
            raise ArchitectureError(f"config field '{key}' is missing")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ArchitectureError(f"config field '{key}' is {value!r}, expected a positive "
                                    f"integer")
        return value

    def number(self, key):
        value = self.raw(key)
        if value is None:
            raise ArchitectureError(f"config field '{key}' is missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value > 0):
            raise ArchitectureError(f"config field '{key}' is {value!r}, expected a positive "
                                    f"number")
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
    """A gemma3 (multimodal) config is accepted when it is a text model in
    disguise: its text_config holds the fields and there is no vision part."""
    if config.get("model_type") != "gemma3":
        return config
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ArchitectureError("model_type 'gemma3' without a text_config object is not "
                                "supported")
    if config.get("vision_config") is not None:
        raise ArchitectureError("model_type 'gemma3' with a vision_config is not supported "
                                "(only its text model, gemma3_text)")
    merged = dict(text)
    merged["model_type"] = text.get("model_type") or "gemma3_text"
    if merged["model_type"] != "gemma3_text":
        raise ArchitectureError(f"model_type 'gemma3' with a text_config of model_type "
                                f"{merged['model_type']!r} is not supported")
    if "tie_word_embeddings" not in merged and "tie_word_embeddings" in config:
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    return merged


def rope_settings(fields, model_type):
    """(theta, linear scaling) of the global layers and (theta, scaling) of
    sliding gemma3 layers, from rope_theta / rope_scaling (or a newer
    config's rope_parameters)."""
    parameters = fields.config.get("rope_parameters")
    if parameters is not None:
        return _rope_parameters(parameters, model_type)
    scaling = _linear_factor(fields.config.get("rope_scaling"), "rope_scaling")
    theta = fields.number("rope_theta")
    local = (fields.number("rope_local_base_freq"), 1.0) if model_type == "gemma3_text" else None
    return (theta, scaling), local


def _linear_factor(scaling, field):
    if scaling is None:
        return 1.0
    if not isinstance(scaling, dict):
        raise ArchitectureError(f"{field} {scaling!r} is not supported (expected null or an "
                                f"object)")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return 1.0
    if kind != "linear":
        raise ArchitectureError(f"{field} type {kind!r} is not supported (supported: linear)")
    factor = scaling.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise ArchitectureError(f"{field} factor {factor!r} is not a positive number")
    return float(factor)


def _rope_parameters(parameters, model_type):
    def one(entry, field):
        if not isinstance(entry, dict) or not isinstance(entry.get("rope_theta"), (int, float)):
            raise ArchitectureError(f"{field} {entry!r} is not supported (expected an object "
                                    f"with rope_theta)")
        return float(entry["rope_theta"]), _linear_factor(entry, field)

    if model_type == "gemma3_text" and FULL in parameters:
        return (one(parameters[FULL], f"rope_parameters.{FULL}"),
                one(parameters.get(SLIDING), f"rope_parameters.{SLIDING}"))
    return one(parameters, "rope_parameters"), None


def layer_types(fields, model_type, layers):
    """Each layer's attention: sliding_attention or full_attention."""
    types = fields.config.get("layer_types")
    if types is None:
        if model_type != "gemma3_text":
            return [FULL] * layers
        pattern = fields.integer("sliding_window_pattern")
        return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise ArchitectureError(f"config field 'layer_types' lists "
                                f"{len(types) if isinstance(types, list) else types!r} layers, "
                                f"expected {layers} (num_hidden_layers)")
    for i, kind in enumerate(types):
        if kind not in (SLIDING, FULL):
            raise ArchitectureError(f"layer_types[{i}] {kind!r} is not supported (supported: "
                                    f"{SLIDING}, {FULL})")
    return list(types)


def bf16_round(value):
    """value as float32, rounded to bfloat16 (nearest even), as a float."""
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return float(np.array(rounded, dtype=np.uint32).view(np.float32))


def model_spec(config):
    """The ModelSpec of a config.json's contents; ArchitectureError when
    cq4p cannot run the model it describes."""
    config = _text_config(config)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ArchitectureError(f"model_type {model_type!r} is not supported (supported: "
                                f"{', '.join(SUPPORTED_MODEL_TYPES)})")
    for name in config.get("architectures") or []:
        if name != CAUSAL_LM_CLASSES[model_type]:
            raise ArchitectureError(f"architecture {name!r} is not supported for model_type "
                                    f"{model_type!r} (supported: "
                                    f"{CAUSAL_LM_CLASSES[model_type]})")
    fields = _Fields(config, model_type)
    gemma = model_type == "gemma3_text"

    fields.refuse_true("attention_bias")
    fields.refuse_true("mlp_bias")
    if model_type == "qwen3":
        fields.refuse_true("use_sliding_window")
    if gemma:
        fields.refuse_set("final_logit_softcapping")
        fields.refuse_set("attn_logit_softcapping")
    factor = config.get("partial_rotary_factor")
    if factor is not None and factor != 1:
        raise ArchitectureError(f"partial_rotary_factor {factor!r} is not supported (only 1)")

    activation_field = "hidden_activation" if gemma and fields.has("hidden_activation") \
        else "hidden_act"
    activation = fields.raw(activation_field)
    if activation not in ACTIVATIONS:
        raise ArchitectureError(f"{activation_field} {activation!r} is not supported "
                                f"(supported: {', '.join(ACTIVATIONS)})")

    vocab = fields.integer("vocab_size")
    hidden = fields.integer("hidden_size")
    ffn = fields.integer("intermediate_size")
    layers = fields.integer("num_hidden_layers")
    heads = fields.integer("num_attention_heads")
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

    (theta, scaling), local_rope = rope_settings(fields, model_type)
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
    layer_specs = []
    for kind in types:
        if gemma and kind == SLIDING:
            layer_specs.append(LayerSpec(window, *local_rope))
        elif gemma:
            layer_specs.append(LayerSpec(0, theta, scaling))
        else:
            layer_specs.append(LayerSpec(window, theta, scaling))

    scale_base = fields.number("query_pre_attn_scalar") if gemma else head_dim
    return ModelSpec(
        architecture=ARCHITECTURES[model_type], model_type=model_type, vocab=vocab,
        hidden=hidden, ffn=ffn, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        epsilon=fields.number("rms_norm_eps"), activation=ACTIVATIONS[activation],
        tied=fields.flag("tie_word_embeddings"), attention_scale=scale_base ** -0.5,
        embedding_scale=bf16_round(hidden ** 0.5) if gemma else None, unit_offset=gemma,
        qk_norm=model_type in ("qwen3", "gemma3_text"), sandwich_norms=gemma,
        layers=tuple(layer_specs))


def with_checkpoint_names(spec, names):
    """The spec with the tensor prefix of a checkpoint whose decoder is
    nested (a gemma3 multimodal checkpoint's language model:
    `language_model.model.` or `model.language_model.`)."""
    embeddings = [name for name in names if name.endswith("embed_tokens.weight")]
    if len(embeddings) != 1:
        return spec
    prefix = embeddings[0][:-len("embed_tokens.weight")]
    lm_head = "lm_head.weight"
    if prefix.endswith("model.") and prefix[:-len("model.")] + lm_head in names:
        lm_head = prefix[:-len("model.")] + lm_head
    return dataclasses.replace(spec, prefix=prefix, lm_head_name=lm_head)
