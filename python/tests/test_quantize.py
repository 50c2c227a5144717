"""Codebooks, rotations and input scales against independent oracles."""

import math

import numpy as np
import pytest

from cq4p import quantize as qz

# Max (1960): the 16-level Lloyd-Max quantizer of a unit Gaussian, positive half.
GAUSSIAN_LLOYD_MAX_16 = [0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6180, 2.0690, 2.7326]


def test_codebook_for_large_d_is_the_gaussian_lloyd_max_quantizer():
    # A coordinate of a random unit vector in d dims is ~ N(0, 1/d) for large d.
    levels = qz.lloyd_max_codebook(1 << 20) * math.sqrt(1 << 20)
    assert np.allclose(levels[8:], GAUSSIAN_LLOYD_MAX_16, atol=2e-3)
    assert np.allclose(levels[:8], -np.array(GAUSSIAN_LLOYD_MAX_16[::-1]), atol=2e-3)


@pytest.mark.parametrize("d", [8, 32, 128, 1536])
def test_codebook_satisfies_the_lloyd_max_conditions(d):
    # Independent check by direct quadrature of the unnormalised density:
    # every level is the mean of its cell, cells split at the midpoints.
    levels = qz.lloyd_max_codebook(d)
    assert np.all(np.diff(levels) > 0)
    x = np.linspace(-1, 1, 2_000_001)[1:-1]
    density = (1 - x * x) ** ((d - 3) / 2)
    bounds = np.concatenate(([-1.0], (levels[1:] + levels[:-1]) / 2, [1.0]))
    for i, level in enumerate(levels):
        cell = (x >= bounds[i]) & (x < bounds[i + 1])
        centroid = np.sum(x[cell] * density[cell]) / np.sum(density[cell])
        assert abs(centroid - level) < 2e-4 * levels[-1], (i, centroid, level)


def test_codebook_is_cached_and_not_shared_mutably():
    first = qz.lloyd_max_codebook(128)
    first[:] = 0
    assert np.all(qz.lloyd_max_codebook(128) != 0)


def test_sylvester_hadamard_is_natural_order():
    h = qz.sylvester_hadamard(64).astype(np.int64)
    i, j = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    parity = np.vectorize(lambda v: bin(v).count("1") % 2)(i & j)
    assert np.array_equal(h, 1 - 2 * parity)
    assert np.array_equal(h @ h.T, 64 * np.eye(64, dtype=np.int64))


def test_hadamard_rotation_matches_its_definition_and_the_transform():
    left, right, permutation = qz.hadamard_components(128, seed=3)
    assert set(np.unique(left)) <= {-1, 1} and left.dtype == np.int8
    assert sorted(permutation) == list(range(128)) and permutation.dtype == np.uint32
    rot = qz.hadamard_rotation(left, right, permutation)
    h = qz.sylvester_hadamard(128).astype(np.float64)
    expected = (np.diag(left) @ h @ np.diag(right) / math.sqrt(128))[:, permutation]
    assert np.allclose(rot, expected, atol=1e-15)
    assert np.allclose(rot @ rot.T, np.eye(128), atol=1e-12)
    # FORMAT.md section 5: x*left, FWHT / sqrt(gs), *right, z[j] = w[perm[j]].
    x = np.random.default_rng(0).standard_normal(128)
    w = (h @ (x * left)) / math.sqrt(128) * right
    assert np.allclose(x @ rot, w[permutation])


def test_rotations_are_seeded():
    a = qz.hadamard_components(128, 1)
    assert all(np.array_equal(x, y) for x, y in zip(a, qz.hadamard_components(128, 1)))
    assert not np.array_equal(a[2], qz.hadamard_components(128, 2)[2])
    r = qz.orthogonal_rotation(64, 1)
    assert np.allclose(r @ r.T, np.eye(64), atol=1e-12)
    assert np.array_equal(r, qz.orthogonal_rotation(64, 1))
    # The sign fix: Q's columns are oriented so that R's diagonal is positive.
    gaussian = np.random.default_rng(1 + 17 * 64).standard_normal((64, 64))
    assert np.all(np.diag(r.T @ gaussian) > 0)


def test_input_scale_from_statistics():
    stat = np.array([1.0, 4.0, 16.0, 1e-9, 1e9, 2.0])
    s = qz.input_scale_from_statistics(stat)
    raw = np.sqrt(stat)
    expected = np.clip(raw / math.exp(np.mean(np.log(raw))), 1 / 8, 8)
    assert np.allclose(s, expected)
    assert s.min() == 1 / 8 and s.max() == 8
    s16, isr = qz.stored_input_scales(6, s)
    assert s16.dtype == np.float16 and isr.dtype == np.float16
    assert np.array_equal(isr, np.minimum(1 / s16.astype(np.float64), 65504).astype(np.float16))
    ones, ones_recip = qz.stored_input_scales(3)
    assert np.all(ones == 1) and np.all(ones_recip == 1)


def test_hadamard_quantization_pads_k_and_uses_the_nearest_level():
    w = np.random.default_rng(2).standard_normal((5, 200))
    qw = qz.quantize_hadamard(w, 128, seed=4, prescale=False)
    assert qw.indices.shape == (5, 256) and qw.norms.shape == (5, 2)
    assert qw.original_shape == (5, 200)
    padded = np.zeros((5, 256))
    padded[:, :200] = w
    groups = padded.reshape(5, 2, 128)
    norms = np.linalg.norm(groups, axis=2)
    assert np.array_equal(qw.norms, norms.astype(np.float16))
    rot = qz.hadamard_rotation(qw.left_signs, qw.right_signs, qw.permutation)
    rotated = (groups / norms[..., None]) @ rot
    levels = qz.lloyd_max_codebook(128)
    nearest = np.argmin(np.abs(rotated[..., None] - levels), axis=-1)
    assert np.array_equal(qw.indices.reshape(5, 2, 128), nearest)


def test_prescaling_keeps_the_product():
    w = np.random.default_rng(3).standard_normal((8, 128))
    raw = qz.quantize_hadamard(w, 128, seed=0, prescale=False)
    scaled = qz.quantize_hadamard(w, 128, seed=0, prescale=True)
    assert np.array_equal(raw.indices, scaled.indices)
    assert float(np.max(np.abs(scaled.codebook.astype(np.float32)))) == 127.0
    product_raw = raw.codebook.astype(np.float64)[None, :] * raw.norms.astype(np.float64)
    product_scaled = scaled.codebook.astype(np.float64)[None, :] * scaled.norms.astype(np.float64)
    assert np.allclose(product_raw, product_scaled, rtol=2e-3)


def test_a_norm_past_the_fp16_range_is_refused():
    w = np.full((1, 128), 1e5)
    with pytest.raises(qz.NormOverflowError, match="exceeds the fp16 range"):
        qz.quantize_hadamard(w, 128, prescale=False)
    # Pre-scaling (f = max|cb| / 127) brings the same norm into range.
    assert np.all(np.isfinite(qz.quantize_hadamard(w, 128, prescale=True).norms))
