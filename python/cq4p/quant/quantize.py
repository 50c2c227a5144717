"""CQ4 quantization (docs/FORMAT.md section 2): codebooks, rotations, indices.

A CQ4 weight row is split into groups; each group is divided by its L2 norm,
rotated, and every coordinate is replaced by the nearest of 16 codebook
levels. The codebook is the Lloyd-Max quantizer of one coordinate of a random
unit vector in d dimensions, which is what a rotated unit vector's
coordinates look like. Hadamard tensors rotate each group of gs values with a
randomised Hadamard matrix; orthogonal tensors (embeddings, lm_head) rotate
the whole row with a dense orthogonal matrix.

The result is a `QuantizedWeight`: exactly the values a file stores (fp16
codebook and norms, indices, rotation), so every writer writes it as is and
every reader gives it back.
"""

import functools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from cq4p.format import constants as fmt

HADAMARD = "hadamard"
ORTHOGONAL = "orthogonal"

FP16_MAX = float(np.finfo(np.float16).max)
INPUT_SCALE_MIN = 1.0 / 8.0
INPUT_SCALE_MAX = 8.0
NORM_MIN = 1e-8
INT8_MAX = 127

# The codebook's density is integrated on this many cells; the levels move by
# far less than an fp16 ulp when it is doubled.
_GRID_POINTS = 1 << 17
_LLOYD_TOLERANCE = 1e-13
_LLOYD_MAX_ITERATIONS = 100000
# Rows quantized at a time, so that a large embedding never needs an fp64
# copy of itself.
_ROW_CHUNK = 2048


class NormOverflowError(ValueError):
    """A stored fp16 norm would be infinite: the tensor cannot be CQ4."""


@dataclass
class QuantizedWeight:
    """The stored values of one CQ4 tensor, independent of the file layout.

    indices: uint8 [N, K], one codebook index per weight.
    norms: fp16 [N, num_groups] as stored (orthogonal: num_groups = 1).
    codebook: fp16 [16] as stored (possibly pre-scaled, docs/FORMAT.md section 4).
    input_scale, input_scale_recip: fp16 [K].
    group_size: Hadamard gs; orthogonal K (one group spans the row).
    Hadamard: left_signs, right_signs int8 [gs], permutation uint32 [gs].
    Orthogonal: rotation fp16 [K, K] with R[k][i].
    original_shape: the checkpoint's shape before K was zero-padded.
    """

    rotation: str
    group_size: int
    indices: np.ndarray
    norms: np.ndarray
    codebook: np.ndarray
    input_scale: np.ndarray
    input_scale_recip: np.ndarray
    left_signs: Optional[np.ndarray] = None
    right_signs: Optional[np.ndarray] = None
    permutation: Optional[np.ndarray] = None
    rotation_matrix: Optional[np.ndarray] = None
    original_shape: Optional[tuple] = None

    @property
    def n(self):
        return self.indices.shape[0]

    @property
    def k(self):
        return self.indices.shape[1]

    @property
    def num_groups(self):
        return self.k // self.group_size

    @property
    def orthogonal(self):
        return self.rotation == ORTHOGONAL


# --- codebook ----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _lloyd_max_levels(d):
    if d < 2:
        raise ValueError(f"codebook dimension must be at least 2, got {d}")
    # Past 16 standard deviations (1/sqrt(d) each) the density is below any
    # float64 contribution, so the grid covers only where the mass is.
    half = min(1.0, 16.0 / math.sqrt(d))
    step = 2.0 * half / _GRID_POINTS
    centres = -half + (np.arange(_GRID_POINTS) + 0.5) * step
    log_norm = math.lgamma(d / 2) - 0.5 * math.log(math.pi) - math.lgamma((d - 1) / 2)
    mass = np.exp(log_norm + 0.5 * (d - 3) * np.log1p(-centres * centres)) * step
    edges = np.linspace(-half, half, _GRID_POINTS + 1)
    cumulative_mass = np.concatenate(([0.0], np.cumsum(mass)))
    cumulative_moment = np.concatenate(([0.0], np.cumsum(mass * centres)))

    levels_count = fmt.CQ4P_CODEBOOK_LEVELS
    quantiles = (np.arange(levels_count) + 0.5) / levels_count * cumulative_mass[-1]
    levels = np.interp(quantiles, cumulative_mass, edges)
    for _ in range(_LLOYD_MAX_ITERATIONS):
        bounds = np.concatenate(([-half], 0.5 * (levels[1:] + levels[:-1]), [half]))
        cell_mass = np.diff(np.interp(bounds, edges, cumulative_mass))
        cell_moment = np.diff(np.interp(bounds, edges, cumulative_moment))
        updated = cell_moment / cell_mass
        updated = 0.5 * (updated - updated[::-1])  # the density is even
        change = np.max(np.abs(updated - levels))
        levels = updated
        if change < _LLOYD_TOLERANCE * half:
            break
    levels.flags.writeable = False
    return levels


def lloyd_max_codebook(d):
    """The 16 Lloyd-Max levels (float64, ascending) for a coordinate of a
    random unit vector in d dimensions: density (1 - x^2)^((d-3)/2) on [-1, 1].
    """
    return np.array(_lloyd_max_levels(int(d)))


def nearest_level(values, levels):
    """Index of the nearest of the ascending `levels` for every value."""
    bounds = 0.5 * (levels[1:] + levels[:-1])
    return np.searchsorted(bounds, values).astype(np.uint8)


# --- rotations ---------------------------------------------------------------

def rotation_rng(seed, dim):
    """The generator of the Hadamard components of group size `dim`."""
    return np.random.default_rng(seed + 17 * dim)


def sylvester_hadamard(n):
    """The natural-order Sylvester Hadamard matrix of order n (power of two),
    int8 entries +-1: H[i, j] = (-1)^popcount(i & j)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard order must be a power of two, got {n}")
    h = np.ones((1, 1), dtype=np.int8)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def hadamard_components(gs, seed):
    """left and right +-1 signs (int8 [gs]) and a permutation (uint32 [gs])."""
    rng = rotation_rng(seed, gs)
    left = (rng.integers(0, 2, gs) * 2 - 1).astype(np.int8)
    right = (rng.integers(0, 2, gs) * 2 - 1).astype(np.int8)
    permutation = rng.permutation(gs).astype(np.uint32)
    return left, right, permutation


def hadamard_rotation(left, right, permutation, dtype=np.float64):
    """rot = (diag(left) H / sqrt(gs) diag(right))[:, perm], [gs, gs]."""
    gs = len(left)
    h = sylvester_hadamard(gs).astype(dtype)
    scaled = left.astype(dtype)[:, None] * h * right.astype(dtype)[None, :]
    return scaled[:, permutation.astype(np.intp)] * dtype(1.0 / math.sqrt(gs))


# The orthogonal rotation is defined by its operations, so that every
# machine makes the same bits (the format stores R; how it is made is the
# converter's choice). runtime/src/OrthogonalRotation.cpp spells out the
# definition and makes it natively; this is the same definition in numpy's
# elementwise operations, each rounded on its own (no BLAS, whose summation
# order depends on the library), and sums written as `np.add.accumulate`,
# which is sequential by definition.
_SPLITMIX_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_SPLITMIX_MULTIPLIERS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_UNIFORMS_PER_GAUSSIAN = 12
# Columns rotated at a time (any width gives the same bits; this one keeps
# the working set in cache).
_ROTATION_PANEL = 64


def _splitmix_mix(z):
    """The SplitMix64 finalizer of a uint64 array (wrapping arithmetic)."""
    z = z ^ (z >> np.uint64(30))
    z = z * _SPLITMIX_MULTIPLIERS[0]
    z = z ^ (z >> np.uint64(27))
    z = z * _SPLITMIX_MULTIPLIERS[1]
    return z ^ (z >> np.uint64(31))


def rotation_key(seed, k):
    """The generator key of the rotation of width k: mix(mix(seed) ^ k)."""
    seed = np.array([int(seed) % (1 << 64)], dtype=np.uint64)
    return _splitmix_mix(_splitmix_mix(seed) ^ np.uint64(k))[0]


def rotation_gaussians(key, first, count):
    """Gaussians first..first+count-1 of a key: each the sum, left to right,
    of 12 uniforms (bits >> 11) * 2^-53 of SplitMix64 outputs
    mix(key + (n + 1) * gamma), n = 12 t + l, minus 6 (Irwin-Hall: mean 0,
    variance 1)."""
    t = np.uint64(first) + np.arange(count, dtype=np.uint64)
    n = (t * np.uint64(_UNIFORMS_PER_GAUSSIAN))[:, None] + \
        np.arange(_UNIFORMS_PER_GAUSSIAN, dtype=np.uint64)[None, :]
    bits = _splitmix_mix(key + (n + np.uint64(1)) * _SPLITMIX_GAMMA)
    uniforms = (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    total = uniforms[:, 0].copy()
    for column in range(1, _UNIFORMS_PER_GAUSSIAN):
        total = total + uniforms[:, column]
    return total - 6.0


def _reflection(key, k, j):
    """(u_j, beta_j, d_j): Householder vector j (acting on coordinates
    j..k-1) made from Gaussian vector x_j, and the column sign d_j."""
    x = rotation_gaussians(key, j * k - j * (j - 1) // 2, k - j)
    norm = np.sqrt(np.add.accumulate(x * x)[-1])
    s = 1.0 if x[0] >= 0 else -1.0
    u = x.copy()
    u[0] = x[0] + s * norm
    beta = norm * (norm + abs(x[0]))
    return u, beta, -s


@functools.lru_cache(maxsize=4)
def _orthogonal_rotation(k, seed):
    key = rotation_key(seed, k)
    reflections = [_reflection(key, k, j) for j in range(k)]
    rotation = np.empty((k, k))
    for c0 in range(0, k, _ROTATION_PANEL):
        c1 = min(k, c0 + _ROTATION_PANEL)
        y = np.zeros((k, c1 - c0))
        y[np.arange(c0, c1), np.arange(c1 - c0)] = 1.0
        for j in range(min(c1 - 1, k - 2), -1, -1):
            u, beta, _ = reflections[j]
            if beta == 0:
                continue
            block = y[j:, max(j - c0, 0):]  # the panel's columns c >= j
            products = block * u[:, None]
            w = np.add.accumulate(products, axis=0, out=products)[-1] / beta
            block -= u[:, None] * w[None, :]
        rotation[:, c0:c1] = y
    rotation *= np.array([d for _, _, d in reflections])[None, :]
    rotation.flags.writeable = False
    return rotation


def orthogonal_rotation(k, seed):
    """The converter's K x K orthogonal rotation (float64), R[i][c]: Haar
    distributed in exact arithmetic, and the same bits on every machine.

    Stewart's construction: R = H_0 H_1 ... H_{K-2} D, H_j = I - u_j u_j^T /
    beta_j on coordinates j..K-1, from Gaussian vectors x_j of length K - j
    (u_j = x_j with x_0 + s |x_j| first, s = sign(x_0), beta_j = |x_j|
    (|x_j| + |x_0|), D = diag(-s_j)); that is the Q of the QR decomposition
    of a Gaussian matrix with R's diagonal positive. The Gaussians are
    Irwin-Hall sums of SplitMix64 uniforms keyed by the seed and K
    (`rotation_gaussians`). Column c is d_c H_0 ... H_min(c, K-2) e_c, each
    reflection's dot product summed row by row from +0, then
    y - (dot / beta) * u: every operation rounded on its own. The runtime's
    cq4p_orthogonal_rotation (runtime/src/OrthogonalRotation.cpp) makes the
    same bits natively."""
    return np.array(_orthogonal_rotation(int(k), int(seed)))


# --- input scales ------------------------------------------------------------

def input_scale_from_statistics(mean_abs_activation):
    """AWQ-like input scale from per-input-channel mean |activation|:
    s = stat^0.5 with geometric mean 1, clipped to [1/8, 8] (float64)."""
    stat = np.asarray(mean_abs_activation, dtype=np.float64)
    if stat.ndim != 1 or not np.all(np.isfinite(stat)):
        raise ValueError("calibration statistics must be a finite vector")
    s = np.sqrt(np.maximum(stat, 1e-30))
    s = s / math.exp(float(np.mean(np.log(s))))
    return np.clip(s, INPUT_SCALE_MIN, INPUT_SCALE_MAX)


def stored_input_scales(k, input_scale=None):
    """fp16 s[K] and isr[K] = fp16(min(1 / max(s, 1e-8), 65504)); s = 1
    without a scale."""
    if input_scale is None:
        s = np.ones(k, dtype=np.float64)
    else:
        s = np.asarray(input_scale, dtype=np.float64)
        if s.shape != (k,):
            raise ValueError(f"input scale has shape {s.shape}, expected ({k},)")
    s16 = s.astype(np.float16)
    s_stored = s16.astype(np.float64)
    isr = np.minimum(1.0 / np.maximum(s_stored, 1e-8), FP16_MAX).astype(np.float16)
    return s16, isr


# --- quantization ------------------------------------------------------------

def _pad_columns(w, k_padded):
    if w.shape[1] == k_padded:
        return w
    padded = np.zeros((w.shape[0], k_padded), dtype=w.dtype)
    padded[:, :w.shape[1]] = w
    return padded


def _pad_scale(input_scale, k, k_padded):
    if input_scale is None or k == k_padded:
        return input_scale
    return np.concatenate([np.asarray(input_scale, dtype=np.float64),
                           np.ones(k_padded - k)])


def _store_codebook_and_norms(levels, norms, prescale, name):
    """fp16 codebook and norms; pre-scaled: cb / f and norm * f with
    f = max|cb| / 127, the product unchanged."""
    factor = float(np.max(np.abs(levels))) / INT8_MAX if prescale else 1.0
    codebook = (levels / factor).astype(np.float16)
    with np.errstate(over="ignore"):
        stored = (norms * factor).astype(np.float16)
    if not np.all(np.isfinite(stored)):
        worst = float(np.max(norms * factor))
        raise NormOverflowError(f"{name}: a stored norm ({worst:.6g}) exceeds the fp16 range "
                                f"({FP16_MAX:g})")
    return codebook, stored


def _scaled_rows(w, s_stored, start, stop):
    rows = np.asarray(w[start:stop], dtype=np.float64) * s_stored[None, :]
    if not np.all(np.isfinite(rows)):
        raise ValueError("the weight has non-finite values")
    return rows


def quantize_hadamard(w, gs=128, seed=0, input_scale=None, prescale=True):
    """Hadamard CQ4 of w [N, K] with groups of gs along K.

    K is zero-padded to a multiple of gs (input scale 1 there); the original
    shape is recorded. prescale stores the codebook as cb / f and the norms
    as norm * f (docs/FORMAT.md section 4; panel and interleaved files).
    """
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    n, k = w.shape
    k_padded = -(-k // gs) * gs
    ng = k_padded // gs
    s16, isr = stored_input_scales(k_padded, _pad_scale(input_scale, k, k_padded))
    s_stored = s16.astype(np.float64)
    levels = lloyd_max_codebook(gs)
    left, right, permutation = hadamard_components(gs, seed)
    rot = hadamard_rotation(left, right, permutation)

    indices = np.empty((n, k_padded), dtype=np.uint8)
    norms = np.empty((n, ng), dtype=np.float64)
    for start in range(0, n, _ROW_CHUNK):
        stop = min(n, start + _ROW_CHUNK)
        rows = _pad_columns(_scaled_rows(w, s_stored[:k], start, stop), k_padded)
        groups = rows.reshape(stop - start, ng, gs)
        group_norms = np.maximum(np.sqrt(np.einsum("ngi,ngi->ng", groups, groups)), NORM_MIN)
        rotated = (groups / group_norms[:, :, None]) @ rot
        indices[start:stop] = nearest_level(rotated, levels).reshape(stop - start, k_padded)
        norms[start:stop] = group_norms

    codebook, stored_norms = _store_codebook_and_norms(levels, norms, prescale, "hadamard")
    return QuantizedWeight(HADAMARD, gs, indices, stored_norms, codebook, s16, isr,
                           left_signs=left, right_signs=right, permutation=permutation,
                           original_shape=(n, k))


def quantize_orthogonal(w, seed=0, input_scale=None, k_padded=None):
    """Orthogonal CQ4 of w [N, K]: one norm per row, a dense K x K rotation,
    the raw (not pre-scaled) codebook for d = K. With `k_padded`, the rows
    are zero-padded to that width first (input scale 1 there) and K is
    k_padded; the original shape is recorded."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    n, k_true = w.shape
    k = k_padded or k_true
    if k < k_true:
        raise ValueError(f"k_padded ({k}) is less than K ({k_true})")
    if k != k_true:
        w = _pad_columns(w, k)
    s16, isr = stored_input_scales(k, _pad_scale(input_scale, k_true, k))
    s_stored = s16.astype(np.float64)
    levels = lloyd_max_codebook(k)
    rotation = orthogonal_rotation(k, seed)
    rotation16 = rotation.astype(np.float16)
    rot32 = rotation16.astype(np.float32)  # quantize against the stored R

    indices = np.empty((n, k), dtype=np.uint8)
    norms = np.empty((n, 1), dtype=np.float64)
    for start in range(0, n, _ROW_CHUNK):
        stop = min(n, start + _ROW_CHUNK)
        rows = _scaled_rows(w, s_stored, start, stop)
        row_norms = np.maximum(np.sqrt(np.einsum("ni,ni->n", rows, rows)), NORM_MIN)
        unit = (rows / row_norms[:, None]).astype(np.float32)
        indices[start:stop] = nearest_level(unit @ rot32, levels)
        norms[start:stop, 0] = row_norms

    codebook, stored_norms = _store_codebook_and_norms(levels, norms, False, "orthogonal")
    return QuantizedWeight(ORTHOGONAL, k, indices, stored_norms, codebook, s16, isr,
                           rotation_matrix=rotation16, original_shape=(n, k_true))
