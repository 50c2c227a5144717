"""A cq4p bundle: one file per tensor plus manifest.json.

The manifest names each tensor's logical file `<stem>.weights`; a loader
opens `<stem>.cq4p.weights`, then `<stem>.cq4.weights`, then the plain name
(`cq4p.io.bundle.resolve`). Entries: name, file, shape (as stored),
original_shape (the checkpoint's), dtype (CQ4, FP16 or FP32), sha256 (of
the file's bytes) and, for CQ4, rotation, layout and group_size.

A bundle of a whole model also records `model_digest`: the sha256 of a
canonical JSON of its config and tensor list. Since the list carries each
file's sha256, the digest names these exact weights; a library compiled from
the bundle's model.mlir carries it too, and the runtime refuses a library
whose digest differs from the bundle's.
"""

import hashlib
import json
import os
import tempfile

from cq4p.format import constants as fmt

MANIFEST = "manifest.json"
FORMAT_NAME = "cq4p-bundle"
VERSION = 1

MODEL_GRAPH = "model.mlir"
# The tokenizer's files convert copies from the checkpoint (the runtime reads
# tokenizer.json, tokenizer_config.json, generation_config.json and
# chat_template.jinja by these names; the others travel with them).
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "generation_config.json", "chat_template.jinja")
# Every file a bundle ships besides manifest.json and the tensors: each has
# its sha256 in the manifest's `files_sha256` (bundles converted before it
# have none), checked by every verification.
SHIPPED_FILES = (MODEL_GRAPH,) + TOKENIZER_FILES
FILES_SHA256 = "files_sha256"

PANEL_SUFFIX = ".cq4p.weights"
LEGACY_SUFFIX = ".cq4.weights"
PLAIN_SUFFIX = ".weights"


class BundleError(ValueError):
    """A bundle that cannot be used; the message is one line."""


def sync_directory(directory):
    """fsync a directory, so that the names renamed or created in it last
    (a bundle's files, a prepared model's entry) are on disk."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def logical_file(name):
    """`<stem>.weights` for a tensor name; names that are not safe file
    names are refused."""
    if (not name or name.startswith(".") or "/" in name or "\\" in name or "\0" in name):
        raise BundleError(f"tensor name {name!r} cannot be a file name in a bundle")
    return name + ".weights"


def manifest(config, tensors, model_digest=None, extra=None):
    """The manifest's content; `extra`: further members (tokenizer_files,
    files_sha256)."""
    content = {"format": FORMAT_NAME, "version": VERSION,
               "model_type": config.get("model_type"),
               "architectures": list(config.get("architectures") or []),
               "config": config, "tensors": tensors}
    if model_digest is not None:
        content["model_digest"] = model_digest
    content.update(extra or {})
    return content


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped_file_sha256(directory, name):
    """The sha256 of a bundle's file `name`, opened as the runtime opens it:
    a plain name relative to the bundle, a regular file, never through a
    symbolic link. BundleError naming the file otherwise."""
    from cq4p.io import reader as rd
    path = os.path.join(directory, name)
    try:
        fd = rd.open_regular(path, confined=True)
    except rd.FormatError as error:
        raise BundleError(str(error)) from None
    except OSError as error:
        raise BundleError(f"{path}: cannot open: {error.strerror}") from None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_shipped_files(directory, content):
    """The files besides the tensors against the manifest (Bundle::verify's
    checks, in its order and words): each file of `files_sha256` hashed and
    compared, and no file of SHIPPED_FILES present that it does not list;
    a manifest without `files_sha256` (an older bundle) checks that each
    of its `tokenizer_files` is a regular file inside the bundle. Returns
    (names hashed, names present that no digest covers); raises BundleError."""
    recorded = content.get(FILES_SHA256)
    if recorded is None:
        for name in content.get("tokenizer_files") or []:
            shipped_file_sha256(directory, name)
        uncovered = [name for name in SHIPPED_FILES
                     if os.path.lexists(os.path.join(directory, name))]
        return [], uncovered
    for name, sha256 in recorded.items():
        found = shipped_file_sha256(directory, name)
        if found != sha256:
            raise BundleError(f"{os.path.join(directory, name)}: sha256 {sha256} in "
                              f"manifest.json {FILES_SHA256}, but the file gives {found} (the "
                              f"file was changed after conversion)")
    for name in SHIPPED_FILES:
        if name not in recorded and os.path.lexists(os.path.join(directory, name)):
            raise BundleError(f"{os.path.join(directory, name)}: not in manifest.json "
                              f"{FILES_SHA256} (added after conversion; cq4p reads it)")
    return list(recorded), []

def model_digest(config, tensors):
    """sha256 of {"config", "tensors"} as JSON with sorted keys and no
    whitespace."""
    canonical = json.dumps({"config": config, "tensors": tensors}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share_as_umask_says(path, directory=False):
    """mkstemp and mkdtemp create owner-only files; a bundle's files get the
    mode a plain open() or mkdir() would have given them (0666 or 0777
    less the umask)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def write_manifest(directory, content):
    """Writes manifest.json atomically (a complete old or new manifest is
    always in place)."""
    handle, temporary = tempfile.mkstemp(prefix=".manifest.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(content, out, indent=1)
            out.write("\n")
        share_as_umask_says(temporary)
        os.replace(temporary, os.path.join(directory, MANIFEST))
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


# Every reader's bounds on a manifest (format.h).
MAX_MANIFEST_BYTES = fmt.CQ4P_MAX_MANIFEST_BYTES
MAX_JSON_DEPTH = fmt.CQ4P_MAX_MANIFEST_NESTING
MAX_SHAPE_DIMS = fmt.CQ4P_MAX_SHAPE_DIMS
DTYPES = ("CQ4", "FP16", "FP32")


def refuse_duplicates(pairs):
    names = set()
    for key, _ in pairs:
        if key in names:
            raise _JsonRefusal(f"duplicate member name \"{key}\"")
        names.add(key)
    return dict(pairs)


def refuse_constant(name):
    raise _JsonRefusal(f"{name} is not JSON")


def finite_number(text):
    """A JSON number as json.loads reads it, refusing (as the runtime's
    reader does) one past the double range, which Python would read as inf
    or as an int no other reader holds."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _JsonRefusal(f"number overflow parsing '{text}'")
    return value if any(c in text for c in ".eE") else int(text)


class _JsonRefusal(ValueError):
    pass


def json_depth(value):
    """Nesting depth of a parsed document, the top value at 0 (the
    runtime's reader refuses a value deeper than MAX_JSON_DEPTH)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((member, depth + 1) for member in item.values())
        elif isinstance(item, list):
            stack.extend((member, depth + 1) for member in item)
    return deepest


def _read_manifest_text(path):
    """The bytes of manifest.json, read as the runtime reads them: a regular
    file directly in the bundle, not a symbolic link, bounded in size."""
    from cq4p.io import reader as rd  # the reader imports nothing of bundles
    try:
        fd = rd.open_regular(path, confined=True)
    except rd.FormatError as error:
        raise BundleError(str(error)) from None
    except OSError as error:
        raise BundleError(f"{path}: cannot open: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_MANIFEST_BYTES:
            raise BundleError(f"{path}: size: expected at most {MAX_MANIFEST_BYTES} bytes, "
                              f"found {size}")
        return handle.read(MAX_MANIFEST_BYTES + 1)


def _runtime_checks_manifest(directory):
    """Whether the runtime's validator (cq4p_manifest_check) passed the
    manifest: False when the runtime library is not built; BundleError with
    its message when it refuses."""
    from cq4p.native import runtime as native  # native imports nothing of bundles
    try:
        native.check_manifest(directory)
    except (native.LibraryNotFoundError, AttributeError):
        return False
    except native.NativeError as error:
        raise BundleError(error.message) from None
    return True


def read_manifest(directory, runtime=True):
    """manifest.json, checked before any tensor file is touched. Raises
    BundleError. The runtime's validator decides when the runtime library is
    built (one set of rules for every reader); without it (or with
    `runtime=False`) the Python reader below checks the same rules in the
    same order, with the same wording."""
    path = os.path.join(directory, MANIFEST)
    if runtime and _runtime_checks_manifest(directory):
        return json.loads(_read_manifest_text(path))
    raw = _read_manifest_text(path)
    try:
        text = raw.decode("utf-8")
        content = json.loads(text, object_pairs_hook=refuse_duplicates,
                             parse_constant=refuse_constant, parse_float=finite_number,
                             parse_int=finite_number)
    except UnicodeDecodeError as error:
        raise BundleError(f"{path}: invalid JSON: not UTF-8 at byte {error.start}") from None
    except _JsonRefusal as error:
        raise BundleError(f"{path}: invalid JSON: {error}") from None
    except json.JSONDecodeError as error:
        raise BundleError(f"{path}:{error.lineno}:{error.colno}: invalid JSON: "
                          f"{error.msg}") from None
    except RecursionError:
        raise BundleError(f"{path}: invalid JSON: nesting deeper than "
                          f"{MAX_JSON_DEPTH}") from None
    if json_depth(content) > MAX_JSON_DEPTH:
        raise BundleError(f"{path}: invalid JSON: nesting deeper than {MAX_JSON_DEPTH}")
    _check_manifest(path, content)
    return content


def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_manifest(path, content):
    def refuse(message):
        raise BundleError(f"{path}: {message}")

    if not isinstance(content, dict):
        refuse("expected a JSON object at the top")
    if content.get("format") != FORMAT_NAME:
        refuse(f"format: expected \"{FORMAT_NAME}\"")
    version = content.get("version")
    if not _is_integer(version) or version != VERSION:
        refuse(f"version: expected {VERSION}, found "
               f"{version if isinstance(version, (int, float)) else 'none'}")
    tensors = content.get("tensors")
    if not isinstance(tensors, list):
        refuse("tensors: expected an array")
    if "model_digest" in content and (not isinstance(content["model_digest"], str)
                                      or not content["model_digest"]):
        refuse("model_digest: expected a non-empty string")
    if "config" in content and not isinstance(content["config"], dict):
        refuse("config: expected an object")
    _check_shipped_members(refuse, content)
    names = set()
    for i, entry in enumerate(tensors):
        entry = entry if isinstance(entry, dict) else {}
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            refuse(f"tensors[{i}]: expected a non-empty \"name\"")
        where = f"tensor '{name}'"
        if name in names:
            refuse(f"{where}: listed twice")
        names.add(name)
        if not is_plain_file_name(entry.get("file")):
            refuse(f"{where}: expected \"file\" to be a file name inside the bundle")
        if entry.get("dtype") not in DTYPES:
            refuse(f"{where}: expected \"dtype\" CQ4, FP16 or FP32")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not 1 <= len(shape) <= MAX_SHAPE_DIMS:
            refuse(f"{where}: expected \"shape\" to list 1 to {MAX_SHAPE_DIMS} dimensions")
        if not all(_is_integer(dim) and 0 < dim < 1 << 63 for dim in shape):
            refuse(f"{where}: expected positive integer dimensions in \"shape\"")
        if _is_whole_per_layer_table(name, entry, shape, content.get("config")):
            refuse(f"{where}: the per-layer embedding table is stored as one "
                   f"[{shape[0]}, {shape[1]}] orthogonal tensor, a layout this cq4p no longer "
                   f"runs (a {shape[1]} x {shape[1]} rotation read for every token); "
                   f"reconvert the checkpoint with `python -m cq4p convert`, which stores it "
                   f"as rows of one layer each")
        if "sha256" in entry and not _is_sha256(entry["sha256"]):
            refuse(f"{where}: expected \"sha256\" to be 64 lowercase hex digits")


def shown(value):
    """A manifest value in a message: its JSON (ASCII), at most 80
    characters (the runtime's shownJson)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_shipped_members(refuse, content):
    """`tokenizer_files` and `files_sha256`, confined like every other name:
    plain file names inside the bundle, listed once; each digest 64
    lowercase hex digits; every tokenizer file with a digest when the
    manifest records digests (Bundle::open's checks, in its order and words)."""
    files = content.get("tokenizer_files")
    if files is not None:
        if not isinstance(files, list):
            refuse("tokenizer_files: expected an array of file names")
        listed = set()
        for i, name in enumerate(files):
            if not is_plain_file_name(name) or name == MANIFEST:
                refuse(f"tokenizer_files[{i}]: expected the name of a file inside the bundle "
                       f"(not manifest.json), found {shown(name)}")
            if name in listed:
                refuse(f"tokenizer_files[{i}]: {shown(name)} listed twice")
            listed.add(name)
    digests = content.get(FILES_SHA256)
    if digests is None:
        return
    if not isinstance(digests, dict):
        refuse(f"{FILES_SHA256}: expected an object of file names and sha256 digests")
    for name, sha256 in digests.items():
        if not is_plain_file_name(name) or name == MANIFEST:
            refuse(f"{FILES_SHA256}: expected the name of a file inside the bundle "
                   f"(not manifest.json), found {shown(name)}")
        if not _is_sha256(sha256):
            refuse(f"{FILES_SHA256}: {shown(name)}: expected 64 lowercase hex digits")
    for i, name in enumerate(files or []):
        if name not in digests:
            refuse(f"tokenizer_files[{i}]: {shown(name)} has no sha256 in {FILES_SHA256}")


def _is_whole_per_layer_table(name, entry, shape, config):
    """Gemma 4's per-layer embedding table stored with the checkpoint's rows
    ([vocab, layers * width], one wide rotation), the layout converters
    wrote before it was stored as rows of one layer each. With one layer
    the two layouts are the same rows."""
    original = entry.get("original_shape")
    if not (entry.get("dtype") == "CQ4" and name.endswith("embed_tokens_per_layer.weight")
            and len(shape) == 2 and isinstance(original, list) and len(original) == 2
            and _is_integer(original[0]) and original[0] == shape[0]):
        return False
    config = config if isinstance(config, dict) else {}
    for fields in (config.get("text_config"), config):
        if isinstance(fields, dict) and "num_hidden_layers" in fields:
            layers = fields["num_hidden_layers"]
            return not (_is_integer(layers) and layers == 1)
    return True


def _is_sha256(text):
    return (isinstance(text, str) and len(text) == 64
            and all(c in "0123456789abcdef" for c in text))


def file_stem(logical_name):
    if not logical_name.endswith(PLAIN_SUFFIX):
        raise ValueError(f"logical file name {logical_name!r} does not end in {PLAIN_SUFFIX}")
    return logical_name[:-len(PLAIN_SUFFIX)]


def is_plain_file_name(name):
    """True when `name` can only name a file directly inside a directory
    (the runtime's isPlainFileName)."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
            and "\\" not in name and "\0" not in name)


def resolve(directory, logical_name):
    """The file a loader opens for `<stem>.weights`: `<stem>.cq4p.weights`,
    then `<stem>.cq4.weights`, then the plain name (None if none exists).
    A candidate present as a symbolic link, a FIFO or a device is returned,
    so that opening it (read_tensor(..., confined=True)) refuses it by name
    rather than falling through to the next candidate. A name that is not a
    plain file name is a ValueError."""
    if not is_plain_file_name(logical_name):
        raise ValueError(f"file {logical_name!r}: expected a file name inside the bundle")
    stem = (logical_name[:-len(PLAIN_SUFFIX)] if logical_name.endswith(PLAIN_SUFFIX)
            and len(logical_name) > len(PLAIN_SUFFIX) else None)
    names = ([stem + PANEL_SUFFIX, stem + LEGACY_SUFFIX] if stem else []) + [logical_name]
    for name in names:
        candidate = os.path.join(directory, name)
        if os.path.lexists(candidate):
            return candidate
    return None


def open_tensor(directory, entry):
    """The validated, mapped file of a checked manifest entry, compared with
    the entry as the runtime compares them (shape, dtype, rotation, layout).
    Raises BundleError naming the tensor."""
    from cq4p.io import reader as rd
    where = f"tensor '{entry['name']}'"
    path = resolve(directory, entry["file"])
    if path is None:
        raise BundleError(f"{directory}: {where}: no file for '{entry['file']}' (looked for "
                          f"the .cq4p.weights, .cq4.weights and plain names)")
    try:
        tensor = rd.read_tensor(path, confined=True)
    except rd.FormatError as error:
        raise BundleError(f"{where}: {error}") from None
    except OSError as error:
        raise BundleError(f"{where}: {path}: cannot open: {error.strerror}") from None
    try:
        _compare(directory, where, entry, tensor)
    except BaseException:
        tensor.close()
        raise
    return tensor


def check_files(directory, manifest):
    """Opens and compares every entry of a checked manifest, as the runtime
    does when it opens the bundle; raises BundleError at the first that it
    would refuse. Tools that change or run a bundle call this first."""
    for entry in manifest["tensors"]:
        open_tensor(directory, entry).close()


def _compare(directory, where, entry, tensor):
    def disagree(field, manifest_value, file_value):
        raise BundleError(f"{directory}: {where}: {field} {manifest_value} in manifest.json, "
                          f"but {file_value} in {tensor.path}")

    dims = list(tensor.dims)
    if list(entry["shape"]) != dims:
        disagree("shape", _shape(entry["shape"]), _shape(dims))
    if entry["dtype"] != tensor.precision_name:
        disagree("dtype", entry["dtype"], tensor.precision_name)
    if tensor.precision_name == "CQ4":
        rotation = "orthogonal" if tensor.orthogonal else "hadamard"
        if "rotation" in entry and entry["rotation"] != rotation:
            disagree("rotation", f"'{entry['rotation']}'", rotation)
        if "layout" in entry and entry["layout"] != tensor.layout:
            disagree("layout", f"'{entry['layout']}'", tensor.layout)


def _shape(dims):
    return "[" + ", ".join(str(d) for d in dims) + "]"
