"""`python -m cq4p convert`: a safetensors checkpoint -> a cq4p bundle.

The checkpoint must be a model cq4p runs (`cq4p.architecture`): its config
and tensor names and shapes are checked before any tensor is converted.
The bundle holds one file per tensor, manifest.json (with each file's
sha256 and the model_digest), model.mlir (the forward pass,
`cq4p.ir.model_graph`) and the tokenizer files found next to the
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

Quantizer: the runtime library's native one (`cq4p.native_quantize`,
runtime/src/Quantize.cpp: multi-threaded, reading the checkpoint's bytes)
writes the panel files when the library is built, else numpy's
(`cq4p.quantize`, the oracle); the bundles are the same bytes. Each progress
line ends with the tensor's parameters per second, and a last line gives
the whole conversion's.

The bundle is written into a temporary directory next to the output and
renamed into place once complete; on any error or interrupt the temporary
directory is removed, and an existing bundle (--force) is replaced only by a
complete new one.
"""

import glob
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from cq4p import architecture as arch
from cq4p import bundle as bd
from cq4p import files as fl
from cq4p import format as fmt
from cq4p import ir
from cq4p import quantize as qz
from cq4p import safetensors as st

HADAMARD_GROUP_SIZE = 128
LEGACY_LAYOUTS = (fl.INTERLEAVED, fl.ROW_MAJOR)
MODEL_GRAPH = "model.mlir"
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "generation_config.json", "chat_template.jinja")


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
        return fl.PANELS
    if legacy != fl.ROW_MAJOR and fl.interleaved_refusal(qz.ORTHOGONAL, n, k, k) is None:
        return fl.INTERLEAVED
    return fl.ROW_MAJOR


def hadamard_layout(n, legacy=None):
    if legacy is None:
        return fl.PANELS
    if legacy == fl.INTERLEAVED and n % 4 == 0:
        return fl.INTERLEAVED
    return fl.ROW_MAJOR


def _file_name(stem, layout):
    if layout == fl.PANELS:
        return stem + fl.PANEL_SUFFIX
    return stem + fl.LEGACY_SUFFIX


# --- inputs ------------------------------------------------------------------

def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise ConvertError(f"{model_dir}: missing config.json")
    try:
        with open(path) as handle:
            config = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConvertError(f"{path}: cannot read: {error}") from error
    if not isinstance(config, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    return config


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
    shapes = {entry.name: entry.shape for entry in entries}
    spec = arch.with_checkpoint_names(spec, shapes)
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
        for candidate in (stem + fl.PANEL_SUFFIX, stem + fl.LEGACY_SUFFIX,
                          stem + fl.PLAIN_SUFFIX):
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
    with np.errstate(over="ignore"):
        fp16 = values.astype(np.float16)
    overflow = bool(np.any(np.isinf(fp16) & np.isfinite(values)))
    precision = fl.FP32 if overflow else fl.FP16
    stored = values if overflow else fp16
    stem = bd.logical_file(name)
    fl.write_dense_file(os.path.join(directory, stem), stored.reshape(original_shape or (1,)),
                        precision)
    dtype = fl.PRECISION_NAMES[precision]
    shape = list(original_shape or (1,))
    note = reason or ("values outside the fp16 range" if overflow else None)
    line = f"{dtype} {'x'.join(map(str, shape))}" + (f" ({note})" if note else "")
    return {"name": name, "file": stem, "shape": shape, "original_shape": list(original_shape),
            "dtype": dtype}, line


def _quantized(name, values, rotation, seed, input_scale, layout):
    if not np.all(np.isfinite(values)):
        raise ConvertError(f"tensor {name}: {int(np.count_nonzero(~np.isfinite(values)))} "
                           f"non-finite values in a weight to quantize")
    if rotation == qz.ORTHOGONAL:
        # Panels need K % 128 == 0: a narrower table is zero-padded, as the
        # Hadamard weights are (the graph slices rows back to the true width).
        k_padded = arch.padded(values.shape[1]) if layout == fl.PANELS else None
        return qz.quantize_orthogonal(values, seed, input_scale, k_padded)
    # Panel and interleaved Hadamard files store the pre-scaled codebook.
    prescale = layout in (fl.PANELS, fl.INTERLEAVED)
    return qz.quantize_hadamard(values, HADAMARD_GROUP_SIZE, seed, input_scale, prescale)


QUANTIZERS = ("auto", "native", "numpy")
# Orthogonal tensors at least this wide have their rotation made on a thread
# (numpy's QR: ~20 s at K = 2048) and are converted after the others; smaller
# ones (a fraction of a second) in checkpoint order.
ROTATION_PREFETCH_MIN_K = 512


def _use_native(quantizer, layout):
    """The native quantizer (runtime library) writes panel files; "auto"
    uses it when the library is there, "numpy" never."""
    if quantizer not in QUANTIZERS:
        raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {quantizer!r}")
    if quantizer == "numpy" or layout != fl.PANELS:
        return False
    from cq4p import native_quantize as nq
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
    from cq4p import native_quantize as nq
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


def convert_tensor(directory, entry, seed, calibration, legacy=None, quantizer="auto"):
    """Writes one tensor's file; returns (manifest entry, progress text)."""
    name, shape = entry.name, entry.shape
    stem = bd.logical_file(name)
    if 0 in shape:
        raise ConvertError(f"{entry.path}: tensor {name} has no elements (shape {list(shape)})")
    if len(shape) > fl.MAX_DIMS:
        raise ConvertError(f"{entry.path}: tensor {name} has {len(shape)} dims, at most "
                           f"{fl.MAX_DIMS} can be stored")
    if len(shape) == 2 and is_orthogonal_tensor(name):
        rotation, layout = qz.ORTHOGONAL, orthogonal_layout(*shape, legacy)
    elif is_hadamard_tensor(name, shape):
        rotation, layout = qz.HADAMARD, hadamard_layout(shape[0], legacy)
    else:
        return _dense_entry(directory, name, st.load(entry), shape)

    input_scale = _input_scale(name, shape[1], calibration)
    path = os.path.join(directory, _file_name(stem[:-len(fl.PLAIN_SUFFIX)], layout))
    native = _use_native(quantizer, layout)
    # The native quantizer reads the checkpoint's own bytes (F32, BF16 or F16).
    values = None if native else st.load(entry)
    try:
        if native:
            weight = _quantized_native(name, entry, rotation, seed, input_scale)
        else:
            weight = _quantized(name, values, rotation, seed, input_scale, layout)
    except qz.NormOverflowError as error:
        return _dense_entry(directory, name, st.load(entry) if values is None else values, shape,
                            f"not CQ4: {str(error).split(': ', 1)[1]}")
    fl.WRITERS[layout](path, weight)
    gs = (HADAMARD_GROUP_SIZE if rotation == qz.HADAMARD
          else fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP if layout == fl.PANELS else weight.k)
    stored = [weight.n, weight.k]
    line = f"CQ4 {rotation} {layout} {weight.n}x{weight.k}"
    if weight.k != shape[1]:
        line += f" (K padded from {shape[1]})"
    return {"name": name, "file": stem, "shape": stored, "original_shape": list(shape),
            "dtype": "CQ4", "rotation": rotation, "layout": layout, "group_size": gs}, line


def _prefetch_rotations(entries, seed, legacy, quantizer):
    """With the native quantizer, starts making the orthogonal tensors'
    rotations on threads (numpy's QR, without the GIL); the numbers of the
    entries to convert last, once the others are done."""
    if quantizer == "numpy" or legacy is not None:
        return set()
    from cq4p import native_quantize as nq
    if not nq.available():
        return set()
    later = set()
    for number, entry in enumerate(entries, 1):
        if (len(entry.shape) == 2 and is_orthogonal_tensor(entry.name) and 0 not in entry.shape
                and entry.shape[1] >= ROTATION_PREFETCH_MIN_K):
            nq.prefetch_rotation(arch.padded(entry.shape[1]), seed)
            later.add(number)
    return later


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


def _replace(temporary, out):
    """Moves the complete bundle into place; an old one goes only after."""
    if not os.path.lexists(out):
        os.rename(temporary, out)
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
    if os.path.isdir(old) and not os.path.islink(old):
        shutil.rmtree(old)
    else:
        os.remove(old)


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


def write_model_files(directory, config, tensors, spec):
    """manifest.json with the model_digest, and model.mlir; returns why
    there is no model.mlir (None when it was written)."""
    digest = bd.model_digest(config, tensors)
    transforms = {}
    for entry in tensors:
        if entry["dtype"] == "CQ4" and entry.get("rotation") == qz.HADAMARD:
            with fl.read_tensor(fl.resolve(directory, entry["file"])) as tensor:
                if tensor.layout == fl.PANELS:
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
    bd.write_manifest(directory, bd.manifest(config, tensors, digest))
    return reason


def check_replaceable(out, model_dir):
    """--force replaces only what a conversion made: a cq4p bundle (a
    directory whose manifest.json reads as one) or an empty directory, and
    never the checkpoint being converted or a directory that holds it."""
    model = os.path.realpath(model_dir)
    target = os.path.realpath(out)
    if model == target or model.startswith(target.rstrip(os.sep) + os.sep):
        raise ConvertError(f"{out}: --force would replace the checkpoint being converted "
                           f"({model_dir}) or a directory that holds it")
    if os.path.islink(out) or not os.path.isdir(out):
        raise ConvertError(f"{out}: --force replaces only a bundle directory or an empty one, "
                           f"and this is not a directory")
    if not os.listdir(out):
        return
    try:
        bd.read_manifest(out)
    except bd.BundleError as error:
        raise ConvertError(f"{out}: --force replaces only a cq4p bundle or an empty directory, "
                           f"and this is neither ({error})") from error


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
    if os.path.lexists(out):
        check_replaceable(out, model_dir)
    config = read_config(model_dir)
    entries = checkpoint_tensors(model_dir)
    spec, names = checked_model(model_dir, config, entries)
    wanted = set(names)
    skipped = [entry.name for entry in entries if entry.name not in wanted]
    entries = [entry for entry in entries if entry.name in wanted]
    statistics = read_calibration(calibration)
    deferred_rotations = set()
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", suffix=".tmp", dir=parent)
    try:
        bd.share_as_umask_says(temporary, directory=True)
        for name in skipped:
            print(f"{name}: skipped ({_skip_reason(spec, name)})", file=progress)
        started, total = time.perf_counter(), 0
        records = [None] * len(entries)
        deferred = deferred_rotations = _prefetch_rotations(entries, seed, legacy, quantizer)

        def one(number):
            nonlocal total
            entry = entries[number - 1]
            begin = time.perf_counter()
            try:
                record, line = convert_tensor(temporary, entry, seed, statistics, legacy,
                                              quantizer)
            except bd.BundleError as error:
                raise ConvertError(f"{entry.path}: {error}") from error
            record["sha256"] = bd.file_sha256(fl.resolve(temporary, record["file"]))
            records[number - 1] = record
            count = int(np.prod(entry.shape))
            total += count
            print(f"[{number}/{len(entries)}] {entry.name}: {line}; "
                  f"{_rate(count, time.perf_counter() - begin)}", file=progress, flush=True)

        # The orthogonal tensors go last, while their rotations are made; an
        # error is still the first failing tensor's, in checkpoint order.
        waiting = []
        for number in range(1, len(entries) + 1):
            if number in deferred:
                waiting.append(number)
                continue
            try:
                one(number)
            except BaseException:
                for earlier in waiting:
                    if earlier < number:
                        one(earlier)
                raise
        for number in waiting:
            one(number)
        tensors = records
        print(f"{total} parameters in {time.perf_counter() - started:.1f} s: "
              f"{_rate(total, time.perf_counter() - started)}", file=progress, flush=True)
        reason = write_model_files(temporary, config, tensors, spec)
        if reason:
            print(f"{MODEL_GRAPH}: not written: {reason}", file=progress)
        copied = []
        for name in TOKENIZER_FILES:
            source = os.path.join(model_dir, name)
            if os.path.isfile(source):
                shutil.copyfile(source, os.path.join(temporary, name))
                copied.append(name)
        if copied:
            # The manifest lists the tokenizer's files (the runtime reads them
            # from the bundle: cq4p_model_tokenizer, cq4p-run --prompt).
            content = bd.read_manifest(temporary)
            content["tokenizer_files"] = copied
            bd.write_manifest(temporary, content)
        _replace(temporary, out)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    finally:
        global _NATIVE_BUFFERS
        _NATIVE_BUFFERS = None  # the memory goes with the conversion
        if deferred_rotations:
            from cq4p import native_quantize as nq
            nq.forget_rotations()
    return out
