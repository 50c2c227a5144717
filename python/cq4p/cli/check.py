"""End-to-end check: a bundle's tensors through compiled kernels vs numpy.

For every packed-panel CQ4 tensor of a bundle, runs cq4p-run (the runtime
over a kernel library built by cq4p-compile) on random activations and
compares its output with an fp32 numpy reference computed from the
dequantized weight (`cq4p.quant.dequantize`): x @ W^T for a linear layer, the
dequantized rows for the token embedding.
"""

import os
import subprocess
import tempfile

import numpy as np

from cq4p.io import bundle as bd
from cq4p.native import tools

# int8 activations over 4-bit weights: about 1% relative error.
TOLERANCE = 0.02


class CheckError(RuntimeError):
    """The runner refused a tensor; the message is its own."""


def _relative_error(got, reference):
    """||got - reference|| / ||reference||; a NaN or infinity anywhere (in
    the output or the reference) is an infinite error, so that it fails
    every tolerance instead of comparing false against it."""
    with np.errstate(all="ignore"):
        error = float(np.linalg.norm(got - reference) / np.linalg.norm(reference))
    return error if np.isfinite(error) else float("inf")


def _run(runner, bundle_dir, library, name, rows, input_path, output_path):
    command = [runner, "--bundle", bundle_dir, "--library", library, "--tensor", name,
               "--rows", str(rows), "--input", input_path, "--output", output_path,
               "--repeat", "1"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CheckError(result.stderr.strip() or f"cq4p-run exited with {result.returncode}")


def check_bundle(bundle_dir, library, rows=3, seed=0):
    """[(tensor, kind, relative error)] for every packed-panel CQ4 tensor,
    run on `rows` rows (the lm_head on one). Tensors are read by the rules
    the runtime applies (cq4p.io.bundle.open_tensor)."""
    manifest = bd.read_manifest(bundle_dir)
    bd.check_files(bundle_dir, manifest)
    runner = tools.find_tool("cq4p-run")
    rng = np.random.default_rng(seed)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        input_path = os.path.join(scratch, "input.bin")
        output_path = os.path.join(scratch, "output.bin")
        for entry in manifest["tensors"]:
            if entry.get("dtype") != "CQ4" or entry.get("layout") != "panels":
                continue
            with bd.open_tensor(bundle_dir, entry) as tensor:
                weight = tensor.dequantize().astype(np.float32)
                isr = tensor.input_scale_recip.astype(np.float32)
                scale = tensor.input_scale.astype(np.float32)
            n, k = weight.shape
            # The model graph applies the lm_head to the last row alone, so
            # a model library may hold only its one-row kernel.
            count = 1 if entry["name"].endswith("lm_head.weight") else rows
            if "embed_tokens" in entry["name"]:
                ids = rng.integers(0, n, size=count, dtype=np.int64)
                ids.tofile(input_path)
                _run(runner, bundle_dir, library, entry["name"], count, input_path, output_path)
                got = np.fromfile(output_path, dtype=np.float32).reshape(count, k)
                # The decoder multiplies by the stored 1/s where the meaning divides by s.
                reference = weight[ids] * scale * isr
                kind = "embedding"
            else:
                x = rng.standard_normal((count, k)).astype(np.float32)
                x.tofile(input_path)
                _run(runner, bundle_dir, library, entry["name"], count, input_path, output_path)
                got = np.fromfile(output_path, dtype=np.float32).reshape(count, n)
                reference = x @ weight.T
                kind = "linear"
            error = _relative_error(got, reference)
            results.append((entry["name"], kind, error))
    return results
