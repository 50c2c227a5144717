"""A corpus of malformed tensor files, each with the field a reader must name.

Both readers (the Python one in `cq4p.io.reader` and the runtime's C++ one) must
refuse every file here with FormatError / CQ4P_ERROR_FORMAT naming the
expected field; the runtime's fuzz and sanitizer tests reuse the files. The
corpus starts from small valid files of every layout and breaks one thing in
each copy: truncations at every header field and region boundary, every
header field corrupted, inconsistent sizes, overflowing dims, conflicting
flags, and bad contents (codebook, signs, permutation, orthogonal norms).

    write_malformed_corpus(directory) -> [(file name, expected field), ...]

also writes the list as directory/EXPECTED.tsv ("name<TAB>field" lines).
"""

import os
import struct

import numpy as np

from cq4p.format import constants as fmt
from cq4p.format import layout as ly
from cq4p.io import reader as rd
from cq4p.io import writer as wr
from cq4p.quant import quantize as qz

EXPECTED_LIST = "EXPECTED.tsv"
_SEED = 7

U32 = "<I"
U64 = "<Q"
HEADER_FIELD_OFFSETS = sorted({offset for _, offset, _ in ly.HEADER_FIELDS}
                              | {fmt.CQ4P_OFFSET_DIMS + 8 * i for i in range(ly.HEADER_DIMS)})


def _weight(rotation, n, k, gs, seed=_SEED):
    """Stored values of a small CQ4 tensor (random indices, real codebook)."""
    rng = np.random.default_rng(seed)
    d = k if rotation == qz.ORTHOGONAL else gs
    codebook = qz.lloyd_max_codebook(d).astype(np.float16)
    norms = rng.uniform(0.5, 2.0, (n, 1 if rotation == qz.ORTHOGONAL else k // gs))
    s16, isr = qz.stored_input_scales(k, rng.uniform(0.5, 2.0, k))
    common = dict(indices=rng.integers(0, 16, (n, k), dtype=np.uint8),
                  norms=norms.astype(np.float16), codebook=codebook, input_scale=s16,
                  input_scale_recip=isr)
    if rotation == qz.ORTHOGONAL:
        rotation_matrix = (rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float16)
        return qz.QuantizedWeight(qz.ORTHOGONAL, k, rotation_matrix=rotation_matrix, **common)
    left, right, permutation = qz.hadamard_components(gs, seed)
    return qz.QuantizedWeight(qz.HADAMARD, gs, left_signs=left, right_signs=right,
                              permutation=permutation, **common)


def _bases(directory):
    """Valid files of every layout: {kind: bytes} and {kind: (regions,
    data offset)} as the reader maps them."""
    specs = {
        "hpanel": (wr.write_panel_file, _weight(qz.HADAMARD, 8, 128, 128)),
        "opanel": (wr.write_panel_file, _weight(qz.ORTHOGONAL, 4, 256, 256)),
        "hrow": (wr.write_row_major_file, _weight(qz.HADAMARD, 4, 64, 32)),
        "hint": (wr.write_interleaved_file, _weight(qz.HADAMARD, 8, 64, 32)),
        "orow": (wr.write_row_major_file, _weight(qz.ORTHOGONAL, 4, 32, 32)),
        "oint": (wr.write_interleaved_file, _weight(qz.ORTHOGONAL, 4, 32, 32)),
    }
    rng = np.random.default_rng(_SEED)
    dense = {
        "fp16": (rng.standard_normal((3, 5)).astype(np.float16), ly.FP16),
        "fp32ext": (rng.standard_normal((2, 1, 3, 1, 2)).astype(np.float32), ly.FP32),
    }
    scratch = os.path.join(directory, ".base.weights")
    bases, layouts = {}, {}
    try:
        for kind in list(specs) + list(dense):
            if kind in specs:
                writer, weight = specs[kind]
                writer(scratch, weight)
            else:
                wr.write_dense_file(scratch, *dense[kind])
            with open(scratch, "rb") as handle:
                bases[kind] = handle.read()
            with rd.read_tensor(scratch) as tensor:
                layouts[kind] = (dict(tensor.regions), tensor.data_offset)
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
    return bases, layouts


def _get(data, offset, code):
    return struct.unpack_from(code, data, offset)[0]


def _set(data, offset, code, value):
    patched = bytearray(data)
    struct.pack_into(code, patched, offset, value)
    return bytes(patched)


def _cases(bases, layouts):
    """(name, bytes, expected field) for every malformed file."""
    cases = []

    def add(name, data, field):
        cases.append((name, data, field))

    def header_field(kind, field, code, value, expected, suffix=None):
        offset = dict((n, o) for n, o, _ in ly.HEADER_FIELDS)[field]
        label = suffix if suffix is not None else str(value)
        add(f"{kind}_{field}_{label}", _set(bases[kind], offset, code, value), expected)

    # Truncations: every header field boundary, then every region boundary.
    hpanel = bases["hpanel"]
    add("empty", b"", "header")
    for offset in HEADER_FIELD_OFFSETS:
        add(f"hpanel_truncated_at_{offset}", hpanel[:offset], "header")
    add(f"hpanel_truncated_at_{fmt.CQ4P_HEADER_BYTES}", hpanel[:fmt.CQ4P_HEADER_BYTES],
        "file size")
    for kind in ("hpanel", "opanel", "hrow", "hint", "orow", "oint", "fp16", "fp32ext"):
        data = bases[kind]
        regions, data_offset = layouts[kind]
        cuts = {offset for offset, _ in regions.values()}
        cuts |= {offset + size for offset, size in regions.values()}
        cuts |= {data_offset + 1, len(data) - 1}
        header_bytes = (fmt.CQ4P_EXTENDED_HEADER_BYTES if kind == "fp32ext"
                        else fmt.CQ4P_HEADER_BYTES)
        for cut in sorted(c for c in cuts if header_bytes < c < len(data)):
            add(f"{kind}_truncated_at_{cut}", data[:cut], "file size")
    ext = bases["fp32ext"]
    for cut in (fmt.CQ4P_HEADER_BYTES, 100, fmt.CQ4P_EXTENDED_HEADER_BYTES - 1):
        add(f"fp32ext_truncated_at_{cut}", ext[:cut], "header")

    # magic
    for value in (0, 0x58434143, 0x43414354):
        header_field("hpanel", "magic", U32, value, "magic", f"{value:08x}")
    # alignment: refused values, and accepted ones that move the regions
    for value in (0, 3, 48, 8192, 1 << 31, 0xFFFFFFFF):
        header_field("hpanel", "alignment", U32, value, "alignment")
    for value in (1, 64, 4096):
        header_field("hpanel", "alignment", U32, value, "file size")
    # precision
    for value in (0, 3, 4, 5, 7, 255, 0xFFFFFFFF):
        header_field("hpanel", "precision", U32, value, "precision")
    header_field("fp16", "precision", U32, fmt.CQ4P_PRECISION_INT8, "precision")
    # flags: unknown bits, conflicting bits, CQ bits on dense files
    panels = fmt.CQ4P_FLAG_PACKED_PANELS
    for bit in (0, 3, 6, 31):
        header_field("hpanel", "flags", U32, panels | (1 << bit), "flags", f"bit{bit}")
    header_field("hpanel", "flags", U32, panels | fmt.CQ4P_FLAG_INTERLEAVED_4ROW, "flags",
                 "panels_and_interleaved")
    header_field("hint", "flags", U32, panels | fmt.CQ4P_FLAG_INTERLEAVED_4ROW, "flags",
                 "panels_and_interleaved")
    for name, bit in (("orthogonal", fmt.CQ4P_FLAG_ORTHOGONAL_ROTATION),
                      ("interleaved", fmt.CQ4P_FLAG_INTERLEAVED_4ROW),
                      ("panels", fmt.CQ4P_FLAG_PACKED_PANELS)):
        header_field("fp16", "flags", U32, bit, "flags", name)
    header_field("hpanel", "flags", U32, 0, "scales_bytes", "legacy")
    header_field("hrow", "flags", U32, panels, "scales_bytes", "panels")
    header_field("hpanel", "flags", U32, panels | fmt.CQ4P_FLAG_EXTENDED_SHAPE, "dims",
                 "extended")
    # The four extra dims would be the first data bytes: not zero.
    header_field("fp16", "flags", U32, fmt.CQ4P_FLAG_EXTENDED_SHAPE, "dims", "extended")
    extended_short = _set(hpanel[:100], fmt.CQ4P_OFFSET_FLAGS, U32,
                          panels | fmt.CQ4P_FLAG_EXTENDED_SHAPE)
    add("hpanel_flags_extended_truncated_at_100", extended_short, "header")
    # ndim
    for value in (0, 1, 3, 0xFFFFFFFF):
        header_field("hpanel", "ndim", U32, value, "ndim")
    for value in (0, 5):
        header_field("fp16", "ndim", U32, value, "ndim")
    header_field("fp32ext", "ndim", U32, 9, "ndim")
    header_field("fp16", "ndim", U32, 1, "dims")
    header_field("fp16", "ndim", U32, 3, "dims")
    # dims: zero used dims, nonzero unused dims, dims past 2^32, N % 4
    dims = fmt.CQ4P_OFFSET_DIMS
    for i, value, kind in ((0, 0, "hpanel"), (1, 0, "hpanel"), (2, 1, "hpanel"),
                           (3, 7, "hpanel"), (1, 0, "fp16"), (2, 1, "fp16")):
        add(f"{kind}_dims{i}_{value}", _set(bases[kind], dims + 8 * i, U64, value), "dims")
    for exponent in (32, 40, 63):
        add(f"hpanel_n_2pow{exponent}", _set(hpanel, dims, U64, 1 << exponent), "dims")
        add(f"hpanel_k_2pow{exponent}", _set(hpanel, dims + 8, U64, 1 << exponent), "dims")
    add("hpanel_n_max", _set(hpanel, dims, U64, (1 << 64) - 1), "dims")
    n_and_original = _set(_set(hpanel, dims, U64, 1 << 40), fmt.CQ4P_OFFSET_ORIGINAL_N, U64,
                          1 << 40)
    add("hpanel_n_and_original_n_2pow40", n_and_original, "dims")
    add("hint_n_6", _set(_set(bases["hint"], dims, U64, 6), fmt.CQ4P_OFFSET_ORIGINAL_N, U64,
                         6), "dims")
    extended_dims = fmt.CQ4P_OFFSET_EXTENDED_DIMS
    add("fp32ext_dims4_0", _set(ext, extended_dims, U64, 0), "dims")
    add("fp32ext_dims7_1", _set(ext, extended_dims + 24, U64, 1), "dims")
    # Dense sizes that do not fit: refused at data_bytes (u64 overflow or mismatch).
    for exponent in (40, 63):
        add(f"fp16_dims0_2pow{exponent}", _set(bases["fp16"], dims, U64, 1 << exponent),
            "data_bytes")
    huge = bases["fp16"]
    for i in range(2):
        huge = _set(huge, dims + 8 * i, U64, (1 << 64) - 1)
    add("fp16_dims_max", huge, "data_bytes")
    # original_n
    for value in (0, 9, 1 << 63):
        header_field("hpanel", "original_n", U64, value, "original_n")
    # group_size
    for value in (0, 16, 48, 64 + 32, 512, 1 << 31):
        header_field("hpanel", "group_size", U32, value, "group_size")
    header_field("hpanel", "group_size", U32, 64, "num_groups")
    for value in (64, 256, 0):
        header_field("opanel", "group_size", U32, value, "group_size")
    for value in (0, 4, 24, 48):
        header_field("hrow", "group_size", U32, value, "group_size")
    header_field("hrow", "group_size", U32, 16, "num_groups")
    for value in (8, 16, 48, 512):
        header_field("hint", "group_size", U32, value, "group_size")
    for value in (16, 64):
        header_field("orow", "group_size", U32, value, "group_size")
        header_field("oint", "group_size", U32, value, "group_size")
    # num_groups
    for kind in ("hpanel", "opanel", "hrow", "orow"):
        ng = _get(bases[kind], fmt.CQ4P_OFFSET_NUM_GROUPS, U32)
        for value in (0, ng + 1, 0xFFFFFFFF):
            header_field(kind, "num_groups", U32, value, "num_groups")
    # scales_bytes and data_bytes: off by one, zero, huge, swapped
    for kind in ("hpanel", "opanel", "hrow", "hint", "orow", "oint", "fp16"):
        data = bases[kind]
        scales = _get(data, fmt.CQ4P_OFFSET_SCALES_BYTES, U64)
        size = _get(data, fmt.CQ4P_OFFSET_DATA_BYTES, U64)
        for label, value in (("plus1", scales + 1), ("minus1", scales - 1),
                             ("plus32", scales + 32), ("max", (1 << 64) - 1)):
            if value >= 0 and value != scales:
                header_field(kind, "scales_bytes", U64, value, "scales_bytes", label)
        for label, value in (("plus1", size + 1), ("minus1", size - 1), ("zero", 0),
                             ("max", (1 << 64) - 1)):
            header_field(kind, "data_bytes", U64, value, "data_bytes", label)
    swapped = _set(_set(hpanel, fmt.CQ4P_OFFSET_SCALES_BYTES, U64,
                        _get(hpanel, fmt.CQ4P_OFFSET_DATA_BYTES, U64)),
                   fmt.CQ4P_OFFSET_DATA_BYTES, U64,
                   _get(hpanel, fmt.CQ4P_OFFSET_SCALES_BYTES, U64))
    add("hpanel_sizes_swapped", swapped, "scales_bytes")
    # file size: trailing bytes
    for kind in ("hpanel", "hint", "fp16"):
        add(f"{kind}_trailing_1", bases[kind] + b"\0", "file size")
        add(f"{kind}_trailing_4096", bases[kind] + bytes(4096), "file size")

    # contents
    for kind in ("hpanel", "opanel", "hrow", "hint", "orow", "oint"):
        data = bases[kind]
        regions, _ = layouts[kind]
        codebook, _ = regions["codebook"]
        add(f"{kind}_codebook_zero", data[:codebook] + bytes(32) + data[codebook + 32:],
            "codebook")
        negative_zero = struct.pack("<16H", *([0x8000] * 16))
        add(f"{kind}_codebook_negative_zero", data[:codebook] + negative_zero
            + data[codebook + 32:], "codebook")
        for label, bits in (("nan", 0x7E00), ("inf", 0x7C00), ("minus_inf", 0xFC00)):
            add(f"{kind}_codebook_{label}", _set(data, codebook + 6, "<H", bits), "codebook")
        if "left_signs" in regions:
            gs = regions["left_signs"][1]
            for name in ("left_signs", "right_signs"):
                offset, _ = regions[name]
                for value in (0, 2, -2, 127):
                    add(f"{kind}_{name}_{value}", _set(data, offset + gs - 1, "<b", value), name)
            offset, _ = regions["permutation"]
            first = _get(data, offset, U32)
            add(f"{kind}_permutation_duplicate", _set(data, offset + 4, U32, first),
                "permutation")
            for value in (gs, 0xFFFFFFFF):
                add(f"{kind}_permutation_{value}", _set(data, offset + 4 * (gs - 1), U32, value),
                    "permutation")
    opanel = bases["opanel"]
    regions, _ = layouts["opanel"]
    norms, _ = regions["norms"]
    ng = _get(opanel, fmt.CQ4P_OFFSET_NUM_GROUPS, U32)
    last_row_last_group = norms + 2 * (4 * ng - 1)
    bits = _get(opanel, last_row_last_group, "<H")
    add("opanel_norms_unequal", _set(opanel, last_row_last_group, "<H", bits ^ 1), "norms")
    add("opanel_norms_negative_zero_repeat",
        _set(_set(opanel, norms, "<H", 0), norms + 2, "<H", 0x8000), "norms")
    return cases


def write_malformed_corpus(directory):
    """Writes the corpus into `directory` (created if needed) and returns
    [(file name, expected field)], also written as EXPECTED.tsv."""
    os.makedirs(directory, exist_ok=True)
    listing = []
    names = set()
    for name, data, field in _cases(*_bases(directory)):
        file_name = f"{name}.weights"
        if file_name in names:
            raise AssertionError(f"corpus name {file_name} used twice")
        names.add(file_name)
        with open(os.path.join(directory, file_name), "wb") as out:
            out.write(data)
        listing.append((file_name, field))
    with open(os.path.join(directory, EXPECTED_LIST), "w") as out:
        out.write("".join(f"{name}\t{field}\n" for name, field in listing))
    return listing
