"""Textual cq4p IR: the weight type, single linears, and a bundle's whole
forward pass (`model_graph`, the model.mlir of docs/MODEL.md).

The compiler verifies what this module writes; it does not restate the
verifier's rules, so a shape that does not fit is refused by cq4p-opt with
its message (see `cq4p.native.tools.run_opt`).
"""

from dataclasses import dataclass

import numpy as np

ROTATIONS = ("hadamard", "orthogonal")
LAYOUTS = ("panels", "interleaved4row")


@dataclass(frozen=True)
class WeightType:
    """`!cq4p.weight<NxK, gs = G, rotation, layout>`."""

    n: int
    k: int
    group_size: int
    rotation: str = "hadamard"
    layout: str = "panels"

    def __post_init__(self):
        if self.rotation not in ROTATIONS:
            raise ValueError(f"rotation must be one of {ROTATIONS}, got {self.rotation!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")

    def __str__(self):
        return (f"!cq4p.weight<{self.n}x{self.k}, gs = {self.group_size}, "
                f"{self.rotation}, {self.layout}>")


def tensor_type(*dims):
    """`tensor<MxKxf32>`; None stands for a dynamic size."""
    shape = "x".join("?" if d is None else str(d) for d in dims)
    return f"tensor<{shape}xf32>"


def _weight_argument(weight, tensor):
    """`%w: !cq4p.weight<...>`, naming the bundle tensor it binds to."""
    attribute = f' {{cq4p.tensor = "{tensor}"}}' if tensor else ""
    return f"%w: {weight}{attribute}"


def linear_function(name, m, weight, tensor=None):
    """A function computing `cq4p.linear` of x[m, K] and `weight`.

    m may be None for a dynamic number of rows (a prefill); `tensor` names
    the bundle tensor the weight is.
    """
    x_type = tensor_type(m, weight.k)
    y_type = tensor_type(m, weight.n)
    return (
        f"func.func @{name}(%x: {x_type}, {_weight_argument(weight, tensor)}) -> {y_type} {{\n"
        f"  %y = cq4p.linear %x, %w : {x_type}, {weight} -> {y_type}\n"
        f"  return %y : {y_type}\n"
        f"}}\n"
    )


def f32(value):
    """An MLIR f32 literal that parses back to float32(value) exactly: 7
    significant digits when they suffice, else 9 (always enough)."""
    value = float(np.float32(value))
    text = f"{value:.6e}"
    if float(np.float32(float(text))) != value:
        text = f"{value:.8e}"
    return f"{text} : f32"


def i64(value):
    return f"{int(value)} : i64"


def attributes(**values):
    """An attribute dictionary in MLIR's printed order (sorted by name);
    True stands for a unit attribute."""
    items = []
    for name in sorted(values):
        value = values[name]
        items.append(name if value is True else f"{name} = {value}")
    return "{" + ", ".join(items) + "}"


class GraphError(ValueError):
    """A bundle tensor the graph cannot bind as it is stored."""


REPACK_PER_LAYER = "reconvert the checkpoint with `python -m cq4p convert`"


def _argument_type(entry):
    if entry["dtype"] == "CQ4":
        if entry.get("layout") != "panels":
            raise GraphError(f"tensor {entry['name']} is CQ4 in the {entry.get('layout')} "
                             f"layout; the model graph needs packed panels "
                             f"(python -m cq4p upgrade)")
        n, k = entry["shape"]
        return WeightType(n, k, entry["group_size"], entry["rotation"], "panels")
    element = {"FP16": "f16", "FP32": "f32"}[entry["dtype"]]
    # A dense tensor binds as its elements, row-major (a conv kernel
    # [H, 1, L] is H * L values).
    return f"tensor<{int(np.prod(entry['shape']))}x{element}>"


class _Graph:
    """The forward function's arguments and body, built in order. Values
    are [rows, width] fp32 tensors; `width` remembers each one's."""

    def __init__(self, spec, entries, transforms):
        self.spec = spec
        self.entries = entries
        self.transforms = transforms
        self.arguments = ["%ids: tensor<?xi64>, %pos: index"]
        self.bound = {}  # tensor name -> (SSA name, type)
        self.body = []
        self.width = {}  # SSA name -> columns
        self.rows = {}  # SSA name -> 1 for single-row values
        self.padded = {}  # (SSA name, width) -> SSA name of its zero-padded copy

    def bind(self, tensor, ssa, kind):
        """The argument for a bundle tensor (declared on first use)."""
        if tensor in self.bound:
            return self.bound[tensor]
        entry = self.entries.get(tensor)
        if entry is None:
            raise GraphError(f"tensor {tensor} is not in the bundle")
        kind_found = "CQ4" if entry["dtype"] == "CQ4" else "dense"
        if kind_found != kind:
            raise GraphError(f"tensor {tensor} is {entry['dtype']}; the model graph needs it "
                             f"{'as CQ4 panels' if kind == 'CQ4' else 'dense (FP16 or FP32)'}")
        value_type = _argument_type(entry)
        attrs = [f'cq4p.tensor = "{tensor}"']
        if tensor in self.transforms:
            attrs.append(f'cq4p.transform = "{self.transforms[tensor]}"')
        self.arguments.append(f"%{ssa}: {value_type} {{{', '.join(attrs)}}}")
        self.bound[tensor] = (ssa, value_type)
        return self.bound[tensor]

    def emit(self, line):
        self.body.append("    " + line)

    def type_of(self, ssa, width=None):
        return tensor_type(self.rows.get(ssa), self.width[ssa] if width is None else width)

    def define(self, result, width, like=None):
        self.width[result] = width
        if like is not None and like in self.rows:
            self.rows[result] = self.rows[like]
        return result

    def norm(self, result, x, tensor, ssa):
        weight, weight_type = self.bind(tensor, ssa, "dense")
        attrs = dict(epsilon=f32(self.spec.epsilon))
        if self.spec.unit_offset:
            attrs["unit_offset"] = True
        x_type = self.type_of(x)
        self.define(result, self.width[x], like=x)
        self.emit(f"%{result} = cq4p.rms_norm %{x}, %{weight} {attributes(**attrs)} : "
                  f"{x_type}, {weight_type} -> {x_type}")
        return result

    def plain_norm(self, result, x, chunk):
        attrs = attributes(chunk=i64(chunk), epsilon=f32(self.spec.epsilon))
        x_type = self.type_of(x)
        self.define(result, self.width[x], like=x)
        self.emit(f"%{result} = cq4p.rms_norm %{x} {attrs} : {x_type} -> {x_type}")
        return result

    def columns(self, result, x, offset, width):
        self.define(result, width, like=x)
        self.emit(f"%{result} = cq4p.columns %{x} {{offset = {i64(offset)}}} : "
                  f"{self.type_of(x)} -> {self.type_of(result)}")
        return result

    def pad(self, x, width):
        """x zero-padded to `width` columns (once per value and width)."""
        if self.width[x] == width:
            return x
        if self.width[x] > width:
            raise GraphError(f"a value of width {self.width[x]} feeds a projection of K "
                             f"{width}")
        key = (x, width)
        if key not in self.padded:
            self.padded[key] = self.columns(f"{x}_pad{width}", x, 0, width)
        return self.padded[key]

    def linear(self, result, x, tensor, ssa, bias=None, bias_ssa=None):
        weight, weight_type = self.bind(tensor, ssa, "CQ4")
        x = self.pad(x, weight_type.k)
        types = [self.type_of(x), str(weight_type)]
        operands = f"%{x}, %{weight}"
        if bias is not None:
            bias_value, bias_type = self.bind(bias, bias_ssa, "dense")
            operands += f" bias %{bias_value}"
            types.append(bias_type)
        self.define(result, weight_type.n, like=x)
        self.emit(f"%{result} = cq4p.linear {operands} : {', '.join(types)} -> "
                  f"{self.type_of(result)}")
        return result

    def rope(self, result, x, layer):
        spec = self.spec
        head_dim = layer.head_dim or spec.head_dim
        if layer.rope_type in (None, "default", "linear") or not layer.inv_freq:
            attrs = attributes(head_dim=i64(head_dim), scaling=f32(layer.scaling),
                               theta=f32(layer.theta))
        else:
            freqs = ", ".join(f"{float(np.float32(f)):.8e}" for f in layer.inv_freq)
            attrs = attributes(head_dim=i64(head_dim), inv_freq=f"array<f32: {freqs}>")
        x_type = self.type_of(x)
        self.define(result, self.width[x], like=x)
        self.emit(f"%{result} = cq4p.rope %{x}, %pos {attrs} : {x_type}, index -> {x_type}")
        return result

    def scale(self, result, x, factor=None, scalar=None, scalar_ssa=None):
        x_type = self.type_of(x)
        self.define(result, self.width[x], like=x)
        if scalar is None:
            self.emit(f"%{result} = cq4p.scale %{x} {{factor = {f32(factor)}}} : {x_type} -> "
                      f"{x_type}")
        else:
            value, value_type = self.bind(scalar, scalar_ssa, "dense")
            self.emit(f"%{result} = cq4p.scale %{x} by %{value} : {x_type}, {value_type} -> "
                      f"{x_type}")
        return result

    def glu(self, result, gate, up, activation):
        x_type = self.type_of(gate)
        self.define(result, self.width[gate], like=gate)
        self.emit(f"%{result} = cq4p.glu <{activation}> %{gate}, %{up} : {x_type}, "
                  f"{x_type} -> {x_type}")
        return result

    def add(self, result, a, b):
        self.define(result, self.width[a], like=a)
        self.emit(f"%{result} = arith.addf %{a}, %{b} : {self.type_of(a)}")
        return result


def _attention_block(graph, index, layer, x, name, ssa, p):
    """q/k/v (or q alone on a KV-shared layer), their norms and rotary
    embedding, the cached attention and the output projection; returns the
    branch's output."""
    spec = graph.spec
    head_dim = layer.head_dim or spec.head_dim
    kv_heads = layer.num_kv_heads or spec.num_kv_heads
    tensors = spec.layer_tensors(index)

    def project(role):
        bias = tensors.get(f"{role}_bias")
        return graph.linear(p + role, x, name(role), ssa(role),
                            bias=bias[0] if bias else None,
                            bias_ssa=ssa(f"{role}_bias") if bias else None)

    q = project("q")
    shared = layer.kv_donor is not None
    if not shared:
        k, v = project("k"), project("v")
    if spec.qk_norm:
        q = graph.norm(p + "qn", q, name("q_norm"), ssa("q_norm"))
        if not shared:
            k = graph.norm(p + "kn", k, name("k_norm"), ssa("k_norm"))
    if spec.v_norm and not shared:
        v = graph.plain_norm(p + "vn", v, head_dim)
    q = graph.rope(p + "qr", q, layer)
    attrs = attributes(head_dim=i64(head_dim),
                       layer=i64(layer.kv_donor if shared else index),
                       num_heads=i64(spec.num_heads), num_kv_heads=i64(kv_heads),
                       scale=f32(layer.attention_scale or spec.attention_scale),
                       window=i64(layer.window))
    q_type = graph.type_of(q)
    graph.define(p + "a", graph.width[q], like=q)
    if shared:
        graph.emit(f"%{p}a = cq4p.cached_attention %{q}, %pos {attrs} : {q_type}, index -> "
                   f"{q_type}")
    else:
        k = graph.rope(p + "kr", k, layer)
        kv_type = graph.type_of(k)
        graph.emit(f"%{p}a = cq4p.cached_attention %{q}, %{k}, %{v}, %pos {attrs} : "
                   f"{q_type}, {kv_type}, {kv_type}, index -> {q_type}")
    return graph.linear(p + "o", p + "a", name("o"), ssa("o"))


def _conv_block(graph, index, x, name, ssa, p):
    """LFM2's short convolution: in_proj, the gated causal convolution with
    its state, out_proj."""
    bcx = graph.linear(p + "bcx", x, name("conv_in"), ssa("conv_in"))
    weight, weight_type = graph.bind(name("conv"), ssa("conv"), "dense")
    hidden = graph.spec.hidden
    graph.define(p + "sc", hidden, like=bcx)
    graph.emit(f"%{p}sc = cq4p.short_conv %{bcx}, %{weight}, %pos "
               f"{{layer = {i64(index)}}} : {graph.type_of(bcx)}, {weight_type}, index -> "
               f"{graph.type_of(p + 'sc')}")
    return graph.linear(p + "co", p + "sc", name("conv_out"), ssa("conv_out"))


def _per_layer_inputs(graph, h):
    """Gemma 4's per-layer inputs P [rows, layers * ple_width] (once per
    step), from the token ids and the scaled embedding rows h."""
    spec = graph.spec
    table, table_type = graph.bind(spec.ple_embedding_name, "ple_embed", "CQ4")
    width = spec.num_layers * spec.ple_width
    # The table is stored as rows of one layer each ([vocab * layers,
    # ple_width]): a token's rows are `layers` consecutive ones, decoded
    # side by side (cq4p.embedding rows_per_id).
    if table_type.n != spec.ple_vocab * spec.num_layers:
        raise GraphError(f"tensor {spec.ple_embedding_name}: stored as {table_type.n} x "
                         f"{table_type.k}, expected {spec.ple_vocab * spec.num_layers} rows "
                         f"(one per token and layer); {REPACK_PER_LAYER}")
    graph.define("ple_tok_rows", spec.num_layers * table_type.k)
    attrs = attributes(rows_per_id=i64(spec.num_layers), scale=f32(spec.ple_embedding_scale))
    graph.emit(f"%ple_tok_rows = cq4p.embedding %ids, %{table} {attrs} : tensor<?xi64>, "
               f"{table_type} -> {graph.type_of('ple_tok_rows')}")
    tok = "ple_tok_rows"
    if table_type.k != spec.ple_width:  # a width the converter padded
        raise GraphError(f"tensor {spec.ple_embedding_name}: rows of {table_type.k}, "
                         f"expected the per-layer width {spec.ple_width}")
    ctx = graph.linear("ple_ctx", h, spec.ple_projection_name, "ple_projection")
    ctx = graph.scale("ple_ctx_scaled", ctx, factor=spec.ple_projection_scale)
    ctx = graph.norm("ple_ctx_norm", ctx, spec.ple_norm_name, "ple_norm")
    mixed = graph.add("ple_mixed", ctx, tok)
    return graph.scale("ple", mixed, factor=spec.ple_mix_scale)


def model_graph(spec, tensors, digest, transforms=None):
    """The model.mlir text of a bundle: `spec` (cq4p.model.architecture.ModelSpec),
    `tensors` its manifest entries, `digest` its model_digest, `transforms`
    {tensor name: cq4p.transform digest} for its Hadamard weights."""
    entries = {entry["name"]: entry for entry in tensors}
    graph = _Graph(spec, entries, transforms or {})
    hidden = spec.hidden

    embed, embed_type = graph.bind(spec.embedding_name, "embed", "CQ4")
    scale = (" " + attributes(scale=f32(spec.embedding_scale))
             if spec.embedding_scale is not None else "")
    graph.define("h0", embed_type.k)
    graph.emit(f"%h0 = cq4p.embedding %ids, %{embed}{scale} : tensor<?xi64>, {embed_type} -> "
               f"{graph.type_of('h0')}")
    h = "h0"
    if embed_type.k != hidden:  # a K the converter padded: the true width
        h = graph.columns("h0t", "h0", 0, hidden)
    ple = _per_layer_inputs(graph, h) if spec.ple_width else None

    for index, layer in enumerate(spec.layers):
        tensors_of_layer = spec.layer_tensors(index)

        def name(role):
            return tensors_of_layer[role][0]

        def ssa(role):
            # The tensor's last name part (q_proj, input_layernorm, w1...).
            tensor = name(role)
            stem = tensor[:-len(".weight")] if tensor.endswith(".weight") else tensor
            suffix = "_bias" if stem.endswith(".bias") else ""
            stem = stem[:-len(".bias")] if suffix else stem
            return f"l{index}_{stem.split('.')[-1]}{suffix}"

        p = f"l{index}_"
        x = graph.norm(p + "x", h, name("attn_norm"), ssa("attn_norm"))
        if layer.is_conv:
            branch = _conv_block(graph, index, x, name, ssa, p)
        else:
            branch = _attention_block(graph, index, layer, x, name, ssa, p)
        if spec.sandwich_norms:
            branch = graph.norm(p + "on", branch, name("post_attn_norm"),
                                ssa("post_attn_norm"))
        h = graph.add(p + "h", h, branch)
        y = graph.norm(p + "y", h, name("ffn_norm"), ssa("ffn_norm"))
        gate = graph.linear(p + "g", y, name("gate"), ssa("gate"))
        up = graph.linear(p + "u", y, name("up"), ssa("up"))
        m = graph.glu(p + "m", gate, up, spec.activation)
        mlp = graph.linear(p + "d", m, name("down"), ssa("down"))
        if spec.sandwich_norms:
            mlp = graph.norm(p + "dn", mlp, name("post_ffn_norm"), ssa("post_ffn_norm"))
        h = graph.add(f"h{index + 1}" if not (ple or spec.layer_scalar) else p + "hm", h, mlp)
        if ple:
            gate = graph.linear(p + "pg", h, name("ple_gate"), ssa("ple_gate"))
            mine = graph.columns(p + "pi", ple, index * spec.ple_width, spec.ple_width)
            gated = graph.glu(p + "pm", gate, mine, "gelu_tanh")
            projected = graph.linear(p + "pp", gated, name("ple_projection"),
                                     ssa("ple_projection"))
            projected = graph.norm(p + "pn", projected, name("ple_norm"), ssa("ple_norm"))
            h = graph.add(f"h{index + 1}" if not spec.layer_scalar else p + "hp", h, projected)
        if spec.layer_scalar:
            h = graph.scale(f"h{index + 1}", h, scalar=name("layer_scalar"),
                            scalar_ssa=ssa("layer_scalar"))

    graph.emit("%c0 = arith.constant 0 : index")
    graph.emit("%c1 = arith.constant 1 : index")
    graph.emit(f"%rows = tensor.dim %{h}, %c0 : {graph.type_of(h)}")
    graph.emit("%last = arith.subi %rows, %c1 : index")
    graph.width["t"], graph.rows["t"] = hidden, 1
    graph.emit(f"%t = tensor.extract_slice %{h}[%last, 0] [1, {hidden}] [1, 1] : "
               f"{graph.type_of(h)} to {graph.type_of('t')}")
    graph.norm("f", "t", spec.final_norm_name, "norm")
    output = spec.output_name
    logits = graph.linear("logits", "f", output, "embed" if spec.tied else "lm_head")
    if spec.final_logit_softcapping is not None:
        graph.define("capped", spec.vocab, like=logits)
        graph.emit(f"%capped = cq4p.softcap %{logits} "
                   f"{{cap = {f32(spec.final_logit_softcapping)}}} : {graph.type_of(logits)} -> "
                   f"{graph.type_of(logits)}")
        logits = "capped"
    result_type = tensor_type(1, spec.vocab)
    graph.emit(f"return %{logits} : {result_type}")

    model = ", ".join([f'architecture = "{spec.architecture}"', f'digest = "{digest}"',
                       f"vocab = {i64(spec.vocab)}", f"hidden = {i64(hidden)}",
                       f"layers = {i64(spec.num_layers)}",
                       f"num_kv_heads = {i64(spec.num_kv_heads)}",
                       f"head_dim = {i64(spec.head_dim)}"])
    arguments = ",\n      ".join(graph.arguments)
    return (f"module attributes {{cq4p.model = {{{model}}}}} {{\n"
            f"  func.func @forward({arguments}) -> {result_type} {{\n"
            + "\n".join(graph.body) + "\n  }\n}\n")
