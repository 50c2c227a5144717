"""The native quantizer: `python -m cq4p convert`'s fast path.

The runtime library's `cq4p_quantize_hadamard_panels` and
`cq4p_quantize_orthogonal_panels` (runtime/src/Quantize.cpp) quantize a
tensor on every core straight into packed panels, repeating the numpy
implementation's (`cq4p.quantize`) floating-point operations in its order,
so the files are byte for byte the ones `cq4p.files.write_panel_file` writes
from `quantize_hadamard` / `quantize_orthogonal`. numpy still makes what is
cheap and shared: the codebook, the Hadamard signs and permutation, the input
scales, the fp16 norms and the orthogonal K x K rotation (numpy's seeded
Gaussian and LAPACK's QR, kept in numpy so that it stays the same matrix).
"""

import concurrent.futures
import ctypes
import functools
import os
import threading

import numpy as np

from cq4p import format as fmt
from cq4p import native
from cq4p import panels as pn
from cq4p import quantize as qz
from cq4p import safetensors as st

THREADS_VARIABLE = "CQ4P_CONVERT_THREADS"


class NativeQuantizeError(ValueError):
    """The runtime refused the tensor (the message is the runtime's)."""


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


def available():
    """True when the runtime library is built and has the quantizer."""
    try:
        _functions()
    except (native.LibraryNotFoundError, AttributeError, OSError):
        return False
    return True


def default_threads():
    value = os.environ.get(THREADS_VARIABLE)
    if value:
        return max(1, int(value))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# (K, seed) -> a Future of numpy's K x K rotation, made on a thread while the
# Hadamard tensors are quantized (LAPACK's QR runs without the GIL).
_ROTATIONS = {}
_ROTATIONS_LOCK = threading.Lock()


def prefetch_rotation(k, seed):
    """Starts making orthogonal_rotation(k, seed) on a thread; returns its Future."""
    key = (int(k), int(seed))
    with _ROTATIONS_LOCK:
        if key not in _ROTATIONS:
            future = concurrent.futures.Future()

            def make():
                try:
                    future.set_result(qz.orthogonal_rotation(*key))
                except BaseException as error:  # handed to whoever waits
                    future.set_exception(error)

            threading.Thread(target=make, name=f"cq4p-rotation-{k}", daemon=True).start()
            _ROTATIONS[key] = future
        return _ROTATIONS[key]


def forget_rotations():
    """Drops the prefetched rotations (a conversion's end)."""
    with _ROTATIONS_LOCK:
        _ROTATIONS.clear()


def _rotation(k, seed):
    future = _ROTATIONS.get((int(k), int(seed)))
    if future is not None:
        return future.result()
    return qz.orthogonal_rotation(k, seed)


# The checkpoint dtypes the runtime reads (enum cq4p_source_dtype).
SOURCE_DTYPES = {"F32": native.API["CQ4P_SOURCE_F32"], "BF16": native.API["CQ4P_SOURCE_BF16"],
                 "F16": native.API["CQ4P_SOURCE_F16"]}


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
    encoded (`weight.packed`), natively; the rotation is numpy's. w as for
    `quantize_hadamard_panels`."""
    w, dtype = _source(w, source_dtype)
    n, k_true = w.shape
    k = k_padded or k_true
    if k < k_true:
        raise ValueError(f"k_padded ({k}) is less than K ({k_true})")
    s16, isr = qz.stored_input_scales(k, qz._pad_scale(input_scale, k_true, k))
    scale = np.ascontiguousarray(s16.astype(np.float64))
    levels = qz.lloyd_max_codebook(k)
    rotation16 = _rotation(k, seed).astype(np.float16)
    rot32 = np.ascontiguousarray(rotation16.astype(np.float32))
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
