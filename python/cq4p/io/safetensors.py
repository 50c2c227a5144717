"""A reader for safetensors checkpoints (F32, F16 and BF16 tensors).

A safetensors file is a little-endian u64 header length, a JSON header
mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets relative to the end of the header; an optional "__metadata__"
entry), then the tensors' bytes. Everything is checked before a byte of
data is touched; a defect raises CheckpointError naming the file, the tensor
and the numbers. Refused as the safetensors format refuses them: a header
over 100 MB, a name given twice, tensors whose bytes overlap.
"""

import json
import mmap
import os
from dataclasses import dataclass

import numpy as np

LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100_000_000  # the format's own limit
METADATA_KEY = "__metadata__"
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read; the message is one line."""


@dataclass(frozen=True)
class TensorEntry:
    path: str
    name: str
    dtype: str
    shape: tuple
    begin: int  # absolute file offsets
    end: int

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=object))


def _fail(path, message):
    raise CheckpointError(f"{path}: {message}")


class _DuplicateName(ValueError):
    pass


def _refuse_duplicates(pairs):
    names = set()
    for key, _ in pairs:
        if key in names:
            raise _DuplicateName(f"tensor {key} is listed twice in the header")
        names.add(key)
    return dict(pairs)


def _refuse_constant(name):
    raise _DuplicateName(f"{name} is not JSON")


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(path, name, spec, data_start, file_bytes):
    if not isinstance(spec, dict):
        _fail(path, f"tensor {name}: header entry is not an object")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in DTYPES:
        _fail(path, f"tensor {name}: unsupported dtype {dtype!r} (supported: "
                    f"{', '.join(DTYPES)})")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        _fail(path, f"tensor {name}: shape {shape!r} is not a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets)
            or offsets[0] > offsets[1]):
        _fail(path, f"tensor {name}: data_offsets {offsets!r} are not [begin, end] with "
                    f"begin <= end")
    needed = int(np.prod(shape, dtype=object)) * DTYPES[dtype].itemsize
    if offsets[1] - offsets[0] != needed:
        _fail(path, f"tensor {name}: data_offsets {offsets} span {offsets[1] - offsets[0]} bytes, "
                    f"{dtype} shape {shape} needs {needed}")
    if data_start + offsets[1] > file_bytes:
        _fail(path, f"tensor {name}: truncated data: needs bytes up to {data_start + offsets[1]}, "
                    f"the file has {file_bytes}")
    return TensorEntry(path, name, dtype, tuple(shape), data_start + offsets[0],
                       data_start + offsets[1])


def read_header(path):
    """The tensors of a safetensors file, in header order."""
    path = str(path)
    from cq4p.io import reader as rd  # a regular file: no FIFO to block on, no device
    try:
        fd = rd.open_regular(path)
    except rd.FormatError as error:
        _fail(path, str(error).split(": ", 1)[-1])
    with os.fdopen(fd, "rb") as handle:
        file_bytes = os.fstat(handle.fileno()).st_size
        if file_bytes < LENGTH_BYTES:
            _fail(path, f"corrupt header: the file has {file_bytes} bytes, fewer than the "
                        f"{LENGTH_BYTES}-byte header length")
        length = int.from_bytes(handle.read(LENGTH_BYTES), "little")
        if length > MAX_HEADER_BYTES:
            _fail(path, f"corrupt header: header length {length} is over the format's "
                        f"limit of {MAX_HEADER_BYTES} bytes")
        if length > file_bytes - LENGTH_BYTES:
            _fail(path, f"corrupt header: header length {length} exceeds the "
                        f"{file_bytes - LENGTH_BYTES} bytes after it")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_refuse_duplicates,
                            parse_constant=_refuse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        _fail(path, f"corrupt header: not JSON ({error})")
    except RecursionError:
        _fail(path, "corrupt header: nested too deep")
    except ValueError as error:
        _fail(path, f"corrupt header: {error}")
    if not isinstance(header, dict):
        _fail(path, "corrupt header: not a JSON object")
    data_start = LENGTH_BYTES + length
    entries = [_entry(path, name, spec, data_start, file_bytes)
               for name, spec in header.items() if name != METADATA_KEY]
    # Each byte belongs to one tensor at most (empty tensors own none).
    spans = sorted((entry.begin, entry.end, entry.name) for entry in entries
                   if entry.end > entry.begin)
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
        if begin < end:
            _fail(path, f"tensors {first} and {second} overlap: bytes {begin} to {end} "
                        f"belong to both")
    return entries


def load(entry):
    """The tensor as float32 (BF16 widened exactly: its 16 bits become the
    high half of an fp32)."""
    with open(entry.path, "rb") as handle:
        if entry.end == entry.begin:
            return np.zeros(entry.shape, dtype=np.float32)
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
            # The view of the mapping goes before the mapping closes, also when
            # an interrupt or SIGTERM unwinds through here: closing a mapping
            # with a view alive raises BufferError over the interrupt.
            raw = None
            try:
                raw = np.frombuffer(mapping, dtype=DTYPES[entry.dtype], count=entry.size,
                                    offset=entry.begin)
                if entry.dtype == "BF16":
                    values = (raw.astype(np.uint32) << 16).view(np.float32)
                else:
                    values = raw.astype(np.float32)
            finally:
                raw = None
    return values.reshape(entry.shape)


def _encoded(array, dtype):
    """The bytes of a float32 array as `dtype` (BF16: rounded to nearest even)."""
    array = np.asarray(array, dtype=np.float32)
    if dtype == "BF16":
        bits = array.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype("<u2").tobytes()
    return array.astype(DTYPES[dtype]).tobytes()


def write_streamed(path, shapes, rows, dtype="BF16", block_rows=4096):
    """Writes a safetensors file of {name: shape} whose values come a block
    of rows at a time from `rows(name, shape, begin, end)` (float32
    [end - begin, *shape[1:]]): a checkpoint larger than memory (Gemma 4's
    per-layer table is 2.35 G values) in block_rows rows of memory."""
    header, offset = {}, 0
    width = DTYPES[dtype].itemsize
    for name, shape in shapes.items():
        size = int(np.prod(shape, dtype=np.int64)) * width
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode("utf-8")
    with open(path, "wb") as out:
        out.write(len(encoded).to_bytes(LENGTH_BYTES, "little"))
        out.write(encoded)
        for name, shape in shapes.items():
            for begin in range(0, shape[0], block_rows):
                end = min(shape[0], begin + block_rows)
                block = np.asarray(rows(name, shape, begin, end), dtype=np.float32)
                if block.shape != (end - begin, *shape[1:]):
                    raise ValueError(f"{name}: rows {begin}..{end} came as {block.shape}")
                out.write(_encoded(block, dtype))


def write(path, tensors, dtype="F32", metadata=None):
    """Writes {name: array} as a safetensors file of one dtype (BF16: fp32
    rounded to nearest even); used to make test checkpoints."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header[METADATA_KEY] = metadata
    for name, array in tensors.items():
        array = np.asarray(array, dtype=np.float32)
        blob = _encoded(array, dtype)
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header).encode("utf-8")
    with open(path, "wb") as out:
        out.write(len(encoded).to_bytes(LENGTH_BYTES, "little"))
        out.write(encoded)
        for blob in blobs:
            out.write(blob)
