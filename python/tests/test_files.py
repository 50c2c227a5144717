"""Tensor files: layouts, dequantization, and the C++ reader on files the
Python side writes."""

import math
import os

import numpy as np
import pytest

from conftest import RELATIVE_ERRORS, gaussian_weight, relative_error
from cq4p.format import constants as fmt
from cq4p.format import layout as ly
from cq4p.format import legacy as lg
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import writer as wr
from cq4p.native import runtime as native
from cq4p.quant import quantize as qz

CASES = [(64, 256, 128), (192, 512, 128), (100, 256, 128), (256, 256, 256), (30, 200, 128)]
# 4-bit Lloyd-Max on rotated Gaussian data gives about 0.096; fp16 storage
# adds little. A wrong rotation, codebook or layout gives errors near 1.
ERROR_BOUND = 0.12
# With an input scale the weight is quantized as w * s and divided by s
# again, which amplifies the error of columns with s < 1: the plain weight
# error grows (the activation-weighted error is what the scale improves).
SCALED_ERROR_BOUND = 0.15


def write_all_layouts(directory, qw, stem):
    paths = {}
    for layout, writer in wr.WRITERS.items():
        if layout == ly.INTERLEAVED and wr.interleaved_refusal(qw.rotation, qw.n, qw.k,
                                                               qw.group_size):
            continue
        if layout == ly.PANELS and wr.panel_refusal(qw.rotation, qw.k, qw.group_size):
            continue
        paths[layout] = os.path.join(directory, f"{stem}.{layout}.weights")
        writer(paths[layout], qw)
    return paths


def oracle_dequantize(qw):
    """docs/FORMAT.md section 2 written plainly, one row and group at a time, in
    float64."""
    levels = qw.codebook.astype(np.float64)
    s = qw.input_scale.astype(np.float64)
    gs = qw.group_size
    if qw.orthogonal:
        rot = qw.rotation_matrix.astype(np.float64)
    else:
        h = qz.sylvester_hadamard(gs).astype(np.float64)
        rot = (np.diag(qw.left_signs.astype(np.float64)) @ h / math.sqrt(gs)
               @ np.diag(qw.right_signs.astype(np.float64)))[:, qw.permutation]
    out = np.zeros((qw.n, qw.k))
    for row in range(qw.n):
        for g in range(qw.k // gs):
            columns = slice(g * gs, (g + 1) * gs)
            code = levels[qw.indices[row, columns]]
            out[row, columns] = float(qw.norms[row, g]) * (code @ rot.T) / s[columns]
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("prescale", [True, False], ids=["prescaled", "raw"])
@pytest.mark.parametrize("scaled", [False, True], ids=["unit_scale", "input_scale"])
def test_layouts_dequantize_identically_hadamard(tmp_path, case, prescale, scaled):
    n, k, gs = case
    w = gaussian_weight(n, k, sum(case))
    scale = np.random.default_rng(1).uniform(0.5, 2.0, k) if scaled else None
    qw = qz.quantize_hadamard(w, gs, seed=2, input_scale=scale, prescale=prescale)
    paths = write_all_layouts(tmp_path, qw, "w")
    assert ly.PANELS in paths and ly.ROW_MAJOR in paths
    dequantized = {}
    for layout, path in paths.items():
        with rd.read_tensor(path) as tensor:
            assert tensor.layout == layout
            assert np.array_equal(tensor.indices(), qw.indices)
            dequantized[layout] = tensor.dequantize()
    reference = dequantized[ly.ROW_MAJOR]
    for layout, values in dequantized.items():
        assert np.max(np.abs(values - reference)) == 0.0, layout
    assert np.allclose(reference, oracle_dequantize(qw), rtol=1e-4, atol=1e-5)
    error = relative_error(reference[:, :k], w)
    label = (f"hadamard {n}x{k} gs {gs} {'prescaled' if prescale else 'raw'} codebook"
             f"{', input scale' if scaled else ''}")
    RELATIVE_ERRORS[label] = error
    assert error < (SCALED_ERROR_BOUND if scaled else ERROR_BOUND)


def test_layouts_dequantize_identically_orthogonal(tmp_path, orthogonal_weight):
    w, qw = orthogonal_weight
    paths = write_all_layouts(tmp_path, qw, "o")
    assert set(paths) == {ly.PANELS, ly.ROW_MAJOR, ly.INTERLEAVED}
    dequantized = {}
    for layout, path in paths.items():
        with rd.read_tensor(path) as tensor:
            assert tensor.group_size == (128 if layout == ly.PANELS else 1536)
            dequantized[layout] = tensor.dequantize()
    reference = dequantized[ly.ROW_MAJOR]
    for layout, values in dequantized.items():
        assert np.max(np.abs(values - reference)) == 0.0, layout
    error = relative_error(reference, w)
    RELATIVE_ERRORS["orthogonal 68x1536 (virtual groups of 128)"] = error
    assert error < ERROR_BOUND


def test_dequantize_matches_the_oracle_orthogonal(tmp_path):
    w = gaussian_weight(12, 64, 3)
    qw = qz.quantize_orthogonal(w, seed=1, input_scale=np.linspace(0.5, 2, 64))
    path = tmp_path / "o.weights"
    wr.write_row_major_file(path, qw)
    with rd.read_tensor(path) as tensor:
        assert np.allclose(tensor.dequantize(), oracle_dequantize(qw), rtol=1e-4, atol=1e-5)


def test_panel_file_layout_and_prescaled_codebook(tmp_path):
    qw = qz.quantize_hadamard(gaussian_weight(100, 256, 0), 128, seed=0, prescale=True)
    path = tmp_path / "h.weights"
    wr.write_panel_file(path, qw)
    raw = path.read_bytes()
    n, k, gs, ng, sb = 100, 256, 128, 2, 2
    scales = 32 + 2 * k + 2 * k + 2 * n * ng
    scales = -(-scales // 4) * 4 + 4 * sb * ng * 64 + gs + gs + 4 * gs
    data_offset = -(-(96 + scales) // 32) * 32
    assert len(raw) == data_offset + 128 * k // 2
    assert raw[:4] == b"CACT" and raw[84:96] == bytes(12)
    with rd.read_tensor(path) as tensor:
        assert tensor.scales_offset == 96 and tensor.scales_bytes == scales
        assert tensor.data_offset == data_offset
        # Zero-copy, read-only views of the mapping.
        for region in ("data", "norms", "norm_panels", "permutation"):
            view = getattr(tensor, region)
            assert not view.flags.writeable and not view.flags.owndata
        assert np.max(np.abs(tensor.codebook.astype(np.float32))) == 127
        folded = tensor.norm_panels.transpose(0, 2, 1).reshape(128, ng)
        assert np.array_equal(folded[:n], tensor.norms.astype(np.float32))  # cb_scale 1
        assert not folded[n:].any()


def test_interleaved_byte_order(tmp_path):
    indices = np.zeros((4, 32), dtype=np.uint8)
    indices[2, 8 + 1] = 3  # chunk 1, j = 1: low nibble of byte (row 2, 1)
    indices[2, 8 + 5] = 9  # chunk 1, j = 1 + 4: high nibble of the same byte
    packed = lg.pack_interleaved(indices, 32)
    assert packed.shape == (1, 1, 4, 4, 4)
    assert packed[0, 0, 1, 2, 1] == 3 | 9 << 4 and np.count_nonzero(packed) == 1
    assert np.array_equal(lg.unpack_interleaved(packed, 4, 32, 32), indices)
    # Row-major: k even in the low nibble; k = 9 and 13 are odd.
    assert lg.pack_row_major(indices)[2, 4] == 3 << 4 and lg.pack_row_major(indices)[2, 6] == 9 << 4


def test_dense_files_and_the_extended_header(tmp_path):
    values = np.arange(2 * 3 * 1 * 2 * 5, dtype=np.float32).reshape(2, 3, 1, 2, 5)
    path = tmp_path / "x.weights"
    wr.write_dense_file(path, values, ly.FP32)
    raw = path.read_bytes()
    assert len(raw) == 128 + values.nbytes  # 116-byte header, data at 128
    with rd.read_tensor(path) as tensor:
        assert tensor.header_bytes == 116 and tensor.dims == (2, 3, 1, 2, 5)
        assert tensor.flags == fmt.CQ4P_FLAG_EXTENDED_SHAPE
        assert np.array_equal(tensor.data, values)
    small = tmp_path / "y.weights"
    wr.write_dense_file(small, np.ones(3, dtype=np.float16), ly.FP16)
    with rd.read_tensor(small) as tensor:
        assert tensor.header_bytes == 84 and tensor.original_n == 3 and tensor.flags == 0
        assert tensor.group_size == 0 and tensor.num_groups == 0


def native_region_cases(directory, orthogonal_qw):
    qw = qz.quantize_hadamard(gaussian_weight(100, 256, 9), 128, seed=3)
    qw_raw = qz.quantize_hadamard(gaussian_weight(96, 256, 9), 128, seed=3, prescale=False)
    small_orthogonal = qz.quantize_orthogonal(gaussian_weight(8, 96, 4), seed=1)
    files = {
        "hadamard_panels": (wr.write_panel_file, qw),
        "orthogonal_panels": (wr.write_panel_file, orthogonal_qw),
        "hadamard_row_major": (wr.write_row_major_file, qw),
        "hadamard_interleaved": (wr.write_interleaved_file, qw_raw),
        "orthogonal_row_major": (wr.write_row_major_file, small_orthogonal),
        "orthogonal_interleaved": (wr.write_interleaved_file, small_orthogonal),
    }
    paths = {}
    for name, (writer, weight) in files.items():
        paths[name] = os.path.join(directory, name + ".weights")
        writer(paths[name], weight)
    paths["fp16"] = os.path.join(directory, "fp16.weights")
    wr.write_dense_file(paths["fp16"], np.linspace(-1, 1, 35).reshape(5, 7).astype(np.float16),
                        ly.FP16)
    paths["fp32_extended"] = os.path.join(directory, "fp32.weights")
    wr.write_dense_file(paths["fp32_extended"], np.ones((1, 2, 3, 4, 5, 6), np.float32), ly.FP32)
    return paths


def test_native_reader_sees_the_same_regions(tmp_path, orthogonal_weight):
    paths = native_region_cases(tmp_path, orthogonal_weight[1])
    for name, path in paths.items():
        with rd.read_tensor(path) as tensor, native.open_tensor(path) as opened:
            info = opened.info
            assert opened.layout == tensor.layout, name
            for field in ("flags", "alignment", "precision", "ndim", "group_size", "num_groups",
                          "header_bytes", "scales_offset", "scales_bytes", "data_offset",
                          "data_bytes", "file_bytes"):
                assert info[field] == getattr(tensor, field), (name, field)
            assert info["dims"][:tensor.ndim] == tensor.dims and not any(info["dims"][tensor.ndim:])
            assert bool(info["orthogonal"]) == tensor.orthogonal
            for region in rd.TensorFile.REGION_NAMES:
                view = getattr(tensor, region)
                expected = b"" if view is None else view.tobytes()
                assert opened.region(region) == expected, (name, region)
                if view is not None:
                    assert tensor.regions[region][1] == len(expected)


def test_missing_native_library_is_an_error_not_a_skip(monkeypatch, tmp_path):
    monkeypatch.setenv(native.LIBRARY_VARIABLE, str(tmp_path / "absent.so"))
    with pytest.raises(native.LibraryNotFoundError, match="absent.so"):
        native.library()


def test_resolve_prefers_panels_then_legacy_then_plain(tmp_path):
    assert bd.resolve(tmp_path, "a.weights") is None
    for name in ("a.weights", "a.cq4.weights", "a.cq4p.weights"):
        (tmp_path / name).write_bytes(b"")
        assert bd.resolve(tmp_path, "a.weights") == str(tmp_path / name)
