"""`python -m cq4p inspect PATH`: what a tensor file or a bundle holds.

For a file: the header, flags by name, layout, every region (offset, bytes,
type, shape), norm statistics and the codebook (with its int8 form). For a
bundle: one line per manifest tensor, each file opened and compared with
its entry by the runtime's rules. `--deep` checks every content rule of
docs/FORMAT.md as well, and the bundle's integrity: each file's sha256 against
its entry's, the model_digest recomputed from the manifest (a file
swapped for another of the same shape, a config edited after conversion)
and model.mlir's and the tokenizer files' sha256 against files_sha256. A file that does not validate gets the verdict line
"INVALID: <message>" and the command exits with status 1.
"""

import os

import numpy as np

from cq4p.format import layout as ly
from cq4p.format import panels as pn
from cq4p.io import bundle as bd
from cq4p.io import reader as rd

EXIT_OK = 0
EXIT_INVALID = 1


def _stats(values):
    values = np.asarray(values, dtype=np.float64)
    return (f"min {values.min():.6g} max {values.max():.6g} mean {values.mean():.6g}"
            if values.size else "empty")


def _precision(tensor):
    return f"{tensor.precision_name} ({tensor.precision})"


def describe(tensor):
    """The lines `inspect` prints for a validated file."""
    flags = " | ".join(ly.flag_names(tensor.flags)) or "none"
    lines = [f"file: {tensor.path}",
             f"header: magic CACT, {tensor.header_bytes} bytes, alignment {tensor.alignment}, "
             f"file {tensor.file_bytes} bytes",
             f"precision: {_precision(tensor)}",
             f"flags: 0x{tensor.flags:x} ({flags})"]
    if tensor.layout == ly.DENSE:
        lines.append(f"layout: dense, shape {' x '.join(map(str, tensor.dims))}")
    else:
        rotation = "orthogonal" if tensor.orthogonal else "hadamard"
        lines += [f"layout: {tensor.layout}, rotation {rotation}",
                  f"shape: N {tensor.n} x K {tensor.k}, original_n {tensor.original_n}, "
                  f"group_size {tensor.group_size}, num_groups {tensor.num_groups}"]
    lines.append(f"scales: offset {tensor.scales_offset}, {tensor.scales_bytes} bytes; "
                 f"data: offset {tensor.data_offset}, {tensor.data_bytes} bytes")
    lines.append("regions:")
    for name, (offset, size) in tensor.regions.items():
        view = getattr(tensor, name)
        shape = "x".join(map(str, view.shape))
        lines.append(f"  {name:<18} offset {offset:>10}  bytes {size:>10}  "
                     f"{view.dtype.str} [{shape}]")
    if tensor.layout == ly.DENSE:
        lines.append(f"values: {_stats(tensor.data)}")
        return lines
    lines.append(f"norms (stored fp16): {_stats(tensor.norms)}")
    if tensor.norm_panels is not None:
        lines.append(f"norm_panels (folded fp32): {_stats(tensor.norm_panels)}")
    codebook = tensor.codebook.astype(np.float32)
    lines.append("codebook: " + " ".join(f"{x:.6g}" for x in codebook))
    cb_i8, cb_scale = pn.codebook_int8(tensor.codebook)
    lines.append(f"cb_i8: {' '.join(map(str, cb_i8))} (cb_scale {cb_scale:.9g})")
    return lines


def inspect_file(path, out, deep=False):
    try:
        tensor = rd.read_tensor(path)
    except rd.FormatError as error:
        print(f"INVALID: {error}", file=out)
        return EXIT_INVALID
    with tensor:
        for line in describe(tensor):
            print(line, file=out)
        if deep:
            try:
                rd.verify_content(tensor)
            except rd.FormatError as error:
                print(f"INVALID: {error}", file=out)
                return EXIT_INVALID
            print("content: every rule of FORMAT.md holds", file=out)
    print("verdict: OK", file=out)
    return EXIT_OK


def _bundle_line(directory, record, deep=False):
    """(ok, line) for a manifest entry: its file opened and compared with
    the entry by the rules the runtime's Bundle::open applies (and with
    `deep`, its content checked as Bundle::verify does)."""
    name = record["name"]
    try:
        with bd.open_tensor(directory, record) as tensor:
            if deep:
                try:
                    rd.verify_content(tensor)
                except rd.FormatError as error:
                    return False, f"{name}: INVALID: tensor '{name}': {error}"
                recorded = record.get("sha256")
                if recorded is not None:
                    found = bd.file_sha256(tensor.path)
                    if found != recorded:
                        return False, (f"{name}: INVALID: {directory}: tensor '{name}': sha256 "
                                       f"{recorded} in manifest.json, but {found} for "
                                       f"{tensor.path} (the file is not the one converted)")
            shape = "x".join(map(str, tensor.dims))
            kind = tensor.precision_name
            if tensor.layout != ly.DENSE:
                rotation = "orthogonal" if tensor.orthogonal else "hadamard"
                kind += f" {rotation} {tensor.layout} gs {tensor.group_size}"
            original = record.get("original_shape")
            if original and len(original) == 2 and len(tensor.dims) == 2 and \
                    original[0] != tensor.dims[0]:
                # A table stored as rows of one layer each.
                shape += (f" ({tensor.dims[0] // original[0]} rows per checkpoint row of "
                          f"{'x'.join(map(str, original))})")
            elif original and list(original) != list(tensor.dims):
                # A K the converter zero-padded: the model's true shape.
                shape += f" (true shape {'x'.join(map(str, original))})"
            return True, f"{name}: {os.path.basename(tensor.path)} {kind} {shape}"
    except bd.BundleError as error:
        return False, f"{name}: INVALID: {error}"


def inspect_bundle(directory, out, deep=False):
    try:
        manifest = bd.read_manifest(directory)
    except bd.BundleError as error:
        print(f"INVALID: {error}", file=out)
        return EXIT_INVALID
    print(f"bundle: {directory} ({manifest.get('model_type')}, "
          f"{len(manifest['tensors'])} tensors)", file=out)
    failures = 0
    for record in manifest["tensors"]:
        ok, line = _bundle_line(directory, record, deep)
        failures += not ok
        print(line, file=out)
    digest_ok = shipped_ok = True
    if deep:
        digest_ok = _digest_line(directory, manifest, out)
        shipped_ok = _shipped_line(directory, manifest, out)
    _tokenizer_lines(directory, out)
    if failures:
        verdict = f"INVALID: {failures} tensors"
    elif not digest_ok:
        verdict = "INVALID: model_digest"
    elif not shipped_ok:
        verdict = f"INVALID: {bd.FILES_SHA256}"
    else:
        verdict = "OK"
    print(f"verdict: {verdict}", file=out)
    return EXIT_OK if verdict == "OK" else EXIT_INVALID


def _digest_line(directory, manifest, out):
    """The model_digest recomputed from the manifest's config and tensor
    list (which holds every file's sha256) against the recorded one, as
    the runtime's Bundle::verifyIntegrity does; False on a mismatch."""
    digest = bd.model_digest(manifest.get("config"), manifest["tensors"])
    recorded = manifest.get("model_digest")
    if recorded is None:
        print(f"model_digest: not recorded (the content gives {digest})", file=out)
        return True
    if recorded != digest:
        print(f"model_digest: INVALID: {directory}/manifest.json: model_digest {recorded} "
              f"recorded, but the config and tensor list give {digest} (the manifest was "
              f"edited after conversion)", file=out)
        return False
    print(f"model_digest: {digest} (matches the config, the tensor list and every sha256)",
          file=out)
    return True


def _shipped_line(directory, manifest, out):
    """The files besides the tensors (model.mlir, the tokenizer's) against
    files_sha256, as the runtime's Bundle::verify checks them; False when
    one is refused."""
    try:
        hashed, uncovered = bd.verify_shipped_files(directory, manifest)
    except bd.BundleError as error:
        print(f"{bd.FILES_SHA256}: INVALID: {error}", file=out)
        return False
    if bd.FILES_SHA256 in manifest:
        print(f"{bd.FILES_SHA256}: {len(hashed)} files match (model.mlir and the tokenizer's)",
              file=out)
    if uncovered:
        print(f"{bd.FILES_SHA256}: not recorded; not covered by any digest: "
              f"{', '.join(uncovered)} (the manifest predates {bd.FILES_SHA256}; convert the "
              f"checkpoint again to cover them)", file=out)
    return True


def _tokenizer_lines(directory, out):
    """The bundle's tokenizer as the runtime reads it: kind, vocabulary,
    special tokens, stop ids, chat format."""
    if not os.path.isfile(os.path.join(directory, "tokenizer.json")):
        return
    from cq4p.native import runtime as native
    try:
        with native.NativeTokenizer(directory=directory) as tokenizer:
            info = tokenizer.info()
            specials = tokenizer.special_tokens()
    except native.LibraryNotFoundError as error:
        print(f"tokenizer: tokenizer.json (not read: {error})", file=out)
        return
    except native.NativeError as error:
        print(f"tokenizer: REFUSED by the runtime: {error.message}", file=out)
        return
    print(f"tokenizer: {info['kind']}, vocab {info['vocab']}, BOS "
          f"{info['bos'] if info['bos'] >= 0 else 'none'}, added before the text "
          f"{info['prefix_ids'] or 'nothing'}, stop ids {info['stop_ids']}, chat format "
          f"{info['chat_format']}", file=out)
    shown = ", ".join(f"{text}={token}" for token, text in specials[:12])
    more = f" and {len(specials) - 12} more" if len(specials) > 12 else ""
    print(f"special tokens: {len(specials)}: {shown}{more}", file=out)


def inspect(path, out, deep=False):
    """Prints what PATH holds; returns the exit status. `deep`: also every
    content rule of docs/FORMAT.md (a full pass over each file, as the runtime's
    `cq4p-run --verify` does), where the default reads headers only."""
    if os.path.isdir(path):
        return inspect_bundle(path, out, deep)
    return inspect_file(path, out, deep)
