"""End to end: checkpoint -> bundle -> cq4p-compile -> runtime -> numpy.

Uses the tools of the build tree (scripts/build): converts a small
llama-shaped checkpoint, AOT-compiles its model.mlir for the host, runs
every packed-panel tensor through cq4p-run and compares with the fp32
numpy reference of the dequantized weights.
"""

import json
import os
import resource
import subprocess

import pytest

from cq4p.cli import check as ck
from cq4p.cli import convert as cv
from cq4p.model import ir
from cq4p.model import synthetic
from cq4p.native import tools


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


def _one_layer(directory):
    """A one-linear-layer module (64 x 256, Hadamard panels) in `directory`."""
    source = directory / "layer.mlir"
    source.write_text(
        "func.func @f(%x: tensor<1x256xf32>, %w: !cq4p.weight<64x256, gs = 128, hadamard, "
        "panels>) -> tensor<1x64xf32> {\n"
        "  %y = cq4p.linear %x, %w : tensor<1x256xf32>, !cq4p.weight<64x256, gs = 128, "
        "hadamard, panels> -> tensor<1x64xf32>\n  return %y : tensor<1x64xf32>\n}\n")
    return source


@pytest.mark.parametrize("triple, kind, symbol", [
    ("aarch64-linux-android", b"\x7fELF", "cq4p_kernel_table"),
    ("aarch64-apple-darwin", b"\xcf\xfa\xed\xfe", "_cq4p_kernel_table"),
])
def test_objects_for_other_aarch64_triples(tmp_path, triple, kind, symbol):
    source = _one_layer(tmp_path)
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


def test_sme2_objects_carry_the_sme_abi_routines(tmp_path):
    """An SME2 object for another ELF triple defines the SME ABI routines its
    streaming leaves call, hidden (assembled by the library builder, not
    taken from a system library); a non-ELF triple is refused in one line,
    as the routines are ELF assembly."""
    source = _one_layer(tmp_path)
    compile_tool = tools.find_tool("cq4p-compile")
    obj = tmp_path / "kernels.o"
    subprocess.run([compile_tool, str(source), "--target=aarch64-sme2",
                    "--triple=aarch64-linux-android", "--emit=obj", "-o", str(obj)],
                   check=True, capture_output=True)
    symbols = subprocess.run(["/usr/lib/llvm-22/bin/llvm-readelf", "-s", "-W", str(obj)],
                             check=True, capture_output=True, text=True).stdout
    for routine in ("__arm_sme_state", "__arm_tpidr2_save", "__arm_tpidr2_restore",
                    "__arm_za_disable", "__arm_get_current_vg"):
        rows = [line.split() for line in symbols.splitlines()
                if line.split()[-1:] == [routine]]
        assert any(row[4:6] == ["GLOBAL", "HIDDEN"] and "UND" not in row for row in rows), \
            (routine, rows)
    result = subprocess.run([compile_tool, str(source), "--target=aarch64-sme2",
                             "--triple=arm64-apple-macos", "--emit=obj", "-o",
                             str(tmp_path / "x.o")], capture_output=True, text=True)
    assert result.returncode != 0
    assert result.stderr == ("cq4p-compile: error: --target=aarch64-sme2 needs an ELF triple "
                             "(Linux, Android) for its SME ABI routines, got "
                             "'arm64-apple-macos'\n")


def _q_proj(bundle):
    """The bundle's first Hadamard q_proj entry and a one-row graph of its
    shape (kernels only: no model steps, no digest of its own)."""
    manifest = json.loads(open(os.path.join(bundle, "manifest.json")).read())
    entry = next(e for e in manifest["tensors"] if e["name"].endswith("q_proj.weight"))
    n, k = entry["shape"]
    return entry["name"], ir.linear_function("q", 1, ir.WeightType(n, k, entry["group_size"]))


def _with_digest(bundle, directory, digest):
    """A copy of `bundle` whose manifest.json says model_digest `digest`
    (None: no model_digest)."""
    subprocess.run(["cp", "-r", bundle, str(directory)], check=True)
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    if digest is None:
        del manifest["model_digest"]
    else:
        manifest["model_digest"] = digest
    path.write_text(json.dumps(manifest))
    return str(directory)


def _run_tensor(bundle, library, name, *flags):
    return subprocess.run([tools.find_tool("cq4p-run"), "--bundle", bundle, "--library", library,
                           "--tensor", name, "--rows", "1", "--repeat", "1", *flags],
                          capture_output=True, text=True, check=False)


def test_a_kernel_library_compiled_for_a_bundle_refuses_any_other(compiled, tmp_path):
    bundle, model_library, _ = compiled
    digest = json.loads(open(os.path.join(bundle, "manifest.json")).read())["model_digest"]
    name, graph = _q_proj(bundle)
    source = tmp_path / "q.mlir"
    source.write_text(graph)
    compile_tool = tools.find_tool("cq4p-compile")
    recorded, unrecorded = str(tmp_path / "librecorded.so"), str(tmp_path / "libany.so")
    subprocess.run([compile_tool, str(source), "--target=host", "--bundle", bundle, "-o",
                    recorded], check=True, capture_output=True)
    subprocess.run([compile_tool, str(source), "--target=host", "-o", unrecorded],
                   check=True, capture_output=True)
    other = _with_digest(bundle, tmp_path / "other", "f00d")

    for library in (recorded, model_library):
        result = _run_tensor(bundle, library, name, "--require-digest")
        assert result.returncode == 0, result.stderr
    result = _run_tensor(bundle, unrecorded, name)
    assert result.returncode == 0, result.stderr
    # The kernel library and the model library (its steps' digest) record
    # the bundle's digest; the kernel library compiled without --bundle none.
    for library in (recorded, model_library):
        result = _run_tensor(other, library, name)
        assert result.returncode == 2
        assert (f"cq4p-run: error: {library}: library built for bundle digest {digest}, this "
                f"bundle's is f00d ({other})") in result.stderr
    assert _run_tensor(other, unrecorded, name).returncode == 0
    result = _run_tensor(other, unrecorded, name, "--require-digest")
    assert result.returncode == 2
    assert (f"{unrecorded}: records no bundle digest, and one is required (compile it from "
            f"the bundle's model.mlir or with cq4p-compile --bundle {other})") in result.stderr


def test_compile_refuses_a_bundle_digest_it_cannot_record(compiled, tmp_path):
    bundle, _, _ = compiled
    compile_tool = tools.find_tool("cq4p-compile")
    _, graph = _q_proj(bundle)
    source = tmp_path / "q.mlir"
    source.write_text(graph)
    library = tmp_path / "x.so"
    none = _with_digest(bundle, tmp_path / "none", None)
    result = subprocess.run([compile_tool, str(source), "--target=host", "--bundle", none,
                             "-o", str(library)], capture_output=True, text=True)
    assert result.returncode != 0
    assert (f"--bundle {none}: {none}/manifest.json has no model_digest to record "
            f"(python -m cq4p convert writes one)") in result.stderr
    # A model.mlir records its own bundle's digest: another bundle's is a contradiction.
    other = _with_digest(bundle, tmp_path / "other", "f00d")
    digest = json.loads(open(os.path.join(bundle, "manifest.json")).read())["model_digest"]
    model = os.path.join(bundle, "model.mlir")
    result = subprocess.run([compile_tool, model, "--target=host", "--bundle", other, "-o",
                             str(library)], capture_output=True, text=True)
    assert result.returncode != 0
    assert (f"{model} was written for bundle digest {digest}, but --bundle {other} has "
            f"f00d") in result.stderr
    assert not library.exists()


def test_compile_says_so_when_memory_runs_out(tmp_path):
    # 40 distinct shapes need about 250 MiB; under a 64 MiB data limit the
    # compiler refuses them before any work. One CPU, so that the compiler's
    # threads (a stack each) do not depend on the machine.
    source = tmp_path / "shapes.mlir"
    functions = []
    for i in range(40):
        weight = ir.WeightType(64 * (1 + i // 4), 128 * 2 ** (i % 4), 128)
        functions.append(ir.linear_function(f"linear_{i}", None, weight))
    source.write_text("".join(functions))
    library = tmp_path / "x.so"

    def limited():
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        resource.setrlimit(resource.RLIMIT_DATA, (64 << 20, 64 << 20))

    result = subprocess.run([tools.find_tool("cq4p-compile"), str(source), "--target=host", "-o",
                             str(library)], capture_output=True, text=True, preexec_fn=limited)
    assert result.returncode == 1
    # 128 MiB + 3 MiB x 40 shapes = 248 MiB, refused before any work.
    assert result.stderr == (
        f"cq4p-compile: error: out of memory compiling {source} for --target=host: 40 distinct "
        f"kernel shapes, at about 3.5 MiB each: split the functions over several files and compile "
        f"a library of each (a layer binds to any library with its shape's kernels), or give "
        f"the compiler more memory (about 248 MiB in all, above the data limit of 64 MiB)\n")
    assert not library.exists()
