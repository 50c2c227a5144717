"""Textual cq4p IR for model graphs: the weight type and the linear op.

The compiler verifies what this module writes; it does not restate the
verifier's rules, so a shape that does not fit is refused by cq4p-opt with
its message (see `cq4p.tools.run_opt`).
"""

import re
from dataclasses import dataclass

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


def embedding_function(name, weight, tensor=None):
    """A function decoding rows `ids` of an orthogonal `weight`."""
    out_type = tensor_type(None, weight.k)
    return (
        f"func.func @{name}(%ids: tensor<?xi64>, {_weight_argument(weight, tensor)}) -> {out_type} {{\n"
        f"  %rows = cq4p.embedding %ids, %w : tensor<?xi64>, {weight} -> {out_type}\n"
        f"  return %rows : {out_type}\n"
        f"}}\n"
    )


def symbol_name(tensor):
    """An MLIR symbol for a tensor name."""
    return "t_" + re.sub(r"[^A-Za-z0-9_]", "_", tensor)


def model_graph(tensors, tied_lm_head=False):
    """The model.mlir of a bundle: one function per packed-panel CQ4 tensor
    of the manifest entries `tensors` (a linear for every projection and the
    lm_head, an embedding for the token embedding, and the lm_head of a
    model whose embedding is tied to it), for cq4p-compile."""
    functions = []
    for entry in tensors:
        if entry.get("dtype") != "CQ4" or entry.get("layout") != "panels":
            continue
        n, k = entry["shape"]
        weight = WeightType(n, k, entry["group_size"], entry["rotation"], "panels")
        name = entry["name"]
        if "embed_tokens" in name:
            functions.append(embedding_function(symbol_name(name), weight, name))
            if tied_lm_head:
                functions.append(linear_function(symbol_name(name) + "_lm_head", None, weight, name))
        else:
            functions.append(linear_function(symbol_name(name), None, weight, name))
    return "\n".join(functions)
