"""Gemma 4's per-layer embedding table, stored as rows of one layer each
(docs/MODEL.md): the converter's layout, checked against the checkpoint
with plain numpy, and the refusal of bundles of the layout before it."""

import json
import os
import subprocess

import numpy as np
import pytest

from cq4p.cli import convert as cv
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import safetensors as st
from cq4p.model import ir
from cq4p.model import synthetic
from cq4p.native import tools

TABLE = "model.language_model.embed_tokens_per_layer.weight"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("gemma4")
    shape = synthetic.default_shape("gemma4", layers=5, vocab=192)
    config = synthetic.write_model(str(root / "checkpoint"), "gemma4", shape)
    with open(os.devnull, "w") as quiet:
        cv.convert(str(root / "checkpoint"), str(root / "bundle"), progress=quiet)
    checkpoint = {entry.name: entry for path in sorted((root / "checkpoint").glob("*.safetensors"))
                  for entry in st.read_header(str(path))}
    return root, config, shape, st.load(checkpoint[TABLE])


def _entry(bundle, name):
    return {e["name"]: e for e in bd.read_manifest(str(bundle))["tensors"]}[name]


def test_the_table_is_stored_as_rows_of_one_layer(converted):
    root, _, shape, table = converted
    layers, width = shape.layers, synthetic.GEMMA4_PLE
    entry = _entry(root / "bundle", TABLE)
    assert entry["shape"] == [shape.vocab * layers, width]
    assert entry["original_shape"] == [shape.vocab, layers * width]
    assert entry["rotation"] == "orthogonal"
    with rd.read_tensor(bd.resolve(str(root / "bundle"), entry["file"])) as tensor:
        rotation = np.array(tensor.rotation, dtype=np.float64)
        norms = tensor.group_norms()[:, 0]
        values = tensor.dequantize()
    # One width x width rotation for every row (fp16, orthogonal to fp16's
    # precision), not a (layers x width)-wide one.
    assert rotation.shape == (width, width)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(width), atol=5e-3)
    # Row id * layers + l is layer l's slice of token id's row: its norm is
    # that slice's L2 norm, and its values the slice's within CQ4's error.
    slices = table.reshape(shape.vocab * layers, width).astype(np.float64)
    np.testing.assert_allclose(norms.astype(np.float64), np.linalg.norm(slices, axis=1),
                               rtol=1e-3)
    error = np.linalg.norm(values - slices, axis=1) / np.linalg.norm(slices, axis=1)
    assert float(np.median(error)) < 0.15
    # A slice read from a neighbouring layer or token would not be close.
    shifted = np.roll(slices, 1, axis=0)
    assert float(np.median(np.linalg.norm(values - shifted, axis=1)
                           / np.linalg.norm(slices, axis=1))) > 1.0


def test_the_graph_decodes_a_tokens_rows_side_by_side(converted):
    root, _, shape, _ = converted
    graph = (root / "bundle" / "model.mlir").read_text()
    layers, width = shape.layers, synthetic.GEMMA4_PLE
    line = next(line for line in graph.splitlines() if "%ple_tok_rows = cq4p.embedding" in line)
    assert f"rows_per_id = {layers} : i64" in line
    assert f"!cq4p.weight<{shape.vocab * layers}x{width}, gs = 128, orthogonal, panels>" in line
    assert line.endswith(f"-> tensor<?x{layers * width}xf32>")


def _old_layout(bundle, out):
    """The bundle with its table's manifest entry as converters wrote it
    before (the checkpoint's rows, one wide row per token)."""
    manifest = bd.read_manifest(str(bundle))
    for entry in manifest["tensors"]:
        if entry["name"] == TABLE:
            entry["shape"] = list(entry["original_shape"])
    os.makedirs(out)
    with open(os.path.join(out, bd.MANIFEST), "w") as handle:
        json.dump(manifest, handle)
    return out


@pytest.mark.parametrize("runtime", [True, False], ids=["runtime", "python"])
def test_a_bundle_of_the_old_layout_is_refused(converted, tmp_path, runtime):
    root, _, shape, _ = converted
    if runtime and not bd._runtime_checks_manifest(str(root / "bundle")):
        pytest.skip("the runtime library is not built")
    old = _old_layout(root / "bundle", str(tmp_path / "old"))
    layers, width = shape.layers, synthetic.GEMMA4_PLE
    with pytest.raises(bd.BundleError) as error:
        bd.read_manifest(old, runtime=runtime)
    message = str(error.value)
    assert f"tensor '{TABLE}': the per-layer embedding table is stored as one" in message
    assert f"{shape.vocab}, {layers * width}]" in message
    assert "reconvert the checkpoint with `python -m cq4p convert`" in message


def test_the_graph_writer_refuses_the_old_layout(converted):
    root, config, _, _ = converted
    manifest = bd.read_manifest(str(root / "bundle"))
    tensors = [dict(e, shape=list(e["original_shape"])) if e["name"] == TABLE else e
               for e in manifest["tensors"]]
    checkpoint = str(root / "checkpoint")
    spec, _ = cv.checked_model(checkpoint, config, cv.checkpoint_tensors(checkpoint))
    with pytest.raises(ir.GraphError, match="one per token and layer"):
        ir.model_graph(spec, tensors, "d")


def test_the_oracle_decodes_the_tables_rows_when_read(converted):
    """Reference.from_bundle keeps the table in its file and dequantizes
    the rows of the ids it is given: the full dequantization's rows."""
    from cq4p.model import reference as rf
    root, _, shape, _ = converted
    entry = _entry(root / "bundle", TABLE)
    path = bd.resolve(str(root / "bundle"), entry["file"])
    rows = rf.PanelRows(path, entry["original_shape"])
    with rd.read_tensor(path) as tensor:
        full = tensor.dequantize().reshape(entry["original_shape"])
    ids = np.array([0, 5, 64, 65, shape.vocab - 1, 5])
    np.testing.assert_allclose(rows[ids], full[ids], rtol=1e-5, atol=1e-6 * np.abs(full).max())
    with pytest.raises(IndexError):
        rows[[shape.vocab]]


def test_the_lazy_oracle_computes_the_dense_oracles_logits(converted):
    """With the token embedding kept in its panels (a full-size model's
    oracle), the tied logits come from PanelRows.project: the dense
    oracle's, up to fp32 rounding."""
    from cq4p.model import reference as rf
    root, config, _, _ = converted
    ids = synthetic.prompt(config, 6, seed=2)
    dense = rf.Reference.from_bundle(str(root / "bundle")).forward(ids)
    lazy = rf.Reference.from_bundle(str(root / "bundle"), lazy_embedding=True).forward(ids)
    np.testing.assert_allclose(lazy, dense, rtol=0, atol=1e-4 * float(np.std(dense)))


@pytest.mark.parametrize("runtime", [True, False], ids=["runtime", "python"])
def test_a_one_layer_model_converts_reads_and_compiles(tmp_path, runtime):
    # With one layer the table's checkpoint rows are already rows of one
    # layer each: the same bytes in both layouts, nothing to refuse.
    shape = synthetic.default_shape("gemma4", layers=1, vocab=192)
    synthetic.write_model(str(tmp_path / "checkpoint"), "gemma4", shape)
    with open(os.devnull, "w") as quiet:
        cv.convert(str(tmp_path / "checkpoint"), str(tmp_path / "bundle"), progress=quiet)
    if runtime and not bd._runtime_checks_manifest(str(tmp_path / "bundle")):
        pytest.skip("the runtime library is not built")
    entry = _entry(tmp_path / "bundle", TABLE)
    assert entry["shape"] == entry["original_shape"] == [shape.vocab, synthetic.GEMMA4_PLE]
    bd.read_manifest(str(tmp_path / "bundle"), runtime=runtime)
    if runtime:
        result = subprocess.run([tools.find_tool("cq4p-compile"),
                                 str(tmp_path / "bundle" / "model.mlir"), "--target=host",
                                 "-o", str(tmp_path / "model.so")],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
