"""Integrity that is checked: a bundle's files and config against its
manifest's sha256s and model_digest, by the runtime (`cq4p-run --verify`,
Bundle::verifyIntegrity, cq4p_model_verify) and by `inspect --deep`, with
Python's hashlib and json as the oracle for the runtime's SHA-256 and
canonical JSON; and the model's own guards seen from Python (one call at
a time, the library's shape against the config).

Needs the build tree's cq4p-run and runtime library; the cases with a
compiled model need cq4p-compile (as test_model_e2e)."""

import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from cq4p.format import constants as fmt
from cq4p.format import layout as ly
from cq4p.cli import main as cli
from cq4p.io import bundle as bd
from cq4p.io import writer as wr
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools


def _verify(bundle, library=None):
    command = [tools.find_tool("cq4p-run"), "--bundle", str(bundle), "--verify"]
    if library is not None:
        command += ["--library", str(library)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    return result.returncode, result.stdout + result.stderr


def _inspect_deep(bundle, capsys):
    status = cli.main(["inspect", "--deep", str(bundle)])
    return status, capsys.readouterr().out


def _copy(bundle, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(bundle, target)
    return target


def _rewrite_manifest(bundle, change):
    path = os.path.join(bundle, "manifest.json")
    with open(path) as handle:
        content = json.load(handle)
    change(content)
    with open(path, "w") as handle:
        json.dump(content, handle, indent=1)


@pytest.mark.parametrize("arch", synthetic.ALL_ARCHITECTURES)
def test_the_runtime_recomputes_pythons_digest_for_every_family(synthetic_model, arch):
    """The runtime's SHA-256 and canonical JSON against hashlib and json
    over each family's real config (floats such as rms_norm_eps 1e-06,
    rope_theta 1000000.0, nested rope_scaling and text_config)."""
    _, bundle, _ = synthetic_model(arch)
    manifest = bd.read_manifest(str(bundle))
    expected = bd.model_digest(manifest.get("config"), manifest["tensors"])
    assert manifest["model_digest"] == expected
    status, out = _verify(bundle)
    assert status == 0, out
    assert f"sha256 of {len(manifest['tensors'])} files matches the manifest" in out
    assert f"model_digest {expected} matches the manifest" in out


def test_hostile_config_values_canonicalise_as_python_does(synthetic_model, tmp_path):
    _, bundle, _ = synthetic_model("llama")
    copy = _copy(bundle, tmp_path)

    def add(content):
        content["config"]["cq4p_test"] = {
            "floats": [0.1, 1e-05, 1e-4, 1e16, 1e15, 2.5e-300, -0.0, 123456789.125,
                       1.7976931348623157e308, 5e-324, 3.0],
            "big": 123456789012345678901234567890, "text": "caf\u00e9 \U0001f600 \x7f \"q\" \\",
            "Z": True, "a": None, "\u00e9": {"b": [], "a": {}}}
        content["model_digest"] = bd.model_digest(content["config"], content["tensors"])

    _rewrite_manifest(copy, add)
    status, out = _verify(copy)
    assert status == 0, out


def test_a_tensor_swapped_for_one_of_the_same_shape_is_caught(synthetic_model, tmp_path,
                                                             capsys):
    """Before: the swap passed bundle open, --verify and inspect --deep, and
    generated silently wrong logits."""
    _, bundle, _ = synthetic_model("llama", seed=0)
    _, other, _ = synthetic_model("llama", seed=1)
    copy = _copy(bundle, tmp_path)
    manifest = bd.read_manifest(str(copy))
    entry = next(e for e in manifest["tensors"] if e["name"].endswith("q_proj.weight"))
    name = os.path.basename(bd.resolve(str(copy), entry["file"]))
    shutil.copyfile(os.path.join(other, name), os.path.join(copy, name))
    assert bd.file_sha256(os.path.join(copy, name)) != entry["sha256"]
    bd.check_files(str(copy), manifest)  # opening (headers, shapes) still passes

    status, out = _verify(copy)
    assert status == 2, out
    assert f"tensor '{entry['name']}': sha256 {entry['sha256']} in manifest.json, but " in out
    assert "the file is not the one converted" in out and out.count("\n") == 1

    status, out = _inspect_deep(copy, capsys)
    assert status == 1
    assert f"{entry['name']}: INVALID: " in out and f"sha256 {entry['sha256']}" in out
    assert "verdict: INVALID: 1 tensors" in out

    status, out = _inspect_deep(bundle, capsys)
    assert status == 0, out
    assert "model_digest: " in out and "verdict: OK" in out


@pytest.mark.parametrize("key, value", [("num_hidden_layers", 3), ("vocab_size", 1024),
                                        ("rope_theta", 12345.0), ("rms_norm_eps", 1e-3)])
def test_a_config_edited_after_conversion_is_caught(synthetic_model, tmp_path, capsys, key,
                                                    value):
    _, bundle, _ = synthetic_model("llama")
    copy = _copy(bundle, tmp_path)
    recorded = bd.read_manifest(str(copy))["model_digest"]

    def edit(content):
        assert key in content["config"] and content["config"][key] != value
        content["config"][key] = value

    _rewrite_manifest(copy, edit)
    status, out = _verify(copy)
    assert status == 2, out
    assert f"model_digest {recorded} recorded, but the config and tensor list give " in out
    status, out = _inspect_deep(copy, capsys)
    assert status == 1
    assert "model_digest: INVALID: " in out and "verdict: INVALID: model_digest" in out


@pytest.fixture(scope="module")
def compiled_llama(synthetic_model, tmp_path_factory):
    _, bundle, config = synthetic_model("llama")
    library = str(tmp_path_factory.mktemp("lib-integrity") / "libmodel.so")
    result = subprocess.run([tools.find_tool("cq4p-compile"), str(bundle / "model.mlir"),
                             "--target=host", "--prefill-chunk", "8", "-o", library],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return str(bundle), library, config


def test_the_librarys_digest_is_compared_with_the_recomputed_one(compiled_llama, tmp_path):
    bundle, library, _ = compiled_llama
    status, out = _verify(bundle, library)
    assert status == 0, out
    assert "built for this bundle's digest" in out
    with native.NativeModel(bundle, library) as model:
        model.verify()

    # A config edit relabelled with the library's digest: open accepts the
    # label, verification recomputes the digest and refuses both.
    copy = _copy(bundle, tmp_path)
    recorded = bd.read_manifest(bundle)["model_digest"]
    _rewrite_manifest(copy, lambda content: content["config"].update(rope_theta=777.0))
    assert bd.read_manifest(str(copy))["model_digest"] == recorded
    with native.NativeModel(str(copy), library) as model:
        with pytest.raises(native.NativeError, match=r"model_digest .* recorded, but"):
            model.verify()
    status, out = _verify(copy, library)
    assert status == 2 and "the manifest was edited after conversion" in out


@pytest.mark.parametrize("key", ["num_hidden_layers", "vocab_size", "hidden_size"])
def test_a_config_edit_of_the_librarys_shape_is_refused_at_open(compiled_llama, tmp_path, key):
    """Opening is cheap (no hashing) yet refuses a config whose layers,
    vocabulary or hidden size is not what the library was compiled for."""
    bundle, library, config = compiled_llama
    copy = _copy(bundle, tmp_path)
    _rewrite_manifest(copy, lambda content: content["config"].update({key: config[key] + 1}))
    with pytest.raises(native.NativeError) as refusal:
        native.NativeModel(str(copy), library)
    assert f"the bundle's config says {key} {config[key] + 1}" in refusal.value.message
    assert f"compiled for {config[key]}" in refusal.value.message


def test_two_python_threads_on_one_model_are_refused_never_wrong(compiled_llama):
    """ctypes releases the GIL around each call: two threads really do
    call into one model at once."""
    bundle, library, config = compiled_llama
    prompts = [synthetic.prompt(config, 9, seed=1), synthetic.prompt(config, 11, seed=2)]
    with native.NativeModel(bundle, library, threads=1, context=64) as model:
        expected = [model.generate(prompt, 6)[0] for prompt in prompts]
        results = {"wrong": 0, "busy": 0, "ran": 0, "other": []}

        def work(index):
            for _ in range(30):
                try:
                    ids, _ = model.generate(prompts[index], 6)
                except native.NativeError as error:
                    if error.code == fmt.CQ4P_ERROR_BUSY:
                        results["busy"] += 1
                    else:
                        results["other"].append(error.message)
                    continue
                results["ran" if ids == expected[index] else "wrong"] += 1

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results["wrong"] == 0 and results["other"] == []
    assert results["ran"] + results["busy"] == 60 and results["ran"] > 0


def test_generate_counts_no_context_holds_are_refused(compiled_llama):
    bundle, library, config = compiled_llama
    with native.NativeModel(bundle, library, context=32) as model:
        for count in (10 ** 11, -1):
            with pytest.raises(native.NativeError, match="new tokens: expected an integer in"):
                model.generate([1, 2, 3], count)
        # Refused before ctypes could make them inf, 1 and 2^64 - 1.
        with pytest.raises(native.NativeError, match=r"temperature: expected a finite number"):
            model.generate([1, 2, 3], 4, temperature=1e39)
        with pytest.raises(native.NativeError, match=r"top_k: expected an integer in"):
            model.generate([1, 2, 3], 4, top_k=4294967297)
        with pytest.raises(native.NativeError, match=r"seed: expected an integer in"):
            model.generate([1, 2, 3], 4, seed=-1)
        # Infinite: refused before ctypes as well (the runtime refuses it
        # too, tested in ModelTest).
        with pytest.raises(native.NativeError, match=r"temperature: expected a finite number"):
            model.generate([1, 2, 3], 4, temperature=float("inf"))
        assert model.generate([1, 2, 3], 4, temperature=0.0, top_p=0.0)[0] == \
            model.generate([1, 2, 3], 4)[0]


def test_a_malformed_sha256_is_refused_alike_by_both_readers(synthetic_model, tmp_path):
    _, bundle, _ = synthetic_model("llama")
    copy = _copy(bundle, tmp_path)
    name = bd.read_manifest(str(copy))["tensors"][0]["name"]

    def spoil(content):
        content["tensors"][0]["sha256"] = "ABC"

    _rewrite_manifest(copy, spoil)
    expected = f"tensor '{name}': expected \"sha256\" to be 64 lowercase hex digits"
    for runtime in (True, False):  # the runtime's validator, then Python's own
        with pytest.raises(bd.BundleError, match=expected):
            bd.read_manifest(str(copy), runtime=runtime)
    status, out = _verify(copy)
    assert status == 2 and expected in out


def _dense_bundle(directory, count, rows, columns, values=None):
    """A bundle of `count` FP16 tensors [rows, columns] (zeros unless
    `values` gives one tensor's), each file's sha256 recorded."""
    os.makedirs(directory, exist_ok=True)
    tensors = []
    for index in range(count):
        name = f"model.layers.{index}.weight"
        stem = bd.logical_file(name)
        array = values if values is not None else np.zeros((rows, columns), np.float16)
        sha256 = wr.write_dense_file(os.path.join(directory, stem), array, ly.FP16)
        tensors.append({"name": name, "file": stem, "shape": [rows, columns], "dtype": "FP16",
                        "sha256": sha256})
    bd.write_manifest(str(directory), bd.manifest({}, tensors))
    return tensors


# The peak RSS of a fresh process before and after cq4p_bundle_verify.
_PEAK_RSS_OF_VERIFY = r"""
import resource, sys
from cq4p.native import runtime as native
native.library()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
native.verify_bundle(sys.argv[1])
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_verification_holds_one_file_in_memory_at_a_time(tmp_path):
    """cq4p_bundle_verify (convert's last step) reads every byte of every
    file; its peak memory grows by about one file (each file's pages leave
    once checked), not by the bundle (before: every file stayed mapped and
    resident, 850 MiB for the 1.1 B bundle)."""
    native.library()
    count, rows, columns = 8, 2048, 4096  # 16 MiB files, 128 MiB in all
    file_kib = rows * columns * 2 // 1024
    _dense_bundle(tmp_path / "bundle", count, rows, columns)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] +
        [p for p in [os.environ.get("PYTHONPATH")] if p]))
    result = subprocess.run([sys.executable, "-c", _PEAK_RSS_OF_VERIFY, str(tmp_path / "bundle")],
                            capture_output=True, text=True, timeout=300, env=env, check=False)
    assert result.returncode == 0, result.stderr
    before, after = map(int, result.stdout.split())
    grown = after - before
    # One file and its hashing's own buffers; never a third of the bundle.
    assert grown <= 2 * file_kib, (f"verification added {grown} KiB of peak RSS for "
                                   f"{count} files of {file_kib} KiB")


def test_a_content_defect_is_reported_before_an_earlier_files_sha256(tmp_path):
    """verify checks each file's content and then hashes it, file by file:
    a content defect in a later file still wins over an earlier file's
    sha256 mismatch, as when every file's content was checked first."""
    bundle = tmp_path / "bundle"
    tensors = _dense_bundle(bundle, 3, 4, 8)
    manifest = bd.read_manifest(str(bundle))
    manifest["tensors"][0]["sha256"] = "0" * 64
    bd.write_manifest(str(bundle), manifest)
    bad = np.zeros((4, 8), np.float16)
    bad[2, 5] = np.inf
    wr.write_dense_file(os.path.join(bundle, tensors[2]["file"]), bad, ly.FP16)

    for status, out in [_verify(bundle), _native_verdict(bundle)]:
        assert status != 0, out
        assert f"tensor '{tensors[2]['name']}': " in out and "sha256" not in out, out

    wr.write_dense_file(os.path.join(bundle, tensors[2]["file"]), np.zeros((4, 8), np.float16),
                        ly.FP16)
    for status, out in [_verify(bundle), _native_verdict(bundle)]:
        assert status != 0, out
        assert (f"tensor '{tensors[0]['name']}': sha256 {'0' * 64} in manifest.json, but "
                in out), out


def _native_verdict(bundle):
    try:
        native.verify_bundle(bundle)
    except native.NativeError as error:
        return error.code, str(error)
    return 0, ""
