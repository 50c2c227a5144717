"""Dequantization (docs/FORMAT.md section 2's meaning of stored CQ4 values)."""

import numpy as np

from cq4p.quant import quantize as qz


def rotation_matrix(qw):
    """The [gs, gs] float32 matrix each group is rotated with."""
    if qw.orthogonal:
        return np.asarray(qw.rotation_matrix, dtype=np.float16).astype(np.float32)
    return qz.hadamard_rotation(np.asarray(qw.left_signs), np.asarray(qw.right_signs),
                                np.asarray(qw.permutation), np.float32)


def dequantize(qw):
    """W[n, group g] = norm[n, g] * (cb[idx] @ rot^T) / s, in float32, the
    same operations in the same order for every layout."""
    n, k, gs = qw.n, qw.k, qw.group_size
    ng = k // gs
    levels = np.asarray(qw.codebook, dtype=np.float16).astype(np.float32)
    values = levels[np.asarray(qw.indices, dtype=np.uint8)].reshape(n * ng, gs)
    rotated = (values @ rotation_matrix(qw).T).reshape(n, ng, gs)
    norms = np.asarray(qw.norms, dtype=np.float16).astype(np.float32).reshape(n, ng, 1)
    scale = np.asarray(qw.input_scale, dtype=np.float16).astype(np.float32)
    return (rotated * norms).reshape(n, k) / scale
