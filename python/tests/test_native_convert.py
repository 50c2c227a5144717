"""The native quantizer (runtime/src/Quantize.cpp) against the numpy one:
the same bundle bytes on every synthetic family, the same refusals."""

import os

import numpy as np
import pytest

from cq4p.cli import convert as cv
from cq4p.format import panels as pn
from cq4p.model import architecture as arch
from cq4p.model import synthetic
from cq4p.native import quantize as nq
from cq4p.quant import quantize as qz

pytestmark = pytest.mark.skipif(not nq.available(),
                                reason="the runtime library (native quantizer) is not built")


def bundle_files(directory):
    """{relative path: bytes} of every file under directory."""
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, directory)] = handle.read()
    return files


def convert_both(checkpoint, root, **options):
    bundles = {}
    with open(os.devnull, "w") as quiet:
        for quantizer in ("numpy", "native"):
            out = os.path.join(root, quantizer)
            cv.convert(str(checkpoint), out, progress=quiet, quantizer=quantizer, **options)
            bundles[quantizer] = bundle_files(out)
    return bundles


def assert_same_bytes(bundles):
    numpy_files, native_files = bundles["numpy"], bundles["native"]
    assert sorted(native_files) == sorted(numpy_files)
    different = [name for name in numpy_files if numpy_files[name] != native_files[name]]
    assert not different, f"files that differ: {different}"
    assert any(name.endswith(".cq4p.weights") for name in numpy_files)


@pytest.mark.parametrize("family", synthetic.ARCHITECTURES + synthetic.FAMILIES)
def test_every_family_converts_to_the_same_bytes(family, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    synthetic.write_model(str(checkpoint), family)
    assert_same_bytes(convert_both(checkpoint, str(tmp_path)))


def test_input_scales_and_a_seed_give_the_same_bytes(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    config = synthetic.write_model(str(checkpoint), "qwen3", seed=3)
    rng = np.random.default_rng(7)
    hidden = config["hidden_size"]
    stats = {f"model.layers.{i}.self_attn.q_proj.weight": np.abs(rng.standard_normal(hidden))
             for i in range(2)}
    stats["lm_head.weight"] = np.abs(rng.standard_normal(hidden)) * 10
    np.savez(tmp_path / "stats.npz", **stats)
    assert_same_bytes(convert_both(checkpoint, str(tmp_path), seed=9,
                                   calibration=str(tmp_path / "stats.npz")))


@pytest.mark.parametrize("n,k", [(1, 128), (63, 96), (65, 200), (130, 1100), (257, 384)])
def test_hadamard_panels_match_the_oracle_for_any_thread_count(n, k):
    rng = np.random.default_rng(n * 1000 + k)
    w = (rng.standard_normal((n, k)) * np.exp(rng.standard_normal(k))).astype(np.float32)
    scale = np.clip(np.exp(rng.standard_normal(k)), 1 / 8, 8)
    oracle = qz.quantize_hadamard(w, 128, 4, scale)
    panels, norm_panels, norms = pn.encode_panels(oracle.indices, oracle.norms,
                                                  oracle.codebook, 128, 128)
    for threads in (1, 2, 3):
        packed = nq.quantize_hadamard_panels(w, 128, 4, scale, threads=threads)
        assert [a.tobytes() for a in packed.packed] == [panels.tobytes(),
                                                        norm_panels.tobytes(), norms.tobytes()]


@pytest.mark.parametrize("n,k", [(1, 128), (70, 96), (129, 256), (64, 300)])
def test_orthogonal_panels_match_the_oracle_for_any_thread_count(n, k):
    rng = np.random.default_rng(n * 1000 + k)
    w = rng.standard_normal((n, k)).astype(np.float32)
    k_padded = arch.padded(k)
    oracle = qz.quantize_orthogonal(w, 2, None, k_padded)
    panels, norm_panels, norms = pn.encode_panels(oracle.indices, oracle.norms,
                                                  oracle.codebook, k_padded, 128)
    for threads in (1, 2, 3):
        packed = nq.quantize_orthogonal_panels(w, 2, None, k_padded, threads=threads)
        assert [a.tobytes() for a in packed.packed] == [panels.tobytes(),
                                                        norm_panels.tobytes(), norms.tobytes()]


@pytest.mark.parametrize("tensor", ["model.layers.0.self_attn.q_proj.weight",
                                    "model.embed_tokens.weight"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused_the_same_way(tmp_path, tensor, bad):
    tensors = synthetic.llama_tensors()
    tensors[tensor][2, 3] = bad
    tensors[tensor][5, 1] = bad
    checkpoint = tmp_path / "checkpoint"
    synthetic.write_checkpoint(str(checkpoint), tensors,
                               synthetic.llama_config(128, 256, 256, 2), dtype="F32")
    messages = {}
    for quantizer in ("numpy", "native"):
        with pytest.raises(cv.ConvertError) as error:
            cv.convert(str(checkpoint), str(tmp_path / quantizer), progress=open(os.devnull, "w"),
                       quantizer=quantizer)
        messages[quantizer] = str(error.value)
        assert not (tmp_path / quantizer).exists()
    assert messages["native"] == messages["numpy"]
    assert f"tensor {tensor}: 2 non-finite values" in messages["native"]


def test_the_runtime_refuses_non_finite_weights_itself():
    w = np.ones((70, 128), dtype=np.float32)
    w[66, 7] = np.nan
    with pytest.raises(nq.NativeQuantizeError, match="non-finite values"):
        nq.quantize_hadamard_panels(w)
    with pytest.raises(nq.NativeQuantizeError, match="non-finite values"):
        nq.quantize_orthogonal_panels(w)


@pytest.mark.parametrize("k", [1, 2, 3, 31, 32, 33, 64, 96, 128, 200, 384])
def test_the_rotation_is_numpys_bit_for_bit_at_any_thread_count(k):
    expected = qz.orthogonal_rotation(k, 6).view(np.uint64)
    for threads in (1, 2, 3):
        assert np.array_equal(nq.orthogonal_rotation(k, 6, threads).view(np.uint64), expected)


@pytest.mark.parametrize("k", [1536, 2048])
def test_the_rotation_is_numpys_bit_for_bit_at_model_widths(k):
    # Hidden sizes of real models (Gemma 4 E2B, the 1.1 B llama); numpy's
    # construction takes tens of seconds here.
    native = nq.orthogonal_rotation(k, 0)
    assert np.array_equal(native.view(np.uint64), qz.orthogonal_rotation(k, 0).view(np.uint64))
    stored = native.astype(np.float16).astype(np.float32)
    assert np.abs(stored.T @ stored - np.eye(k)).max() < 2.0 ** -9


def test_a_rotation_too_wide_is_refused_before_its_memory():
    with pytest.raises(nq.NativeQuantizeError, match=r"K = 65537, expected 1 to 65536"):
        nq.orthogonal_rotation(65537, 0)


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_every_checkpoint_dtype_gives_the_same_bytes(tmp_path, dtype):
    # The native path reads the checkpoint's own bytes (BF16: the families above).
    synthetic.write_checkpoint(str(tmp_path / "checkpoint"), synthetic.llama_tensors(),
                               synthetic.llama_config(128, 256, 256, 2), dtype=dtype)
    assert_same_bytes(convert_both(tmp_path / "checkpoint", str(tmp_path)))


KERNEL_PATHS_SCRIPT = r"""
import numpy as np
from cq4p.format import panels as pn
from cq4p.model import architecture as arch
from cq4p.native import quantize as nq
from cq4p.quant import quantize as qz
rng = np.random.default_rng(3)
for n, k in [(70, 96), (130, 384), (9, 1024)]:
    w = (rng.standard_normal((n, k)) * np.exp(rng.standard_normal(k))).astype(np.float32)
    oracle = qz.quantize_hadamard(w, 128, 1)
    expected = pn.encode_panels(oracle.indices, oracle.norms, oracle.codebook, 128, 128)
    got = nq.quantize_hadamard_panels(w, 128, 1, threads=2).packed
    assert [a.tobytes() for a in got] == [a.tobytes() for a in expected], ("hadamard", n, k)
    kp = arch.padded(k)
    oracle = qz.quantize_orthogonal(w, 1, None, kp)
    expected = pn.encode_panels(oracle.indices, oracle.norms, oracle.codebook, kp, 128)
    got = nq.quantize_orthogonal_panels(w, 1, None, kp, threads=2).packed
    assert [a.tobytes() for a in got] == [a.tobytes() for a in expected], ("orthogonal", n, k)
for k in (40, 257):
    got = nq.orthogonal_rotation(k, 2, threads=2).view(np.uint64)
    assert np.array_equal(got, qz.orthogonal_rotation(k, 2).view(np.uint64)), ("rotation", k)
print("same")
"""


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_every_kernel_path_gives_the_same_bits(isa):
    # The generic path is the one AArch64 runs; x86-64 picks AVX-512 or AVX2.
    import subprocess
    import sys
    env = dict(os.environ, CQ4P_QUANTIZE_ISA=isa,
               PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", KERNEL_PATHS_SCRIPT], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "same", result.stderr


@pytest.mark.parametrize("tensor,value", [("model.layers.0.self_attn.q_proj.weight", 1e9),
                                          ("model.embed_tokens.weight", 3e5)])
def test_a_norm_past_fp16_is_refused_the_same_way(tmp_path, tensor, value):
    # A stored norm past fp16's range: the model graph needs the tensor as
    # CQ4 panels, so both quantizers refuse it, with one message.
    tensors = synthetic.llama_tensors()
    tensors[tensor][3, 5] = value  # a Hadamard weight is pre-scaled by ~1/500
    checkpoint = tmp_path / "checkpoint"
    synthetic.write_checkpoint(str(checkpoint), tensors, synthetic.llama_config(128, 256, 256, 2))
    messages = {}
    for quantizer in ("numpy", "native"):
        with pytest.raises(cv.ConvertError) as error:
            cv.convert(str(checkpoint), str(tmp_path / quantizer), progress=open(os.devnull, "w"),
                       quantizer=quantizer)
        messages[quantizer] = str(error.value)
        assert not (tmp_path / quantizer).exists()
    assert messages["native"] == messages["numpy"]
    assert messages["native"].startswith(f"tensor {tensor}: cannot be stored as CQ4 (a stored "
                                         f"norm (")
    assert "exceeds the fp16 range (65504)), and the model graph needs it as CQ4 panels" in \
        messages["native"]
