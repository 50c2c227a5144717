"""The oracle: a plain numpy fp32 forward pass of a model.

Written from the architectures' published definitions (the Hugging Face
modelling code of Llama/Mistral, Qwen2/Qwen3, Gemma 3, Gemma 4 and LFM2,
and transformers' modeling_rope_utils for the rotary frequencies), not from
the compiled path, the graph writer or cq4p.model.architecture, so that the
compiled model can be checked against it. It reads the config on its own
and runs over the *dequantized* weights of a bundle (`Reference.from_bundle`:
every CQ4 tensor through the format's meaning, docs/FORMAT.md section 2, its
zero-padded K columns dropped; dense tensors as stored) or over a
checkpoint's own weights (`Reference.from_checkpoint`).

    model = Reference.from_bundle("bundle")
    logits = model.prefill([1, 2, 3])   # [3, vocab]: every position's logits
    logits = model.decode(4)            # [vocab]: the next position's
    ids = model.generate([1, 2, 3], 32) # greedy
    model.reset()

State carried between calls: each attention layer's keys and values (a
KV-shared Gemma 4 layer reads its donor's) and each LFM2 conv layer's last
L-1 rows of B*x, so a prompt given in chunks computes what it computes
given at once.

Everything is float32 except the rotary angles (float64, then cast: the
exact angles, where Hugging Face computes them in float32).
"""

import glob
import json
import math
import os
import re

import numpy as np

from cq4p.format import panels as pn
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import safetensors as st

SLIDING = "sliding_attention"
# Tables the model only indexes by token id: from a bundle, rows are
# dequantized when read (PanelRows).
LAZY_TABLE = "embed_tokens_per_layer.weight"


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


def default_inv_freq(head_dim, theta, factor=1.0):
    """1 / theta^(2j / d) / factor, j < d / 2 (float64)."""
    return 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)) / factor


def llama3_inv_freq(head_dim, theta, factor, low_freq_factor, high_freq_factor, original):
    """transformers' _compute_llama3_parameters, one frequency at a time:
    wavelengths below original / high_freq_factor keep their frequency,
    those above original / low_freq_factor are divided by factor, and those
    in between (both ends included) are blended."""
    out = []
    for inv in default_inv_freq(head_dim, theta):
        wavelength = 2 * math.pi / inv
        if wavelength < original / high_freq_factor:
            out.append(inv)
        elif wavelength > original / low_freq_factor:
            out.append(inv / factor)
        else:
            smooth = (original / wavelength - low_freq_factor) / (high_freq_factor
                                                                   - low_freq_factor)
            out.append((1 - smooth) * inv / factor + smooth * inv)
    return np.array(out)


def proportional_inv_freq(head_dim, theta, partial_rotary_factor, factor=1.0):
    """transformers' _compute_proportional_rope_parameters (Gemma 4): the
    first int(partial_rotary_factor * d // 2) frequencies theta^(-2j/d),
    with d the whole head dim, the rest 0 (those pairs do not rotate)."""
    angles = int(partial_rotary_factor * head_dim // 2)
    inv = np.zeros(head_dim // 2)
    inv[:angles] = 1.0 / theta ** (np.arange(0, 2 * angles, 2, dtype=np.float64) / head_dim)
    return inv / factor


def rope_inv_freq(entry, head_dim, default_theta, max_positions=None):
    """The inverse frequencies of one rope_scaling / rope_parameters entry
    (None: default)."""
    entry = entry or {}
    kind = entry.get("rope_type", entry.get("type", "default"))
    theta = entry.get("rope_theta") or default_theta
    if kind == "linear":
        return default_inv_freq(head_dim, theta, entry["factor"])
    if kind == "llama3":
        return llama3_inv_freq(head_dim, theta, entry["factor"], entry["low_freq_factor"],
                               entry["high_freq_factor"],
                               entry.get("original_max_position_embeddings") or max_positions)
    if kind == "proportional":
        return proportional_inv_freq(head_dim, theta, entry.get("partial_rotary_factor", 1.0),
                                     entry.get("factor", 1.0))
    if kind != "default":
        raise ValueError(f"rope type {kind!r}: the oracle has no definition for it")
    return default_inv_freq(head_dim, theta)


def rope_with(x, positions, inv_freq):
    """Rotate-half rotary embedding of x [M, heads, D] at `positions` [M]
    with inverse frequencies inv_freq [D / 2]."""
    d = x.shape[-1]
    angles = np.asarray(positions, dtype=np.float64)[:, None] * np.asarray(inv_freq)[None, :]
    angles = np.concatenate([angles, angles], axis=-1)[:, None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    half = d // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def short_conv(bx, state, kernel):
    """LFM2's depthwise causal convolution of bx [M, H] given the previous
    L-1 rows `state` [L-1, H] (zeros at the start) and the kernel
    [H, 1, L] (a torch Conv1d weight): y[t, c] = sum_k kernel[c, 0, k] *
    window[t + k, c] over window = state ++ bx. Returns (y, the new state:
    the window's last L-1 rows)."""
    width = kernel.shape[-1]
    window = np.concatenate([state, bx])
    y = np.zeros_like(bx)
    for k in range(width):
        y += window[k:k + bx.shape[0]] * kernel[:, 0, k][None, :]
    return y, window[window.shape[0] - (width - 1):]


def _unwrapped(config):
    """The text config of a multimodal wrapper (gemma3, gemma4)."""
    texts = {"gemma3": "gemma3_text", "gemma4": "gemma4_text"}
    if config.get("model_type") in texts and "text_config" in config:
        text = dict(config["text_config"])
        text.setdefault("model_type", texts[config["model_type"]])
        if "tie_word_embeddings" in config and "tie_word_embeddings" not in text:
            text["tie_word_embeddings"] = config["tie_word_embeddings"]
        return text
    return config


class Config:
    """The fields the forward pass uses, with Hugging Face's defaults.

    Per layer: kinds ("attention" or "conv"), windows (0: none), ropes
    ((theta, linear factor): the base values), inv_freqs (the frequencies
    used), head_dims, donors (None, or the layer whose KV cache a Gemma 4
    KV-shared layer reads)."""

    # Sizes the oracle allocates per layer, head or id: bounded before any
    # list or array is made (a manifest's config is input too).
    BOUNDS = {"num_hidden_layers": 1 << 12, "hidden_size": 1 << 18,
              "num_attention_heads": 1 << 12, "num_key_value_heads": 1 << 12,
              "head_dim": 1 << 14, "vocab_size": 1 << 24}

    def __init__(self, config):
        if isinstance(config, dict) and isinstance(config.get("text_config"), dict):
            config = _unwrapped(config)
        if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
            raise bd.BundleError("config: expected an object with a model_type string")
        for key, bound in self.BOUNDS.items():
            value = config.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 1 <= value <= bound):
                raise bd.BundleError(f"config: {key}: expected an integer in [1, {bound}], "
                                     f"found {value!r}")
        self.model_type = config["model_type"]
        if self.model_type == "lfm2":
            self._lfm2(config)
        elif self.model_type == "gemma4_text":
            self._gemma4(config)
        else:
            self._decoder(config)

    def _common(self):
        self.gemma4 = self.model_type == "gemma4_text"
        self.lfm2 = self.model_type == "lfm2"
        self.bias = self.model_type == "qwen2"
        self.v_norm = self.gemma4
        self.ple = 0
        self.softcap = None
        self.donors = [None] * self.layers
        self.head_dims = [self.head_dim] * self.layers
        self.scales = [self.scale] * self.layers

    def _decoder(self, config):
        gemma = self.gemma = self.model_type == "gemma3_text"
        get = config.get
        self.vocab = get("vocab_size") or (262208 if gemma else None)
        self.hidden = get("hidden_size")
        self.layers = get("num_hidden_layers")
        self.heads = get("num_attention_heads") or (8 if gemma else None)
        self.kv_heads = get("num_key_value_heads") or (4 if gemma else self.heads)
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
        self._common()

        d, positions = self.head_dim, get("max_position_embeddings")
        parameters = get("rope_parameters")
        if parameters is not None and gemma and "full_attention" in parameters:
            global_entry = parameters["full_attention"]
            local_entry = parameters["sliding_attention"]
            global_theta = local_theta = None
        elif parameters is not None:
            global_entry = local_entry = parameters
            global_theta = local_theta = get("rope_theta") or 1e4
        else:
            global_entry = get("rope_scaling")
            global_theta = get("rope_theta") or (1e6 if gemma else 1e4)
            local_entry = None if gemma else global_entry
            local_theta = (get("rope_local_base_freq") or 1e4) if gemma else global_theta
        global_rope = (float(global_entry.get("rope_theta") or global_theta)
                       if global_entry else float(global_theta),
                       self._factor(global_entry))
        local_rope = (float(local_entry.get("rope_theta") or local_theta)
                      if local_entry else float(local_theta), self._factor(local_entry))
        global_inv = rope_inv_freq(global_entry, d, global_theta, positions)
        local_inv = rope_inv_freq(local_entry, d, local_theta, positions)

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
        self.kinds = ["attention"] * self.layers
        self.ropes = [local_rope if kind == SLIDING else global_rope for kind in types]
        self.inv_freqs = [local_inv if kind == SLIDING else global_inv for kind in types]

    def _lfm2(self, config):
        """LFM2 (Lfm2Config): its original key names as well as the newer."""
        get = config.get
        self.gemma = False
        self.vocab = get("vocab_size") or 65536
        self.hidden = get("hidden_size") or get("block_dim")
        self.layers = get("num_hidden_layers")
        self.heads = get("num_attention_heads") or get("num_heads")
        self.kv_heads = get("num_key_value_heads") or 8
        self.head_dim = get("head_dim") or self.hidden // self.heads
        self.epsilon = get("norm_eps") or get("block_norm_eps") or 1e-5
        self.activation = "silu"
        tie = get("tie_embedding")
        self.tied = (get("tie_word_embeddings", True) if tie is None else tie)
        self.qk_norm = True
        self.scale = self.head_dim ** -0.5
        self.embedding_scale = None
        self._common()
        types = get("layer_types")
        if types is None:
            attention = get("full_attn_idxs")
            if attention is None:
                attention = range(self.layers)
            types = ["full_attention" if i in attention else "conv" for i in range(self.layers)]
        self.kinds = ["attention" if kind == "full_attention" else "conv" for kind in types]
        parameters = get("rope_parameters") or {}
        theta = parameters.get("rope_theta") or get("theta") or get("rope_theta") or 1e6
        self.windows = [0] * self.layers
        self.ropes = [(float(theta), 1.0)] * self.layers
        self.inv_freqs = [default_inv_freq(self.head_dim, theta)] * self.layers

    def _gemma4(self, config):
        """The Gemma 4 text decoder (Gemma4TextConfig)."""
        get = config.get
        self.gemma = False
        self.vocab = get("vocab_size") or 262144
        self.hidden = get("hidden_size")
        self.layers = get("num_hidden_layers")
        self.heads = get("num_attention_heads") or 8
        self.kv_heads = get("num_key_value_heads") or 4
        self.head_dim = get("head_dim") or 256
        self.epsilon = get("rms_norm_eps") or 1e-6
        self.activation = get("hidden_activation") or "gelu_pytorch_tanh"
        self.tied = get("tie_word_embeddings", True)
        self.qk_norm = True
        self.scale = 1.0
        self.embedding_scale = bf16(self.hidden ** 0.5)
        self._common()
        types = list(get("layer_types") or [SLIDING if (i + 1) % 6 else "full_attention"
                                             for i in range(self.layers)])
        types[-1] = "full_attention"
        self.kinds = ["attention"] * self.layers
        self.head_dims = [self.head_dim if kind == SLIDING else (get("global_head_dim") or 512)
                          for kind in types]
        window = get("sliding_window") or 512
        self.windows = [window if kind == SLIDING else 0 for kind in types]
        parameters = get("rope_parameters") or {
            SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0}}
        self.ropes = [(float(parameters[kind].get("rope_theta") or 1e4), 1.0) for kind in types]
        self.inv_freqs = [rope_inv_freq(parameters[kind], d, 1e4)
                          for kind, d in zip(types, self.head_dims)]
        # KV sharing: the last num_kv_shared_layers layers attend over the
        # cache of the last earlier layer of their type.
        first_shared = self.layers - (get("num_kv_shared_layers") or 0)
        for i in range(first_shared, self.layers):
            self.donors[i] = max(j for j in range(first_shared) if types[j] == types[i])
        self.ple = get("hidden_size_per_layer_input", 256) or 0
        self.softcap = get("final_logit_softcapping")

    @staticmethod
    def _factor(scaling):
        if scaling and scaling.get("rope_type", scaling.get("type")) == "linear":
            return float(scaling["factor"])
        return 1.0


class MissingWeightError(bd.BundleError):
    """The config asks for a tensor the weights do not have (a manifest that
    claims more layers than it holds, say)."""


class _Weights(dict):
    """{tensor name: array}; a missing name is a MissingWeightError naming it."""

    def __missing__(self, name):
        raise MissingWeightError(f"the model's config needs tensor {name}, which its weights "
                                 f"do not have ({len(self)} tensors)")


class PanelRows:
    """The rows of an orthogonal CQ4 panel table, dequantized when indexed
    (`table[ids]`, docs/FORMAT.md section 2's meaning, as `dequantize` computes
    it row by row): a table read only by token ids (Gemma 4's per-layer
    embeddings, 2.35 G values at E2B's widths, 9.4 GB as float32) never
    held whole. `rows_per_id` stored rows make one row of the checkpoint's
    shape (the table stored as rows of one layer each)."""

    def __init__(self, path, shape):
        self.tensor = rd.read_tensor(path)
        if not (self.tensor.orthogonal and self.tensor.layout == "panels"):
            raise bd.BundleError(f"{path}: expected orthogonal CQ4 panels")
        self.shape = tuple(shape)
        self.rows_per_id = self.tensor.n // self.shape[0]
        k = self.tensor.k
        if self.rows_per_id * self.shape[0] != self.tensor.n or \
                self.rows_per_id * k < self.shape[1]:
            raise bd.BundleError(f"{path}: {self.tensor.n} x {k} stored rows do not make "
                                 f"{list(self.shape)}")
        self.levels = np.asarray(self.tensor.codebook, np.float16).astype(np.float32)
        self.rotation_t = np.asarray(self.tensor.rotation, np.float16).astype(np.float32).T
        self.scale = np.asarray(self.tensor.input_scale, np.float16).astype(np.float32)
        self.norms = self.tensor.group_norms()[:, 0]
        gs = self.tensor.group_size
        self.panels = np.asarray(self.tensor.data, np.uint8).reshape(
            -1, k // gs, gs // pn.KG_K, pn.KG_BYTES)

    def project(self, x):
        """x @ table^T ([M, columns] -> [M, rows]) without the dense table:
        row v's dot with x is norm[v] * (cb[idx[v]] . ((x / s) @ R)), the
        rotation applied once to x; the indices unpacked once, the levels
        gathered a block of rows at a time."""
        if self.rows_per_id != 1:
            raise ValueError("project: a table of one stored row per row")
        x = np.asarray(x, dtype=np.float32)
        padded = np.zeros((x.shape[0], self.tensor.k), np.float32)
        padded[:, :x.shape[1]] = x
        padded[:, :x.shape[1]] /= self.scale[:x.shape[1]]
        rotated = padded @ self.rotation_t.T
        if getattr(self, "indices", None) is None:
            self.indices = self.tensor.indices()
        out = np.empty((x.shape[0], self.tensor.n), np.float32)
        for begin in range(0, self.tensor.n, 8192):
            end = min(self.tensor.n, begin + 8192)
            dots = self.levels[self.indices[begin:end]] @ rotated.T
            out[:, begin:end] = (dots * self.norms[begin:end, None].astype(np.float32)).T
        return out

    def __getitem__(self, ids):
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.shape[0]):
            raise IndexError(f"row ids outside 0 to {self.shape[0] - 1}")
        rows = (ids[:, None] * self.rows_per_id + np.arange(self.rows_per_id)).reshape(-1)
        block, channel = rows // pn.CHANNELS, rows % pn.CHANNELS
        # Row c's 4 K values of a kg-block are nibbles 4c .. 4c + 3: bytes 2c
        # and 2c + 1, low nibble first.
        low = self.panels[block, :, :, 2 * channel]
        high = self.panels[block, :, :, 2 * channel + 1]
        nibbles = np.stack([low & 0x0F, low >> 4, high & 0x0F, high >> 4], axis=-1)
        values = self.levels[nibbles.reshape(rows.size, -1)]
        norms = self.norms[rows].astype(np.float32)[:, None]
        decoded = ((values @ self.rotation_t) * norms) / self.scale
        return decoded.reshape(ids.size, -1)[:, :self.shape[1]]


class Reference:
    """A model over numpy weights, with a KV cache (and LFM2 conv states)."""

    def __init__(self, config, weights):
        """`config`: config.json's contents; `weights`: {tensor name: array}."""
        self.config = Config(config)
        self.weights = _Weights((name, value if isinstance(value, PanelRows)
                                 else np.asarray(value, dtype=np.float32))
                                for name, value in weights.items())
        embeddings = [name for name in self.weights if name.endswith("embed_tokens.weight")]
        if len(embeddings) != 1:
            raise ValueError(f"expected one token embedding, found {embeddings}")
        self.prefix = embeddings[0][:-len("embed_tokens.weight")]
        lm_head = "lm_head.weight"
        nested = self.prefix[:-len("model.")] + lm_head
        if self.prefix.endswith("model.") and nested in self.weights:
            lm_head = nested
        self.output = embeddings[0] if self.config.tied else lm_head
        held = {int(match.group(1)) for name in self.weights
                if (match := re.match(re.escape(self.prefix) + r"layers\.(\d+)\.", name))}
        missing = sorted(set(range(min(self.config.layers, len(held) + 1))) - held)
        if missing:
            raise MissingWeightError(f"the config says {self.config.layers} layers, but the "
                                     f"weights hold {len(held)} (none for layer {missing[0]})")
        self.reset()

    @classmethod
    def from_bundle(cls, directory, lazy_embedding=False):
        """The dequantized model of a bundle; a CQ4 tensor whose K was
        zero-padded (manifest original_shape narrower than the file) keeps
        its original columns. Gemma 4's per-layer embedding table stays in
        its file (PanelRows); with `lazy_embedding`, the token embedding
        too (its rows decoded when read, the tied logits by
        PanelRows.project): a full-size model's oracle without a dense
        262,144 x 1,536 table."""
        manifest = bd.read_manifest(directory)
        weights = {}
        for entry in manifest["tensors"]:
            path = bd.resolve(directory, entry["file"])
            if path is None:
                raise bd.BundleError(f"{directory}: no file for tensor {entry['name']}")
            shape = entry["original_shape"]
            if entry["name"].endswith(LAZY_TABLE) or (
                    lazy_embedding and entry["name"].endswith("embed_tokens.weight")):
                weights[entry["name"]] = PanelRows(path, shape)
                continue
            with rd.read_tensor(path) as tensor:
                values = tensor.dequantize()
            if len(shape) == 2 and values.ndim == 2 and values.shape[1] > shape[1]:
                values = values[:, :shape[1]]
            weights[entry["name"]] = values.reshape(shape)
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
        """Empties the KV caches and the conv states."""
        c = self.config
        self.position = 0
        self.keys = [np.zeros((0, c.kv_heads, d), np.float32) for d in c.head_dims]
        self.values = [k.copy() for k in self.keys]
        self.conv_states = [None] * c.layers
        for index, kind in enumerate(c.kinds):
            if kind == "conv":
                kernel = self._layer_weight(index, "conv.conv")
                self.conv_states[index] = np.zeros((kernel.shape[-1] - 1, kernel.shape[0]),
                                                   np.float32)

    def _layer_weight(self, layer, part, suffix="weight"):
        return self.weights[f"{self.prefix}layers.{layer}.{part}.{suffix}"]

    def _attention(self, index, x, positions):
        c = self.config
        w = lambda part: self._layer_weight(index, part)  # noqa: E731
        m, d = x.shape[0], c.head_dims[index]
        unit = c.gemma
        norms = ("self_attn.q_layernorm", "self_attn.k_layernorm") if c.lfm2 else \
            ("self_attn.q_norm", "self_attn.k_norm")
        q = x @ w("self_attn.q_proj").T
        if c.bias:
            q = q + self._layer_weight(index, "self_attn.q_proj", "bias")
        q = q.reshape(m, c.heads, d)
        if c.qk_norm:
            q = rms_norm(q, w(norms[0]), c.epsilon, unit)
        q = rope_with(q, positions, c.inv_freqs[index])
        donor = c.donors[index]
        if donor is None:
            k = x @ w("self_attn.k_proj").T
            v = x @ w("self_attn.v_proj").T
            if c.bias:
                k = k + self._layer_weight(index, "self_attn.k_proj", "bias")
                v = v + self._layer_weight(index, "self_attn.v_proj", "bias")
            k = k.reshape(m, c.kv_heads, d)
            v = v.reshape(m, c.kv_heads, d)
            if c.qk_norm:
                k = rms_norm(k, w(norms[1]), c.epsilon, unit)
            if c.v_norm:
                v = rms_norm(v, np.float32(1.0), c.epsilon, False)
            k = rope_with(k, positions, c.inv_freqs[index])
            self.keys[index] = np.concatenate([self.keys[index], k])
            self.values[index] = np.concatenate([self.values[index], v])
            donor = index
        a = attention(q, self.keys[donor], self.values[donor], positions, c.scales[index],
                      c.windows[index])
        return a @ w("self_attn.out_proj" if c.lfm2 else "self_attn.o_proj").T

    def _conv(self, index, x):
        """LFM2's short convolution block (Lfm2ShortConv)."""
        w = lambda part: self._layer_weight(index, part)  # noqa: E731
        bcx = x @ w("conv.in_proj").T
        b, c, xx = np.split(bcx, 3, axis=-1)
        y, self.conv_states[index] = short_conv(b * xx, self.conv_states[index], w("conv.conv"))
        return (c * y) @ w("conv.out_proj").T

    def _layer(self, index, h, positions, per_layer, trace):
        c = self.config
        w = lambda part: self._layer_weight(index, part)  # noqa: E731
        unit = c.gemma
        sandwich = c.gemma or c.gemma4
        x = rms_norm(h, w("operator_norm" if c.lfm2 else "input_layernorm"), c.epsilon, unit)
        if c.kinds[index] == "conv":
            o = self._conv(index, x)
        else:
            o = self._attention(index, x, positions)
        if sandwich:
            o = rms_norm(o, w("post_attention_layernorm"), c.epsilon, unit)
        h1 = h + o
        if c.lfm2:
            y = rms_norm(h1, w("ffn_norm"), c.epsilon, False)
            gate = y @ w("feed_forward.w1").T
            up = y @ w("feed_forward.w3").T
            d = (silu(gate) * up) @ w("feed_forward.w2").T
        else:
            y = rms_norm(h1, w("pre_feedforward_layernorm" if sandwich else
                               "post_attention_layernorm"), c.epsilon, unit)
            gate = y @ w("mlp.gate_proj").T
            up = y @ w("mlp.up_proj").T
            d = (ACTIVATIONS[c.activation](gate) * up) @ w("mlp.down_proj").T
        if sandwich:
            d = rms_norm(d, w("post_feedforward_layernorm"), c.epsilon, unit)
        out = h1 + d
        record = {"residual": h, "attention": o, "mlp": d}
        if per_layer is not None:
            g = gelu_tanh(out @ w("per_layer_input_gate").T) * per_layer
            p = rms_norm(g @ w("per_layer_projection").T, w("post_per_layer_input_norm"),
                         c.epsilon, False)
            record["ple"] = p
            out = out + p
        if c.gemma4:
            scalar = self.weights[f"{self.prefix}layers.{index}.layer_scalar"]
            record["layer_scalar"] = scalar
            out = out * scalar.reshape(())
        if trace is not None:
            trace.append(record)
        return out

    def _per_layer_inputs(self, ids, h):
        """Gemma 4's per-layer inputs [M, layers, ple] from the token ids and
        the scaled embeddings h."""
        c = self.config
        table = self.weights[f"{self.prefix}embed_tokens_per_layer.weight"]
        tokens = (table[ids] * bf16(c.ple ** 0.5)).reshape(len(ids), c.layers, c.ple)
        projection = self.weights[f"{self.prefix}per_layer_model_projection.weight"]
        context = (h @ projection.T) * np.float32(c.hidden ** -0.5)
        context = rms_norm(context.reshape(len(ids), c.layers, c.ple),
                           self.weights[f"{self.prefix}per_layer_projection_norm.weight"],
                           c.epsilon, False)
        return (context + tokens) * np.float32(2.0 ** -0.5)

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
        per_layer = self._per_layer_inputs(ids, h) if c.ple else None
        for index in range(c.layers):
            h = self._layer(index, h, positions,
                            None if per_layer is None else per_layer[:, index], trace)
        self.position += ids.size
        final = "embedding_norm" if c.lfm2 else "norm"
        final = rms_norm(h, self.weights[f"{self.prefix}{final}.weight"], c.epsilon, c.gemma)
        output = self.weights[self.output]
        logits = output.project(final) if isinstance(output, PanelRows) else final @ output.T
        if c.softcap:
            cap = np.float32(c.softcap)
            logits = cap * np.tanh(logits / cap)
        return logits

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
        """Per layer: the residual entering it and what its attention (or
        conv) and MLP branches add (and Gemma 4's PLE branch, "ple", and
        layer_scalar), for `ids` alone (the cache is reset)."""
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
