"""End to end: checkpoint -> bundle -> cq4p-compile -> runtime -> numpy.

Uses the tools of the build tree (scripts/build): converts a small
llama-shaped checkpoint, AOT-compiles its model.mlir for the host, runs
every packed-panel tensor through cq4p-run and compares with the fp32
numpy reference of the dequantized weights.
"""

import os
import subprocess

import numpy as np
import pytest

from cq4p import check as ck
from cq4p import convert as cv
from cq4p import synthetic
from cq4p import tools


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    checkpoint = str(root / "checkpoint")
    synthetic.write_llama(checkpoint, hidden=128, ffn=256, vocab=256, layers=1, seed=3)
    bundle = str(root / "bundle")
    cv.convert(checkpoint, bundle, progress=open(os.devnull, "w"))
    library = str(root / "libmodel.so")
    result = subprocess.run([tools.find_tool("cq4p-compile"), os.path.join(bundle, "model.mlir"),
                             "--target=host", "-o", library],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return bundle, library, root


def test_every_tensor_matches_numpy(compiled):
    bundle, library, _ = compiled
    results = ck.check_bundle(bundle, library, rows=3)
    kinds = {kind for _, kind, _ in results}
    assert kinds == {"linear", "embedding"}
    # q, k, v, o, gate, up, down, the lm_head and the embedding.
    assert len(results) == 9
    for name, kind, error in results:
        assert error < ck.TOLERANCE, (name, kind, error)


def test_a_library_for_another_model_is_refused_by_name(compiled, tmp_path):
    bundle, _, root = compiled
    other = tmp_path / "other.mlir"
    other.write_text(
        "func.func @f(%x: tensor<1x256xf32>, %w: !cq4p.weight<64x256, gs = 128, hadamard, "
        "panels>) -> tensor<1x64xf32> {\n"
        "  %y = cq4p.linear %x, %w : tensor<1x256xf32>, !cq4p.weight<64x256, gs = 128, "
        "hadamard, panels> -> tensor<1x64xf32>\n  return %y : tensor<1x64xf32>\n}\n")
    library = str(tmp_path / "libother.so")
    subprocess.run([tools.find_tool("cq4p-compile"), str(other), "--target=host", "-o", library],
                   check=True, capture_output=True)
    with pytest.raises(ck.CheckError, match=r"model.embed_tokens.weight.cq4p.weights: no EMBEDDING "
                       r"kernel for N=256, K=128, group_size=128, orthogonal in .*libother.so"):
        ck.check_bundle(bundle, library)


def test_the_runner_refuses_a_corrupt_tensor_file(compiled, tmp_path):
    bundle, library, _ = compiled
    broken = tmp_path / "bundle"
    subprocess.run(["cp", "-r", bundle, str(broken)], check=True)
    path = broken / "model.layers.0.mlp.up_proj.weight.cq4p.weights"
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data[:-1]))
    result = subprocess.run([tools.find_tool("cq4p-run"), "--bundle", str(broken), "--library",
                             library], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "tensor 'model.layers.0.mlp.up_proj.weight'" in result.stderr
    assert "file size: expected" in result.stderr


def test_compile_refuses_a_wrong_target_and_ir_that_does_not_verify(tmp_path):
    compile_tool = tools.find_tool("cq4p-compile")
    bad = tmp_path / "bad.mlir"
    bad.write_text(
        "func.func @f(%x: tensor<1x1000xf32>, %w: !cq4p.weight<64x1024, gs = 128, hadamard, "
        "panels>) -> tensor<1x64xf32> {\n"
        "  %y = cq4p.linear %x, %w : tensor<1x1000xf32>, !cq4p.weight<64x1024, gs = 128, "
        "hadamard, panels> -> tensor<1x64xf32>\n  return %y : tensor<1x64xf32>\n}\n")
    result = subprocess.run([compile_tool, str(bad), "--target=host", "-o",
                             str(tmp_path / "x.so")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "expected the input's K (1000) to equal the weight's K (1024)" in result.stderr
    result = subprocess.run([compile_tool, str(bad), "--target=riscv", "-o",
                             str(tmp_path / "x.so")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "unknown --target 'riscv' (expected aarch64-neon, aarch64-sme2 or host)" in result.stderr
    assert not (tmp_path / "x.so").exists()


@pytest.mark.parametrize("triple, kind, symbol", [
    ("aarch64-linux-android", b"\x7fELF", "cq4p_kernel_table"),
    ("aarch64-apple-darwin", b"\xcf\xfa\xed\xfe", "_cq4p_kernel_table"),
])
def test_objects_for_other_aarch64_triples(tmp_path, triple, kind, symbol):
    source = tmp_path / "layer.mlir"
    source.write_text(
        "func.func @f(%x: tensor<1x256xf32>, %w: !cq4p.weight<64x256, gs = 128, hadamard, "
        "panels>) -> tensor<1x64xf32> {\n"
        "  %y = cq4p.linear %x, %w : tensor<1x256xf32>, !cq4p.weight<64x256, gs = 128, "
        "hadamard, panels> -> tensor<1x64xf32>\n  return %y : tensor<1x64xf32>\n}\n")
    compile_tool = tools.find_tool("cq4p-compile")
    obj = tmp_path / "kernels.o"
    subprocess.run([compile_tool, str(source), "--target=aarch64-neon", f"--triple={triple}",
                    "--emit=obj", "-o", str(obj)], check=True, capture_output=True)
    assert obj.read_bytes()[:4] == kind
    symbols = subprocess.run(["/usr/lib/llvm-22/bin/llvm-nm", str(obj)], check=True,
                             capture_output=True, text=True).stdout
    assert f" {symbol}\n" in symbols
    if triple.endswith("darwin"):
        result = subprocess.run([compile_tool, str(source), "--target=aarch64-neon",
                                 f"--triple={triple}", "-o", str(tmp_path / "x.so")],
                                capture_output=True, text=True)
        assert result.returncode != 0
        assert "needs that platform's SDK: use --emit=obj" in result.stderr
