"""Textual cq4p IR for model graphs: the weight type and the linear op.

The compiler verifies what this module writes; it does not restate the
verifier's rules, so a shape that does not fit is refused by cq4p-opt with
its message (see `cq4p.tools.run_opt`).
"""

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


def linear_function(name, m, weight):
    """A function computing `cq4p.linear` of x[m, K] and `weight`.

    m may be None for a dynamic number of rows (a prefill).
    """
    x_type = tensor_type(m, weight.k)
    y_type = tensor_type(m, weight.n)
    return (
        f"func.func @{name}(%x: {x_type}, %w: {weight}) -> {y_type} {{\n"
        f"  %y = cq4p.linear %x, %w : {x_type}, {weight} -> {y_type}\n"
        f"  return %y : {y_type}\n"
        f"}}\n"
    )
