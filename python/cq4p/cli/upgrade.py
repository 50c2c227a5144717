"""`python -m cq4p upgrade BUNDLE`: legacy CQ4 files -> packed-panel files.

Each legacy file (row-major or 4-row interleaved, `<stem>.cq4.weights`) is
rewritten as `<stem>.cq4p.weights` from its stored values: the same fp16
codebook and norms (a legacy row-major Hadamard file is not pre-scaled and
stays so; cb_scale absorbs it), the same input scales and rotation, so the
dequantized weight is unchanged. The panel file is written under a
temporary name and renamed into place, the manifest is updated atomically,
and only then is the legacy file removed. Tensors that cannot be panels
(orthogonal K % 128 != 0, a Hadamard group size panels do not allow) stay
as they are and are reported. The model_digest and model.mlir follow the
new tensor list.
"""

import os
import tempfile
from dataclasses import dataclass

from cq4p.cli import convert as cv
from cq4p.format import constants as fmt
from cq4p.format import layout as ly
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import writer as wr
from cq4p.model import architecture as arch


@dataclass
class Outcome:
    name: str
    action: str  # "upgraded", "kept" or "already panels"
    detail: str = ""

    def __str__(self):
        return f"{self.action}: {self.name}" + (f" ({self.detail})" if self.detail else "")


def _write_panels(directory, stem, tensor):
    final = os.path.join(directory, stem + bd.PANEL_SUFFIX)
    handle, temporary = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=directory)
    os.close(handle)
    try:
        wr.write_panel_file(temporary, tensor.stored())
        rd.read_tensor(temporary).close()
        bd.share_as_umask_says(temporary)
        os.replace(temporary, final)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return final


def upgrade_tensor(directory, manifest, record):
    """Upgrades one manifest entry in place; returns its Outcome."""
    name = record["name"]
    with bd.open_tensor(directory, record) as tensor:
        path = tensor.path
        if tensor.layout == ly.DENSE:
            return None
        if tensor.layout == ly.PANELS:
            record["layout"], record["group_size"] = ly.PANELS, tensor.group_size
            return Outcome(name, "already panels")
        if not tensor.orthogonal and "embed_tokens" in name:
            # docs/FORMAT.md section 3: panels are for non-embedding Hadamard
            # tensors; an embedding's rows are read row by row.
            return Outcome(name, "kept", f"{tensor.layout}: a Hadamard embedding stays "
                                         f"row-major (panels are for non-embedding tensors)")
        rotation = "orthogonal" if tensor.orthogonal else "hadamard"
        refusal = wr.panel_refusal(rotation, tensor.k, tensor.group_size)
        if refusal:
            return Outcome(name, "kept", f"{tensor.layout}: {refusal}")
        legacy_layout = tensor.layout
        group_size = (fmt.CQ4P_ORTHOGONAL_VIRTUAL_GROUP if tensor.orthogonal
                      else tensor.group_size)
        final = _write_panels(directory, bd.file_stem(record["file"]), tensor)
    record["layout"], record["group_size"] = ly.PANELS, group_size
    record["sha256"] = bd.file_sha256(final)
    bd.write_manifest(directory, manifest)
    if os.path.realpath(path) != os.path.realpath(final):
        os.remove(path)
    return Outcome(name, "upgraded", f"{legacy_layout} -> panels")


def upgrade(directory):
    """Upgrades every legacy CQ4 file of a bundle; returns the Outcomes."""
    manifest = bd.read_manifest(directory)
    # Nothing is written unless the runtime would open the bundle as it is.
    bd.check_files(directory, manifest)
    outcomes = []
    for record in manifest["tensors"]:
        if record.get("dtype") != "CQ4":
            continue
        outcome = upgrade_tensor(directory, manifest, record)
        if outcome is not None:
            outcomes.append(outcome)
    _rewrite_model_files(directory, manifest)
    return outcomes


def _rewrite_model_files(directory, manifest):
    """The tensor list changed, so the model_digest did; model.mlir is
    rewritten with it (or written at last, once every weight is panels).
    A bundle that is not a model cq4p runs keeps a plain manifest."""
    config = manifest.get("config") or {}
    try:
        spec = arch.model_spec(config)
    except arch.ArchitectureError:
        bd.write_manifest(directory, manifest)
        return
    spec = arch.with_checkpoint_names(spec, [entry["name"] for entry in manifest["tensors"]])
    # The tokenizer's files are kept as they are, with their recorded digests.
    extra = {key: manifest[key] for key in ("tokenizer_files", bd.FILES_SHA256)
             if key in manifest}
    cv.write_model_files(directory, config, manifest["tensors"], spec, extra)
