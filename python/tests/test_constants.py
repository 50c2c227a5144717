"""The format's constants (cq4p.format.constants), generated from the
runtime's C headers, and the lister that finds their names.

The module itself is compared with what the headers give by a lit test
(test/tools/python-constants.test, which needs the build); here: concrete
values docs/FORMAT.md states, and list_constants.py on preprocessed text.
"""

import importlib.util
import struct
from pathlib import Path

from cq4p.format import constants as fmt

LISTER = Path(__file__).resolve().parents[2] / "tools" / "cq4p-python-constants" / \
    "list_constants.py"


def lister():
    spec = importlib.util.spec_from_file_location("list_constants", LISTER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_format_constants_are_the_headers_numbers():
    assert struct.pack("<I", fmt.CQ4P_MAGIC) == b"CACT"
    assert fmt.CQ4P_HEADER_BYTES == fmt.CQ4P_OFFSET_ORIGINAL_N + 8 == 84
    assert fmt.CQ4P_EXTENDED_HEADER_BYTES == fmt.CQ4P_HEADER_BYTES + 4 * 8
    assert fmt.CQ4P_KG_BLOCK_BYTES * 2 == fmt.CQ4P_PANEL_CHANNELS * fmt.CQ4P_KG_BLOCK_K
    assert fmt.CQ4P_PRECISION_CQ4 == 6
    assert fmt.CQ4P_FLAG_PACKED_PANELS == 32
    assert fmt.CQ4P_MAX_MANIFEST_NESTING == 64


def test_kernel_abi_and_c_api_constants_are_there_too():
    assert fmt.CQ4P_FEATURE_X86_AVX512VNNI == 1 << 11
    assert fmt.CQ4P_X86_64_V3_FEATURES == (1 << 13) | (1 << 8) | (1 << 14) | (1 << 9)
    assert fmt.CQ4P_KERNEL_TABLE_SYMBOL == "cq4p_kernel_table"
    assert (fmt.CQ4P_OK, fmt.CQ4P_ERROR_BUSY, fmt.CQ4P_REGION_COUNT) == (0, 6, 11)


def test_the_module_holds_plain_constants_only():
    names = [name for name in vars(fmt) if not name.startswith("__")]
    assert names and all(name.startswith("CQ4P_") for name in names), names
    assert all(type(getattr(fmt, name)) in (int, str) for name in names)


PREPROCESSED = '''\
# 0 "Headers.h"
# 1 "/usr/include/stdint.h" 1 3 4
#define CQ4P_NOT_OURS 1
enum { CQ4P_NOT_OURS_EITHER = 2 };
# 2 "Headers.h" 2
# 1 "inc/cq4p/a.h" 1
#define CQ4P_A_H
#define CQ4P_ONE 1u
#define CQ4P_SHIFTED (CQ4P_ONE << 3)
#define CQ4P_TABLE(X) X(CQ4P_ONE, "one")
#define CQ4P_API __attribute__((visibility("default")))
#define CQ4P_NAME "symbol"
#define CQ4P_GONE 5
#undef CQ4P_GONE

# 12 "inc/cq4p/a.h"
typedef enum cq4p_kind {
  CQ4P_KIND_A = 0,
  CQ4P_KIND_B = (1u << 3) | 1
} cq4p_kind;
int cq4p_table[CQ4P_KIND_B];
# 3 "Headers.h" 2
# 1 "inc/cq4p/b.h" 1
enum { CQ4P_B_ONLY = CQ4P_KIND_A };
'''


def test_lister_takes_values_and_enumerators_of_the_headers_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    constants = lister().list_constants(PREPROCESSED.splitlines(), "inc")
    assert constants == [
        ("cq4p/a.h", "CQ4P_ONE", "1u"),
        ("cq4p/a.h", "CQ4P_SHIFTED", "(CQ4P_ONE << 3)"),
        ("cq4p/a.h", "CQ4P_NAME", '"symbol"'),
        ("cq4p/a.h", "CQ4P_KIND_A", ""),
        ("cq4p/a.h", "CQ4P_KIND_B", ""),
        ("cq4p/b.h", "CQ4P_B_ONLY", ""),
    ]


def test_lister_writes_the_include_and_refuses_an_empty_list(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = lister()
    (tmp_path / "in.i").write_text(PREPROCESSED)
    assert module.main(["list_constants.py", "in.i", "inc", "out.inc"]) == 0
    lines = (tmp_path / "out.inc").read_text().splitlines()
    assert lines[1:4] == ['CQ4P_HEADER("cq4p/a.h")', 'CQ4P_CONSTANT(CQ4P_ONE, "1u")',
                          'CQ4P_CONSTANT(CQ4P_SHIFTED, "(CQ4P_ONE << 3)")']
    assert 'CQ4P_CONSTANT(CQ4P_NAME, "\\"symbol\\"")' in lines
    assert module.main(["list_constants.py", "in.i", "elsewhere", "out.inc"]) == 1
