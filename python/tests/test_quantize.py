"""Codebooks, rotations and input scales against independent oracles."""

import math

import numpy as np
import pytest

from cq4p.quant import quantize as qz

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
    # docs/FORMAT.md section 5: x*left, FWHT / sqrt(gs), *right, z[j] = w[perm[j]].
    x = np.random.default_rng(0).standard_normal(128)
    w = (h @ (x * left)) / math.sqrt(128) * right
    assert np.allclose(x @ rot, w[permutation])


def test_rotations_are_seeded():
    a = qz.hadamard_components(128, 1)
    assert all(np.array_equal(x, y) for x, y in zip(a, qz.hadamard_components(128, 1)))
    assert not np.array_equal(a[2], qz.hadamard_components(128, 2)[2])
    r = qz.orthogonal_rotation(64, 1)
    assert np.array_equal(r.view(np.uint64), qz.orthogonal_rotation(64, 1).view(np.uint64))
    assert not np.array_equal(r, qz.orthogonal_rotation(64, 2))
    assert not np.array_equal(r[:10, :10], qz.orthogonal_rotation(65, 1)[:10, :10])


def _splitmix64(state, count):
    """The SplitMix64 reference generator, on Python integers."""
    mask, out = (1 << 64) - 1, []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append(z ^ (z >> 31))
    return out


def test_the_rotation_generator_is_splitmix64():
    # The reference generator's published first outputs for the state 1234567.
    published = [6457827717110365317, 3203168211198807973, 9817491932198370423,
                 4593380528125082431, 16408922859458223821]
    assert _splitmix64(1234567, 5) == published
    counters = np.arange(1, 6, dtype=np.uint64)
    assert qz._splitmix_mix(np.uint64(1234567) + counters * qz._SPLITMIX_GAMMA).tolist() == \
        published
    # The key, then Gaussian t = the sum of uniforms 12t..12t+11 (left to right) - 6.
    def mix(z):  # the generator's output for the state z - gamma
        return _splitmix64((z - 0x9E3779B97F4A7C15) % (1 << 64), 1)[0]

    key = int(qz.rotation_key(5, 96))
    assert key == mix(mix(5) ^ 96)
    bits = _splitmix64(key, 12 * 7)
    expected = []
    for t in range(7):
        total = 0.0
        for n, value in enumerate(bits[12 * t:12 * t + 12]):
            uniform = (value >> 11) * 2.0 ** -53
            total = uniform if n == 0 else total + uniform
        expected.append(total - 6.0)
    assert qz.rotation_gaussians(np.uint64(key), 0, 7).tolist() == expected
    assert qz.rotation_gaussians(np.uint64(key), 3, 4).tolist() == expected[3:]


def test_orthogonal_rotation_is_its_product_of_reflections():
    # R = H_0 H_1 ... H_{K-2} D, multiplied out densely here (BLAS, any order).
    k = 70
    key = qz.rotation_key(4, k)
    product = np.eye(k)
    signs = []
    for j in range(k):
        u, beta, sign = qz._reflection(key, k, j)
        signs.append(sign)
        if j <= k - 2:
            h = np.eye(k)
            h[j:, j:] -= np.outer(u, u) / beta
            product = product @ h
        # the reflection maps x_j to -s |x_j| e_0 (x_j is u_j with x_0 back)
        x = qz.rotation_gaussians(key, j * k - j * (j - 1) // 2, k - j)
        assert np.isclose(u[0] - x[0], -sign * np.linalg.norm(x), rtol=1e-14)
    r = qz.orthogonal_rotation(k, 4)
    assert np.allclose(r, product * np.array(signs)[None, :], rtol=0, atol=1e-14)


@pytest.mark.parametrize("k", [1, 2, 3, 64, 200])
def test_orthogonal_rotation_is_orthogonal_before_and_after_fp16(k):
    r = qz.orthogonal_rotation(k, 9)
    assert np.abs(r.T @ r - np.eye(k)).max() < 1e-14 * max(k, 8)
    stored = r.astype(np.float16).astype(np.float64)
    # fp16 rounding moves each entry by at most 2^-11 of its size
    assert np.abs(stored.T @ stored - np.eye(k)).max() < 2.0 ** -9


def test_orthogonal_rotation_looks_haar_distributed():
    # sqrt(K) R[i][c] of a Haar matrix is nearly N(0, 1): moments of 262144 entries.
    k = 512
    z = qz.orthogonal_rotation(k, 0).ravel() * math.sqrt(k)
    assert abs(np.mean(z)) < 0.01
    assert abs(np.mean(z * z) - 1) < 1e-12  # exactly, up to rounding: unit columns
    assert abs(np.mean(z ** 4) - 3 * k / (k + 2)) < 0.05
    assert abs(np.mean(z ** 3)) < 0.03
    assert np.count_nonzero(z) == z.size


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
