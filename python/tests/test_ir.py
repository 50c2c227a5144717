"""The IR the Python side writes, checked by the compiler that reads it."""

import re
import struct

import pytest

from cq4p import format as fmt
from cq4p import ir, tools


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


def test_format_constants_come_from_the_c_header():
    assert struct.pack("<I", fmt.CQ4P_MAGIC) == b"CACT"
    assert fmt.CQ4P_HEADER_BYTES == fmt.CQ4P_OFFSET_ORIGINAL_N + 8
    assert fmt.CQ4P_EXTENDED_HEADER_BYTES == fmt.CQ4P_HEADER_BYTES + 4 * 8
    assert fmt.CQ4P_KG_BLOCK_BYTES * 2 == fmt.CQ4P_PANEL_CHANNELS * fmt.CQ4P_KG_BLOCK_K
    assert fmt.CQ4P_PRECISION_CQ4 == 6
    assert fmt.CQ4P_FLAG_PACKED_PANELS == 32


def test_format_parser_reads_what_it_is_given(tmp_path):
    header = tmp_path / "format.h"
    header.write_text("#define CQ4P_A 0x10u\n#define CQ4P_B (1u << 3) /* b */\n"
                      "enum x {\n  CQ4P_PRECISION_Q = 9,\n};\n"
                      "#define CQ4P_C (1ull << 40)\n"
                      "#define CQ4P_D \\\n  (CQ4P_A | /* joined */ CQ4P_C)\n"
                      "#define CQ4P_LIST(X) X(CQ4P_A, \"a\")\n"
                      "#define CQ4P_API __attribute__((visibility(\"default\")))\n"
                      "#define CQ4P_H\n")
    assert fmt.load(header) == {"CQ4P_A": 16, "CQ4P_B": 8, "CQ4P_PRECISION_Q": 9,
                                "CQ4P_C": 1 << 40, "CQ4P_D": 16 | 1 << 40}


@pytest.mark.parametrize("line, message", [
    ("#define CQ4P_E (CQ4P_LATER + 1)", "format.h:1: 'CQ4P_LATER' is not defined before it"),
    ("#define CQ4P_E 1 << ", "format.h:1: cannot read '1 <<' as an integer constant"),
    ("#define CQ4P_E (2 / 1)", "format.h:1: cannot read '(2 / 1)'"),
])
def test_format_parser_refuses_a_constant_it_cannot_read(tmp_path, line, message):
    header = tmp_path / "format.h"
    header.write_text(line + "\n")
    with pytest.raises(fmt.HeaderError, match=re.escape(message)):
        fmt.load(header)


def test_format_constants_are_attributes_or_a_named_error():
    assert fmt.CQ4P_MAX_MANIFEST_NESTING == 64
    assert "CQ4P_MAX_SHAPE_DIMS" in dir(fmt)
    with pytest.raises(AttributeError, match="cq4p.format has no CQ4P_NOT_A_CONSTANT"):
        fmt.CQ4P_NOT_A_CONSTANT  # noqa: B018


def test_kernel_abi_feature_bits_read_as_the_compiler_reads_them():
    abi = fmt.load(fmt.HEADER.parent / "kernel_abi.h")
    assert abi["CQ4P_FEATURE_X86_AVX512VNNI"] == 1 << 11
    assert abi["CQ4P_X86_64_V3_FEATURES"] == (1 << 13) | (1 << 8) | (1 << 14) | (1 << 9)
    assert abi["CQ4P_KERNEL_ABI_VERSION"] == 4
