"""CQ4 tensor files' layout (docs/FORMAT.md sections 1, 3, 4): header fields,
precisions, flags and regions.

A file is an 84-byte header (116 with the extended shape), a scales region
at align_up(header, alignment) and a data region at align_up(scales end,
alignment), zero padding in between. `scales_layout` and `data_layout` are
the one description of which regions a layout has, in which order and of
which size; the writers (`cq4p.io.writer`) fill it and the reader
(`cq4p.io.reader`) checks and maps it.
"""

from dataclasses import dataclass

import numpy as np

from cq4p.format import constants as fmt
from cq4p.format import panels as pn

PANELS = "panels"
ROW_MAJOR = "row_major"
INTERLEAVED = "interleaved4row"
DENSE = "dense"

FP16 = fmt.CQ4P_PRECISION_FP16
FP32 = fmt.CQ4P_PRECISION_FP32
CQ4 = fmt.CQ4P_PRECISION_CQ4
DENSE_DTYPES = {FP16: np.dtype("<f2"), FP32: np.dtype("<f4")}
PRECISION_NAMES = {FP16: "FP16", FP32: "FP32", CQ4: "CQ4"}

FLAG_NAMES = {
    fmt.CQ4P_FLAG_ORTHOGONAL_ROTATION: "ORTHOGONAL_ROTATION",
    fmt.CQ4P_FLAG_INTERLEAVED_4ROW: "INTERLEAVED_4ROW",
    fmt.CQ4P_FLAG_EXTENDED_SHAPE: "EXTENDED_SHAPE",
    fmt.CQ4P_FLAG_PACKED_PANELS: "PACKED_PANELS",
}
CQ4_FLAGS = (fmt.CQ4P_FLAG_ORTHOGONAL_ROTATION | fmt.CQ4P_FLAG_INTERLEAVED_4ROW
             | fmt.CQ4P_FLAG_EXTENDED_SHAPE | fmt.CQ4P_FLAG_PACKED_PANELS)
DENSE_FLAGS = fmt.CQ4P_FLAG_EXTENDED_SHAPE

HEADER_DIMS = 4
EXTENDED_DIMS = 4
MAX_DIMS = HEADER_DIMS + EXTENDED_DIMS
DIM_LIMIT = 1 << 32
NORM_PANEL_ALIGNMENT = 4
CODEBOOK_DTYPE = np.dtype("<f2")

# Byte order of the header's fields: (name, offset, struct code).
HEADER_FIELDS = (
    ("magic", fmt.CQ4P_OFFSET_MAGIC, "<I"),
    ("flags", fmt.CQ4P_OFFSET_FLAGS, "<I"),
    ("alignment", fmt.CQ4P_OFFSET_ALIGNMENT, "<I"),
    ("ndim", fmt.CQ4P_OFFSET_NDIM, "<I"),
    ("dims", fmt.CQ4P_OFFSET_DIMS, f"<{HEADER_DIMS}Q"),
    ("precision", fmt.CQ4P_OFFSET_PRECISION, "<I"),
    ("data_bytes", fmt.CQ4P_OFFSET_DATA_BYTES, "<Q"),
    ("scales_bytes", fmt.CQ4P_OFFSET_SCALES_BYTES, "<Q"),
    ("group_size", fmt.CQ4P_OFFSET_GROUP_SIZE, "<I"),
    ("num_groups", fmt.CQ4P_OFFSET_NUM_GROUPS, "<I"),
    ("original_n", fmt.CQ4P_OFFSET_ORIGINAL_N, "<Q"),
)
EXTENDED_DIMS_CODE = f"<{EXTENDED_DIMS}Q"


def align_up(value, alignment):
    return -(-value // alignment) * alignment


def layout_of(precision, flags):
    if precision != CQ4:
        return DENSE
    if flags & fmt.CQ4P_FLAG_PACKED_PANELS:
        return PANELS
    if flags & fmt.CQ4P_FLAG_INTERLEAVED_4ROW:
        return INTERLEAVED
    return ROW_MAJOR


def flag_names(flags):
    names = [name for bit, name in FLAG_NAMES.items() if flags & bit]
    unknown = flags & ~sum(FLAG_NAMES)
    if unknown:
        names.append(f"0x{unknown:x}")
    return names


# --- region layout (one definition for writers and reader) -------------------

@dataclass(frozen=True)
class Region:
    name: str
    offset: int  # from the start of its region (scales or data)
    dtype: np.dtype
    shape: tuple

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=object)) * self.dtype.itemsize


def _stack(entries):
    """Regions placed one after another; None entries align to 4 bytes."""
    regions, offset = [], 0
    for entry in entries:
        if entry is None:
            offset = align_up(offset, NORM_PANEL_ALIGNMENT)
            continue
        name, dtype, shape = entry
        region = Region(name, offset, np.dtype(dtype), tuple(shape))
        regions.append(region)
        offset += region.nbytes
    return regions, offset


def scales_layout(layout, orthogonal, n, k, gs, ng):
    """The scales regions of a CQ4 file, in order, and the region's size."""
    entries = [("codebook", CODEBOOK_DTYPE, (fmt.CQ4P_CODEBOOK_LEVELS,)),
               ("input_scale", "<f2", (k,)),
               ("input_scale_recip", "<f2", (k,))]
    if layout == PANELS:
        entries += [("norms", "<f2", (n, ng)), None,
                    ("norm_panels", "<f4", (pn.num_super_blocks(n), ng, pn.CHANNELS))]
    elif layout == INTERLEAVED:
        entries.append(("norms", "<f2", (n // 4, ng, 4)))
    else:
        entries.append(("norms", "<f2", (n, ng)))
    if orthogonal:
        entries.append(("rotation", "<f2", (k, k)))
        if layout == PANELS:
            entries.append(("rotation_t", "<f2", (k, k)))
    else:
        entries += [("left_signs", "i1", (gs,)), ("right_signs", "i1", (gs,)),
                    ("permutation", "<u4", (gs,))]
    return _stack(entries)


def data_layout(layout, n, k, gs, ng, dims=None, precision=None):
    """The data region of a file as one Region.

    A CQ4 region holds N * K / 2 bytes (panels: ceil64(N) * K / 2). A legacy
    orthogonal group spans the row (gs = K), and the format does not
    require K to be even (row-major) or a multiple of 8 (interleaved); such
    a region is exposed as flat bytes and has no defined index layout.
    """
    if layout == DENSE:
        return Region("data", 0, DENSE_DTYPES[precision], tuple(dims))
    if layout == PANELS:
        shape = (pn.num_super_blocks(n), ng, gs // pn.KG_K, pn.KG_BYTES)
    elif layout == INTERLEAVED and gs % 8 == 0:
        shape = (n // 4, ng, gs // 8, 4, 4)
    elif layout == ROW_MAJOR and gs % 2 == 0:
        shape = (n, ng, gs // 2)
    else:
        shape = (n * k // 2,)
    return Region("data", 0, np.dtype("u1"), shape)
