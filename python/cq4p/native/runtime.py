"""ctypes binding of the runtime's C API (runtime/include/cq4p/cq4p.h).

Used to check the Python side against the runtime: the C++ reader
(`open_tensor`) and the reference panel encoder (`encode_panels`,
`codebook_int8`); and to run whole models (`NativeModel`: a bundle and the
model library cq4p-compile built from its model.mlir). The library is
$CQ4P_RUNTIME_LIB, else found under $CQ4P_PREFIX, the source tree's build or
an install prefix (cq4p.native.locate); the enumerations are the C header's
(cq4p.format.constants).
"""

import ctypes
import functools
import os
from pathlib import Path

import numpy as np

from cq4p.format import constants as fmt
from cq4p.format import panels as pn
from cq4p.native import locate

LIBRARY_VARIABLE = locate.RUNTIME_VARIABLE
ERROR_BUFFER_BYTES = 4096

LAYOUT_NAMES = {
    fmt.CQ4P_LAYOUT_ROW_MAJOR: "row_major",
    fmt.CQ4P_LAYOUT_INTERLEAVED_4ROW: "interleaved4row",
    fmt.CQ4P_LAYOUT_PANELS: "panels",
    fmt.CQ4P_LAYOUT_DENSE: "dense",
}
LAYOUT_CODES = {name: code for code, name in LAYOUT_NAMES.items()}
REGION_NAMES = ("data", "codebook", "input_scale", "input_scale_recip", "norms",
                "norm_panels", "left_signs", "right_signs", "permutation", "rotation",
                "rotation_t")


class LibraryNotFoundError(RuntimeError):
    """The runtime's shared library is not built (or not where it was said to be)."""


class NativeError(RuntimeError):
    """A failing call into the runtime: its status code and message.

    `field` is the field a format error names ("path: field: expected ...").
    """

    def __init__(self, code, message, path=None):
        super().__init__(message)
        self.code = code
        self.message = message
        rest = message
        if path is not None and message.startswith(f"{path}: "):
            rest = message[len(path) + 2:]
        self.field = rest.split(": ", 1)[0] if ": " in rest else None


class TensorInfo(ctypes.Structure):
    """struct cq4p_tensor_info."""

    _fields_ = [
        ("flags", ctypes.c_uint32),
        ("alignment", ctypes.c_uint32),
        ("precision", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("dims", ctypes.c_uint64 * 8),
        ("group_size", ctypes.c_uint32),
        ("num_groups", ctypes.c_uint32),
        ("layout", ctypes.c_uint32),
        ("orthogonal", ctypes.c_uint32),
        ("header_bytes", ctypes.c_uint64),
        ("scales_offset", ctypes.c_uint64),
        ("scales_bytes", ctypes.c_uint64),
        ("data_offset", ctypes.c_uint64),
        ("data_bytes", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
    ]


def library_path():
    try:
        return Path(locate.runtime_library())
    except locate.NotFoundError as error:
        raise LibraryNotFoundError(str(error)) from None


@functools.lru_cache(maxsize=None)
def _load(path):
    if not os.path.isfile(path):
        raise LibraryNotFoundError(
            f"cq4p runtime library not found at {path}: build it with "
            f"`scripts/build cq4p_runtime` or set {LIBRARY_VARIABLE}")
    lib = ctypes.CDLL(path)
    u8p, u16p = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint16)
    lib.cq4p_tensor_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.c_char_p, ctypes.c_size_t]
    lib.cq4p_tensor_open.restype = ctypes.c_int
    lib.cq4p_tensor_close.argtypes = [ctypes.c_void_p]
    lib.cq4p_tensor_close.restype = None
    lib.cq4p_tensor_get_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(TensorInfo)]
    lib.cq4p_tensor_get_info.restype = None
    lib.cq4p_tensor_region.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_uint64)]
    lib.cq4p_tensor_region.restype = ctypes.c_void_p
    lib.cq4p_encode_panels.argtypes = [
        ctypes.c_int, u8p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32, u16p, u16p,
        ctypes.c_uint32, u8p, ctypes.POINTER(ctypes.c_float), ctypes.c_char_p, ctypes.c_size_t]
    lib.cq4p_encode_panels.restype = ctypes.c_int
    lib.cq4p_codebook_int8.argtypes = [u16p, ctypes.POINTER(ctypes.c_int8),
                                       ctypes.POINTER(ctypes.c_float), ctypes.c_char_p,
                                       ctypes.c_size_t]
    lib.cq4p_codebook_int8.restype = ctypes.c_int
    check_layout(lib, path)
    return lib


class LayoutEntry(ctypes.Structure):
    """struct cq4p_layout_entry."""

    _fields_ = [("structure", ctypes.c_char_p), ("field", ctypes.c_char_p),
                ("offset", ctypes.c_uint64), ("size", ctypes.c_uint64)]


class LayoutError(LibraryNotFoundError):
    """The runtime library lays a C API structure out otherwise than this
    package's ctypes mirror of it."""


def library_layout(lib, path):
    """{structure: {field (None: the whole structure): (offset, size)}} from
    the library's cq4p_struct_layout table."""
    if not hasattr(lib, "cq4p_struct_layout"):
        raise LayoutError(f"{path} has no cq4p_struct_layout (a runtime older than this "
                          f"package): rebuild the runtime (`scripts/build cq4p_runtime`)")
    function = lib.cq4p_struct_layout
    function.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    function.restype = ctypes.POINTER(LayoutEntry)
    count = ctypes.c_size_t()
    entries = function(ctypes.byref(count))
    table = {}
    for i in range(count.value):
        entry = entries[i]
        field = None if entry.field is None else entry.field.decode()
        table.setdefault(entry.structure.decode(), {})[field] = (entry.offset, entry.size)
    return table


def check_layout(lib, path, mirrors=None):
    """Refuses (LayoutError, naming the structure, the field and both
    layouts) a library whose C API structures differ from their ctypes
    mirrors here: their sizes, their fields' names, offsets and sizes."""
    table = library_layout(lib, path)
    for name, mirror in (MIRRORS if mirrors is None else mirrors).items():
        def refuse(what):
            raise LayoutError(f"{path} lays out struct {name} otherwise than this cq4p "
                              f"package: {what}; rebuild the runtime and the package from one "
                              f"source tree")
        if name not in table:
            refuse("the library does not describe it")
        described = table[name]
        if described.get(None, (0, None))[1] != ctypes.sizeof(mirror):
            refuse(f"{described.get(None, (0, None))[1]} bytes in the library, "
                   f"{ctypes.sizeof(mirror)} in the package")
        fields = [field for field, _ in mirror._fields_]
        missing = [field for field in described if field is not None and field not in fields]
        if missing:
            refuse(f"the library's field {missing[0]} is not in the package's")
        for field in fields:
            if field not in described:
                refuse(f"the package's field {field} is not in the library's")
            ours = getattr(mirror, field)
            theirs = described[field]
            if (ours.offset, ours.size) != theirs:
                refuse(f"field {field} at offset {theirs[0]}, {theirs[1]} bytes in the library, "
                       f"at offset {ours.offset}, {ours.size} bytes in the package")


def library():
    """The loaded runtime library; LibraryNotFoundError when it is missing."""
    return _load(str(library_path()))


def verify_bundle(directory):
    """The runtime's full check of a bundle (cq4p_bundle_verify: the
    manifest, every file against its entry and every content rule of
    docs/FORMAT.md); NativeError with its message when it refuses."""
    lib = library()
    lib.cq4p_bundle_verify.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.cq4p_bundle_verify.restype = ctypes.c_int
    error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
    _check(lib.cq4p_bundle_verify(os.fsencode(str(directory)), error, ERROR_BUFFER_BYTES),
           error)


def check_manifest(directory):
    """The runtime's check of a bundle's manifest.json (cq4p_manifest_check:
    what Bundle::open checks before it opens a tensor); NativeError with its
    message when it refuses, AttributeError from a runtime built before the
    call existed."""
    lib = library()
    lib.cq4p_manifest_check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.cq4p_manifest_check.restype = ctypes.c_int
    error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
    _check(lib.cq4p_manifest_check(os.fsencode(str(directory)), error, ERROR_BUFFER_BYTES),
           error)


def _pointer(array, ctype):
    return array.ctypes.data_as(ctypes.POINTER(ctype))


# The C API's argument types (cq4p.h) and cq4p-run's bounds: every number is
# checked here, before ctypes would wrap it (2^32 + 1 as top_k 1, -1 as seed
# 2^64 - 1) or numpy would fail to hold it (an id of 10^23).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_THREADS = 1024  # ThreadPool::kMaxThreads
MAX_NEW_TOKENS = 1 << 30  # cq4p-run -n


def excerpt(text, limit=locate.ECHO_CHARACTERS):
    """locate.excerpt of `text` (a repr when it is no str)."""
    return locate.excerpt(text if isinstance(text, str) else repr(text), limit)


def _shown_integer(value):
    try:
        return excerpt(str(int(value)))
    except ValueError:  # more digits than Python converts to text
        return f"an integer of {int(value).bit_length()} bits"


class ArgumentError(NativeError):
    """An argument the runtime would refuse or ctypes would wrap, refused
    before the call."""

    def __init__(self, message):
        super().__init__(fmt.CQ4P_ERROR_ARGUMENT, message)


def check_integer(what, value, low, high):
    """`value` as an int in [low, high], or an ArgumentError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{what}: expected an integer, found {excerpt(repr(value))}")
    if not low <= int(value) <= high:
        raise ArgumentError(f"{what}: expected an integer in [{low}, {high}], found "
                            f"{_shown_integer(value)}")
    return int(value)


def check_float32(what, value, low=None, high=None, low_open=False):
    """`value` as a finite float that float32 holds (within [low, high],
    (low, high] when low_open), or an ArgumentError naming it."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ArgumentError(f"{what}: expected a number, found {excerpt(repr(value))}") \
            from None
    shown = excerpt(str(value))
    if not np.isfinite(number) or abs(number) > FLOAT32_MAX:
        raise ArgumentError(f"{what}: expected a finite number (float32), found {shown}")
    if low is not None and (number <= low if low_open else number < low):
        raise ArgumentError(f"{what}: expected a number {'>' if low_open else '>='} {low}, "
                            f"found {shown}")
    if high is not None and number > high:
        raise ArgumentError(f"{what}: expected a number <= {high}, found {shown}")
    return number


def check_sampling(temperature, top_k, top_p, seed):
    """The sampling options as the C API takes them (cq4p_sampling)."""
    return (check_float32("temperature", temperature),
            check_integer("top_k", top_k, 0, INT32_MAX),
            check_float32("top_p", top_p, 0.0, 1.0),
            check_integer("seed", seed, 0, UINT64_MAX))


def utf8(what, text):
    """`text` as UTF-8 bytes; a string that has none (a lone surrogate, as
    Python decodes a command line's invalid bytes) is an ArgumentError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ArgumentError(f"{what}: not valid UTF-8 text ({error.reason} at "
                            f"character {error.start})") from None


def c_text(what, text):
    """`text` (str, or bytes that are UTF-8) as the NUL-terminated UTF-8 the
    C API's text arguments take: a NUL inside it would silently end the
    text there, so it is an ArgumentError, as is text that is not UTF-8."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ArgumentError(f"{what}: not valid UTF-8 text ({error.reason} at byte "
                                f"{error.start} of {len(data)})") from None
    elif isinstance(text, str):
        data = utf8(what, text)
    else:
        raise ArgumentError(f"{what}: expected text (str or UTF-8 bytes), found "
                            f"{type(text).__name__}")
    nul = data.find(b"\0")
    if nul >= 0:
        raise ArgumentError(f"{what}: holds a NUL byte at byte {nul} of {len(data)}; the C API "
                            f"takes NUL-terminated text, so the rest would be lost")
    return data


INT64_MIN = -2**63


def check_ids(what, ids):
    """Token ids as an int64 array, each checked to fit before numpy holds
    it (the runtime refuses a negative id or one past the vocabulary, by
    index)."""
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
        if ids.size and int(ids.max()) > INT64_MAX:
            raise ArgumentError(f"{what}: expected ids that fit int64, found {int(ids.max())}")
        return np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    values = [check_integer(f"{what}[{i}]", t, INT64_MIN, INT64_MAX)
              for i, t in enumerate(np.asarray(ids, dtype=object).reshape(-1))]
    return np.array(values, dtype=np.int64)


def _check(code, error, path=None):
    if code != fmt.CQ4P_OK:
        raise NativeError(code, error.value.decode("utf-8", "replace"), path)


class _Handle:
    """An object of the C API owned from Python: closed (by the C function
    named `_CLOSE`) once, by close(), the with-block's end or collection."""

    _CLOSE = None
    _handle = None

    def close(self):
        if self._handle:
            getattr(self._lib, self._CLOSE)(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class NativeTensor(_Handle):
    """A tensor file opened by the C++ reader (cq4p_tensor_open)."""

    def __init__(self, path):
        self.path = str(path)
        self._handle = None
        self._lib = library()
        handle = ctypes.c_void_p()
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        code = self._lib.cq4p_tensor_open(os.fsencode(self.path), ctypes.byref(handle), error,
                                          ERROR_BUFFER_BYTES)
        _check(code, error, self.path)
        self._handle = handle
        info = TensorInfo()
        self._lib.cq4p_tensor_get_info(handle, ctypes.byref(info))
        self.info = {name: getattr(info, name) for name, _ in TensorInfo._fields_}
        self.info["dims"] = tuple(info.dims)
        self.layout = LAYOUT_NAMES[info.layout]

    def region(self, name):
        """The bytes of a region (b"" when the file has none)."""
        size = ctypes.c_uint64()
        region = getattr(fmt, "CQ4P_REGION_" + name.upper())
        address = self._lib.cq4p_tensor_region(self._handle, region, ctypes.byref(size))
        return ctypes.string_at(address, size.value) if address else b""

    _CLOSE = "cq4p_tensor_close"


def open_tensor(path):
    """Opens and validates a file with the C++ reader; NativeError (with
    .field for a format error) when it refuses the file."""
    return NativeTensor(path)


def codebook_int8(codebook_f16):
    """(cb_i8 int8 [16], cb_scale float32) from the runtime."""
    codebook = np.ascontiguousarray(codebook_f16, dtype=np.float16).view(np.uint16)
    cb_i8 = np.zeros(fmt.CQ4P_CODEBOOK_LEVELS, dtype=np.int8)
    cb_scale = ctypes.c_float()
    error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
    code = library().cq4p_codebook_int8(_pointer(codebook, ctypes.c_uint16),
                                        _pointer(cb_i8, ctypes.c_int8), ctypes.byref(cb_scale),
                                        error, ERROR_BUFFER_BYTES)
    _check(code, error)
    return cb_i8, np.float32(cb_scale.value)


def encode_panels(source_layout, source, n, k, source_gs, norms_f16, codebook_f16, panel_gs):
    """The runtime's reference encoder: legacy data bytes (`source_layout`
    'row_major' or 'interleaved4row'), norms fp16 [N][K/source_gs] and the
    stored codebook -> (panels uint8 [SB][ng][gs/4][128], norm_panels
    float32 [SB][ng][64])."""
    source = np.ascontiguousarray(source, dtype=np.uint8).reshape(-1)
    norms = np.ascontiguousarray(norms_f16, dtype=np.float16).view(np.uint16).reshape(-1)
    codebook = np.ascontiguousarray(codebook_f16, dtype=np.float16).view(np.uint16)
    if source.size < n * k // 2 or norms.size != n * (k // source_gs):
        raise ValueError(f"encode_panels: {source.size} source bytes and {norms.size} norms "
                         f"do not fit N = {n}, K = {k}, source gs = {source_gs}")
    sb, ng = pn.num_super_blocks(n), k // panel_gs
    panels = np.zeros((sb, ng, panel_gs // pn.KG_K, pn.KG_BYTES), dtype=np.uint8)
    norm_panels = np.zeros((sb, ng, pn.CHANNELS), dtype=np.float32)
    error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
    code = library().cq4p_encode_panels(
        LAYOUT_CODES[source_layout], _pointer(source, ctypes.c_uint8), n, k, source_gs,
        _pointer(norms, ctypes.c_uint16), _pointer(codebook, ctypes.c_uint16), panel_gs,
        _pointer(panels, ctypes.c_uint8), _pointer(norm_panels, ctypes.c_float), error,
        ERROR_BUFFER_BYTES)
    _check(code, error)
    return panels, norm_panels


# --- whole models (cq4p_model_*) ---------------------------------------------

class ModelOptions(ctypes.Structure):
    """struct cq4p_model_options."""

    _fields_ = [("threads", ctypes.c_int32), ("context", ctypes.c_int64),
                ("prefill_chunk", ctypes.c_int64)]


class ModelInfo(ctypes.Structure):
    """struct cq4p_model_info."""

    _fields_ = [("vocab", ctypes.c_uint64), ("hidden", ctypes.c_uint64),
                ("layers", ctypes.c_uint64), ("context", ctypes.c_uint64),
                ("prefill_chunk", ctypes.c_uint64), ("position", ctypes.c_uint64),
                ("kv_dtype", ctypes.c_uint32), ("target", ctypes.c_uint32),
                ("architecture", ctypes.c_char * 32)]


class Sampling(ctypes.Structure):
    """struct cq4p_sampling."""

    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64)]


class GenerateStats(ctypes.Structure):
    """struct cq4p_generate_stats."""

    _fields_ = [("prompt_tokens", ctypes.c_int64), ("generated_tokens", ctypes.c_int64),
                ("prefill_seconds", ctypes.c_double), ("decode_seconds", ctypes.c_double),
                ("time_to_first_token_seconds", ctypes.c_double)]


MODEL_FUNCTIONS = {
    "cq4p_model_open": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ModelOptions),
                         ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t],
                        ctypes.c_int),
    "cq4p_model_close": ([ctypes.c_void_p], None),
    "cq4p_model_get_info": ([ctypes.c_void_p, ctypes.POINTER(ModelInfo)], None),
    "cq4p_model_reset": ([ctypes.c_void_p], ctypes.c_int),
    "cq4p_model_verify": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
    "cq4p_model_kernel_variant": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)],
                                  ctypes.c_char_p),
    "cq4p_model_prefill": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64,
                            ctypes.POINTER(ctypes.c_float), ctypes.c_char_p, ctypes.c_size_t],
                           ctypes.c_int),
    "cq4p_model_decode": ([ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_float),
                           ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
    "cq4p_model_generate": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64,
                             ctypes.c_int64, ctypes.POINTER(Sampling),
                             ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(GenerateStats),
                             ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
}


def model_library():
    """The runtime library with its model functions declared; a
    LibraryNotFoundError when it predates them."""
    lib = library()
    for name, (argtypes, restype) in MODEL_FUNCTIONS.items():
        if not hasattr(lib, name):
            raise LibraryNotFoundError(f"{library_path()} has no {name}: rebuild the runtime "
                                       f"(`scripts/build cq4p_runtime`)")
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return lib


class NativeModel(_Handle):
    """A bundle bound to a model library compiled from its model.mlir
    (cq4p_model_open): a sequence with its KV cache, threads and position.
    Every refused call raises NativeError with the runtime's message."""

    def __init__(self, bundle_dir, library_path, threads=1, context=0, prefill_chunk=0):
        self._handle = None
        options = ModelOptions(check_integer("threads", threads, 1, MAX_THREADS),
                               check_integer("context", context, 0, INT64_MAX),
                               check_integer("prefill_chunk", prefill_chunk, 0, INT64_MAX))
        self._lib = model_library()
        handle = ctypes.c_void_p()
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        code = self._lib.cq4p_model_open(os.fsencode(str(bundle_dir)),
                                         os.fsencode(str(library_path)), ctypes.byref(options),
                                         ctypes.byref(handle), error, ERROR_BUFFER_BYTES)
        _check(code, error)
        self._handle = handle

    def info(self):
        info = ModelInfo()
        self._lib.cq4p_model_get_info(_model_handle(self), ctypes.byref(info))
        values = {name: getattr(info, name) for name, _ in ModelInfo._fields_}
        values["architecture"] = info.architecture.decode("utf-8", "replace")
        return values

    def kernel_variant(self):
        """(the x86-64 level whose code runs, how many the library holds):
        ("", 0) for a library that records no variants."""
        count = ctypes.c_uint32()
        name = self._lib.cq4p_model_kernel_variant(_model_handle(self), ctypes.byref(count))
        return name.decode("utf-8"), count.value

    @property
    def vocab(self):
        return self.info()["vocab"]

    @property
    def position(self):
        return self.info()["position"]

    def reset(self):
        code = self._lib.cq4p_model_reset(_model_handle(self))
        if code != fmt.CQ4P_OK:
            raise NativeError(code, "reset: the model is in another call")

    def verify(self):
        """cq4p_model_verify: every file's content and sha256, the
        model_digest and the library's recorded digest; NativeError at the
        first failure."""
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        _check(self._lib.cq4p_model_verify(_model_handle(self), error, ERROR_BUFFER_BYTES), error)

    def prefill(self, ids):
        """Appends `ids`; the logits of the last, float32 [vocab]."""
        ids = check_ids("prefill ids", ids)
        logits = np.empty(self.vocab, dtype=np.float32)
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        code = self._lib.cq4p_model_prefill(_model_handle(self), _pointer(ids, ctypes.c_int64),
                                            ids.size, _pointer(logits, ctypes.c_float), error,
                                            ERROR_BUFFER_BYTES)
        _check(code, error)
        return logits

    def decode(self, token):
        """Appends one token; the next position's logits, float32 [vocab]."""
        token = check_integer("decode id", token, INT64_MIN, INT64_MAX)
        logits = np.empty(self.vocab, dtype=np.float32)
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        code = self._lib.cq4p_model_decode(_model_handle(self), token,
                                           _pointer(logits, ctypes.c_float), error,
                                           ERROR_BUFFER_BYTES)
        _check(code, error)
        return logits

    def generate(self, prompt, count, temperature=0.0, top_k=0, top_p=1.0, seed=0):
        """(new ids, stats dict) of `count` tokens after `prompt` (from
        position 0; temperature <= 0 is greedy)."""
        prompt = check_ids("prompt", prompt)
        count = check_integer("new tokens", count, 0, MAX_NEW_TOKENS)
        options = Sampling(*check_sampling(temperature, top_k, top_p, seed))
        context = self.info()["context"]
        if count > context + 1:
            raise ArgumentError(f"context overflow: {count} new tokens need more positions "
                                f"than the context holds ({context})")
        out = np.zeros(max(count, 1), dtype=np.int64)
        stats = GenerateStats()
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        code = self._lib.cq4p_model_generate(
            _model_handle(self), _pointer(prompt, ctypes.c_int64), prompt.size, count,
            ctypes.byref(options), _pointer(out, ctypes.c_int64), ctypes.byref(stats), error,
            ERROR_BUFFER_BYTES)
        _check(code, error)
        values = {name: getattr(stats, name) for name, _ in GenerateStats._fields_}
        return [int(t) for t in out[:stats.generated_tokens]], values

    _CLOSE = "cq4p_model_close"


class TokenizerInfo(ctypes.Structure):
    """struct cq4p_tokenizer_info."""

    _fields_ = [("kind", ctypes.c_uint32), ("vocab", ctypes.c_int64), ("bos", ctypes.c_int64),
                ("stop_count", ctypes.c_uint32), ("stop_ids", ctypes.c_int64 * 16),
                ("prefix_count", ctypes.c_uint32), ("prefix_ids", ctypes.c_int64 * 4),
                ("chat_format", ctypes.c_char * 48)]


class TextOptions(ctypes.Structure):
    """struct cq4p_text_options."""

    _fields_ = [("max_new_tokens", ctypes.c_int64), ("sampling", Sampling),
                ("stop_strings", ctypes.POINTER(ctypes.c_char_p)),
                ("stop_string_count", ctypes.c_size_t), ("add_special", ctypes.c_int),
                ("ignore_stop_ids", ctypes.c_int)]


class ChatOptions(ctypes.Structure):
    """struct cq4p_chat_options (versioned by its size field)."""

    _fields_ = [("size", ctypes.c_uint32), ("enable_thinking", ctypes.c_int32),
                ("show_thinking", ctypes.c_int32)]


def _chat_options(enable_thinking=False, show_thinking=False):
    return ChatOptions(ctypes.sizeof(ChatOptions), int(bool(enable_thinking)),
                       int(bool(show_thinking)))


TEXT_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                                 ctypes.POINTER(ctypes.c_char), ctypes.c_size_t)
_ERR = [ctypes.c_char_p, ctypes.c_size_t]
_I64P = ctypes.POINTER(ctypes.c_int64)
_SIZEP = ctypes.POINTER(ctypes.c_size_t)
TEXT_FUNCTIONS = {
    "cq4p_tokenizer_open": ([ctypes.c_char_p] * 4 + [ctypes.POINTER(ctypes.c_void_p)] + _ERR,
                            ctypes.c_int),
    "cq4p_tokenizer_open_dir": ([ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)] + _ERR,
                                ctypes.c_int),
    "cq4p_tokenizer_close": ([ctypes.c_void_p], None),
    "cq4p_tokenizer_get_info": ([ctypes.c_void_p, ctypes.POINTER(TokenizerInfo)], None),
    "cq4p_tokenizer_encode": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                               _I64P, ctypes.c_size_t, _SIZEP] + _ERR, ctypes.c_int),
    "cq4p_tokenizer_decode": ([ctypes.c_void_p, _I64P, ctypes.c_size_t, ctypes.c_char_p,
                               ctypes.c_size_t, _SIZEP] + _ERR, ctypes.c_int),
    "cq4p_tokenizer_special_ids": ([ctypes.c_void_p, _I64P, ctypes.c_size_t], ctypes.c_size_t),
    "cq4p_tokenizer_render_chat": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                    ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                    ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, _SIZEP]
                                   + _ERR, ctypes.c_int),
    "cq4p_tokenizer_render_chat_with": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                         ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                         ctypes.c_int, ctypes.POINTER(ChatOptions),
                                         ctypes.c_char_p, ctypes.c_size_t, _SIZEP] + _ERR,
                                        ctypes.c_int),
    "cq4p_model_tokenizer": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)] + _ERR,
                             ctypes.c_int),
    "cq4p_model_generate_text": ([ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                                  ctypes.POINTER(TextOptions), TEXT_CALLBACK, ctypes.c_void_p,
                                  ctypes.POINTER(GenerateStats)] + _ERR, ctypes.c_int),
    "cq4p_chat_open": ([ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                        ctypes.POINTER(ctypes.c_void_p)] + _ERR, ctypes.c_int),
    "cq4p_chat_open_with": ([ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                             ctypes.POINTER(ChatOptions), ctypes.POINTER(ctypes.c_void_p)]
                            + _ERR, ctypes.c_int),
    "cq4p_chat_send": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(TextOptions),
                        TEXT_CALLBACK, ctypes.c_void_p, ctypes.POINTER(GenerateStats)] + _ERR,
                       ctypes.c_int),
    "cq4p_chat_history": ([ctypes.c_void_p, _I64P, ctypes.c_size_t], ctypes.c_size_t),
    "cq4p_chat_close": ([ctypes.c_void_p], None),
}


def text_library():
    """The runtime library with its tokenizer and text functions declared."""
    lib = model_library()
    for name, (argtypes, restype) in TEXT_FUNCTIONS.items():
        if not hasattr(lib, name):
            raise LibraryNotFoundError(f"{library_path()} has no {name}: rebuild the runtime "
                                       f"(`scripts/build cq4p_runtime`)")
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return lib


def _optional_path(path):
    return None if path is None else os.fsencode(str(path))


class NativeTokenizer(_Handle):
    """The runtime's tokenizer (cq4p_tokenizer_*): a tokenizer.json with its
    configs, opened from a directory (a bundle) or from files."""

    def __init__(self, directory=None, tokenizer_json=None, tokenizer_config=None,
                 generation_config=None, chat_template=None, _handle=None, _owner=None):
        self._handle = None
        self._owner = _owner
        self._lib = text_library()
        if _handle is not None:
            self._handle = _handle
            return
        handle = ctypes.c_void_p()
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        if directory is not None:
            code = self._lib.cq4p_tokenizer_open_dir(os.fsencode(str(directory)),
                                                     ctypes.byref(handle), error,
                                                     ERROR_BUFFER_BYTES)
        else:
            code = self._lib.cq4p_tokenizer_open(
                _optional_path(tokenizer_json), _optional_path(tokenizer_config),
                _optional_path(generation_config), _optional_path(chat_template),
                ctypes.byref(handle), error, ERROR_BUFFER_BYTES)
        _check(code, error)
        self._handle = handle

    def _open_handle(self):
        """The handle, or a NativeError when it (or the model owning it) was
        closed: a closed handle is never passed to the runtime."""
        if self._owner is not None and not self._owner._handle:
            raise NativeError(fmt.CQ4P_ERROR_ARGUMENT,
                              "tokenizer: its model was closed (a model's tokenizer lives as "
                              "long as the model)")
        if not self._handle:
            raise NativeError(fmt.CQ4P_ERROR_ARGUMENT, "tokenizer: closed")
        return self._handle

    def info(self):
        info = TokenizerInfo()
        self._lib.cq4p_tokenizer_get_info(self._open_handle(), ctypes.byref(info))
        kinds = {fmt.CQ4P_TOKENIZER_BYTE_LEVEL_BPE: "byte-level BPE",
                 fmt.CQ4P_TOKENIZER_SENTENCEPIECE_BPE: "SentencePiece-style BPE"}
        return {"kind": kinds.get(info.kind, str(info.kind)), "vocab": info.vocab,
                "bos": info.bos, "stop_ids": list(info.stop_ids[:min(info.stop_count, 16)]),
                "prefix_ids": list(info.prefix_ids[:min(info.prefix_count, 4)]),
                "chat_format": info.chat_format.decode("utf-8", "replace")}

    def special_tokens(self):
        """[(id, text)] of the added tokens marked special."""
        handle = self._open_handle()
        count = self._lib.cq4p_tokenizer_special_ids(handle, None, 0)
        ids = np.zeros(max(count, 1), dtype=np.int64)
        self._lib.cq4p_tokenizer_special_ids(handle, _pointer(ids, ctypes.c_int64), count)
        return [(int(i), self.decode([int(i)])) for i in ids[:count]]

    def encode(self, text, add_special=True):
        """The ids of `text` (str or UTF-8 bytes)."""
        data = utf8("text", text) if isinstance(text, str) else bytes(text)
        capacity = len(data) + 16
        while True:
            ids = np.zeros(capacity, dtype=np.int64)
            count = ctypes.c_size_t()
            error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
            code = self._lib.cq4p_tokenizer_encode(self._open_handle(), data, len(data),
                                                   int(add_special),
                                                   _pointer(ids, ctypes.c_int64), capacity,
                                                   ctypes.byref(count), error,
                                                   ERROR_BUFFER_BYTES)
            if code == fmt.CQ4P_ERROR_ARGUMENT and count.value > capacity:
                capacity = count.value
                continue
            _check(code, error)
            return [int(i) for i in ids[:count.value]]

    def decode(self, ids):
        """The text of `ids` (str; invalid sequences as U+FFFD)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        capacity = 16 * ids.size + 64
        while True:
            text = ctypes.create_string_buffer(capacity)
            length = ctypes.c_size_t()
            error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
            code = self._lib.cq4p_tokenizer_decode(self._open_handle(), _pointer(ids, ctypes.c_int64),
                                                   ids.size, text, capacity,
                                                   ctypes.byref(length), error,
                                                   ERROR_BUFFER_BYTES)
            if code == fmt.CQ4P_ERROR_ARGUMENT and length.value + 1 > capacity:
                capacity = length.value + 1
                continue
            _check(code, error)
            return text.raw[:length.value].decode("utf-8")

    def render_chat(self, messages, add_generation_prompt=True, enable_thinking=False):
        """The text of [{"role", "content"}] in the tokenizer's chat format;
        enable_thinking: Gemma 4's thinking (refused by other formats)."""
        options = _chat_options(enable_thinking)
        role_bytes = [c_text(f"messages[{i}] role", m["role"]) for i, m in enumerate(messages)]
        content_bytes = [c_text(f"messages[{i}] content", m["content"])
                         for i, m in enumerate(messages)]
        roles = (ctypes.c_char_p * max(len(messages), 1))(*role_bytes)
        contents = (ctypes.c_char_p * max(len(messages), 1))(*content_bytes)
        capacity = 256 + sum(len(c) for c in content_bytes) * 2
        while True:
            text = ctypes.create_string_buffer(capacity)
            length = ctypes.c_size_t()
            error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
            code = self._lib.cq4p_tokenizer_render_chat_with(
                self._open_handle(), roles, contents, len(messages), int(add_generation_prompt),
                ctypes.byref(options), text, capacity, ctypes.byref(length), error,
                ERROR_BUFFER_BYTES)
            if code == fmt.CQ4P_ERROR_ARGUMENT and length.value + 1 > capacity:
                capacity = length.value + 1
                continue
            _check(code, error)
            return text.raw[:length.value].decode("utf-8")

    def close(self):
        # A model's tokenizer is the model's to close.
        if self._handle and self._owner is None:
            self._lib.cq4p_tokenizer_close(self._handle)
        self._handle = None


def _text_options(max_new_tokens, temperature, top_k, top_p, seed, stop_strings, add_special,
                  ignore_stop_ids):
    max_new_tokens = check_integer("new tokens", max_new_tokens, 0, MAX_NEW_TOKENS)
    sampling = Sampling(*check_sampling(temperature, top_k, top_p, seed))
    if isinstance(stop_strings, (str, bytes)):
        stop_strings = [stop_strings]  # one stop string, not its characters
    stops = [c_text(f"stop string {i}", s) for i, s in enumerate(stop_strings or [])]
    array = (ctypes.c_char_p * max(len(stops), 1))(*stops)
    options = TextOptions(max_new_tokens, sampling,
                          ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p)), len(stops),
                          int(add_special), int(ignore_stop_ids))
    return options, array


class _TextCallback:
    """The C callback of a text call: collects the ids and the text, calls
    on_text(piece). An exception there (KeyboardInterrupt too) cannot cross
    the C frames: it is kept, the generation is stopped (the callback
    returns 0) and raise_pending() raises it once the call has returned."""

    def __init__(self, on_text):
        self.ids, self.pieces = [], []
        self.error = None
        self._on_text = on_text
        self.function = TEXT_CALLBACK(self._call)

    def _call(self, _context, token, text, length):
        if self.error is not None:
            return 0
        try:
            if token >= 0:
                self.ids.append(int(token))
            piece = ctypes.string_at(text, length).decode("utf-8") if length else ""
            self.pieces.append(piece)
            if self._on_text is not None and piece:
                self._on_text(piece)
        except BaseException as error:  # noqa: B902 - re-raised after the call
            self.error = error
            return 0
        return 1

    def raise_pending(self):
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _stats_dict(stats):
    return {name: getattr(stats, name) for name, _ in GenerateStats._fields_}


def _model_handle(model):
    """A NativeModel's handle, or a NativeError when it was closed."""
    if not model._handle:
        raise NativeError(fmt.CQ4P_ERROR_ARGUMENT, "model: closed")
    return model._handle


def model_tokenizer(model):
    """The bundle's tokenizer of a NativeModel (owned by the model)."""
    lib = text_library()
    handle = ctypes.c_void_p()
    error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
    _check(lib.cq4p_model_tokenizer(_model_handle(model), ctypes.byref(handle), error,
                                    ERROR_BUFFER_BYTES), error)
    return NativeTokenizer(_handle=handle, _owner=model)


def generate_text(model, prompt, max_new_tokens, tokenizer=None, temperature=0.0, top_k=0,
                  top_p=1.0, seed=0, stop_strings=None, add_special=True, ignore_stop_ids=False,
                  on_text=None):
    """(ids, text, stats) of a generation from a text prompt through the C API
    (cq4p_model_generate_text); on_text(piece) sees the text as it streams."""
    lib = text_library()
    options, _keep = _text_options(max_new_tokens, temperature, top_k, top_p, seed,
                                   stop_strings, add_special, ignore_stop_ids)
    text = c_text("prompt", prompt)
    callback = _TextCallback(on_text)
    stats = GenerateStats()
    error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
    code = lib.cq4p_model_generate_text(_model_handle(model),
                                        tokenizer._open_handle() if tokenizer else None,
                                        text, ctypes.byref(options), callback.function,
                                        None, ctypes.byref(stats), error, ERROR_BUFFER_BYTES)
    callback.raise_pending()
    _check(code, error)
    return callback.ids, "".join(callback.pieces), _stats_dict(stats)


class NativeChat(_Handle):
    """A conversation through the C API (cq4p_chat_*): each send() prefills
    only the new turn after the previous one's KV cache. Gemma 4:
    enable_thinking puts <|think|> in the system turn; the model's thought
    channel is left out of the text send() returns and streams unless
    show_thinking."""

    def __init__(self, model, system_prompt=None, tokenizer=None, enable_thinking=False,
                 show_thinking=False):
        self._handle = None
        self._model = model
        self._lib = text_library()
        handle = ctypes.c_void_p()
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        options = _chat_options(enable_thinking, show_thinking)
        code = self._lib.cq4p_chat_open_with(
            _model_handle(model), tokenizer._open_handle() if tokenizer else None,
            c_text("system prompt", system_prompt) if system_prompt else None,
            ctypes.byref(options), ctypes.byref(handle), error, ERROR_BUFFER_BYTES)
        _check(code, error)
        self._handle = handle

    def send(self, text, max_new_tokens, temperature=0.0, top_k=0, top_p=1.0, seed=0,
             stop_strings=None, ignore_stop_ids=False, on_text=None):
        options, _keep = _text_options(max_new_tokens, temperature, top_k, top_p, seed,
                                       stop_strings, False, ignore_stop_ids)
        data = c_text("text", text)
        callback = _TextCallback(on_text)
        stats = GenerateStats()
        error = ctypes.create_string_buffer(ERROR_BUFFER_BYTES)
        code = self._lib.cq4p_chat_send(self._open_handle(), data, ctypes.byref(options),
                                        callback.function, None, ctypes.byref(stats), error,
                                        ERROR_BUFFER_BYTES)
        callback.raise_pending()
        _check(code, error)
        return callback.ids, "".join(callback.pieces), _stats_dict(stats)

    def _open_handle(self):
        """The handle, or a NativeError when the chat or its model was
        closed (a chat uses its model's memory)."""
        if not self._model._handle:
            raise NativeError(fmt.CQ4P_ERROR_ARGUMENT, "chat: its model was closed")
        if not self._handle:
            raise NativeError(fmt.CQ4P_ERROR_ARGUMENT, "chat: closed")
        return self._handle

    def history(self):
        handle = self._open_handle()
        count = self._lib.cq4p_chat_history(handle, None, 0)
        ids = np.zeros(max(count, 1), dtype=np.int64)
        self._lib.cq4p_chat_history(handle, _pointer(ids, ctypes.c_int64), count)
        return [int(i) for i in ids[:count]]

    _CLOSE = "cq4p_chat_close"


# The C API's structures this module mirrors, checked against the library's
# own layout table (cq4p_struct_layout) when it is loaded.
MIRRORS = {
    "cq4p_tensor_info": TensorInfo,
    "cq4p_model_options": ModelOptions,
    "cq4p_model_info": ModelInfo,
    "cq4p_sampling": Sampling,
    "cq4p_generate_stats": GenerateStats,
    "cq4p_tokenizer_info": TokenizerInfo,
    "cq4p_text_options": TextOptions,
    "cq4p_chat_options": ChatOptions,
    "cq4p_layout_entry": LayoutEntry,
}
