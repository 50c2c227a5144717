"""Shared fixtures, and a summary of the measured quantization errors that
is printed whether or not pytest captures output."""

import numpy as np
import pytest

from cq4p.quant import quantize as qz

# name -> relative Frobenius error of a dequantized weight, filled by tests.
RELATIVE_ERRORS = {}


def relative_error(approximation, original):
    original = np.asarray(original, dtype=np.float64)
    difference = np.asarray(approximation, dtype=np.float64) - original
    return float(np.linalg.norm(difference) / np.linalg.norm(original))


def pytest_terminal_summary(terminalreporter):
    if RELATIVE_ERRORS:
        terminalreporter.section("CQ4 relative Frobenius errors (dequantized vs original)")
        for name, error in sorted(RELATIVE_ERRORS.items()):
            terminalreporter.write_line(f"{name:<56} {error:.4f}")


def gaussian_weight(n, k, seed):
    return np.random.default_rng(seed).standard_normal((n, k))


@pytest.fixture(scope="session")
def orthogonal_weight():
    """A 68 x 1536 weight and its orthogonal quantization (the K x K
    rotation is the slow part, so it is made once)."""
    w = gaussian_weight(68, 1536, 11)
    return w, qz.quantize_orthogonal(w, seed=5)


@pytest.fixture(scope="session")
def synthetic_model(tmp_path_factory):
    """make(arch, seed=0) -> (checkpoint dir, bundle dir, config) of a
    synthetic model at its default sizes, converted once per session."""
    import os

    from cq4p.cli import convert as cv
    from cq4p.model import synthetic

    made = {}

    def make(arch, seed=0):
        if (arch, seed) not in made:
            root = tmp_path_factory.mktemp(f"{arch}-seed{seed}")
            config = synthetic.write_model(str(root / "checkpoint"), arch, seed=seed)
            with open(os.devnull, "w") as quiet:
                cv.convert(str(root / "checkpoint"), str(root / "bundle"), progress=quiet)
            made[arch, seed] = (root / "checkpoint", root / "bundle", config)
        return made[arch, seed]

    return make


@pytest.fixture(scope="session")
def synthetic_family(tmp_path_factory):
    """make(arch, seed=0) -> (config, {name: fp64 array}) of a synthetic
    model at its default sizes, in memory (no checkpoint, no bundle), made
    once per session."""
    from cq4p.model import synthetic

    made = {}

    def make(arch, seed=0):
        if (arch, seed) not in made:
            shape = synthetic.default_shape(arch)
            made[arch, seed] = (synthetic.model_config(arch, shape),
                                synthetic.model_tensors(arch, shape, seed))
        return made[arch, seed]

    return make
