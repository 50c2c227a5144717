"""The native quantizer: `python -m cq4p convert`'s fast path.

The runtime library's `cq4p_quantize_hadamard_panels` and
`cq4p_quantize_orthogonal_panels` (runtime/src/Quantize.cpp) quantize a
tensor on every core straight into packed panels, repeating the numpy
implementation's (`cq4p.quant.quantize`) floating-point operations in its order,
so the files are byte for byte the ones `cq4p.io.writer.write_panel_file` writes
from `quantize_hadamard` / `quantize_orthogonal`. numpy still makes what is
cheap and shared: the codebook, the Hadamard signs and permutation, the input
scales and the fp16 norms. The orthogonal K x K rotation is the runtime's
`cq4p_orthogonal_rotation` (runtime/src/OrthogonalRotation.cpp), the bits
of `quantize.orthogonal_rotation` made natively on every core.
"""

import ctypes
import functools
import os

import numpy as np

from cq4p.format import constants as fmt
from cq4p.format import panels as pn
from cq4p.io import safetensors as st
from cq4p.native import runtime as native
from cq4p.quant import quantize as qz

THREADS_VARIABLE = "CQ4P_CONVERT_THREADS"
MAX_THREADS = native.MAX_THREADS  # the runtime's thread pools' bound
MAX_ROTATION_K = 1 << 16  # the runtime's bound (K x K float64)


class NativeQuantizeError(ValueError):
    """The runtime refused the tensor (the message is the runtime's)."""


class ThreadsVariableError(ValueError):
    """$CQ4P_CONVERT_THREADS is not a thread count (or $CQ4P_QUANTIZE_ISA
    not an instruction set); the message is one line."""


@functools.lru_cache(maxsize=None)
def _functions():
    lib = native.library()
    f32p, f64p = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_double)
    u8p, i8p = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_int8)
    u32p = ctypes.POINTER(ctypes.c_uint32)
    u64 = ctypes.c_uint64
    hadamard = lib.cq4p_quantize_hadamard_panels
    hadamard.argtypes = [ctypes.c_void_p, ctypes.c_int, u64, u64, u64, ctypes.c_uint32, f64p, i8p, i8p, u32p, f64p,
                         u8p, ctypes.c_int, u8p, f64p, ctypes.c_char_p, ctypes.c_size_t]
    hadamard.restype = ctypes.c_int
    orthogonal = lib.cq4p_quantize_orthogonal_panels
    orthogonal.argtypes = [ctypes.c_void_p, ctypes.c_int, u64, u64, u64, f64p, f32p, f64p, u8p, ctypes.c_int, u8p,
                           f64p, ctypes.c_char_p, ctypes.c_size_t]
    orthogonal.restype = ctypes.c_int
    return hadamard, orthogonal


@functools.lru_cache(maxsize=None)
def _rotation_function():
    rotation = native.library().cq4p_orthogonal_rotation
    rotation.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int,
                         ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_size_t]
    rotation.restype = ctypes.c_int
    return rotation


def available():
    """True when the runtime library is built and has the quantizer."""
    try:
        _functions()
    except (native.LibraryNotFoundError, AttributeError, OSError):
        return False
    return True


def threads_from_environment():
    """$CQ4P_CONVERT_THREADS as a thread count in [1, MAX_THREADS], or None
    when it is unset or empty; anything else (not a decimal integer, 0, past
    the bound) is a ThreadsVariableError naming the variable, the value and
    the bound."""
    value = os.environ.get(THREADS_VARIABLE)
    if not value:
        return None
    shown = value if len(value) <= 40 else value[:40] + "..."
    text = value.strip()
    count = int(text) if text.isascii() and text.isdigit() and len(text) <= 19 else None
    if count is None or not 1 <= count <= MAX_THREADS:
        raise ThreadsVariableError(f"${THREADS_VARIABLE} is {shown!r}: expected a whole number "
                                   f"of threads from 1 to {MAX_THREADS}")
    return count


ISA_VARIABLE = "CQ4P_QUANTIZE_ISA"
# runtime/src/QuantizeIsa.h: generic and avx2 cap it; avx512 (or unset) does not.
ISA_VALUES = ("generic", "avx2", "avx512")


def check_isa_variable():
    """$CQ4P_QUANTIZE_ISA, which caps the quantizer's instruction set for
    tests: unset, or one of ISA_VALUES; another value (which the runtime
    would silently ignore) is a ThreadsVariableError naming it."""
    value = os.environ.get(ISA_VARIABLE)
    if value is None or value in ISA_VALUES:
        return
    shown = value if len(value) <= 40 else value[:40] + "..."
    raise ThreadsVariableError(f"${ISA_VARIABLE} is {shown!r}: expected "
                               f"{', '.join(ISA_VALUES[:-1])} or {ISA_VALUES[-1]} (or unset)")


def default_threads():
    count = threads_from_environment()
    if count is not None:
        return count
    available = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count() or 1)
    return max(1, min(available, MAX_THREADS))


def orthogonal_rotation(k, seed, threads=None):
    """`quantize.orthogonal_rotation(k, seed)`, made by the runtime (float64 [k, k])."""
    if not 1 <= int(k) <= MAX_ROTATION_K:
        raise NativeQuantizeError(f"orthogonal rotation: K = {k}, expected 1 to "
                                  f"{MAX_ROTATION_K}")
    rotation = np.empty((int(k), int(k)), dtype=np.float64)
    _call(_rotation_function(), int(k), int(seed) % (1 << 64), threads or default_threads(),
          _ptr(rotation, ctypes.c_double))
    return rotation


# (K, seed) -> (fp16 R as stored, the same as float32): the embedding and
# the lm_head of a model share one.
_STORED_ROTATIONS = {}


def _stored_rotation(k, seed, threads):
    key = (int(k), int(seed))
    if key not in _STORED_ROTATIONS:
        rotation16 = orthogonal_rotation(k, seed, threads).astype(np.float16)
        rotation32 = rotation16.astype(np.float32)
        rotation16.flags.writeable = rotation32.flags.writeable = False
        _STORED_ROTATIONS.clear()
        _STORED_ROTATIONS[key] = rotation16, rotation32
    return _STORED_ROTATIONS[key]


def forget_rotations():
    """Drops the kept rotation (a conversion's end)."""
    _STORED_ROTATIONS.clear()


# The checkpoint dtypes the runtime reads (enum cq4p_source_dtype).
SOURCE_DTYPES = {"F32": fmt.CQ4P_SOURCE_F32, "BF16": fmt.CQ4P_SOURCE_BF16,
                 "F16": fmt.CQ4P_SOURCE_F16}


class Buffers:
    """Memory reused from one tensor to the next (a fresh large array costs
    a page fault and a zeroed page per 4 KiB): `array(slot, dtype, shape)`
    is valid until the next call for the same slot."""

    def __init__(self):
        self._memory = {}

    def array(self, slot, dtype, shape):
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        memory = self._memory.get(slot)
        if memory is None or memory.size < nbytes:
            memory = self._memory[slot] = np.empty(max(nbytes, 1), dtype=np.uint8)
        return memory[:nbytes].view(dtype).reshape(shape)


def _array(buffers, slot, dtype, shape):
    if buffers is None:
        return np.empty(shape, dtype=dtype)
    return buffers.array(slot, dtype, shape)


def checkpoint_tensor(entry, buffers=None):
    """A safetensors entry's bytes as an array of its dtype ([N, K]; BF16 as
    uint16): half or less of the float32 `safetensors.load` makes."""
    raw = _array(buffers, "source", st.DTYPES[entry.dtype], (entry.size,))
    with open(entry.path, "rb") as handle:
        handle.seek(entry.begin)
        read = handle.readinto(memoryview(raw).cast("B"))
    if read != raw.nbytes:
        raise ValueError(f"{entry.path}: tensor {entry.name}: truncated data")
    return raw.reshape(entry.shape)


def _source(w, source_dtype):
    """(contiguous array, enum value) of a float32 weight, or of the raw
    checkpoint bytes with `source_dtype` ("F32", "BF16", "F16")."""
    if source_dtype is None:
        w = np.ascontiguousarray(w, dtype=np.float32)
        source_dtype = "F32"
    else:
        w = np.ascontiguousarray(w, dtype=st.DTYPES[source_dtype])
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    return w, SOURCE_DTYPES[source_dtype]


def _ptr(array, ctype):
    return array.ctypes.data_as(ctypes.POINTER(ctype))


def _call(function, *args):
    error = ctypes.create_string_buffer(native.ERROR_BUFFER_BYTES)
    code = function(*args, error, native.ERROR_BUFFER_BYTES)
    if code != 0:
        raise NativeQuantizeError(error.value.decode(errors="replace"))


def _index_tables(levels, codebook):
    bounds = np.ascontiguousarray(0.5 * (levels[1:] + levels[:-1]), dtype=np.float64)
    cb_i8, cb_scale = pn.codebook_int8(codebook)
    canonical = np.ascontiguousarray(pn.canonical_index_map(cb_i8), dtype=np.uint8)
    return bounds, canonical, cb_scale


def _no_indices(n, k):
    # The panels hold the indices; the QuantizedWeight only describes them.
    return np.broadcast_to(np.zeros((), dtype=np.uint8), (n, k))


def _packed(weight, panels, norm_panels, norms):
    """The QuantizedWeight (its indices a placeholder) with what its panel
    file stores, `weight.packed` = (panels, norm_panels, per-panel-group
    norms), which `files.write_panel_file` writes as they are."""
    weight.packed = (panels, norm_panels, norms)
    return weight


def quantize_hadamard_panels(w, gs=128, seed=0, input_scale=None, prescale=True, threads=None,
                             source_dtype=None, buffers=None):
    """`quantize.quantize_hadamard`, its panels encoded (`weight.packed`),
    natively. w: float32 values, or a checkpoint's raw [N, K] array of
    `source_dtype` ("F32", "BF16" as uint16, "F16"). With `buffers` (a
    Buffers), the panels live in its memory until its next use."""
    w, dtype = _source(w, source_dtype)
    n, k = w.shape
    k_padded = -(-k // gs) * gs
    ng = k_padded // gs
    s16, isr = qz.stored_input_scales(k_padded, qz._pad_scale(input_scale, k, k_padded))
    scale = np.ascontiguousarray(s16.astype(np.float64))
    levels = qz.lloyd_max_codebook(gs)
    left, right, permutation = qz.hadamard_components(gs, seed)
    codebook, _ = qz._store_codebook_and_norms(levels, np.ones((1, 1)), prescale, "hadamard")
    bounds, canonical, cb_scale = _index_tables(levels, codebook)
    panels = _array(buffers, "panels", np.uint8, (pn.panel_data_bytes(n, k_padded),))
    norms = np.empty((n, ng), dtype=np.float64)
    hadamard, _ = _functions()
    left, right = np.ascontiguousarray(left), np.ascontiguousarray(right)
    permutation = np.ascontiguousarray(permutation, dtype=np.uint32)
    _call(hadamard, w.ctypes.data_as(ctypes.c_void_p), dtype, n, k, k_padded, gs, _ptr(scale, ctypes.c_double),
          _ptr(left, ctypes.c_int8), _ptr(right, ctypes.c_int8),
          _ptr(permutation, ctypes.c_uint32), _ptr(bounds, ctypes.c_double),
          _ptr(canonical, ctypes.c_uint8), threads or default_threads(),
          _ptr(panels, ctypes.c_uint8), _ptr(norms, ctypes.c_double))
    codebook, stored = qz._store_codebook_and_norms(levels, norms, prescale, "hadamard")
    weight = qz.QuantizedWeight(qz.HADAMARD, gs, _no_indices(n, k_padded), stored, codebook,
                                s16, isr, left_signs=left, right_signs=right,
                                permutation=permutation, original_shape=(n, k))
    return _packed(weight, panels, pn.fold_norm_panels(stored, cb_scale), stored)


def quantize_orthogonal_panels(w, seed=0, input_scale=None, k_padded=None, threads=None,
                               source_dtype=None, buffers=None):
    """`quantize.quantize_orthogonal`, its panels (virtual 128-wide groups)
    encoded (`weight.packed`), natively, the rotation too. w as for
    `quantize_hadamard_panels`."""
    w, dtype = _source(w, source_dtype)
    n, k_true = w.shape
    k = k_padded or k_true
    if k < k_true:
        raise ValueError(f"k_padded ({k}) is less than K ({k_true})")
    s16, isr = qz.stored_input_scales(k, qz._pad_scale(input_scale, k_true, k))
    scale = np.ascontiguousarray(s16.astype(np.float64))
    levels = qz.lloyd_max_codebook(k)
    rotation16, rot32 = _stored_rotation(k, seed, threads or default_threads())
    codebook, _ = qz._store_codebook_and_norms(levels, np.ones((1, 1)), False, "orthogonal")
    bounds, canonical, cb_scale = _index_tables(levels, codebook)
    panel_gs = fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP
    panels = _array(buffers, "panels", np.uint8, (pn.panel_data_bytes(n, k),))
    norms = np.empty((n, 1), dtype=np.float64)
    _, orthogonal = _functions()
    _call(orthogonal, w.ctypes.data_as(ctypes.c_void_p), dtype, n, k_true, k, _ptr(scale, ctypes.c_double),
          _ptr(rot32, ctypes.c_float), _ptr(bounds, ctypes.c_double),
          _ptr(canonical, ctypes.c_uint8), threads or default_threads(),
          _ptr(panels, ctypes.c_uint8), _ptr(norms, ctypes.c_double))
    codebook, stored = qz._store_codebook_and_norms(levels, norms, False, "orthogonal")
    weight = qz.QuantizedWeight(qz.ORTHOGONAL, k, _no_indices(n, k), stored, codebook, s16,
                                isr, rotation_matrix=rotation16, original_shape=(n, k_true))
    repeated = pn.repeat_norms(stored, k, panel_gs)
    return _packed(weight, panels, pn.fold_norm_panels(repeated, cb_scale), repeated)
