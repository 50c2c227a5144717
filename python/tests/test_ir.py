"""The IR the Python side writes, checked by the compiler that reads it."""

import pytest

from cq4p.model import ir
from cq4p.native import tools


def test_weight_type_spelling():
    weight = ir.WeightType(2048, 1536, 128)
    assert str(weight) == "!cq4p.weight<2048x1536, gs = 128, hadamard, panels>"
    lm_head = ir.WeightType(262144, 1536, 128, "orthogonal")
    assert str(lm_head) == "!cq4p.weight<262144x1536, gs = 128, orthogonal, panels>"


def test_weight_type_rejects_unknown_rotation():
    with pytest.raises(ValueError, match="rotation must be one of"):
        ir.WeightType(64, 256, 128, "rotated")


@pytest.mark.parametrize("m", [1, 16, None])
def test_linear_function_verifies_and_round_trips(m):
    weight = ir.WeightType(100, 256, 32)
    out = tools.run_opt(ir.linear_function("proj", m, weight))
    rows = "?" if m is None else str(m)
    assert (f"cq4p.linear %arg0, %arg1 : tensor<{rows}x256xf32>, {weight} "
            f"-> tensor<{rows}x100xf32>") in out
    # What cq4p-opt prints parses again to the same text.
    assert tools.run_opt(out) == out


def test_shape_mismatch_is_refused_with_the_numbers():
    weight = ir.WeightType(2048, 1536, 128)
    text = ir.linear_function("bad", 1, weight).replace("1x1536xf32", "1x1000xf32")
    with pytest.raises(tools.ToolError, match=r"input's K \(1000\) to equal the weight's K \(1536\)"):
        tools.run_opt(text)


def test_group_size_rule_is_the_compilers():
    # A weight the Python side happily spells but the format forbids.
    weight = ir.WeightType(64, 1000, 128)
    with pytest.raises(tools.ToolError, match=r"expected K \(1000\) to be a multiple of the group size \(128\)"):
        tools.run_opt(ir.linear_function("bad", 1, weight))
