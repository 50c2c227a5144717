"""A cq4p bundle: one file per tensor plus manifest.json.

The manifest names each tensor's logical file `<stem>.weights`; a loader
opens `<stem>.cq4p.weights`, then `<stem>.cq4.weights`, then the plain name
(`cq4p.files.resolve`). Entries: name, file, shape (as stored),
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

MANIFEST = "manifest.json"
FORMAT_NAME = "cq4p-bundle"
VERSION = 1


class BundleError(ValueError):
    """A bundle that cannot be used; the message is one line."""


def logical_file(name):
    """`<stem>.weights` for a tensor name; names that are not safe file
    names are refused."""
    if (not name or name.startswith(".") or "/" in name or "\\" in name or "\0" in name):
        raise BundleError(f"tensor name {name!r} cannot be a file name in a bundle")
    return name + ".weights"


def manifest(config, tensors, model_digest=None):
    content = {"format": FORMAT_NAME, "version": VERSION,
               "model_type": config.get("model_type"),
               "architectures": list(config.get("architectures") or []),
               "config": config, "tensors": tensors}
    if model_digest is not None:
        content["model_digest"] = model_digest
    return content


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_digest(config, tensors):
    """sha256 of {"config", "tensors"} as JSON with sorted keys and no
    whitespace."""
    canonical = json.dumps({"config": config, "tensors": tensors}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def write_manifest(directory, content):
    """Writes manifest.json atomically (a complete old or new manifest is
    always in place)."""
    handle, temporary = tempfile.mkstemp(prefix=".manifest.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(content, out, indent=1)
            out.write("\n")
        os.replace(temporary, os.path.join(directory, MANIFEST))
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def read_manifest(directory):
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path) as handle:
            content = json.load(handle)
    except OSError as error:
        raise BundleError(f"{path}: cannot read: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise BundleError(f"{path}: not JSON ({error})") from error
    if not isinstance(content, dict) or content.get("format") != FORMAT_NAME:
        raise BundleError(f"{path}: expected format {FORMAT_NAME!r}, found "
                          f"{content.get('format') if isinstance(content, dict) else content!r}")
    if content.get("version") != VERSION:
        raise BundleError(f"{path}: expected version {VERSION}, found {content.get('version')!r}")
    if not isinstance(content.get("tensors"), list):
        raise BundleError(f"{path}: no tensor list")
    return content
