"""The ctypes mirrors of the C API's structures against the runtime's own
layout table (cq4p_struct_layout), and that table against cq4p.h itself."""

import ctypes
import re
from pathlib import Path

import pytest

from cq4p.native import runtime as native

HEADER = Path(__file__).resolve().parents[2] / "runtime" / "include" / "cq4p" / "cq4p.h"


def header_structures():
    """{structure: [field names]} of every struct cq4p.h defines with a body,
    read from the header's text (comments removed; `uint64_t a, b;`, arrays
    and pointers taken apart by hand)."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    structures = {}
    for name, body in re.findall(r"typedef struct (\w+) \{(.*?)\}", text, flags=re.S):
        fields = []
        for declaration in body.split(";"):
            declaration = declaration.strip()
            if not declaration:
                continue
            # The declarators after the type: the first one's name is the last
            # word before its own brackets or comma.
            first, *rest = declaration.split(",")
            names = [re.sub(r"\[.*\]", "", first).split()[-1].lstrip("*")]
            names += [re.sub(r"\[.*\]", "", d).strip().lstrip("*") for d in rest]
            fields += names
        structures[name] = fields
    return structures


@pytest.fixture(scope="module")
def lib():
    try:
        return native.library()
    except native.LayoutError as error:
        # A library that loads but disagrees with the mirrors is what this
        # file is for: a failure, not a skip (LayoutError is a kind of
        # LibraryNotFoundError, which the other files skip on).
        pytest.fail(str(error))
    except native.LibraryNotFoundError as error:
        pytest.skip(str(error))


def test_the_table_describes_every_structure_of_the_header_field_by_field(lib):
    table = native.library_layout(lib, native.library_path())
    header = header_structures()
    assert "cq4p_model_info" in header and "vocab" in header["cq4p_model_info"]
    described = {name: [f for f in fields if f is not None] for name, fields in table.items()}
    # The table's own structure too, since the package reads it through a mirror.
    assert "cq4p_layout_entry" in header
    assert described == header
    for name, fields in table.items():
        assert fields[None][0] == 0 and fields[None][1] > 0, name


def test_every_mirror_matches_the_library(lib):
    native.check_layout(lib, native.library_path())
    assert set(native.MIRRORS) == set(header_structures())


def _model_info_with(fields):
    return type("WrongModelInfo", (ctypes.Structure,), {"_fields_": fields})


@pytest.mark.parametrize("fields, message", [
    # context as 32 bits (the next field's alignment keeps the size).
    ([(n, ctypes.c_uint32 if n == "context" else t) for n, t in native.ModelInfo._fields_],
     r"struct cq4p_model_info otherwise than this cq4p package: field context at offset 24, "
     r"8 bytes in the library, at offset 24, 4 bytes in the package"),
    # A field dropped: the structure is shorter.
    ([f for f in native.ModelInfo._fields_ if f[0] != "architecture"],
     r"cq4p_model_info otherwise than this cq4p package: 88 bytes in the library, 56 in the "
     r"package"),
    # Same size, two fields swapped.
    ([native.ModelInfo._fields_[1], native.ModelInfo._fields_[0]] + native.ModelInfo._fields_[2:],
     r"field hidden at offset 8, 8 bytes in the library, at offset 0, 8 bytes in the package"),
    # A field renamed.
    ([("vocabulary", ctypes.c_uint64)] + native.ModelInfo._fields_[1:],
     r"the library's field vocab is not in the package's"),
])
def test_a_mirror_that_differs_is_refused_by_name(lib, fields, message):
    with pytest.raises(native.LayoutError, match=message):
        native.check_layout(lib, "libcq4p_runtime.so",
                            {"cq4p_model_info": _model_info_with(fields)})


def test_a_structure_the_library_does_not_describe_is_refused(lib):
    with pytest.raises(native.LayoutError, match="struct cq4p_future_options otherwise than this "
                       "cq4p package: the library does not describe it"):
        native.check_layout(lib, "libcq4p_runtime.so", {"cq4p_future_options": native.Sampling})


def test_a_library_without_the_table_is_refused():
    with pytest.raises(native.LayoutError, match="has no cq4p_struct_layout"):
        native.check_layout(ctypes.CDLL(None), "an older libcq4p_runtime.so")
