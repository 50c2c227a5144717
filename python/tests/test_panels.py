"""The numpy panel packer against a scalar oracle and the runtime's C
reference encoder (byte for byte)."""

import numpy as np
import pytest

from conftest import gaussian_weight
from cq4p.format import legacy as lg
from cq4p.format import panels as pn
from cq4p.io import writer as wr
from cq4p.native import runtime as native
from cq4p.quant import quantize as qz

# (N, K, gs): Hadamard cases; pre-scaled and raw codebooks alternate so that
# the folded norms see cb_scale = 1 and cb_scale != 1.
HADAMARD_CASES = [(64, 256, 128), (192, 512, 128), (100, 256, 128), (256, 256, 256)]


def scalar_panels(indices, gs):
    """docs/FORMAT.md section 3, one weight at a time: the byte address of
    (n, k) is ((s*ng + g)*(gs/4) + kg)*128 + (c*4 + kc)/2."""
    n, k = indices.shape
    ng = k // gs
    out = bytearray(-(-n // 64) * 64 * k // 2)
    for row in range(n):
        s, c = divmod(row, 64)
        for col in range(k):
            g, within = divmod(col, gs)
            kg, kc = divmod(within, 4)
            j = c * 4 + kc
            address = ((s * ng + g) * (gs // 4) + kg) * 128 + j // 2
            out[address] |= int(indices[row, col]) << (4 * (j % 2))
    return bytes(out)


def hadamard_weight(n, k, gs, prescale):
    return qz.quantize_hadamard(gaussian_weight(n, k, n + k + gs), gs, seed=1, prescale=prescale)


def test_packer_matches_the_scalar_address_formula():
    rng = np.random.default_rng(0)
    for n, k, gs in [(100, 64, 32), (64, 256, 128), (3, 512, 256)]:
        indices = rng.integers(0, 16, (n, k), dtype=np.uint8)
        assert pn.pack_panels(indices, gs).tobytes() == scalar_panels(indices, gs)
        assert np.array_equal(pn.unpack_panels(pn.pack_panels(indices, gs), n, k, gs), indices)


def test_channels_past_n_are_zero():
    indices = np.full((10, 128), 15, dtype=np.uint8)
    panels = pn.pack_panels(indices, 128)
    # Channels 10..63: nibbles 40..255 of every kg-block, bytes 20..127.
    assert not panels[..., 20:].any() and np.all(panels[..., :20] == 0xFF)
    folded = pn.fold_norm_panels(np.ones((10, 1), dtype=np.float16), np.float32(0.5))
    assert np.all(folded[0, 0, :10] == 0.5) and not folded[0, 0, 10:].any()


def test_codebook_int8_rounds_ties_away_from_zero():
    # max 127 -> cb_scale 1.0 exactly, inv 1.0; x.5 levels round away from
    # zero as C's roundf does (docs/FORMAT.md section 6): 18.5 -> 19, not 18.
    codebook = np.array([-127, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 18.5] + [10] * 7 + [127],
                        dtype=np.float16)
    cb_i8, cb_scale = pn.codebook_int8(codebook)
    assert cb_scale == np.float32(1.0)
    assert list(cb_i8[:8]) == [-127, -3, -2, -1, 1, 2, 3, 19]
    with pytest.raises(ValueError, match="max"):
        pn.codebook_int8(np.zeros(16, dtype=np.float16))


# (max level, level, int8): the level times fp32(1 / cb_scale) is exactly
# 63.5 in fp32 (-> 64) where level / cb_scale is 63.499996 (-> 63), and the
# other way round; a division would give the other answer in both.
RECIPROCAL_CASES = [(0.1292724609375, 0.06463623046875, 64),
                    (0.14892578125, 0.074462890625, 63)]


@pytest.mark.parametrize("largest, level, expected", RECIPROCAL_CASES)
def test_codebook_int8_multiplies_by_the_reciprocal(largest, level, expected):
    codebook = np.array([largest, level, -level] + [0] * 13, dtype=np.float16)
    assert float(codebook[0]) == largest and float(codebook[1]) == level
    cb_i8, cb_scale = pn.codebook_int8(codebook)
    assert cb_scale == np.float32(largest) / np.float32(127)
    assert list(cb_i8[:3]) == [127, expected, -expected]


@pytest.mark.parametrize("largest, level, expected", RECIPROCAL_CASES)
def test_native_codebook_int8_agrees_on_ties(largest, level, expected):
    codebook = np.array([largest, level, -level, 18.5 * largest / 127] + [0] * 12,
                        dtype=np.float16)
    cb_i8, cb_scale = pn.codebook_int8(codebook)
    c_i8, c_scale = native.codebook_int8(codebook)
    assert list(c_i8[:3]) == [127, expected, -expected]
    assert np.array_equal(cb_i8, c_i8) and cb_scale.tobytes() == c_scale.tobytes()


def test_canonical_indices_merge_equal_int8_levels():
    codebook = np.array([-1.0, -0.999, 0.0, 0.001] + [0.5] * 11 + [1.0], dtype=np.float16)
    cb_i8, _ = pn.codebook_int8(codebook)
    canonical = pn.canonical_index_map(cb_i8)
    assert list(canonical[:4]) == [0, 0, 2, 2]
    assert list(canonical[4:15]) == [4] * 11 and canonical[15] == 15


def test_native_codebook_int8_matches():
    for d, prescale in [(128, False), (256, True), (1536, False)]:
        levels = qz.lloyd_max_codebook(d)
        codebook = (levels / (np.max(levels) / 127) if prescale else levels).astype(np.float16)
        cb_i8, cb_scale = pn.codebook_int8(codebook)
        c_i8, c_scale = native.codebook_int8(codebook)
        assert np.array_equal(cb_i8, c_i8)
        assert cb_scale.tobytes() == c_scale.tobytes()


def sources(qw):
    """The legacy data regions the weight can be written as."""
    out = {"row_major": lg.pack_row_major(qw.indices)}
    if wr.interleaved_refusal(qw.rotation, qw.n, qw.k, qw.group_size) is None:
        out["interleaved4row"] = lg.pack_interleaved(qw.indices, qw.group_size)
    return out


def check_against_native(qw, panel_gs):
    panels, norm_panels, _ = pn.encode_panels(qw.indices, qw.norms, qw.codebook,
                                              qw.group_size, panel_gs)
    built = {}
    for layout, data in sources(qw).items():
        # The Python path: legacy bytes -> indices -> panels.
        if layout == "row_major":
            indices = lg.unpack_row_major(data, qw.n, qw.k)
        else:
            indices = lg.unpack_interleaved(data, qw.n, qw.k, qw.group_size)
        py_panels, py_norms, _ = pn.encode_panels(indices, qw.norms, qw.codebook, qw.group_size,
                                                  panel_gs)
        c_panels, c_norms = native.encode_panels(layout, data, qw.n, qw.k, qw.group_size,
                                                 qw.norms, qw.codebook, panel_gs)
        assert c_panels.tobytes() == py_panels.tobytes() == panels.tobytes(), layout
        assert c_norms.tobytes() == py_norms.tobytes() == norm_panels.tobytes(), layout
        built[layout] = py_panels.tobytes()
    return built


@pytest.mark.parametrize("case", HADAMARD_CASES, ids=lambda c: "x".join(map(str, c)))
def test_native_encoder_is_byte_identical_hadamard(case):
    n, k, gs = case
    qw = hadamard_weight(n, k, gs, prescale=HADAMARD_CASES.index(case) % 2 == 0)
    built = check_against_native(qw, gs)
    assert set(built) == {"row_major", "interleaved4row"}
    assert built["row_major"] == built["interleaved4row"]


def test_native_encoder_is_byte_identical_orthogonal_virtual_groups(orthogonal_weight):
    _, qw = orthogonal_weight
    assert (qw.k, qw.group_size) == (1536, 1536)
    built = check_against_native(qw, 128)
    assert built["row_major"] == built["interleaved4row"]
    _, norm_panels, norms = pn.encode_panels(qw.indices, qw.norms, qw.codebook, 1536, 128)
    assert norms.shape == (68, 12) and np.all(norms == qw.norms)
    assert norm_panels.shape == (2, 12, 64)


def test_native_encoder_canonicalises_like_the_packer():
    # A codebook with repeated int8 levels, so canonicalisation changes bytes.
    codebook = np.array([-8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 7.01],
                        dtype=np.float16)
    indices = np.random.default_rng(5).integers(0, 16, (64, 128), dtype=np.uint8)
    norms = np.ones((64, 1), dtype=np.float16)
    panels, norm_panels, _ = pn.encode_panels(indices, norms, codebook, 128, 128)
    unpacked = pn.unpack_panels(panels, 64, 128, 128)
    assert not np.any(unpacked == 15) and np.array_equal(unpacked == 14, np.isin(indices, [14, 15]))
    c_panels, c_norms = native.encode_panels("row_major", lg.pack_row_major(indices), 64, 128, 128,
                                             norms, codebook, 128)
    assert c_panels.tobytes() == panels.tobytes()
    assert c_norms.tobytes() == norm_panels.tobytes()
