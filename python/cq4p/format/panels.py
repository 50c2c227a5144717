"""The packed-panel layout (docs/FORMAT.md section 3) and its int8 codebook.

Panels group 64 output channels into a super-block and, for each group of gs
K values, store 4 consecutive K values of all 64 channels in one 128-byte
kg-block: nibble j = c*4 + kc lives in byte j/2, low nibble first. This
module packs indices into that layout and back, folds the fp16 norms with
the codebook's int8 scale, and mirrors the runtime's reference encoder
(`cq4p_encode_panels`) byte for byte.
"""

import numpy as np

from cq4p.format import constants as fmt

CHANNELS = fmt.CQ4P_PANEL_CHANNELS
KG_K = fmt.CQ4P_KG_BLOCK_K
KG_BYTES = fmt.CQ4P_KG_BLOCK_BYTES
LEVELS = fmt.CQ4P_CODEBOOK_LEVELS
INT8_MAX = 127
CB_SCALE_FLOOR = np.float32(1e-10)


def num_super_blocks(n):
    """ceil(N / 64)."""
    return -(-n // CHANNELS)


def panel_data_bytes(n, k):
    """ceil64(N) * K / 2."""
    return num_super_blocks(n) * CHANNELS * k // 2


def is_panel_group_size(gs):
    """Group sizes a Hadamard panel file may have."""
    return (gs > 0 and gs & (gs - 1) == 0 and gs % fmt.CQ4P_PANEL_GROUP_MULTIPLE == 0
            and gs <= fmt.CQ4P_PANEL_MAX_GROUP_SIZE)


def codebook_int8(codebook_f16):
    """(cb_i8 int8 [16], cb_scale float32) of a stored fp16 codebook, as the
    format's original engine derives them (docs/FORMAT.md section 6):

    cb_scale = max(fp32(max |fp32(cb)|) / 127, 1e-10) in fp32,
    inv = fp32(1 / cb_scale), cb_i8 = round_half_away_from_zero(fp32(cb * inv))
    (C's roundf). A codebook with max |value| 0 (or a non-finite value) has
    no int8 form.
    """
    levels = np.asarray(codebook_f16, dtype=np.float16).astype(np.float32)
    if levels.shape != (LEVELS,):
        raise ValueError(f"codebook must have {LEVELS} levels, got shape {levels.shape}")
    if not np.all(np.isfinite(levels)):
        raise ValueError("codebook has a non-finite value")
    largest = np.max(np.abs(levels))
    if largest == 0:
        raise ValueError("codebook max |value| is 0")
    cb_scale = max(np.float32(largest) / np.float32(INT8_MAX), CB_SCALE_FLOOR)
    inv = np.float32(1) / cb_scale
    scaled = levels * inv
    return round_half_away(scaled).clip(-128, INT8_MAX).astype(np.int8), np.float32(cb_scale)


def round_half_away(values):
    """C's roundf on fp32 values: ties away from zero. The + 0.5 runs in
    float64, where it is exact for every fp32 (in fp32, 0.49999997 + 0.5
    would round up to 1)."""
    values = np.asarray(values, dtype=np.float32).astype(np.float64)
    return np.copysign(np.floor(np.abs(values) + 0.5), values)


def canonical_index_map(cb_i8):
    """uint8 [16]: each index -> the lowest index with the same int8 level."""
    cb_i8 = np.asarray(cb_i8)
    return np.array([int(np.flatnonzero(cb_i8 == value)[0]) for value in cb_i8], dtype=np.uint8)


def pack_panels(indices, gs):
    """Indices uint8 [N, K] -> panels uint8 [SB][K/gs][gs/4][128].

    Channels past N are index 0. No canonicalisation here (see
    `encode_panels`).
    """
    indices = np.asarray(indices, dtype=np.uint8)
    n, k = indices.shape
    if k % gs or gs % KG_K:
        raise ValueError(f"K ({k}) must be a multiple of the group size ({gs}), itself a "
                         f"multiple of {KG_K}")
    sb = num_super_blocks(n)
    ng = k // gs
    padded = np.zeros((sb * CHANNELS, k), dtype=np.uint8)
    padded[:n] = indices
    # [s, c, g, kg, kc] -> [s, g, kg, c, kc]: nibble j = c*4 + kc within a kg-block.
    nibbles = padded.reshape(sb, CHANNELS, ng, gs // KG_K, KG_K).transpose(0, 2, 3, 1, 4)
    nibbles = nibbles.reshape(sb, ng, gs // KG_K, 2 * KG_BYTES)
    return (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)


def unpack_panels(panels, n, k, gs):
    """Panels (any shape, ceil64(N)*K/2 bytes) -> indices uint8 [N, K]."""
    sb = num_super_blocks(n)
    ng = k // gs
    packed = np.asarray(panels, dtype=np.uint8).reshape(sb, ng, gs // KG_K, KG_BYTES)
    nibbles = np.empty(packed.shape[:-1] + (2 * KG_BYTES,), dtype=np.uint8)
    nibbles[..., 0::2] = packed & 0x0F
    nibbles[..., 1::2] = packed >> 4
    indices = nibbles.reshape(sb, ng, gs // KG_K, CHANNELS, KG_K).transpose(0, 3, 1, 2, 4)
    return np.ascontiguousarray(indices.reshape(sb * CHANNELS, k)[:n])


def fold_norm_panels(norms_f16, cb_scale):
    """norm_panels fp32 [SB][ng][64] = fp32(norm[n][g]) * cb_scale, 0.0 past N."""
    norms = np.asarray(norms_f16, dtype=np.float16)
    n, ng = norms.shape
    sb = num_super_blocks(n)
    folded = np.zeros((sb * CHANNELS, ng), dtype=np.float32)
    folded[:n] = norms.astype(np.float32) * np.float32(cb_scale)
    return np.ascontiguousarray(folded.reshape(sb, CHANNELS, ng).transpose(0, 2, 1))


def repeat_norms(norms_f16, source_gs, panel_gs):
    """Norms [N][K/source_gs] -> [N][K/panel_gs], each repeated over the
    panel groups of its source group (orthogonal: the row norm over the
    virtual 128-wide groups)."""
    if source_gs % panel_gs:
        raise ValueError(f"source group size ({source_gs}) must be a multiple of the panel "
                         f"group size ({panel_gs})")
    return np.repeat(np.asarray(norms_f16, dtype=np.float16), source_gs // panel_gs, axis=1)


def encode_panels(indices, norms_f16, codebook_f16, source_gs, panel_gs):
    """What a panel file stores for a tensor: (panels uint8 [SB][ng][gs/4][128],
    norm_panels fp32 [SB][ng][64], norms fp16 [N][ng]) with ng = K / panel_gs.

    indices uint8 [N, K]; norms_f16 [N][K / source_gs] as stored; indices are
    canonicalised (lowest index with the same int8 level) before packing.
    """
    cb_i8, cb_scale = codebook_int8(codebook_f16)
    canonical = canonical_index_map(cb_i8)[np.asarray(indices, dtype=np.uint8)]
    norms = repeat_norms(norms_f16, source_gs, panel_gs)
    return pack_panels(canonical, panel_gs), fold_norm_panels(norms, cb_scale), norms
