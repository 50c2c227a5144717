"""A Hugging Face checkpoint (config.json and *.safetensors) as an F32 GGUF
that llama.cpp reads as the same model: bench/model --llamacpp's peer side.

The GGUF is written through the gguf-py of the llama.cpp checkout being
compared (its writer, its key names and its tensor-name map, imported at run
time from DIR/gguf-py); this module only says which of llama.cpp's
architectures a checkpoint is, which hyperparameters that architecture reads,
and how a checkpoint tensor is laid out for it:

- llama: q and k rows permuted to llama.cpp's rotary pairs (2i, 2i + 1)
  from Hugging Face's (i, i + D/2); the other architectures here use
  llama.cpp's NeoX rotation, Hugging Face's pairs, and need no permutation;
- qwen3: per-head q/k norms, tied embeddings (no output tensor);
- lfm2: the per-layer KV head count (0 for a convolution layer, which is
  how llama.cpp tells the layer kinds apart), the short convolution's
  cache length, the effective FFN width, the [H, 1, 3] conv kernel as
  [H, 3];
- gemma4: norms as stored (Gemma 4's RMSNorm has no unit offset), the
  sliding-window pattern per layer, the KV-shared layer count, the
  per-layer-embedding width, the full and sliding head dims and rotary
  bases, the per-layer FFN widths (doubled on the KV-shared layers), the
  final logit softcap, `layer_scalar` (no `.weight` on disk) and the
  proportional rotary embedding of the full-attention layers as
  llama.cpp's rope frequency factors (1 on the rotated pairs, 1e30, i.e.
  no rotation, on the rest).

The vocabulary is a placeholder of the right size (the benchmark feeds token
ids, never text). Tensors are streamed, one at a time, so that a checkpoint
larger than memory can be written.
"""

import glob
import json
import os
import re

import numpy as np

# config.json model_type -> llama.cpp architecture name (gguf MODEL_ARCH).
ARCHITECTURES = {"llama": "LLAMA", "mistral": "LLAMA", "qwen3": "QWEN3", "lfm2": "LFM2",
                 "gemma4": "GEMMA4", "gemma4_text": "GEMMA4"}
GEMMA4_ROTATED = 0.25  # fallback partial_rotary_factor of Gemma 4's full layers


class Unsupported(ValueError):
    """A checkpoint this writer cannot express for llama.cpp."""


def text_config(config):
    """The decoder's fields (a multimodal wrapper's text_config), with the
    wrapper's tie_word_embeddings when the text config has none."""
    if isinstance(config.get("text_config"), dict):
        text = dict(config["text_config"])
        text.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", True))
        return text
    return config


def rotary_rows(weight, heads):
    """Rows of a q or k projection in llama.cpp's llama rotary order: the
    checkpoint pairs (i, i + D/2) of each head, llama.cpp's llama
    architecture (2i, 2i + 1), so row i + D/2 of each head moves next to
    row i."""
    rows, columns = weight.shape
    half = rows // heads // 2
    return weight.reshape(heads, 2, half, columns).transpose(0, 2, 1, 3).reshape(rows, columns)


def checkpoint_entries(checkpoint, st):
    """[(name, header entry)] of every tensor of the checkpoint, in file
    order."""
    entries = []
    for path in sorted(glob.glob(os.path.join(glob.escape(checkpoint), "*.safetensors"))):
        entries.extend((entry.name, entry) for entry in st.read_header(path))
    return entries


class Layout:
    """One architecture's view of a checkpoint: its GGUF name and shape for
    each tensor (`place`), the values (`values`), the extra tensors
    llama.cpp wants (`extra`) and the hyperparameters (`metadata`)."""

    def __init__(self, gguf, config, shapes):
        self.gguf = gguf
        self.config = config
        self.text = text_config(config)
        self.model_type = self.text.get("model_type", config.get("model_type"))
        if self.model_type not in ARCHITECTURES:
            raise Unsupported("llama.cpp comparison: no GGUF layout for model_type %r "
                              "(supported: %s)" % (self.model_type,
                                                   ", ".join(sorted(ARCHITECTURES))))
        self.arch = getattr(gguf.MODEL_ARCH, ARCHITECTURES[self.model_type])
        self.arch_name = gguf.MODEL_ARCH_NAMES[self.arch]
        self.layers = self.text["num_hidden_layers"]
        self.shapes = shapes  # checkpoint name -> shape
        self.names = gguf.get_tensor_name_map(self.arch, self.layers)
        self.heads = self.text.get("num_attention_heads") or self.text.get("num_heads")
        self.kv_heads = self.text.get("num_key_value_heads") or self.heads
        self.hidden = self.text.get("hidden_size") or self.text.get("block_dim")

    # --- tensors --------------------------------------------------------------

    def hf_name(self, name):
        """A checkpoint name as llama.cpp's tensor map spells the module:
        no multimodal wrapper's language_model. prefix; Gemma 4's
        layer_scalar buffer gets the .weight its parameters have."""
        name = name.replace("language_model.", "")
        if name.endswith("layer_scalar"):
            name += ".weight"
        return name

    def skipped(self, name):
        """Tensors of other modalities (a multimodal wrapper's towers)."""
        return re.search(r"(^|\.)(vision_tower|audio_tower|embed_vision|embed_audio|"
                         r"multi_modal_projector)\.", name) is not None

    def place(self, name, shape):
        """(GGUF name, numpy shape) of checkpoint tensor `name`."""
        gguf_name = self.names.get_name(self.hf_name(name), try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise Unsupported("llama.cpp comparison: %s has no %s tensor name in gguf-py's "
                              "map" % (name, self.arch_name))
        if self.model_type == "lfm2" and name.endswith("conv.conv.weight"):
            shape = (shape[0], shape[-1])  # [H, 1, L] -> [H, L]
        return gguf_name, tuple(shape)

    def values(self, name, value):
        """The tensor as llama.cpp reads it (float32)."""
        value = np.ascontiguousarray(value, dtype=np.float32)
        if self.model_type in ("llama", "mistral"):
            if name.endswith("self_attn.q_proj.weight"):
                value = rotary_rows(value, self.heads)
            elif name.endswith("self_attn.k_proj.weight"):
                value = rotary_rows(value, self.kv_heads)
        if self.model_type == "lfm2" and name.endswith("conv.conv.weight"):
            value = np.ascontiguousarray(value.reshape(value.shape[0], value.shape[-1]))
        return value

    def extra(self):
        """[(GGUF name, float32 array)] llama.cpp reads that the checkpoint
        does not hold."""
        if self.model_type not in ("gemma4", "gemma4_text"):
            return []
        full = self.gemma4_rope("full_attention")
        head_dim = self.text.get("global_head_dim") or 512
        rotated = int(head_dim * float(full.get("partial_rotary_factor", GEMMA4_ROTATED)) / 2)
        if full.get("rope_type", "default") != "proportional":
            rotated = head_dim // 2
        factors = np.array([1.0] * rotated + [1e30] * (head_dim // 2 - rotated), np.float32)
        name = self.gguf.TENSOR_NAMES[self.gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"
        return [(name, factors)]

    # --- hyperparameters ------------------------------------------------------

    def layer_widths(self, pattern):
        """Per layer, rows of the tensor whose checkpoint name ends with
        `pattern` % layer (None where the layer has none)."""
        widths = []
        for layer in range(self.layers):
            suffix = pattern % layer
            found = [shape[0] for name, shape in self.shapes.items() if name.endswith(suffix)]
            widths.append(found[0] if found else None)
        return widths

    def gemma4_types(self):
        types = list(self.text.get("layer_types") or
                     ["sliding_attention" if (i + 1) % 6 else "full_attention"
                      for i in range(self.layers)])
        types[-1] = "full_attention"  # Gemma 4 forces its last layer full
        return types

    def gemma4_rope(self, kind):
        defaults = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "proportional",
                                       "partial_rotary_factor": GEMMA4_ROTATED,
                                       "rope_theta": 1000000.0}}
        return (self.text.get("rope_parameters") or defaults).get(kind, defaults[kind])

    def metadata(self, writer):
        t, gguf = self.text, self.gguf
        vocab = t["vocab_size"]
        writer.add_name("cq4p bench model")
        writer.add_block_count(self.layers)
        writer.add_embedding_length(self.hidden)
        writer.add_head_count(self.heads)
        writer.add_vocab_size(vocab)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        if self.model_type in ("llama", "mistral", "qwen3"):
            head_dim = t.get("head_dim") or self.hidden // self.heads
            writer.add_context_length(t.get("max_position_embeddings", 2048))
            writer.add_feed_forward_length(t["intermediate_size"])
            writer.add_head_count_kv(self.kv_heads)
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
            writer.add_rope_dimension_count(head_dim)
            writer.add_rope_freq_base(float(t.get("rope_theta", 10000.0)))
            writer.add_layer_norm_rms_eps(float(t.get("rms_norm_eps", 1e-5)))
            scaling = t.get("rope_scaling")
            if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
                raise Unsupported("llama.cpp comparison: rope_scaling %r is not written" %
                                  scaling)
        elif self.model_type == "lfm2":
            kinds = t.get("layer_types")
            if kinds is None:
                attention = t.get("full_attn_idxs")
                attention = range(self.layers) if attention is None else attention
                kinds = ["full_attention" if i in attention else "conv"
                         for i in range(self.layers)]
            widths = self.layer_widths("layers.%d.feed_forward.w1.weight")
            writer.add_context_length(t.get("max_position_embeddings", 128000))
            writer.add_feed_forward_length(widths[0])
            writer.add_head_count_kv([self.kv_heads if kind != "conv" else 0 for kind in kinds])
            head_dim = self.hidden // self.heads
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
            writer.add_rope_dimension_count(head_dim)
            theta = ((t.get("rope_parameters") or {}).get("rope_theta") or t.get("theta") or
                     t.get("rope_theta") or 1e6)
            writer.add_rope_freq_base(float(theta))
            writer.add_layer_norm_rms_eps(float(t.get("norm_eps") or t.get("block_norm_eps")
                                                or 1e-5))
            writer.add_shortconv_l_cache(int(t.get("conv_L_cache", 3)))
        else:  # gemma4
            types = self.gemma4_types()
            head_dim, full_dim = t.get("head_dim") or 256, t.get("global_head_dim") or 512
            ffn = self.layer_widths("layers.%d.mlp.gate_proj.weight")
            writer.add_context_length(t.get("max_position_embeddings", 131072))
            writer.add_feed_forward_length(ffn)
            writer.add_head_count_kv(self.kv_heads)
            writer.add_key_length(full_dim)
            writer.add_value_length(full_dim)
            writer.add_key_length_swa(head_dim)
            writer.add_value_length_swa(head_dim)
            writer.add_rope_dimension_count(full_dim)
            writer.add_rope_dimension_count_swa(head_dim)
            writer.add_rope_freq_base(float(self.gemma4_rope("full_attention")["rope_theta"]))
            writer.add_rope_freq_base_swa(
                float(self.gemma4_rope("sliding_attention")["rope_theta"]))
            writer.add_layer_norm_rms_eps(float(t.get("rms_norm_eps", 1e-6)))
            writer.add_sliding_window(int(t.get("sliding_window") or 512))
            writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in types])
            writer.add_shared_kv_layers(int(t.get("num_kv_shared_layers") or 0))
            writer.add_embedding_length_per_layer_input(
                int(t.get("hidden_size_per_layer_input") or 0))
            if t.get("final_logit_softcapping"):
                writer.add_final_logit_softcapping(float(t["final_logit_softcapping"]))
            if t.get("attention_k_eq_v") or t.get("enable_moe_block"):
                raise Unsupported("llama.cpp comparison: Gemma 4's attention_k_eq_v and MoE "
                                  "are not written")
        # A SentencePiece-style placeholder vocabulary: <unk> <s> </s>, the
        # 256 byte tokens, then placeholders.
        tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
        if vocab < len(tokens):
            raise Unsupported("llama.cpp comparison: the placeholder vocabulary needs at least "
                              "%d tokens, the model has %d" % (len(tokens), vocab))
        tokens += ["\u2581t%d" % i for i in range(vocab - len(tokens))]
        kinds = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] +
                 [gguf.TokenType.BYTE] * 256)
        kinds += [gguf.TokenType.NORMAL] * (vocab - len(kinds))
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores([-float(i) for i in range(vocab)])
        writer.add_token_types(kinds)
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)


def write_gguf(checkpoint, out, gguf, st):
    """Writes `checkpoint` as an F32 GGUF at `out`; `gguf` is the llama.cpp
    checkout's gguf-py module, `st` cq4p's safetensors reader. Returns the
    llama.cpp architecture's name."""
    with open(os.path.join(checkpoint, "config.json")) as f:
        config = json.load(f)
    entries = checkpoint_entries(checkpoint, st)
    layout = Layout(gguf, config, {name: entry.shape for name, entry in entries})
    kept = [(name, entry) for name, entry in entries if not layout.skipped(name)]
    extra = layout.extra()
    writer = gguf.GGUFWriter(out, layout.arch_name)
    layout.metadata(writer)
    for name, entry in kept:
        gguf_name, shape = layout.place(name, entry.shape)
        count = int(np.prod(shape, dtype=np.int64))
        writer.add_tensor_info(gguf_name, shape, np.dtype(np.float32), 4 * count)
    for gguf_name, value in extra:
        writer.add_tensor_info(gguf_name, value.shape, value.dtype, value.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, entry in kept:
        writer.write_tensor_data(layout.values(name, st.load(entry)))
    for _, value in extra:
        writer.write_tensor_data(value)
    writer.close()
    return layout.arch_name
