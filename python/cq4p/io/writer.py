"""CQ4 tensor file writers (docs/FORMAT.md sections 1, 3, 4): packed panels, the
legacy layouts and dense FP16/FP32 files, each laid out as
`cq4p.format.layout` describes and returning the sha256 of its bytes."""

import hashlib
import struct

import numpy as np

from cq4p.format import constants as fmt
from cq4p.format import panels as pn
from cq4p.format.layout import (CQ4, DENSE, EXTENDED_DIMS_CODE, HEADER_DIMS, HEADER_FIELDS,
                                INTERLEAVED, MAX_DIMS, PANELS, ROW_MAJOR, align_up, data_layout,
                                scales_layout)
from cq4p.format.legacy import interleave_norms, pack_interleaved, pack_row_major
from cq4p.quant import quantize as qz


def _header(flags, dims, precision, data_bytes, scales_bytes, gs, ng, original_n):
    extended = len(dims) > HEADER_DIMS
    if extended:
        flags |= fmt.CQ4P_FLAG_EXTENDED_SHAPE
    size = fmt.CQ4P_EXTENDED_HEADER_BYTES if extended else fmt.CQ4P_HEADER_BYTES
    slots = list(dims) + [0] * ((MAX_DIMS if extended else HEADER_DIMS) - len(dims))
    values = {"magic": fmt.CQ4P_MAGIC, "flags": flags, "alignment": fmt.CQ4P_WRITER_ALIGNMENT,
              "ndim": len(dims), "dims": slots[:HEADER_DIMS], "precision": precision,
              "data_bytes": data_bytes, "scales_bytes": scales_bytes, "group_size": gs,
              "num_groups": ng, "original_n": original_n}
    header = bytearray(size)
    for name, offset, code in HEADER_FIELDS:
        value = values[name]
        struct.pack_into(code, header, offset, *(value if isinstance(value, list) else [value]))
    if extended:
        struct.pack_into(EXTENDED_DIMS_CODE, header, fmt.CQ4P_OFFSET_EXTENDED_DIMS,
                         *slots[HEADER_DIMS:])
    return bytes(header)


def _write(path, header, regions, arrays, data_region, data):
    """Header, zero padding, scales regions, zero padding, data: exactly
    data_offset + data_bytes bytes. Returns the sha256 (hex) of the bytes
    written, hashed as they go out (the file is not read back)."""
    scales_offset = align_up(len(header), fmt.CQ4P_WRITER_ALIGNMENT)
    scales_bytes = regions[-1].offset + regions[-1].nbytes if regions else 0
    data_offset = align_up(scales_offset + scales_bytes, fmt.CQ4P_WRITER_ALIGNMENT)
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        def put(chunk):
            out.write(chunk)
            digest.update(chunk)

        put(header)
        for region in regions:
            array = np.ascontiguousarray(arrays[region.name], dtype=region.dtype)
            if array.shape != region.shape:
                raise ValueError(f"{region.name} has shape {array.shape}, expected {region.shape}")
            put(bytes(scales_offset + region.offset - out.tell()))
            put(memoryview(array).cast("B"))
        put(bytes(data_offset - out.tell()))
        block = np.ascontiguousarray(data, dtype=data_region.dtype)
        if block.size * block.itemsize != data_region.nbytes:
            raise ValueError(f"data has {block.nbytes} bytes, expected {data_region.nbytes}")
        put(memoryview(block).cast("B"))
    return digest.hexdigest()


def _cq_header_and_write(path, layout, qw, gs, ng, regions_arrays, data):
    orthogonal = qw.orthogonal
    flags = fmt.CQ4P_FLAG_ORTHOGONAL_ROTATION if orthogonal else 0
    if layout == PANELS:
        flags |= fmt.CQ4P_FLAG_PACKED_PANELS
    elif layout == INTERLEAVED:
        flags |= fmt.CQ4P_FLAG_INTERLEAVED_4ROW
    n, k = qw.n, qw.k
    regions, scales_bytes = scales_layout(layout, orthogonal, n, k, gs, ng)
    data_region = data_layout(layout, n, k, gs, ng)
    header = _header(flags, (n, k), CQ4, data_region.nbytes, scales_bytes, gs, ng, n)
    return _write(path, header, regions, regions_arrays, data_region, data)


def _common_arrays(qw):
    arrays = {"codebook": qw.codebook, "input_scale": qw.input_scale,
              "input_scale_recip": qw.input_scale_recip}
    if qw.orthogonal:
        arrays["rotation"] = qw.rotation_matrix
        arrays["rotation_t"] = np.ascontiguousarray(np.asarray(qw.rotation_matrix).T)
    else:
        arrays.update(left_signs=qw.left_signs, right_signs=qw.right_signs,
                      permutation=qw.permutation)
    return arrays


def panel_refusal(qw_rotation, k, gs):
    """Why a tensor cannot be a panel file (None when it can)."""
    if qw_rotation == qz.ORTHOGONAL:
        if k % fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP:
            return f"orthogonal K ({k}) is not a multiple of {fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP}"
        return None
    if not pn.is_panel_group_size(gs):
        return (f"group size ({gs}) is not a power of two, multiple of "
                f"{fmt.CQ4P_PANEL_GROUP_MULTIPLE}, at most {fmt.CQ4P_PANEL_MAX_GROUP_SIZE}")
    return None


def interleaved_refusal(qw_rotation, n, k, gs):
    """Why a tensor cannot be a legacy interleaved file (None when it can)."""
    if n % 4:
        return f"N ({n}) is not a multiple of 4"
    if qw_rotation == qz.ORTHOGONAL:
        return None if k % 32 == 0 else f"orthogonal K ({k}) is not a multiple of 32"
    if not pn.is_panel_group_size(gs):
        return f"group size ({gs}) is not a power of two, multiple of 32, at most 256"
    return None


def write_panel_file(path, qw):
    """A packed-panel file (flag PACKED_PANELS) of the stored values `qw`;
    returns its sha256 (hex), as every writer here does."""
    refusal = panel_refusal(qw.rotation, qw.k, qw.group_size)
    if refusal:
        raise ValueError(f"{path}: cannot write panels: {refusal}")
    gs = fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP if qw.orthogonal else qw.group_size
    # The native quantizer (cq4p.native.quantize) hands its panels over packed.
    packed = getattr(qw, "packed", None)
    if packed is not None:
        panels, norm_panels, norms = packed
    else:
        panels, norm_panels, norms = pn.encode_panels(qw.indices, qw.norms, qw.codebook,
                                                      qw.group_size, gs)
    arrays = _common_arrays(qw)
    arrays.update(norms=norms, norm_panels=norm_panels)
    return _cq_header_and_write(path, PANELS, qw, gs, qw.k // gs, arrays, panels)


def row_major_refusal(qw_rotation, k, gs):
    """Why a tensor cannot be a legacy row-major file (None when it can)."""
    if qw_rotation == qz.ORTHOGONAL:
        if gs == k and k % 2 == 0:
            return None
        return f"orthogonal group size ({gs}) is not an even K ({k})"
    if gs < 8 or gs & (gs - 1):
        return f"group size ({gs}) is not a power of two of at least 8"
    return None


def write_row_major_file(path, qw):
    """A legacy row-major CQ4 file: [N][ng][gs/2] nibbles."""
    refusal = row_major_refusal(qw.rotation, qw.k, qw.group_size)
    if refusal:
        raise ValueError(f"{path}: cannot write a row-major file: {refusal}")
    arrays = _common_arrays(qw)
    arrays["norms"] = qw.norms
    return _cq_header_and_write(path, ROW_MAJOR, qw, qw.group_size, qw.num_groups, arrays,
                         pack_row_major(qw.indices))


def write_interleaved_file(path, qw):
    """A legacy 4-row interleaved CQ4 file (flag INTERLEAVED_4ROW)."""
    refusal = interleaved_refusal(qw.rotation, qw.n, qw.k, qw.group_size)
    if refusal:
        raise ValueError(f"{path}: cannot write an interleaved file: {refusal}")
    arrays = _common_arrays(qw)
    arrays["norms"] = interleave_norms(np.asarray(qw.norms))
    return _cq_header_and_write(path, INTERLEAVED, qw, qw.group_size, qw.num_groups, arrays,
                         pack_interleaved(qw.indices, qw.group_size))


WRITERS = {PANELS: write_panel_file, ROW_MAJOR: write_row_major_file,
           INTERLEAVED: write_interleaved_file}


def write_dense_file(path, array, precision):
    """An FP16 or FP32 file of `array` (rank 1..8; rank 0 is stored as [1])."""
    array = np.asarray(array)
    dims = array.shape or (1,)
    if not 1 <= len(dims) <= MAX_DIMS or min(dims) == 0:
        raise ValueError(f"{path}: cannot store shape {array.shape}")
    region = data_layout(DENSE, 0, 0, 0, 0, dims, precision)
    header = _header(0, dims, precision, region.nbytes, 0, 0, 0, dims[0])
    return _write(path, header, [], {}, region, array.reshape(dims))
