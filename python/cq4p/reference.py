"""The oracle: a plain numpy fp32 forward pass of a model.

Written from the architectures' published definitions (the Hugging Face
modelling code of Llama/Mistral, Qwen3 and Gemma 3), not from the compiled
path or the graph writer, so that the compiled model can be checked against
it. It reads the config on its own and runs over the *dequantized* weights
of a bundle (`Reference.from_bundle`: every CQ4 tensor through the format's
meaning, FORMAT.md section 2; dense tensors as stored) or over a
checkpoint's own weights (`Reference.from_checkpoint`).

    model = Reference.from_bundle("bundle")
    logits = model.prefill([1, 2, 3])   # [3, vocab]: every position's logits
    logits = model.decode(4)            # [vocab]: the next position's
    ids = model.generate([1, 2, 3], 32) # greedy
    model.reset()

Everything is float32 except the rotary angles (float64, then cast: the
exact angles, where Hugging Face computes them in float32).
"""

import glob
import json
import math
import os

import numpy as np

from cq4p import bundle as bd
from cq4p import files as fl
from cq4p import safetensors as st

SLIDING = "sliding_attention"


def bf16(value):
    """float32(value) rounded to bfloat16 (nearest even)."""
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return np.array(bits, dtype=np.uint32).view(np.float32)[()]


def rms_norm(x, weight, epsilon, unit_offset):
    """Over the last axis: x * rsqrt(mean(x^2) + eps) * w, or * (1 + w)
    (Gemma)."""
    x = x.astype(np.float32)
    inverse = np.float32(1.0) / np.sqrt(np.mean(x * x, axis=-1, keepdims=True)
                                        + np.float32(epsilon))
    scale = (np.float32(1.0) + weight) if unit_offset else weight
    return (x * inverse) * scale


def silu(x):
    with np.errstate(over="ignore"):
        return x / (np.float32(1.0) + np.exp(-x))


def gelu_tanh(x):
    inner = np.float32(math.sqrt(2.0 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))


ACTIVATIONS = {"silu": silu, "gelu_pytorch_tanh": gelu_tanh}


def rope(x, positions, theta, factor):
    """Rotate-half rotary embedding of x [M, heads, D] at `positions` [M]:
    inv_freq = 1 / theta^(arange(0, D, 2) / D) / factor (linear scaling)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d)) / factor
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)[:, None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    half = d // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def attention(q, keys, values, positions, scale, window):
    """Grouped-query attention of q [M, H, D] (query r at positions[r])
    over keys/values [T, Hkv, D] at positions 0..T-1: key j is visible from
    query i iff j <= i and (no window or i - j < window)."""
    m, heads, d = q.shape
    t, kv_heads, _ = keys.shape
    group = heads // kv_heads
    grouped = q.reshape(m, kv_heads, group, d)
    scores = np.einsum("mkgd,tkd->kgmt", grouped, keys) * np.float32(scale)
    i = np.asarray(positions)[:, None]
    j = np.arange(t)[None, :]
    visible = j <= i
    if window:
        visible &= i - j < window
    scores = np.where(visible, scores, np.float32(-np.inf))
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.einsum("kgmt,tkd->mkgd", weights, values)
    return out.reshape(m, heads * d)


class Config:
    """The fields the forward pass uses, with Hugging Face's defaults."""

    def __init__(self, config):
        if config.get("model_type") == "gemma3":
            config = dict(config["text_config"], model_type="gemma3_text",
                          **({"tie_word_embeddings": config["tie_word_embeddings"]}
                             if "tie_word_embeddings" in config
                             and "tie_word_embeddings" not in config["text_config"] else {}))
        self.model_type = config["model_type"]
        gemma = self.gemma = self.model_type == "gemma3_text"
        get = config.get
        self.vocab = get("vocab_size")
        self.hidden = get("hidden_size")
        self.layers = get("num_hidden_layers")
        self.heads = get("num_attention_heads")
        self.kv_heads = get("num_key_value_heads") or self.heads
        default_head_dim = {"qwen3": 128, "gemma3_text": 256}.get(self.model_type)
        self.head_dim = get("head_dim") or default_head_dim or self.hidden // self.heads
        self.epsilon = get("rms_norm_eps") or 1e-6
        self.activation = (get("hidden_activation") or "gelu_pytorch_tanh") if gemma else \
            (get("hidden_act") or "silu")
        self.tied = get("tie_word_embeddings", gemma)
        self.qk_norm = self.model_type in ("qwen3", "gemma3_text")
        self.scale = (get("query_pre_attn_scalar") or 256) ** -0.5 if gemma else \
            self.head_dim ** -0.5
        self.embedding_scale = bf16(self.hidden ** 0.5) if gemma else None

        parameters = get("rope_parameters")
        if parameters is not None and gemma and "full_attention" in parameters:
            global_rope = self._rope(parameters["full_attention"])
            local_rope = self._rope(parameters["sliding_attention"])
        elif parameters is not None:
            global_rope = local_rope = self._rope(parameters)
        else:
            theta = get("rope_theta") or (1e6 if gemma else 1e4)
            global_rope = (theta, self._factor(get("rope_scaling")))
            local_rope = (get("rope_local_base_freq") or 1e4, 1.0) if gemma else global_rope

        types = get("layer_types")
        if types is None and gemma:
            pattern = get("sliding_window_pattern") or 6
            types = [SLIDING if (i + 1) % pattern else "full_attention"
                     for i in range(self.layers)]
        types = types or ["full_attention"] * self.layers
        if self.model_type == "mistral":
            window = get("sliding_window", 4096) or 0
            self.windows = [window] * self.layers
        else:
            window = get("sliding_window") or 4096
            self.windows = [window if kind == SLIDING else 0 for kind in types]
        self.ropes = [local_rope if kind == SLIDING else global_rope for kind in types]

    @staticmethod
    def _factor(scaling):
        if scaling and scaling.get("rope_type", scaling.get("type")) == "linear":
            return float(scaling["factor"])
        return 1.0

    def _rope(self, entry):
        return float(entry["rope_theta"]), self._factor(entry)


class Reference:
    """A model over numpy weights, with a KV cache."""

    def __init__(self, config, weights):
        """`config`: config.json's contents; `weights`: {tensor name: array}."""
        self.config = Config(config)
        self.weights = {name: np.asarray(value, dtype=np.float32)
                        for name, value in weights.items()}
        embeddings = [name for name in self.weights if name.endswith("embed_tokens.weight")]
        if len(embeddings) != 1:
            raise ValueError(f"expected one token embedding, found {embeddings}")
        self.prefix = embeddings[0][:-len("embed_tokens.weight")]
        lm_head = "lm_head.weight"
        nested = self.prefix[:-len("model.")] + lm_head
        if self.prefix.endswith("model.") and nested in self.weights:
            lm_head = nested
        self.output = embeddings[0] if self.config.tied else lm_head
        self.reset()

    @classmethod
    def from_bundle(cls, directory):
        """The dequantized model of a bundle."""
        manifest = bd.read_manifest(directory)
        weights = {}
        for entry in manifest["tensors"]:
            path = fl.resolve(directory, entry["file"])
            if path is None:
                raise bd.BundleError(f"{directory}: no file for tensor {entry['name']}")
            with fl.read_tensor(path) as tensor:
                weights[entry["name"]] = tensor.dequantize().reshape(entry["original_shape"])
        return cls(manifest["config"], weights)

    @classmethod
    def from_checkpoint(cls, directory):
        """The model of a safetensors checkpoint, its weights as stored."""
        with open(os.path.join(directory, "config.json")) as handle:
            config = json.load(handle)
        weights = {}
        for path in sorted(glob.glob(os.path.join(glob.escape(str(directory)),
                                                  "*.safetensors"))):
            for entry in st.read_header(path):
                weights[entry.name] = st.load(entry)
        return cls(config, weights)

    @property
    def vocab(self):
        return self.config.vocab

    def reset(self):
        """Empties the KV cache."""
        self.position = 0
        self.keys = [np.zeros((0, self.config.kv_heads, self.config.head_dim), np.float32)
                     for _ in range(self.config.layers)]
        self.values = [k.copy() for k in self.keys]

    def _layer_weight(self, layer, part):
        return self.weights[f"{self.prefix}layers.{layer}.{part}.weight"]

    def _layer(self, index, h, positions, trace):
        c = self.config
        w = lambda part: self._layer_weight(index, part)  # noqa: E731
        m = h.shape[0]
        x = rms_norm(h, w("input_layernorm"), c.epsilon, c.gemma)
        q = (x @ w("self_attn.q_proj").T).reshape(m, c.heads, c.head_dim)
        k = (x @ w("self_attn.k_proj").T).reshape(m, c.kv_heads, c.head_dim)
        v = (x @ w("self_attn.v_proj").T).reshape(m, c.kv_heads, c.head_dim)
        if c.qk_norm:
            q = rms_norm(q, w("self_attn.q_norm"), c.epsilon, c.gemma)
            k = rms_norm(k, w("self_attn.k_norm"), c.epsilon, c.gemma)
        theta, factor = c.ropes[index]
        q = rope(q, positions, theta, factor)
        k = rope(k, positions, theta, factor)
        self.keys[index] = np.concatenate([self.keys[index], k])
        self.values[index] = np.concatenate([self.values[index], v])
        a = attention(q, self.keys[index], self.values[index], positions, c.scale,
                      c.windows[index])
        o = a @ w("self_attn.o_proj").T
        if c.gemma:
            o = rms_norm(o, w("post_attention_layernorm"), c.epsilon, True)
        h1 = h + o
        y = rms_norm(h1, w("pre_feedforward_layernorm" if c.gemma else
                           "post_attention_layernorm"), c.epsilon, c.gemma)
        gate = y @ w("mlp.gate_proj").T
        up = y @ w("mlp.up_proj").T
        d = (ACTIVATIONS[c.activation](gate) * up) @ w("mlp.down_proj").T
        if c.gemma:
            d = rms_norm(d, w("post_feedforward_layernorm"), c.epsilon, True)
        if trace is not None:
            trace.append({"residual": h, "attention": o, "mlp": d})
        return h1 + d

    def _step(self, ids, trace=None):
        c = self.config
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValueError("no token ids")
        if ids.min() < 0 or ids.max() >= c.vocab:
            raise ValueError(f"token id {int(ids.max() if ids.max() >= c.vocab else ids.min())} "
                             f"is outside the vocabulary (0 to {c.vocab - 1})")
        positions = self.position + np.arange(ids.size)
        h = self.weights[f"{self.prefix}embed_tokens.weight"][ids]
        if c.embedding_scale is not None:
            h = h * c.embedding_scale
        for index in range(c.layers):
            h = self._layer(index, h, positions, trace)
        self.position += ids.size
        final = rms_norm(h, self.weights[f"{self.prefix}norm.weight"], c.epsilon, c.gemma)
        return final @ self.weights[self.output].T

    def prefill(self, ids):
        """Appends `ids` to the sequence; the logits of every one, [len, vocab]."""
        return self._step(ids)

    def decode(self, token):
        """Appends one token; the logits of the next position, [vocab]."""
        return self._step([token])[0]

    def forward(self, ids):
        """All positions' logits of `ids` alone (the cache is reset)."""
        self.reset()
        return self._step(ids)

    def trace(self, ids):
        """Per layer: the residual entering it and what its attention and
        MLP branches add, for `ids` alone (the cache is reset)."""
        self.reset()
        records = []
        self._step(ids, records)
        return records

    def generate(self, prompt, count):
        """`count` greedy tokens after `prompt` (the cache is reset)."""
        self.reset()
        logits = self.prefill(prompt)[-1]
        out = []
        for _ in range(count):
            token = int(np.argmax(logits))
            out.append(token)
            logits = self.decode(token)
        return out


def greedy_margins(model, prompt, steps):
    """(tokens, margins) of `steps` greedy steps after `prompt`: each
    step's top-1 minus top-2 logit, relative to the std of its logits."""
    model.reset()
    logits = model.prefill(prompt)[-1]
    tokens, margins = [], []
    for _ in range(steps):
        top2 = np.partition(logits, -2)[-2:]
        margins.append(float((top2[1] - top2[0]) / np.std(logits)))
        token = int(np.argmax(logits))
        tokens.append(token)
        logits = model.decode(token)
    return tokens, np.array(margins)
