"""`python -m cq4p convert`: a safetensors checkpoint -> a cq4p bundle.

The checkpoint must be a model cq4p runs (`cq4p.model.architecture`): its config
and tensor names and shapes are checked before any tensor is converted.
The bundle holds one file per tensor, manifest.json (with each file's
sha256 and the model_digest, and model.mlir's and the tokenizer files'
sha256 under files_sha256), model.mlir (the forward pass,
`cq4p.model.ir.model_graph`) and the tokenizer files found next to the
checkpoint.

Tensor policy:
- token embeddings (names containing 'embed_tokens', Gemma 4's per-layer
  table among them) and lm_head: orthogonal CQ4 panels, K zero-padded to a
  multiple of 128 (the original shape recorded); with --legacy, 4-row
  interleaved when N % 4 == 0 and K % 32 == 0, else row-major;
- every other 2-D '.weight': Hadamard CQ4, gs 128, panels (K zero-padded to
  a multiple of 128, the original shape recorded);
- everything else: FP16, or FP32 when a value is outside fp16's finite
  range (as is a CQ4 candidate whose stored norms would overflow fp16).

Quantizer: the runtime library's native one (`cq4p.native.quantize`,
runtime/src/Quantize.cpp: multi-threaded, reading the checkpoint's bytes)
writes the panel files when the library is built, else numpy's
(`cq4p.quant.quantize`, the oracle); the bundles are the same bytes. Each progress
line ends with the tensor's parameters per second, and a last line gives
the whole conversion's.

The orthogonal tensors' K x K rotation: the format stores R (fp16) and
asks only that it be orthogonal, so how it is made is this converter's
choice, and the choice is a definition by operations, the same bits on any
machine: Stewart's construction of a Haar matrix (R = H_0 H_1 ... H_{K-2} D,
Householder reflections of Gaussian vectors of decreasing length), the
Gaussians Irwin-Hall sums of 12 SplitMix64 uniforms keyed by the seed and
K, every product, sum and quotient rounded on its own in a fixed order
(`quantize.orthogonal_rotation` spells it out). The runtime makes it on
every core (`cq4p_orthogonal_rotation`, runtime/src/OrthogonalRotation.cpp:
1.5 to 2 s at K = 2048 on one loaded core) and numpy makes the same float64 bits with elementwise
operations only, no BLAS. Converters before this one took numpy's QR of a
seeded Gaussian through the machine's LAPACK (17.6 s at K = 2048, and
another BLAS could give other bits); their bundles stay valid, as every
bundle carries its R.

Everything written is checked by the readers that will read it: the
config (copied into the manifest) as the runtime's JSON reader takes it
(`parse_config`: no NaN or Infinity, no lone surrogate, no duplicate name,
at most 64 levels and 16 MiB), the model's numbers as float32 literals of
model.mlir (`check_spec_values`), every tensor's values finite, and the
finished bundle opened by the Python reader and, when the runtime library is
built, verified by the runtime (`cq4p_bundle_verify`) before it is moved into
place.

The bundle is written into a temporary directory next to the output (named
after the converting process, `.<out>.convert-<pid>.<random>.tmp`) and
renamed into place once complete (manifest.json written last, once every
other file is there); on any error, interrupt or SIGTERM the temporary
directory is removed, a temporary left by a killed conversion (its process
gone) is removed by the next conversion to the same output, and an
existing bundle (--force) is replaced only by a complete new one, and only
when its directory holds nothing but the files its manifest lists
(`check_replaceable`). Models cq4p-compile or the runtime would refuse are
refused before anything is written (`architecture.check_limits`).
"""

import dataclasses
import glob
import hashlib
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

import numpy as np

from cq4p.format import constants as fmt
from cq4p.format import layout as ly
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import safetensors as st
from cq4p.io import writer as wr
from cq4p.model import architecture as arch
from cq4p.model import ir
from cq4p.quant import quantize as qz

HADAMARD_GROUP_SIZE = 128
LEGACY_LAYOUTS = (ly.INTERLEAVED, ly.ROW_MAJOR)
MODEL_GRAPH = bd.MODEL_GRAPH
TOKENIZER_FILES = bd.TOKENIZER_FILES


class ConvertError(ValueError):
    """Input the converter cannot use; the message is one line."""


def is_orthogonal_tensor(name):
    return "embed_tokens" in name or name == "lm_head.weight" or name.endswith(".lm_head.weight")


def is_hadamard_tensor(name, shape):
    return len(shape) == 2 and name.endswith(".weight")


def orthogonal_layout(n, k, legacy=None):
    """Panels (K zero-padded to a multiple of 128) unless legacy files are
    asked for; then interleaved when the shape allows, else row-major."""
    if legacy is None:
        return ly.PANELS
    if legacy != ly.ROW_MAJOR and wr.interleaved_refusal(qz.ORTHOGONAL, n, k, k) is None:
        return ly.INTERLEAVED
    return ly.ROW_MAJOR


def hadamard_layout(n, legacy=None):
    if legacy is None:
        return ly.PANELS
    if legacy == ly.INTERLEAVED and n % 4 == 0:
        return ly.INTERLEAVED
    return ly.ROW_MAJOR


def _file_name(stem, layout):
    if layout == ly.PANELS:
        return stem + bd.PANEL_SUFFIX
    return stem + bd.LEGACY_SUFFIX


# --- inputs ------------------------------------------------------------------

# config.json is copied into manifest.json, one level down: it must be what
# the runtime's reader takes there (bundle.MAX_MANIFEST_BYTES, MAX_JSON_DEPTH).
MAX_CONFIG_BYTES = bd.MAX_MANIFEST_BYTES
MAX_CONFIG_LEVELS = bd.MAX_JSON_DEPTH
INT64_RANGE = (-(1 << 63), (1 << 63) - 1)


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    if not os.path.lexists(path):
        raise ConvertError(f"{model_dir}: missing config.json")
    try:
        fd = rd.open_regular(path)
    except rd.FormatError as error:
        raise ConvertError(str(error)) from None
    except OSError as error:
        raise ConvertError(f"{path}: cannot open: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    return parse_config(path, raw)


def parse_config(path, raw):
    """config.json's bytes as a dict, refused (ConvertError naming the
    path and the value) unless the runtime's manifest reader would take
    them: UTF-8, at most MAX_CONFIG_BYTES, JSON without NaN, Infinity,
    duplicate names or lone surrogates, numbers finite (1e400 is not) and
    integers within int64, at most MAX_CONFIG_LEVELS levels deep, an
    object at the top."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConvertError(f"{path}: size: expected at most {MAX_CONFIG_BYTES} bytes, found more")
    try:
        config = json.loads(raw.decode("utf-8"), object_pairs_hook=bd.refuse_duplicates,
                            parse_constant=bd.refuse_constant)
    except UnicodeDecodeError as error:
        raise ConvertError(f"{path}: invalid JSON: not UTF-8 at byte {error.start}") from None
    except json.JSONDecodeError as error:
        raise ConvertError(f"{path}:{error.lineno}:{error.colno}: invalid JSON: "
                           f"{error.msg}") from None
    except RecursionError:
        raise ConvertError(f"{path}: invalid JSON: nesting deeper than "
                           f"{MAX_CONFIG_LEVELS} levels") from None
    except ValueError as error:  # a refused constant or name, an integer of 4300+ digits
        raise ConvertError(f"{path}: invalid JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    if bd.json_depth(config) >= MAX_CONFIG_LEVELS:
        raise ConvertError(f"{path}: invalid JSON: nesting deeper than {MAX_CONFIG_LEVELS} "
                           f"levels")
    _check_json_values(path, config)
    architectures = config.get("architectures")
    if architectures is not None and not (
            isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)):
        raise ConvertError(f"{path}: architectures: expected a list of class names, found "
                           f"{json.dumps(architectures)[:80]}")
    return config


def _check_json_values(path, document):
    """Every string valid UTF-8 (Python decodes an escaped lone surrogate,
    which no UTF-8 writer can write), every number finite, every integer
    an int64."""
    stack = [("", document)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, member in value.items():
                _check_text(path, f"{where}.{key}" if where else key, key, "name")
                stack.append((f"{where}.{key}" if where else key, member))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", member) for i, member in enumerate(value))
        elif isinstance(value, str):
            _check_text(path, where, value, "value")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConvertError(f"{path}: {where}: {value} is not a finite number")
        elif isinstance(value, int) and not isinstance(value, bool) and \
                not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
            raise ConvertError(f"{path}: {where}: integer {value} is outside int64")


def _check_text(path, where, text, what):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ConvertError(f"{path}: {where}: the {what} holds a lone surrogate "
                           f"(U+{ord(text[error.start]):04X}), not text") from None


def check_spec_values(path, spec):
    """Every number of the model (theta, rope factors and frequencies,
    epsilon, scales, soft-capping) as model.mlir writes it, a float32: finite
    there, or the config value behind it is refused by name."""
    def check(field, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if not math.isfinite(value) or abs(value) > float(np.finfo(np.float32).max):
            raise ConvertError(f"{path}: {field} {value!r} (from the config) is not a finite "
                               f"float32 value")
        if 0 < abs(value) < arch.FLOAT32_TINY:
            raise ConvertError(f"{path}: {field} {value!r} (from the config) is below "
                               f"float32's smallest normal number ({arch.FLOAT32_TINY:.8g}): "
                               f"the kernels flush it to zero")

    def walk(prefix, record):
        for name in record.__dataclass_fields__:
            value = getattr(record, name)
            if isinstance(value, tuple) and value and hasattr(value[0], "__dataclass_fields__"):
                for index, item in enumerate(value):
                    walk(f"{prefix}{name}[{index}].", item)
            elif isinstance(value, tuple):
                for index, item in enumerate(value):
                    check(f"{prefix}{name}[{index}]", item)
            else:
                check(prefix + name, value)

    walk("", spec)


def checkpoint_tensors(model_dir):
    """Every tensor of every *.safetensors file (files in name order)."""
    shards = sorted(glob.glob(os.path.join(glob.escape(model_dir), "*.safetensors")))
    if not shards:
        raise ConvertError(f"{model_dir}: no *.safetensors files")
    entries, seen = [], {}
    for shard in shards:
        try:
            shard_entries = st.read_header(shard)
        except st.CheckpointError as error:
            raise ConvertError(str(error)) from error
        for entry in shard_entries:
            if entry.name in seen:
                raise ConvertError(f"{shard}: tensor {entry.name} is also in {seen[entry.name]}")
            seen[entry.name] = shard
            entries.append(entry)
    return entries


def checked_model(model_dir, config, entries):
    """(ModelSpec, names of the tensors to convert) of a checkpoint; a
    ConvertError naming what cq4p cannot run."""
    try:
        spec = arch.model_spec(config)
    except arch.ArchitectureError as error:
        raise ConvertError(f"{os.path.join(model_dir, 'config.json')}: {error}") from error
    except (ValueError, TypeError, OverflowError, KeyError) as error:
        # A field of a type or size the architecture's reader did not expect.
        raise ConvertError(f"{os.path.join(model_dir, 'config.json')}: cannot read the "
                           f"model's fields: {type(error).__name__}: {error}") from error
    check_spec_values(os.path.join(model_dir, "config.json"), spec)
    shapes = {entry.name: entry.shape for entry in entries}
    spec = arch.with_checkpoint_names(spec, shapes)
    try:
        # What cq4p-compile and the runtime refuse, refused here first.
        arch.check_limits(spec)
    except arch.ArchitectureError as error:
        raise ConvertError(f"{os.path.join(model_dir, 'config.json')}: {error}") from error
    try:
        names = spec.check_tensors(shapes)
    except arch.ArchitectureError as error:
        raise ConvertError(f"{model_dir}: {error}") from error
    check_tensor_names(model_dir, names)
    return spec, names


# Tensor names become file names and MLIR string attributes (model.mlir):
# characters outside this set would need escaping in one or the other.
_NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789_.-")


def check_tensor_names(where, names):
    """Refuses names that cannot be written to a bundle and model.mlir as
    they are, and names whose files a loader would confuse: `a` resolves
    `a.weights` to `a.cq4p.weights` first, which is the file of a tensor
    named `a.cq4p`."""
    files = {}
    for name in names:
        bad = sorted(set(name) - _NAME_CHARACTERS)
        if not name or name.startswith(".") or bad:
            raise ConvertError(f"{where}: tensor name {name!r}: expected letters, digits, "
                               f"'_', '.' and '-' (not first), found "
                               f"{', '.join(map(repr, bad)) or 'a leading dot'}")
        stem = name
        for candidate in (stem + bd.PANEL_SUFFIX, stem + bd.LEGACY_SUFFIX,
                          stem + bd.PLAIN_SUFFIX):
            other = files.setdefault(candidate, name)
            if other != name:
                raise ConvertError(f"{where}: tensor names {other!r} and {name!r} both "
                                   f"resolve to the file {candidate}")


def read_calibration(path):
    """{tensor name: per-input-channel mean |activation|} from an .npz."""
    if path is None:
        return {}
    try:
        with np.load(path) as archive:
            return {name: np.asarray(archive[name], dtype=np.float64) for name in archive.files}
    except (OSError, ValueError) as error:
        raise ConvertError(f"{path}: cannot read calibration statistics: {error}") from error


def _input_scale(name, k, calibration):
    if name not in calibration:
        return None
    stat = calibration[name]
    if stat.shape != (k,):
        raise ConvertError(f"calibration statistics for {name} have shape {stat.shape}, "
                           f"expected ({k},)")
    try:
        return qz.input_scale_from_statistics(stat)
    except ValueError as error:
        raise ConvertError(f"calibration statistics for {name}: {error}") from error


# --- one tensor --------------------------------------------------------------

def _dense_entry(directory, name, values, original_shape, reason=None):
    finite = np.isfinite(values)
    if not finite.all():
        first = np.unravel_index(int(np.argmin(finite)), values.shape) if values.ndim else ()
        raise ConvertError(f"tensor {name}: {int(np.count_nonzero(~finite))} non-finite "
                           f"values (the first, {values[first]}, at {list(map(int, first))}); "
                           f"a model with them computes NaN")
    with np.errstate(over="ignore"):
        fp16 = values.astype(np.float16)
    overflow = bool(np.any(np.isinf(fp16) & np.isfinite(values)))
    precision = ly.FP32 if overflow else ly.FP16
    stored = values if overflow else fp16
    stem = bd.logical_file(name)
    sha256 = wr.write_dense_file(os.path.join(directory, stem),
                                 stored.reshape(original_shape or (1,)), precision)
    dtype = ly.PRECISION_NAMES[precision]
    shape = list(original_shape or (1,))
    note = reason or ("values outside the fp16 range" if overflow else None)
    line = f"{dtype} {'x'.join(map(str, shape))}" + (f" ({note})" if note else "")
    return {"name": name, "file": stem, "shape": shape, "original_shape": list(original_shape),
            "dtype": dtype, "sha256": sha256}, line


def _quantized(name, values, rotation, seed, input_scale, layout):
    if not np.all(np.isfinite(values)):
        raise ConvertError(f"tensor {name}: {int(np.count_nonzero(~np.isfinite(values)))} "
                           f"non-finite values in a weight to quantize")
    if rotation == qz.ORTHOGONAL:
        # Panels need K % 128 == 0: a narrower table is zero-padded, as the
        # Hadamard weights are (the graph slices rows back to the true width).
        k_padded = arch.padded(values.shape[1]) if layout == ly.PANELS else None
        return qz.quantize_orthogonal(values, seed, input_scale, k_padded)
    # Panel and interleaved Hadamard files store the pre-scaled codebook.
    prescale = layout in (ly.PANELS, ly.INTERLEAVED)
    return qz.quantize_hadamard(values, HADAMARD_GROUP_SIZE, seed, input_scale, prescale)


QUANTIZERS = ("auto", "native", "numpy")


def check_threads(quantizer):
    """$CQ4P_CONVERT_THREADS, when the native quantizer may read it: a
    thread count from 1 to 1024 (the runtime's bound), refused by name
    before anything is written; $CQ4P_QUANTIZE_ISA generic, avx2 or unset."""
    if quantizer == "numpy":
        return
    from cq4p.native import quantize as nq
    try:
        nq.threads_from_environment()
        nq.check_isa_variable()
    except nq.ThreadsVariableError as error:
        raise ConvertError(str(error)) from None


def _use_native(quantizer, layout):
    """The native quantizer (runtime library) writes panel files; "auto"
    uses it when the library is there, "numpy" never."""
    if quantizer not in QUANTIZERS:
        raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {quantizer!r}")
    if quantizer == "numpy" or layout != ly.PANELS:
        return False
    from cq4p.native import quantize as nq
    if quantizer == "native" and not nq.available():
        raise ConvertError("the native quantizer needs the runtime library (scripts/build "
                           "cq4p_runtime, or CQ4P_RUNTIME_LIB)")
    return nq.available()


# The native path's source and panel memory, reused tensor after tensor (each
# tensor's file is written before the next one is read).
_NATIVE_BUFFERS = None


def _quantized_native(name, entry, rotation, seed, input_scale):
    """`_quantized` and the panel encoder, in the runtime (`weight.packed`),
    from the checkpoint's bytes."""
    from cq4p.native import quantize as nq
    global _NATIVE_BUFFERS
    if _NATIVE_BUFFERS is None:
        _NATIVE_BUFFERS = nq.Buffers()
    try:
        raw = nq.checkpoint_tensor(entry, _NATIVE_BUFFERS)
        if rotation == qz.ORTHOGONAL:
            return nq.quantize_orthogonal_panels(raw, seed, input_scale,
                                                 arch.padded(entry.shape[1]),
                                                 source_dtype=entry.dtype,
                                                 buffers=_NATIVE_BUFFERS)
        return nq.quantize_hadamard_panels(raw, HADAMARD_GROUP_SIZE, seed, input_scale,
                                           source_dtype=entry.dtype, buffers=_NATIVE_BUFFERS)
    except nq.NativeQuantizeError as error:
        values = st.load(entry)
        if not np.all(np.isfinite(values)):
            raise ConvertError(f"tensor {name}: {int(np.count_nonzero(~np.isfinite(values)))} "
                               f"non-finite values in a weight to quantize") from None
        raise ConvertError(f"tensor {name}: {error}") from None


def split_rows(entry, rows_per_row):
    """The entry of a [N, R * W] table read as [N * R, W] (the same bytes,
    row-major): Gemma 4's per-layer embeddings, a token's row of `layers`
    slices stored as `layers` rows of one layer each, so that each has its
    own norm and one W x W rotation serves them all (docs/MODEL.md)."""
    n, k = entry.shape
    if k % rows_per_row:
        raise ConvertError(f"{entry.path}: tensor {entry.name} has {k} columns, not "
                           f"{rows_per_row} slices of equal width")
    return dataclasses.replace(entry, shape=(n * rows_per_row, k // rows_per_row))


def convert_tensor(directory, entry, seed, calibration, legacy=None, quantizer="auto",
                   rows_per_row=1):
    """Writes one tensor's file; returns (manifest entry with the sha256 of
    the bytes written, progress text). With `rows_per_row` R > 1 (an
    orthogonal table), each checkpoint row is stored as R rows (split_rows);
    the manifest's original_shape stays the checkpoint's."""
    name, shape = entry.name, entry.shape
    stem = bd.logical_file(name)
    if 0 in shape:
        raise ConvertError(f"{entry.path}: tensor {name} has no elements (shape {list(shape)})")
    if len(shape) > ly.MAX_DIMS:
        raise ConvertError(f"{entry.path}: tensor {name} has {len(shape)} dims, at most "
                           f"{ly.MAX_DIMS} can be stored")
    checkpoint_shape = shape
    if rows_per_row > 1:
        if legacy is not None:
            raise ConvertError(f"tensor {name}: stored as rows of one layer each, which "
                               f"needs packed panels (not --legacy)")
        if name in calibration:
            raise ConvertError(f"calibration statistics for {name}: an embedding table "
                               f"takes none")
        entry = split_rows(entry, rows_per_row)
        shape = entry.shape
    if len(shape) == 2 and is_orthogonal_tensor(name):
        rotation, layout = qz.ORTHOGONAL, orthogonal_layout(*shape, legacy)
    elif is_hadamard_tensor(name, shape):
        rotation, layout = qz.HADAMARD, hadamard_layout(shape[0], legacy)
    else:
        return _dense_entry(directory, name, st.load(entry), shape)

    input_scale = _input_scale(name, shape[1], calibration)
    path = os.path.join(directory, _file_name(stem[:-len(bd.PLAIN_SUFFIX)], layout))
    native = _use_native(quantizer, layout)
    # The native quantizer reads the checkpoint's own bytes (F32, BF16 or F16).
    values = None if native else st.load(entry)
    try:
        if native:
            weight = _quantized_native(name, entry, rotation, seed, input_scale)
        else:
            weight = _quantized(name, values, rotation, seed, input_scale, layout)
    except qz.NormOverflowError as error:
        why = str(error).split(": ", 1)[1]
        if layout == ly.PANELS:
            # The model graph runs every linear and embedding from CQ4
            # panels: an FP32 copy would leave a bundle without a model.mlir.
            raise ConvertError(f"tensor {name}: cannot be stored as CQ4 ({why}), and the "
                               f"model graph needs it as CQ4 panels") from None
        return _dense_entry(directory, name, st.load(entry) if values is None else values, shape,
                            f"not CQ4: {why}")
    sha256 = wr.WRITERS[layout](path, weight)
    gs = (HADAMARD_GROUP_SIZE if rotation == qz.HADAMARD
          else fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP if layout == ly.PANELS else weight.k)
    stored = [weight.n, weight.k]
    line = f"CQ4 {rotation} {layout} {weight.n}x{weight.k}"
    if weight.k != shape[1]:
        line += f" (K padded from {shape[1]})"
    if rows_per_row > 1:
        line += f" ({rows_per_row} rows per checkpoint row)"
    return {"name": name, "file": stem, "shape": stored,
            "original_shape": list(checkpoint_shape),
            "dtype": "CQ4", "rotation": rotation, "layout": layout, "group_size": gs,
            "sha256": sha256}, line


def _rate(parameters, seconds):
    return f"{parameters / max(seconds, 1e-9) / 1e6:.1f} M params/s"


# --- the bundle --------------------------------------------------------------

def _skip_reason(spec, name):
    if spec.is_skipped(name):
        return "not part of the text model"
    if name == spec.lm_head_name and spec.tied:
        return "the lm_head is tied to the embedding"
    if arch.IGNORED_TENSOR.search(name):
        return "a derived buffer, recomputed by the graph"
    return "a KV-shared layer's own keys and values are never used"


def _settle(directory):
    """Puts every file of the finished bundle on disk before it is moved into
    place (so a crash after the rename leaves the whole bundle, never files
    of zeros), then lets the page cache drop the copies the writes left: they
    were cached in the writes' small pieces, and a first load that reads the
    files back from disk gets them in large folios, which the runtime's
    2 MiB-aligned mappings then read through 2 MiB TLB entries (decode reads
    every weight once per token)."""
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        handle = os.open(path, os.O_RDONLY)
        try:
            os.fsync(handle)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(handle)
    bd.sync_directory(directory)


def _replace(temporary, out, replaceable=frozenset(), progress=None):
    """Moves the complete bundle into place; an old one goes only after,
    and only the files of `replaceable` (check_replaceable's names): a file
    that appeared in the old directory meanwhile is kept there, named."""
    _settle(temporary)
    if not os.path.lexists(out):
        os.rename(temporary, out)
        bd.sync_directory(os.path.dirname(out))
        return
    parent = os.path.dirname(out)
    old = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.old.", dir=parent)
    os.rmdir(old)
    os.rename(out, old)
    try:
        os.rename(temporary, out)
    except BaseException:
        os.rename(old, out)
        raise
    bd.sync_directory(parent)
    for name in replaceable:
        path = os.path.join(old, name)
        if os.path.islink(path) or os.path.isfile(path):
            os.remove(path)
    try:
        os.rmdir(old)
    except OSError:
        if progress is not None:
            print(f"{old}: the replaced bundle's directory, kept: it holds files that are "
                  f"not the bundle's ({', '.join(sorted(os.listdir(old))[:4])})", file=progress)


def _write_atomically(directory, name, text):
    handle, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        bd.share_as_umask_says(temporary)
        os.replace(temporary, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def write_model_files(directory, config, tensors, spec, extra=None):
    """model.mlir, then manifest.json with the model_digest (written last:
    a directory without it is no bundle, so every other file is in place
    before it appears); returns why there is no model.mlir (None when it was
    written). `extra`: further manifest members (tokenizer_files,
    files_sha256); when it has files_sha256, model.mlir's sha256 is set
    there (or dropped with the file)."""
    digest = bd.model_digest(config, tensors)
    transforms = {}
    for entry in tensors:
        if entry["dtype"] == "CQ4" and entry.get("rotation") == qz.HADAMARD:
            with rd.read_tensor(bd.resolve(directory, entry["file"])) as tensor:
                if tensor.layout == ly.PANELS:
                    transforms[entry["name"]] = tensor.transform_digest()
    graph_path = os.path.join(directory, MODEL_GRAPH)
    try:
        graph = ir.model_graph(spec, tensors, digest, transforms)
    except ir.GraphError as error:
        if os.path.exists(graph_path):
            os.remove(graph_path)
        graph, reason = None, str(error)
    if graph is not None:
        _write_atomically(directory, MODEL_GRAPH, graph)
        reason = None
    extra = dict(extra or {})
    if bd.FILES_SHA256 in extra:
        files = {name: sha for name, sha in extra[bd.FILES_SHA256].items()
                 if name != MODEL_GRAPH}
        if graph is not None:
            files[MODEL_GRAPH] = bd.shipped_file_sha256(directory, MODEL_GRAPH)
        extra[bd.FILES_SHA256] = dict(sorted(files.items()))
    bd.write_manifest(directory, bd.manifest(config, tensors, digest, extra))
    return reason


def copy_tokenizer_files(model_dir, directory):
    """Copies the checkpoint's tokenizer files into the bundle directory;
    returns {name: sha256 of the bytes written}."""
    copied = {}
    for name in TOKENIZER_FILES:
        source = os.path.join(model_dir, name)
        if not os.path.isfile(source):
            continue
        digest = hashlib.sha256()
        with open(source, "rb") as reader, open(os.path.join(directory, name), "wb") as writer:
            for block in iter(lambda: reader.read(1 << 20), b""):
                digest.update(block)
                writer.write(block)
        copied[name] = digest.hexdigest()
    return copied


def verify_bundle(directory):
    """The finished bundle as its readers will read it: the Python reader
    (manifest, every tensor file against its entry, docs/FORMAT.md's content
    rules, which it reads every byte for only when the runtime library is not
    built) and the runtime's full verification (cq4p_bundle_verify). A
    ConvertError names what they refuse:
    a bundle convert wrote and its own tools refuse is a defect of convert,
    reported instead of moved into place."""
    from cq4p.native import runtime as native
    try:
        native.verify_bundle(directory)
        deep = False
    except native.LibraryNotFoundError:
        deep = True  # no runtime built: the Python reader reads every byte instead
    except native.NativeError as error:
        raise ConvertError(f"the runtime refuses the converted bundle: {error}") from None
    try:
        manifest = bd.read_manifest(directory)
        for entry in manifest["tensors"]:
            with bd.open_tensor(directory, entry) as tensor:
                if deep:
                    rd.verify_content(tensor)
        if deep:
            bd.verify_shipped_files(directory, manifest)
    except (bd.BundleError, rd.FormatError) as error:
        raise ConvertError(f"the converted bundle does not read back: {error}") from None


# The temporary of a conversion: `.<out>.convert-<pid>.<random>.tmp` beside
# the output, so that the next conversion can tell one whose process is gone.
_TEMPORARY = re.compile(r"\.(?P<out>.+)\.convert-(?P<pid>[0-9]+)\.[^.]+\.tmp")


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(out, progress=None):
    """Removes the temporaries a killed conversion to `out` left beside it
    (those whose process no longer runs); returns their paths."""
    parent, base = os.path.dirname(out), os.path.basename(out)
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        match = _TEMPORARY.fullmatch(name)
        if not match or match["out"] != base or _process_alive(int(match["pid"])):
            continue
        path = os.path.join(parent, name)
        if os.path.islink(path) or not os.path.isdir(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
        if progress is not None:
            print(f"{path}: removed (left by an interrupted conversion)", file=progress)
    return removed


class _Terminated(BaseException):
    """SIGTERM during a conversion: unwinds like an interrupt, so the
    temporary directory is removed."""


def _on_terminate(signum, _frame):
    raise _Terminated(f"terminated by signal {signum}")


def bundle_file_names(content):
    """The names of the files a bundle's manifest says cq4p wrote:
    manifest.json, model.mlir, every tensor's file (each candidate name of
    its `<stem>.weights`: upgrade leaves the panel file where a legacy one
    was) and the shipped files the manifest lists."""
    names = {bd.MANIFEST, MODEL_GRAPH}
    for entry in content["tensors"]:
        logical = entry["file"]
        names.add(logical)
        if logical.endswith(bd.PLAIN_SUFFIX) and len(logical) > len(bd.PLAIN_SUFFIX):
            stem = logical[:-len(bd.PLAIN_SUFFIX)]
            names.update((stem + bd.PANEL_SUFFIX, stem + bd.LEGACY_SUFFIX))
    names.update(content.get("tokenizer_files") or [])
    names.update(content.get(bd.FILES_SHA256) or {})
    return names


def check_replaceable(out, model_dir):
    """--force replaces only what a conversion made: an empty directory, or
    a cq4p bundle holding nothing but the files its manifest lists (regular
    files; no subdirectory, no link), and never the checkpoint being
    converted or a directory that holds it. Returns the names to remove
    from the old directory; a ConvertError names the first other entry,
    and nothing is removed."""
    model = os.path.realpath(model_dir)
    target = os.path.realpath(out)
    if model == target or model.startswith(target.rstrip(os.sep) + os.sep):
        raise ConvertError(f"{out}: --force would replace the checkpoint being converted "
                           f"({model_dir}) or a directory that holds it")
    if os.path.islink(out) or not os.path.isdir(out):
        raise ConvertError(f"{out}: --force replaces only a bundle directory or an empty one, "
                           f"and this is not a directory")
    present = sorted(os.listdir(out))
    if not present:
        return set()
    try:
        content = bd.read_manifest(out)
    except bd.BundleError as error:
        raise ConvertError(f"{out}: --force replaces only a cq4p bundle or an empty directory, "
                           f"and this is neither ({error})") from error
    ours = bundle_file_names(content)
    for name in present:
        path = os.path.join(out, name)
        if name not in ours:
            raise ConvertError(f"{path}: --force replaces only the files of the bundle's "
                               f"manifest, and this is not one of them (move it out of "
                               f"{out}, or convert to another --out)")
        if os.path.islink(path) or not os.path.isfile(path):
            kind = "a symbolic link" if os.path.islink(path) else "not a regular file"
            raise ConvertError(f"{path}: --force replaces only the bundle's regular files, and "
                               f"this is {kind}")
    return set(present)


def convert(model_dir, out, force=False, seed=0, calibration=None, legacy=None,
            progress=None, quantizer="auto"):
    """Converts the checkpoint in model_dir into a bundle at out; progress
    lines go to `progress` (default stderr), each with the tensor's
    parameters per second. quantizer: "auto" (the runtime's native
    quantizer when its library is built, else numpy), "native" or "numpy";
    the files are the same bytes."""
    progress = progress or sys.stderr
    if legacy is not None and legacy not in LEGACY_LAYOUTS:
        raise ValueError(f"legacy layout must be one of {LEGACY_LAYOUTS}, got {legacy!r}")
    out = os.path.abspath(out)
    if os.path.lexists(out) and not force:
        raise ConvertError(f"{out}: already exists (use --force to replace it)")
    replaceable = check_replaceable(out, model_dir) if os.path.lexists(out) else set()
    check_threads(quantizer)
    config = read_config(model_dir)
    entries = checkpoint_tensors(model_dir)
    spec, names = checked_model(model_dir, config, entries)
    wanted = set(names)
    skipped = [entry.name for entry in entries if entry.name not in wanted]
    entries = [entry for entry in entries if entry.name in wanted]
    statistics = read_calibration(calibration)
    split = spec.split_tables()
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    remove_stale_temporaries(out, progress)
    previous_handler = None
    if threading.current_thread() is threading.main_thread():
        previous_handler = signal.signal(signal.SIGTERM, _on_terminate)
    temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.convert-{os.getpid()}.",
                                 suffix=".tmp", dir=parent)
    try:
        bd.share_as_umask_says(temporary, directory=True)
        for name in skipped:
            print(f"{name}: skipped ({_skip_reason(spec, name)})", file=progress)
        started, total = time.perf_counter(), 0
        records = [None] * len(entries)
        for number, entry in enumerate(entries, 1):
            begin = time.perf_counter()
            try:
                record, line = convert_tensor(temporary, entry, seed, statistics, legacy,
                                              quantizer, split.get(entry.name, 1))
            except bd.BundleError as error:
                raise ConvertError(f"{entry.path}: {error}") from error
            records[number - 1] = record
            count = int(np.prod(entry.shape))
            total += count
            print(f"[{number}/{len(entries)}] {entry.name}: {line}; "
                  f"{_rate(count, time.perf_counter() - begin)}", file=progress, flush=True)
        tensors = records
        print(f"{total} parameters in {time.perf_counter() - started:.1f} s: "
              f"{_rate(total, time.perf_counter() - started)}", file=progress, flush=True)
        # The tokenizer's files first (the runtime reads them from the
        # bundle: cq4p_model_tokenizer, cq4p-run --prompt), then model.mlir
        # and manifest.json, which lists them with every file's sha256.
        copied = copy_tokenizer_files(model_dir, temporary)
        extra = {"tokenizer_files": list(copied)} if copied else {}
        extra[bd.FILES_SHA256] = copied
        reason = write_model_files(temporary, config, tensors, spec, extra)
        if reason:
            print(f"{MODEL_GRAPH}: not written: {reason}", file=progress)
        verify_bundle(temporary)
        _replace(temporary, out, replaceable, progress)
    except _Terminated as error:
        shutil.rmtree(temporary, ignore_errors=True)
        raise ConvertError(f"{out}: not written: {error}") from None
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
        global _NATIVE_BUFFERS
        _NATIVE_BUFFERS = None  # the memory goes with the conversion
        if "cq4p.native.quantize" in sys.modules:
            sys.modules["cq4p.native.quantize"].forget_rotations()
    return out
