"""The legacy CQ4 layouts of the indices (docs/FORMAT.md section 1): row-major
nibbles and the 4-row interleaved layout, with its interleaved norms."""

import numpy as np


def pack_row_major(indices):
    """[N, K] -> [N][K/2] bytes, k even in the low nibble."""
    indices = np.asarray(indices, dtype=np.uint8)
    return (indices[:, 0::2] | (indices[:, 1::2] << 4)).astype(np.uint8)


def unpack_row_major(data, n, k):
    packed = np.asarray(data, dtype=np.uint8).reshape(n, k // 2)
    indices = np.empty((n, k), dtype=np.uint8)
    indices[:, 0::2] = packed & 0x0F
    indices[:, 1::2] = packed >> 4
    return indices


def pack_interleaved(indices, gs):
    """[N, K] -> [N/4][ng][gs/8][4 rows][4 bytes]; byte (r, j) of chunk c
    holds idx[r][c*8 + j] low and idx[r][c*8 + 4 + j] high."""
    indices = np.asarray(indices, dtype=np.uint8)
    n, k = indices.shape
    # [q, r, g, c, half, j] -> [q, g, c, r, half, j]
    split = indices.reshape(n // 4, 4, k // gs, gs // 8, 2, 4).transpose(0, 2, 3, 1, 4, 5)
    return (split[..., 0, :] | (split[..., 1, :] << 4)).astype(np.uint8)


def unpack_interleaved(data, n, k, gs):
    packed = np.asarray(data, dtype=np.uint8).reshape(n // 4, k // gs, gs // 8, 4, 4)
    split = np.stack([packed & 0x0F, packed >> 4], axis=-2)  # [q, g, c, r, half, j]
    return np.ascontiguousarray(split.transpose(0, 3, 1, 2, 4, 5).reshape(n, k))


def interleave_norms(norms):
    """[N][ng] -> [N/4][ng][4]."""
    n, ng = norms.shape
    return np.ascontiguousarray(norms.reshape(n // 4, 4, ng).transpose(0, 2, 1))


def deinterleave_norms(norms):
    """[N/4][ng][4] -> [N][ng]."""
    q, ng, _ = norms.shape
    return np.ascontiguousarray(np.asarray(norms).transpose(0, 2, 1).reshape(4 * q, ng))
