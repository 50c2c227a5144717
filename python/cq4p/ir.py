"""Textual cq4p IR: the weight type, single linears, and a bundle's whole
forward pass (`model_graph`, the model.mlir of docs/MODEL.md).

The compiler verifies what this module writes; it does not restate the
verifier's rules, so a shape that does not fit is refused by cq4p-opt with
its message (see `cq4p.tools.run_opt`).
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


def _argument_type(entry):
    if entry["dtype"] == "CQ4":
        if entry.get("layout") != "panels":
            raise GraphError(f"tensor {entry['name']} is CQ4 in the {entry.get('layout')} "
                             f"layout; the model graph needs packed panels "
                             f"(python -m cq4p upgrade)")
        n, k = entry["shape"]
        return WeightType(n, k, entry["group_size"], entry["rotation"], "panels")
    if len(entry["shape"]) != 1:
        raise GraphError(f"tensor {entry['name']} is {entry['dtype']} with shape "
                         f"{entry['shape']}; the model graph needs it as CQ4 panels")
    element = {"FP16": "f16", "FP32": "f32"}[entry["dtype"]]
    return f"tensor<{entry['shape'][0]}x{element}>"


class _Graph:
    """The forward function's arguments and body, built in order."""

    def __init__(self, spec, entries, transforms):
        self.spec = spec
        self.entries = entries
        self.transforms = transforms
        self.arguments = ["%ids: tensor<?xi64>, %pos: index"]
        self.bound = {}  # tensor name -> (SSA name, type)
        self.body = []

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

    def norm(self, result, x, width, tensor, ssa, rows="?"):
        weight, weight_type = self.bind(tensor, ssa, "dense")
        attrs = dict(epsilon=f32(self.spec.epsilon))
        if self.spec.unit_offset:
            attrs["unit_offset"] = True
        x_type = tensor_type(None if rows == "?" else rows, width)
        self.emit(f"%{result} = cq4p.rms_norm %{x}, %{weight} {attributes(**attrs)} : "
                  f"{x_type}, {weight_type} -> {x_type}")

    def linear(self, result, x, tensor, ssa, rows=None):
        weight, weight_type = self.bind(tensor, ssa, "CQ4")
        self.emit(f"%{result} = cq4p.linear %{x}, %{weight} : {tensor_type(rows, weight_type.k)}, "
                  f"{weight_type} -> {tensor_type(rows, weight_type.n)}")

    def rope(self, result, x, width, layer):
        spec = self.spec
        attrs = attributes(head_dim=i64(spec.head_dim), scaling=f32(layer.scaling),
                           theta=f32(layer.theta))
        x_type = tensor_type(None, width)
        self.emit(f"%{result} = cq4p.rope %{x}, %pos {attrs} : {x_type}, index -> {x_type}")

    def add(self, result, a, b):
        self.emit(f"%{result} = arith.addf %{a}, %{b} : {tensor_type(None, self.spec.hidden)}")


def model_graph(spec, tensors, digest, transforms=None):
    """The model.mlir text of a bundle: `spec` (cq4p.architecture.ModelSpec),
    `tensors` its manifest entries, `digest` its model_digest, `transforms`
    {tensor name: cq4p.transform digest} for its Hadamard weights."""
    entries = {entry["name"]: entry for entry in tensors}
    graph = _Graph(spec, entries, transforms or {})
    hidden, q_width, kv_width = spec.hidden, spec.q_width, spec.kv_width

    embed, embed_type = graph.bind(spec.embedding_name, "embed", "CQ4")
    scale = (" " + attributes(scale=f32(spec.embedding_scale))
             if spec.embedding_scale is not None else "")
    graph.emit(f"%h0 = cq4p.embedding %ids, %{embed}{scale} : tensor<?xi64>, {embed_type} -> "
               f"{tensor_type(None, hidden)}")
    h = "h0"
    for index, layer in enumerate(spec.layers):
        def name(part):
            return spec.layer_tensor(index, part)

        def ssa(part):
            return f"l{index}_{part.split('.')[-1]}"

        p = f"l{index}_"
        graph.norm(p + "x", h, hidden, name("input_layernorm"), ssa("input_layernorm"))
        for proj in ("q", "k", "v"):
            graph.linear(p + proj, p + "x", name(f"self_attn.{proj}_proj"),
                         ssa(f"self_attn.{proj}_proj"))
        q, k = p + "q", p + "k"
        if spec.qk_norm:
            graph.norm(p + "qn", q, q_width, name("self_attn.q_norm"), ssa("self_attn.q_norm"))
            graph.norm(p + "kn", k, kv_width, name("self_attn.k_norm"), ssa("self_attn.k_norm"))
            q, k = p + "qn", p + "kn"
        graph.rope(p + "qr", q, q_width, layer)
        graph.rope(p + "kr", k, kv_width, layer)
        attrs = attributes(head_dim=i64(spec.head_dim), layer=i64(index),
                           num_heads=i64(spec.num_heads), num_kv_heads=i64(spec.num_kv_heads),
                           scale=f32(spec.attention_scale), window=i64(layer.window))
        graph.emit(f"%{p}a = cq4p.cached_attention %{p}qr, %{p}kr, %{p}v, %pos {attrs} : "
                   f"{tensor_type(None, q_width)}, {tensor_type(None, kv_width)}, "
                   f"{tensor_type(None, kv_width)}, index -> {tensor_type(None, q_width)}")
        graph.linear(p + "o", p + "a", name("self_attn.o_proj"), ssa("self_attn.o_proj"))
        attention = p + "o"
        if spec.sandwich_norms:
            graph.norm(p + "on", attention, hidden, name("post_attention_layernorm"),
                       ssa("post_attention_layernorm"))
            attention = p + "on"
        graph.add(p + "h", h, attention)
        mlp_norm = "pre_feedforward_layernorm" if spec.sandwich_norms else \
            "post_attention_layernorm"
        graph.norm(p + "y", p + "h", hidden, name(mlp_norm), ssa(mlp_norm))
        graph.linear(p + "g", p + "y", name("mlp.gate_proj"), ssa("mlp.gate_proj"))
        graph.linear(p + "u", p + "y", name("mlp.up_proj"), ssa("mlp.up_proj"))
        ffn_type = tensor_type(None, spec.ffn)
        activation = attributes(activation=f'"{spec.activation}"')
        graph.emit(f"%{p}m = cq4p.glu %{p}g, %{p}u {activation} : {ffn_type}, {ffn_type} -> "
                   f"{ffn_type}")
        graph.linear(p + "d", p + "m", name("mlp.down_proj"), ssa("mlp.down_proj"))
        mlp = p + "d"
        if spec.sandwich_norms:
            graph.norm(p + "dn", mlp, hidden, name("post_feedforward_layernorm"),
                       ssa("post_feedforward_layernorm"))
            mlp = p + "dn"
        graph.add(f"h{index + 1}", p + "h", mlp)
        h = f"h{index + 1}"

    graph.emit("%c0 = arith.constant 0 : index")
    graph.emit("%c1 = arith.constant 1 : index")
    graph.emit(f"%rows = tensor.dim %{h}, %c0 : {tensor_type(None, hidden)}")
    graph.emit("%last = arith.subi %rows, %c1 : index")
    graph.emit(f"%t = tensor.extract_slice %{h}[%last, 0] [1, {hidden}] [1, 1] : "
               f"{tensor_type(None, hidden)} to {tensor_type(1, hidden)}")
    graph.norm("f", "t", hidden, spec.final_norm_name, "norm", rows=1)
    output = spec.output_name
    graph.linear("logits", "f", output, "embed" if spec.tied else "lm_head", rows=1)
    result_type = tensor_type(1, spec.vocab)
    graph.emit(f"return %logits : {result_type}")

    model = ", ".join([f'architecture = "{spec.architecture}"', f'digest = "{digest}"',
                       f"vocab = {i64(spec.vocab)}", f"hidden = {i64(hidden)}",
                       f"layers = {i64(spec.num_layers)}",
                       f"num_kv_heads = {i64(spec.num_kv_heads)}",
                       f"head_dim = {i64(spec.head_dim)}"])
    arguments = ",\n      ".join(graph.arguments)
    return (f"module attributes {{cq4p.model = {{{model}}}}} {{\n"
            f"  func.func @forward({arguments}) -> {result_type} {{\n"
            + "\n".join(graph.body) + "\n  }\n}\n")
