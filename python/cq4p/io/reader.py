"""The validating reader of CQ4 tensor files (docs/FORMAT.md sections 1, 3, 4).

It maps a file's regions as `cq4p.format.layout` describes them and refuses
a file at the first field that does not follow the format, naming that field
exactly as the runtime's C++ reader does, so the two can be compared on
malformed files.
"""

import errno
import hashlib
import mmap
import os
import stat
import struct
from dataclasses import dataclass

import numpy as np

from cq4p.format import constants as fmt
from cq4p.format import panels as pn
from cq4p.format.layout import (CQ4, CQ4_FLAGS, DENSE, DENSE_FLAGS, DIM_LIMIT, EXTENDED_DIMS_CODE,
                                FP16, FP32, HEADER_DIMS, HEADER_FIELDS, INTERLEAVED, MAX_DIMS,
                                PANELS, PRECISION_NAMES, ROW_MAJOR, align_up, data_layout,
                                layout_of, scales_layout)
from cq4p.format.legacy import deinterleave_norms, unpack_interleaved, unpack_row_major
from cq4p.quant import quantize as qz
from cq4p.quant.dequantize import dequantize


class FormatError(ValueError):
    """A file that does not follow docs/FORMAT.md; `field` names the first
    field found wrong, as the C++ reader names it."""

    def __init__(self, path, field, expected, found):
        self.path = str(path)
        self.field = field
        self.expected = expected
        self.found = found
        super().__init__(f"{path}: {field}: expected {expected}, found {found}")


class FileKindError(FormatError):
    """A path that is not a regular file (or is a symbolic link where a
    bundle's file must not be one); worded as the runtime words it."""

    def __init__(self, path, what):
        super().__init__(path, "file", "a regular file", what)
        self.args = (f"{path}: {what}",)

    def __str__(self):
        return self.args[0]


@dataclass
class Header:
    magic: int
    flags: int
    alignment: int
    ndim: int
    dims: tuple
    precision: int
    data_bytes: int
    scales_bytes: int
    group_size: int
    num_groups: int
    original_n: int
    header_bytes: int


def _unpack_header(raw):
    values = {name: struct.unpack_from(code, raw, offset) for name, offset, code in HEADER_FIELDS}
    values = {name: (value if name == "dims" else value[0]) for name, value in values.items()}
    return values


def _power_of_two(value):
    return value > 0 and value & (value - 1) == 0


class _Checker:
    def __init__(self, path):
        self.path = path

    def require(self, ok, field, expected, found):
        if not ok:
            raise FormatError(self.path, field, expected, found)


def _expected_group_size(layout, orthogonal, k, gs):
    """(ok, expected text) for the group_size field of a CQ4 file."""
    if orthogonal and layout == PANELS:
        return gs == fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP, str(fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP)
    if orthogonal:
        return gs == k, f"K ({k})"
    if layout == ROW_MAJOR:
        return _power_of_two(gs) and gs >= 8, "a power of two of at least 8"
    return pn.is_panel_group_size(gs), (f"a power of two, multiple of "
                                        f"{fmt.CQ4P_PANEL_GROUP_MULTIPLE}, at most "
                                        f"{fmt.CQ4P_PANEL_MAX_GROUP_SIZE}")


def validate_header(path, raw, file_bytes):
    """Checks every header field and size of a file whose first bytes are
    `raw`, in the C++ reader's order. Returns the Header."""
    check = _Checker(path)
    check.require(file_bytes >= fmt.CQ4P_HEADER_BYTES, "header",
                  f"at least {fmt.CQ4P_HEADER_BYTES} bytes", f"{file_bytes} bytes")
    v = _unpack_header(raw)
    check.require(v["magic"] == fmt.CQ4P_MAGIC, "magic", f"0x{fmt.CQ4P_MAGIC:08x}",
                  f"0x{v['magic']:08x}")
    alignment = v["alignment"]
    check.require(_power_of_two(alignment) and alignment <= fmt.CQ4P_MAX_READER_ALIGNMENT,
                  "alignment", f"a power of two from 1 to {fmt.CQ4P_MAX_READER_ALIGNMENT}",
                  alignment)
    precision = v["precision"]
    check.require(precision in (FP16, FP32, CQ4), "precision",
                  f"{FP16} (FP16), {FP32} (FP32) or {CQ4} (CQ4)", precision)

    flags = v["flags"]
    allowed = CQ4_FLAGS if precision == CQ4 else DENSE_FLAGS
    check.require(flags & ~allowed == 0, "flags", f"only bits 0x{allowed:x}", f"0x{flags:x}")
    both = fmt.CQ4P_FLAG_PACKED_PANELS | fmt.CQ4P_FLAG_INTERLEAVED_4ROW
    check.require(flags & both != both, "flags",
                  "PACKED_PANELS and INTERLEAVED_4ROW not both set", f"0x{flags:x}")
    extended = bool(flags & fmt.CQ4P_FLAG_EXTENDED_SHAPE)
    header_bytes = fmt.CQ4P_EXTENDED_HEADER_BYTES if extended else fmt.CQ4P_HEADER_BYTES
    check.require(file_bytes >= header_bytes, "header", f"at least {header_bytes} bytes",
                  f"{file_bytes} bytes")

    ndim = v["ndim"]
    if precision == CQ4:
        check.require(ndim == 2, "ndim", 2, ndim)
    else:
        most = MAX_DIMS if extended else HEADER_DIMS
        check.require(1 <= ndim <= most, "ndim", f"1 to {most}", ndim)

    slots = list(v["dims"])
    if extended:
        slots += struct.unpack_from(EXTENDED_DIMS_CODE, raw, fmt.CQ4P_OFFSET_EXTENDED_DIMS)
    for i, dim in enumerate(slots):
        if i < ndim:
            check.require(dim > 0, "dims", f"dims[{i}] > 0", dim)
        else:
            check.require(dim == 0, "dims", f"dims[{i}] = 0 (unused)", dim)
    dims = tuple(slots[:ndim])
    layout = layout_of(precision, flags)
    orthogonal = bool(flags & fmt.CQ4P_FLAG_ORTHOGONAL_ROTATION)

    if layout == DENSE:
        # Sizes are exact integers here; one that does not fit in 64 bits
        # cannot equal the stored u64 and is refused at data_bytes.
        scales_bytes = 0
        data_region = data_layout(DENSE, 0, 0, 0, 0, dims, precision)
    else:
        n, k = dims
        check.require(n < DIM_LIMIT, "dims", "N < 2^32", n)
        check.require(k < DIM_LIMIT, "dims", "K < 2^32", k)
        if layout == INTERLEAVED:
            check.require(n % 4 == 0, "dims", "N a multiple of 4", n)
        check.require(v["original_n"] == n, "original_n", n, v["original_n"])
        gs = v["group_size"]
        ok, expected = _expected_group_size(layout, orthogonal, k, gs)
        check.require(ok, "group_size", expected, gs)
        ng = v["num_groups"]
        check.require(ng * gs == k, "num_groups", f"K / group_size ({k // gs})", ng)
        _, scales_bytes = scales_layout(layout, orthogonal, n, k, gs, ng)
        data_region = data_layout(layout, n, k, gs, ng)
    check.require(v["scales_bytes"] == scales_bytes, "scales_bytes", scales_bytes,
                  v["scales_bytes"])
    check.require(v["data_bytes"] == data_region.nbytes, "data_bytes", data_region.nbytes,
                  v["data_bytes"])
    scales_offset = align_up(header_bytes, alignment)
    data_offset = align_up(scales_offset + scales_bytes, alignment)
    expected_size = data_offset + data_region.nbytes
    check.require(file_bytes == expected_size, "file size", f"{expected_size} bytes",
                  f"{file_bytes} bytes")
    return Header(v["magic"], flags, alignment, ndim, dims, precision, v["data_bytes"],
                  scales_bytes, v["group_size"], v["num_groups"], v["original_n"], header_bytes)


class TensorFile:
    """A validated tensor file, mapped read-only, with zero-copy numpy views
    of its regions (None where the layout has no such region)."""

    REGION_NAMES = ("data", "codebook", "input_scale", "input_scale_recip", "norms",
                    "norm_panels", "left_signs", "right_signs", "permutation", "rotation",
                    "rotation_t")

    def __init__(self, path, header, mapping, file_bytes):
        self.path = str(path)
        self.header = header
        self.file_bytes = file_bytes
        self._mapping = mapping
        for name, value in vars(header).items():
            setattr(self, name, value)
        self.layout = layout_of(header.precision, header.flags)
        self.orthogonal = bool(header.flags & fmt.CQ4P_FLAG_ORTHOGONAL_ROTATION)
        self.scales_offset = align_up(header.header_bytes, header.alignment)
        self.data_offset = align_up(self.scales_offset + header.scales_bytes, header.alignment)
        self.regions = {}  # name -> (absolute offset, bytes)
        for name in self.REGION_NAMES:
            setattr(self, name, None)
        if self.layout == DENSE:
            scales, data_region = [], data_layout(DENSE, 0, 0, 0, 0, header.dims,
                                                  header.precision)
        else:
            n, k = header.dims
            scales, _ = scales_layout(self.layout, self.orthogonal, n, k, header.group_size,
                                      header.num_groups)
            data_region = data_layout(self.layout, n, k, header.group_size, header.num_groups)
        for region in scales:
            self._map(region, self.scales_offset)
        self._map(data_region, self.data_offset)

    def _map(self, region, base):
        offset = base + region.offset
        count = region.nbytes // region.dtype.itemsize
        view = np.frombuffer(self._mapping, dtype=region.dtype, count=count, offset=offset)
        setattr(self, region.name, view.reshape(region.shape))
        self.regions[region.name] = (offset, region.nbytes)

    # -- meaning of the stored values --

    @property
    def precision_name(self):
        return PRECISION_NAMES[self.precision]

    @property
    def n(self):
        return self.dims[0]

    @property
    def k(self):
        return self.dims[1]

    def indices(self):
        """uint8 [N, K] codebook indices (panels: as stored, canonical)."""
        n, k, gs = self.n, self.k, self.group_size
        if self.layout != DENSE and self.data.ndim == 1:
            raise ValueError(f"{self.path}: a {self.layout} region with K = {k} has no "
                             f"defined index layout")
        if self.layout == PANELS:
            return pn.unpack_panels(self.data, n, k, gs)
        if self.layout == INTERLEAVED:
            return unpack_interleaved(self.data, n, k, gs)
        if self.layout == ROW_MAJOR:
            return unpack_row_major(self.data, n, k)
        raise ValueError(f"{self.path}: a {self.precision_name} file has no indices")

    def group_norms(self):
        """fp16 [N, K / source gs]: the stored norms per quantization group
        (orthogonal: one per row)."""
        if self.layout == INTERLEAVED:
            norms = deinterleave_norms(self.norms)
        else:
            norms = np.array(self.norms)
        return norms[:, :1].copy() if self.orthogonal else norms

    def stored(self):
        """The file's stored values as a QuantizedWeight."""
        if self.layout == DENSE:
            raise ValueError(f"{self.path}: a {self.precision_name} file is not CQ4")
        common = dict(indices=self.indices(), norms=self.group_norms(),
                      codebook=np.array(self.codebook), input_scale=np.array(self.input_scale),
                      input_scale_recip=np.array(self.input_scale_recip))
        if self.orthogonal:
            return qz.QuantizedWeight(qz.ORTHOGONAL, self.k,
                                      rotation_matrix=np.array(self.rotation), **common)
        return qz.QuantizedWeight(qz.HADAMARD, self.group_size,
                                  left_signs=np.array(self.left_signs),
                                  right_signs=np.array(self.right_signs),
                                  permutation=np.array(self.permutation), **common)

    def transform_digest(self):
        """sha256 hex of the regions the activation transform reads
        (input_scale_recip, left_signs, right_signs, permutation): Hadamard
        linears with equal digests transform an input identically."""
        if self.layout == DENSE or self.orthogonal:
            raise ValueError(f"{self.path}: only a Hadamard CQ4 file has an activation "
                             f"transform")
        digest = hashlib.sha256()
        for name in ("input_scale_recip", "left_signs", "right_signs", "permutation"):
            digest.update(getattr(self, name).tobytes())
        return digest.hexdigest()

    def dequantize(self):
        """float32: the dense tensor (CQ4: docs/FORMAT.md section 2's meaning)."""
        if self.layout == DENSE:
            return self.data.astype(np.float32)
        return dequantize(self.stored())

    def close(self):
        for name in self.REGION_NAMES:
            setattr(self, name, None)
        mapping, self._mapping = self._mapping, None
        try:
            mapping.close()
        except BufferError:
            pass  # views handed out still use it; it closes when they go

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _check_contents(tensor):
    check = _Checker(tensor.path)
    if tensor.layout == DENSE:
        return
    codebook = tensor.codebook.astype(np.float32)
    check.require(bool(np.all(np.isfinite(codebook))) and float(np.max(np.abs(codebook))) > 0,
                  "codebook", "16 finite levels, not all zero",
                  " ".join(f"{x:g}" for x in codebook))
    if not tensor.orthogonal:
        for name in ("left_signs", "right_signs"):
            signs = getattr(tensor, name)
            bad = np.flatnonzero((signs != 1) & (signs != -1))
            check.require(bad.size == 0, name, "+1 or -1",
                          f"{int(signs[bad[0]])} at {int(bad[0])}" if bad.size else "")
        permutation = tensor.permutation
        gs = tensor.group_size
        seen = np.zeros(gs, dtype=bool)
        in_range = permutation < gs
        seen[permutation[in_range].astype(np.intp)] = True
        check.require(bool(np.all(in_range)) and bool(np.all(seen)), "permutation",
                      f"a permutation of 0..{gs - 1}",
                      f"value {int(permutation[~in_range][0])}" if not np.all(in_range)
                      else f"{int(np.count_nonzero(~seen))} missing values")
    elif tensor.layout == PANELS:
        bits = tensor.norms.view(np.uint16)
        unequal = np.flatnonzero(np.any(bits != bits[:, :1], axis=1))
        check.require(unequal.size == 0, "norms", "each row's norm repeated over its groups",
                      f"row {int(unequal[0])} differs" if unequal.size else "")


def verify_content(tensor):
    """The content rules of docs/FORMAT.md that read_tensor leaves out (it reads
    the header, the codebook, the signs and the permutation only), in the
    runtime's order and words (verifyTensorContent): zero padding; finite
    fp16/fp32 values; rotation_t the transpose of rotation; for panel files
    norm_panels = fp32(norm) * cb_scale and 0.0 past N, index 0 in the
    channels past N, canonical indices. Raises FormatError."""
    path = tensor.path
    raw = np.frombuffer(tensor._mapping, dtype=np.uint8)
    used = np.zeros(tensor.file_bytes, dtype=bool)
    used[:tensor.header_bytes] = True
    for offset, size in tensor.regions.values():
        used[offset:offset + size] = True
    stray = np.flatnonzero(~used & (raw != 0))
    if stray.size:
        at = int(stray[0])
        raise FormatError(path, "padding", "zero bytes", f"0x{int(raw[at]):x} at offset {at}")
    if tensor.layout == DENSE:
        values = tensor.data.reshape(-1)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            shown = (f"0x{int(values.view(np.uint16)[bad[0]]):x}" if values.dtype.itemsize == 2
                     else f"{float(values[bad[0]]):.9g}")
            raise FormatError(path, "data", "finite values", f"{shown} at element {int(bad[0])}")
        return
    for name in ("input_scale", "input_scale_recip", "norms", "rotation", "rotation_t"):
        values = getattr(tensor, name)
        if values is None:
            continue
        values = values.reshape(-1)
        bad = np.flatnonzero(~np.isfinite(values.astype(np.float32)))
        if bad.size:
            raise FormatError(path, name, "finite values",
                              f"0x{int(values.view(np.uint16)[bad[0]]):x} at element "
                              f"{int(bad[0])}")
    if tensor.rotation_t is not None:
        rotation = tensor.rotation.view(np.uint16)
        transposed = tensor.rotation_t.view(np.uint16)
        bad = np.argwhere(transposed != rotation.T)
        if bad.size:
            j, i = (int(v) for v in bad[0])
            raise FormatError(path, "rotation_t", "the transpose of rotation",
                              f"rotation_t[{j}][{i}] = 0x{int(transposed[j, i]):x}, "
                              f"rotation[{i}][{j}] = 0x{int(rotation[i, j]):x}")
    if tensor.layout == PANELS:
        _verify_panels(tensor)


def _verify_panels(tensor):
    path, n, k, ng = tensor.path, tensor.n, tensor.k, tensor.num_groups
    cb_i8, cb_scale = pn.codebook_int8(tensor.codebook)
    sb = pn.num_super_blocks(n)
    expected = np.zeros((sb * pn.CHANNELS, ng), dtype=np.float32)
    expected[:n] = tensor.norms.astype(np.float32) * cb_scale
    expected = expected.reshape(sb, pn.CHANNELS, ng).transpose(0, 2, 1)
    found = tensor.norm_panels.reshape(sb, ng, pn.CHANNELS)
    bad = np.argwhere(found.view(np.uint32) != expected.view(np.uint32))
    if bad.size:
        s, g, c = (int(v) for v in bad[0])
        row = s * pn.CHANNELS + c
        want = (f"fp32(norm) * cb_scale = {float(expected[s, g, c]):.9g}" if row < n
                else "0.0 past N: 0")
        raise FormatError(path, "norm_panels", want,
                          f"{float(found[s, g, c]):.9g} at super-block {s}, group {g}, "
                          f"channel {c} (row {row})")
    indices = pn.unpack_panels(tensor.data, sb * pn.CHANNELS, k, tensor.group_size)
    padding = np.argwhere(indices[n:] != 0)
    if padding.size:
        row, col = int(padding[0][0]) + n, int(padding[0][1])
        raise FormatError(path, "data", "index 0 in channels past N",
                          f"index {int(indices[row, col])} at row {row}, column {col}")
    canonical = pn.canonical_index_map(cb_i8)
    bad = np.argwhere(canonical[indices] != indices)
    if bad.size:
        row, col = (int(v) for v in bad[0])
        index = int(indices[row, col])
        raise FormatError(path, "data", "canonical indices (the lowest index of each int8 "
                          "level)", f"index {index} (int8 level {int(cb_i8[index])}) at row "
                          f"{row}, column {col}")


def open_regular(path, confined=False):
    """A read-only descriptor of the regular file at `path`, opened without
    blocking and checked before a byte is read, so a FIFO or a device is
    refused instead of hanging or being read without end. With `confined`
    (a bundle's file) a symbolic link is refused too. Raises OSError, or
    FormatError naming the path (the runtime's runtime/src/SafeOpen.h)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    if confined:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if confined and error.errno == errno.ELOOP:
            raise FileKindError(path, "a symbolic link; a bundle's files must be regular "
                                "files inside its directory") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileKindError(path, f"{_file_kind(mode)}, expected a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _file_kind(mode):
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return "not a regular file"


def read_tensor(path, confined=False):
    """Maps and validates a tensor file read-only; raises FormatError at the
    first field that does not follow the format. `confined`: a bundle's
    file, refused if it is a symbolic link."""
    with os.fdopen(open_regular(path, confined), "rb") as handle:
        file_bytes = os.fstat(handle.fileno()).st_size
        raw = handle.read(fmt.CQ4P_EXTENDED_HEADER_BYTES)
        raw = raw + bytes(fmt.CQ4P_EXTENDED_HEADER_BYTES - len(raw))
        header = validate_header(path, raw, file_bytes)
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    tensor = TensorFile(path, header, mapping, file_bytes)
    try:
        _check_contents(tensor)
    except FormatError:
        tensor.close()
        raise
    return tensor
