"""The converter, check-model and a bundle's integrity under hostile input
(docs/TRUST.md): `convert --force` over a directory that holds more than a
bundle, $CQ4P_CONVERT_THREADS, model shapes the compiler or the runtime
refuse, degenerate numbers in a config, and the files a bundle ships beside
its tensors (model.mlir, the tokenizer's) edited, added or named outside the
bundle after conversion.

Every case runs as a separate process under hostile.run's time and memory
limits and must be refused cleanly (one line naming the file, member, value
and limit; no signal, no traceback), with nothing outside the outputs
touched.
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import hostile
from cq4p.cli import convert as cv
from cq4p.cli import generate as gn
from cq4p.io import bundle as bd
from cq4p.io import safetensors as st
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

EXIT_BAD_INPUT = 2
SHAPE = synthetic.Shape(hidden=128, ffn=256, vocab=256, layers=2)
TOKENIZER_TEXTS = {
    "tokenizer.json": '{"model": {"type": "BPE", "vocab": {}, "merges": []}}',
    "tokenizer_config.json": '{"eos_token": "</s>"}',
    "generation_config.json": '{"eos_token_id": 2}',
}


def _env(**variables):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(synthetic.__file__).resolve().parents[2])
    env.update(variables)
    return env


def _tool(name):
    try:
        return tools.find_tool(name)
    except tools.ToolError:
        pytest.skip(f"{name} is not built")


def _checkpoint(root, arch="llama", shape=SHAPE, edit=None, tokenizer=True):
    model_dir = root / "model"
    config = synthetic.write_model(str(model_dir), arch, shape, seed=0)
    if edit is not None:
        edit(config)
        (model_dir / "config.json").write_text(json.dumps(config))
    if tokenizer:
        for name, text in TOKENIZER_TEXTS.items():
            (model_dir / name).write_text(text)
    return model_dir


def _convert(model_dir, out, *arguments, env=None):
    return hostile.run(hostile.cli("convert", "--model", model_dir, "--out", out, *arguments),
                       env=env or _env(), timeout=120)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(checkpoint, bundle) of a small Llama with tokenizer files."""
    root = tmp_path_factory.mktemp("hostile-convert")
    model_dir = _checkpoint(root)
    with open(os.devnull, "w") as quiet:
        cv.convert(str(model_dir), str(root / "bundle"), progress=quiet)
    return model_dir, root / "bundle"


def _copy(bundle, target):
    shutil.copytree(bundle, target, symlinks=True)
    return target


# --- convert --force replaces only what cq4p wrote ------------------------------

def _with_a_library(out):
    (out / "libmodel.so").write_bytes(b"\x7fELF user library")
    return "libmodel.so"


def _with_notes(out):
    (out / "notes").mkdir()
    (out / "notes" / "todo.txt").write_text("my notes")
    return "notes"


def _with_a_link(out):
    os.symlink("/etc/hostname", out / "elsewhere")
    return "elsewhere"


FORCE_CASES = {
    "a library built beside the bundle": _with_a_library,
    "a subdirectory of notes": _with_notes,
    "a symbolic link": _with_a_link,
}


@pytest.mark.parametrize("case", list(FORCE_CASES))
def test_force_refuses_a_bundle_directory_with_other_files(converted, tmp_path, case):
    model_dir, bundle = converted
    out = _copy(bundle, tmp_path / "out")
    name = FORCE_CASES[case](out)
    before = hostile.snapshot(out)
    outcome = _convert(model_dir, out, "--force")
    hostile.assert_refused(outcome, f"{out / name}: --force replaces only the files of the "
                                    f"bundle's manifest", code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    assert hostile.snapshot(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out"], "a temporary was left"


def test_force_refuses_a_copied_manifest_among_other_files(converted, tmp_path):
    model_dir, bundle = converted
    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(bundle / "manifest.json", out / "manifest.json")
    (out / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    (out / "report.txt").write_text("the user's")
    before = hostile.snapshot(out)
    outcome = _convert(model_dir, out, "--force")
    hostile.assert_refused(outcome, f"{out / 'photo.jpg'}: --force replaces only the files",
                           code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    assert hostile.snapshot(out) == before


def test_force_replaces_a_bundle_and_its_legacy_files(converted, tmp_path):
    """The control: a bundle alone is replaced, whatever files of its
    manifest it holds."""
    model_dir, bundle = converted
    out = _copy(bundle, tmp_path / "out")
    tensor = bd.read_manifest(str(out))["tensors"][0]["file"]
    (out / (tensor[:-len(".weights")] + ".cq4.weights")).write_bytes(b"a legacy file")
    outcome = _convert(model_dir, out, "--force")
    assert outcome.returncode == 0, outcome.describe()
    assert sorted(os.listdir(out)) == sorted(os.listdir(bundle))
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_the_manifest_is_written_last(tmp_path, monkeypatch):
    """A conversion stopped at any point leaves no directory that reads as a
    bundle without its model.mlir or tokenizer: manifest.json is written
    once, after every other file."""
    model_dir = _checkpoint(tmp_path)
    listings = []
    write = bd.write_manifest

    def recording(directory, content):
        listings.append(sorted(os.listdir(directory)))
        write(directory, content)

    monkeypatch.setattr(bd, "write_manifest", recording)
    with open(os.devnull, "w") as quiet:
        cv.convert(str(model_dir), str(tmp_path / "bundle"), progress=quiet)
    assert len(listings) == 1, listings
    for name in ("model.mlir", *TOKENIZER_TEXTS):
        assert name in listings[0]


# --- $CQ4P_CONVERT_THREADS ----------------------------------------------------

THREAD_VALUES = ["2000000000", "99999999999", "abc", "1e3", "0", "-1", "1025", "4 4",
                 "9" * 100]


@pytest.mark.parametrize("value", THREAD_VALUES, ids=[v[:12] for v in THREAD_VALUES])
def test_convert_threads_variable_is_checked(tmp_path, value):
    model_dir = _checkpoint(tmp_path, tokenizer=False)
    out = tmp_path / "out"
    outcome = _convert(model_dir, out, env=_env(CQ4P_CONVERT_THREADS=value))
    hostile.assert_refused(outcome, "$CQ4P_CONVERT_THREADS is ", code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    assert "expected a whole number of threads from 1 to 1024" in outcome.stderr
    assert repr(value[:40]).rstrip("'") in outcome.stderr
    assert not out.exists()


@pytest.mark.parametrize("value", ["AVX2", "avx-512", ""])
def test_convert_quantize_isa_variable_is_checked(tmp_path, value):
    """The runtime reads anything but generic and avx2 as avx512 (no cap):
    a typo would go unnoticed."""
    model_dir = _checkpoint(tmp_path, tokenizer=False)
    outcome = _convert(model_dir, tmp_path / "out", env=_env(CQ4P_QUANTIZE_ISA=value))
    hostile.assert_refused(outcome, f"$CQ4P_QUANTIZE_ISA is {value!r}: expected generic, "
                                    f"avx2 or avx512 (or unset)", code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)


def test_convert_threads_variable_within_the_bound_converts(tmp_path):
    model_dir = _checkpoint(tmp_path, tokenizer=False)
    outcome = _convert(model_dir, tmp_path / "out", env=_env(CQ4P_CONVERT_THREADS="3"))
    assert outcome.returncode == 0, outcome.describe()


# --- integrity of the shipped files ---------------------------------------------

def _verify_outcomes(bundle):
    """(cq4p-run --verify, inspect --deep) over the bundle."""
    runner = _tool("cq4p-run")
    return (hostile.run([runner, "--bundle", bundle, "--verify"]),
            hostile.run(hostile.cli("inspect", "--deep", bundle), env=_env()))


def _runtime_verify(bundle):
    try:
        native.verify_bundle(str(bundle))
    except native.LibraryNotFoundError:
        pytest.skip("the runtime library is not built")
    except native.NativeError as error:
        return error.message
    return None


def _edit_json(path, change):
    content = json.loads(path.read_text())
    change(content)
    path.write_text(json.dumps(content))


def _swap_eos(bundle):
    _edit_json(bundle / "generation_config.json", lambda c: c.update(eos_token_id=7))
    return "generation_config.json: sha256"


def _edit_tokenizer(bundle):
    _edit_json(bundle / "tokenizer.json", lambda c: c["model"]["vocab"].update(a=0))
    return "tokenizer.json: sha256"


def _edit_tokenizer_config(bundle):
    _edit_json(bundle / "tokenizer_config.json", lambda c: c.update(eos_token="<eos>"))
    return "tokenizer_config.json: sha256"


def _edit_graph(bundle):
    with open(bundle / "model.mlir", "a") as graph:
        graph.write("// edited\n")
    return "model.mlir: sha256"


def _add_chat_template(bundle):
    (bundle / "chat_template.jinja").write_text("{{ messages }}")
    return "chat_template.jinja: not in manifest.json files_sha256 (added after conversion"


def _remove_tokenizer(bundle):
    (bundle / "tokenizer_config.json").unlink()
    return "tokenizer_config.json: cannot open: No such file or directory"


def _link_tokenizer(bundle):
    (bundle / "tokenizer.json").unlink()
    os.symlink("/etc/hostname", bundle / "tokenizer.json")
    return "tokenizer.json: a symbolic link"


def _tokenizer_files_named(name):
    def edit(bundle):
        _edit_json(bundle / "manifest.json", lambda c: c["tokenizer_files"].append(name))
        return (f"manifest.json: tokenizer_files[3]: expected the name of a file inside the "
                f"bundle (not manifest.json), found {bd.shown(name)}")
    return edit


def _files_sha256_named(name):
    def edit(bundle):
        _edit_json(bundle / "manifest.json",
                   lambda c: c["files_sha256"].update({name: "0" * 64}))
        return (f"manifest.json: files_sha256: expected the name of a file inside the bundle "
                f"(not manifest.json), found {bd.shown(name)}")
    return edit


def _unrecorded_tokenizer_file(bundle):
    _edit_json(bundle / "manifest.json", lambda c: c["files_sha256"].pop("tokenizer.json"))
    return "tokenizer_files[0]: \"tokenizer.json\" has no sha256 in files_sha256"


def _bad_digest(bundle):
    _edit_json(bundle / "manifest.json",
               lambda c: c["files_sha256"].update({"tokenizer.json": "XYZ"}))
    return "files_sha256: \"tokenizer.json\": expected 64 lowercase hex digits"


INTEGRITY_CASES = {
    "generation_config.json edited (another EOS)": _swap_eos,
    "tokenizer.json edited": _edit_tokenizer,
    "tokenizer_config.json edited": _edit_tokenizer_config,
    "model.mlir edited": _edit_graph,
    "chat_template.jinja added": _add_chat_template,
    "a tokenizer file removed": _remove_tokenizer,
    "tokenizer.json a link out of the bundle": _link_tokenizer,
    "tokenizer_files ../../../etc/passwd": _tokenizer_files_named("../../../etc/passwd"),
    "tokenizer_files /etc/passwd": _tokenizer_files_named("/etc/passwd"),
    "tokenizer_files ..": _tokenizer_files_named(".."),
    "tokenizer_files manifest.json": _tokenizer_files_named("manifest.json"),
    "tokenizer_files a number": _tokenizer_files_named(5),
    "tokenizer_files a long name": _tokenizer_files_named("../" * 100),
    "files_sha256 ../x": _files_sha256_named("../x"),
    "a tokenizer file without a digest": _unrecorded_tokenizer_file,
    "a digest that is not hex": _bad_digest,
}


@pytest.mark.parametrize("case", list(INTEGRITY_CASES))
def test_verify_refuses_shipped_files_changed_after_conversion(converted, tmp_path, case):
    _, bundle = converted
    copy = _copy(bundle, tmp_path / "bundle")
    expected = INTEGRITY_CASES[case](copy)
    run, inspect = _verify_outcomes(copy)
    hostile.assert_refused(run, expected)
    assert len(run.stderr.strip().splitlines()) == 1, run.describe()
    assert inspect.returncode == 1 and hostile.crashed(inspect) is None, inspect.describe()
    assert expected in inspect.stdout, inspect.stdout
    message = _runtime_verify(copy)
    assert message is not None and expected in message, message
    # The Python reader's own rules (used where the runtime is not built):
    # the same refusal in the same words.
    try:
        bd.verify_shipped_files(str(copy), bd.read_manifest(str(copy), runtime=False))
        message = None
    except bd.BundleError as error:
        message = str(error)
    assert message is not None and expected in message, message


def test_a_converted_bundle_records_and_passes_every_digest(converted):
    _, bundle = converted
    manifest = bd.read_manifest(str(bundle))
    assert sorted(manifest["files_sha256"]) == sorted(["model.mlir", *TOKENIZER_TEXTS])
    run, inspect = _verify_outcomes(bundle)
    assert run.returncode == 0, run.describe()
    assert "4 other files (model.mlir, tokenizer files) match files_sha256" in run.stdout
    assert inspect.returncode == 0, inspect.stdout
    assert "files_sha256: 4 files match (model.mlir and the tokenizer's)" in inspect.stdout
    assert _runtime_verify(bundle) is None


def test_an_older_bundle_says_what_no_digest_covers(converted, tmp_path):
    """A bundle converted before files_sha256 still verifies (docs/TRUST.md),
    and both tools name the files no digest covers."""
    _, bundle = converted
    copy = _copy(bundle, tmp_path / "bundle")
    _edit_json(copy / "manifest.json", lambda c: c.pop("files_sha256"))
    run, inspect = _verify_outcomes(copy)
    assert run.returncode == 0, run.describe()
    uncovered = "model.mlir, tokenizer.json, tokenizer_config.json, generation_config.json"
    assert f"not covered by any digest: {uncovered}" in run.stdout, run.stdout
    assert inspect.returncode == 0, inspect.stdout
    assert f"not covered by any digest: {uncovered}" in inspect.stdout, inspect.stdout
    # Its tokenizer_files are still confined to the bundle.
    _edit_json(copy / "manifest.json",
               lambda c: c["tokenizer_files"].append("../../../etc/passwd"))
    run, inspect = _verify_outcomes(copy)
    hostile.assert_refused(run, "tokenizer_files[3]: expected the name of a file inside")
    assert inspect.returncode == 1, inspect.stdout


def test_upgrade_keeps_the_shipped_files_digests(converted, tmp_path):
    _, bundle = converted
    copy = _copy(bundle, tmp_path / "bundle")
    outcome = hostile.run(hostile.cli("upgrade", copy), env=_env())
    assert outcome.returncode == 0, outcome.describe()
    manifest = bd.read_manifest(str(copy))
    assert manifest["tokenizer_files"] == list(TOKENIZER_TEXTS)
    assert sorted(manifest["files_sha256"]) == sorted(["model.mlir", *TOKENIZER_TEXTS])
    assert _runtime_verify(copy) is None


# --- models the compiler or the runtime would refuse, refused by convert ---------

def _lfm2_with_a_wide_convolution(root):
    """An LFM2 checkpoint whose conv_L_cache (17) and conv weights agree."""
    shape = synthetic.default_shape("lfm2", layers=2).resolved()
    model_dir = root / "model"
    config = synthetic.write_model(str(model_dir), "lfm2", shape, seed=0)
    config["conv_L_cache"] = 17
    (model_dir / "config.json").write_text(json.dumps(config))
    tensors = synthetic.model_tensors("lfm2", shape, 0)
    for name, values in list(tensors.items()):
        if name.endswith("conv.conv.weight"):
            tensors[name] = np.resize(values, (values.shape[0], 1, 17))
    for path in model_dir.glob("*.safetensors"):
        path.unlink()
    st.write(str(model_dir / "model.safetensors"), tensors)
    return model_dir


def _lfm2_without_attention(root):
    shape = synthetic.default_shape("lfm2", layers=2).resolved()
    model_dir = root / "model"
    config = synthetic.write_model(str(model_dir), "lfm2", shape, seed=0)
    config.pop("layer_types", None)
    config["full_attn_idxs"] = []
    (model_dir / "config.json").write_text(json.dumps(config))
    tensors = synthetic.model_tensors("lfm2", shape, 0)
    conv = {name[len("model.layers.0."):]: values for name, values in tensors.items()
            if name.startswith("model.layers.0.")}
    for layer in range(2):
        prefix = f"model.layers.{layer}."
        for name in [name for name in tensors if name.startswith(prefix)]:
            del tensors[name]
        tensors.update({prefix + part: values for part, values in conv.items()})
    for path in model_dir.glob("*.safetensors"):
        path.unlink()
    st.write(str(model_dir / "model.safetensors"), tensors)
    return model_dir


def _synthetic(arch, **sizes):
    def make(root):
        shape = synthetic.default_shape(arch, **sizes)
        synthetic.write_model(str(root / "model"), arch, shape, seed=0)
        return root / "model"
    return make


def _edited(arch, **fields):
    def make(root):
        model_dir = root / "model"
        config = synthetic.write_model(str(model_dir), arch, synthetic.default_shape(arch,
                                                                                     layers=2))
        config.get("text_config", config).update(fields)
        (model_dir / "config.json").write_text(json.dumps(config))
        return model_dir
    return make


LIMIT_CASES = {
    "hidden 2": (_synthetic("smollm2", hidden=2, vocab=256, layers=1, heads=1, kv_heads=1,
                            head_dim=2), "hidden_size (2) must be a multiple of 16"),
    "hidden 24": (_synthetic("smollm2", hidden=24, vocab=256, layers=1, heads=1, kv_heads=1,
                             head_dim=16), "hidden_size (24) must be a multiple of 16"),
    "head_dim 8": (_synthetic("smollm2", hidden=64, vocab=256, layers=1, heads=8, kv_heads=8,
                              head_dim=8), "head_dim of layer 0 (8) must be a multiple of 16"),
    "ffn 24": (_synthetic("smollm2", ffn=24, vocab=256, layers=1),
               "intermediate_size (24) must be a multiple of 16"),
    "vocab 1": (_synthetic("llama", vocab=1, layers=1), "vocab_size (1) must be at least 2"),
    "a soft-capped vocabulary of 24": (_synthetic("gemma4", vocab=24, layers=2),
                                       "vocab_size (24) must be a multiple of 16 with "
                                       "final_logit_softcapping"),
    "LFM2 conv_L_cache 17": (_lfm2_with_a_wide_convolution,
                             "conv_L_cache (17) must be at most 16"),
    "LFM2 without attention": (_lfm2_without_attention,
                               "no attention layer among the 2 layers"),
    "rms_norm_eps subnormal": (_edited("llama", rms_norm_eps=1e-45),
                               "'rms_norm_eps' is 1e-45, below float32's smallest normal"),
    "rope_theta subnormal": (_edited("llama", rope_theta=1e-40),
                             "'rope_theta' is 1e-40, below float32's smallest normal"),
    "final_logit_softcapping subnormal": (_edited("gemma4", final_logit_softcapping=1e-39),
                                          "'final_logit_softcapping' is 1e-39, below"),
    "final_logit_softcapping 0": (_edited("gemma4", final_logit_softcapping=0),
                                  "'final_logit_softcapping' is 0, expected a positive"),
    "final_logit_softcapping -1": (_edited("gemma4", final_logit_softcapping=-1.0),
                                   "'final_logit_softcapping' is -1.0, expected a positive"),
}


@pytest.mark.parametrize("case", list(LIMIT_CASES))
def test_convert_refuses_what_the_compiler_and_runtime_refuse(tmp_path, case):
    make, expected = LIMIT_CASES[case]
    model_dir = make(tmp_path)
    (tmp_path / "out").mkdir()
    before = hostile.snapshot(model_dir)
    outcome = _convert(model_dir, tmp_path / "out" / "bundle")
    hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    assert "config.json: " in outcome.stderr
    assert hostile.snapshot(model_dir) == before
    assert os.listdir(tmp_path / "out") == [], "a bundle or a temporary was left"


# --- check-model over degenerate configs and logits -------------------------------

CHECK_MODEL_CASES = {
    "vocab_size 1": ({"vocab_size": 1}, "vocab_size (1) must be at least 2"),
    "rms_norm_eps 0": ({"rms_norm_eps": 0}, "'rms_norm_eps' is 0, expected a positive"),
    "rms_norm_eps subnormal": ({"rms_norm_eps": 1e-40}, "'rms_norm_eps' is 1e-40, below"),
    "rope_theta -1": ({"rope_theta": -1.0}, "'rope_theta' is -1.0, expected a positive"),
    "hidden_size 24": ({"hidden_size": 24}, "hidden_size (24) must be a multiple of 16"),
}


@pytest.mark.parametrize("case", list(CHECK_MODEL_CASES))
def test_check_model_refuses_a_degenerate_config(converted, tmp_path, case):
    """A manifest whose config was edited (or written by an older
    converter): check-model refuses it by convert's rules, before any
    library is opened."""
    fields, expected = CHECK_MODEL_CASES[case]
    _, bundle = converted
    copy = _copy(bundle, tmp_path / "bundle")
    _edit_json(copy / "manifest.json", lambda c: c["config"].update(fields))
    outcome = hostile.run(hostile.cli("check-model", "--bundle", copy, "--library",
                                      tmp_path / "libmodel.so", "--steps", "1"), env=_env())
    hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)


class _Logits:
    """A model or an oracle that returns the same logits at every step."""

    def __init__(self, logits):
        self.logits = np.asarray(logits, dtype=np.float32)

    def reset(self):
        pass

    def prefill(self, prompt):
        return self.logits if isinstance(self, _Compiled) else np.stack([self.logits])

    def decode(self, token):
        return self.logits


class _Compiled(_Logits):
    pass


def test_check_model_compares_logits_a_tiny_soft_cap_leaves():
    """A soft-cap of 1e-30 squeezes every logit into +-1e-30, whose float32
    variance is 0: the comparison is made in float64, no ZeroDivisionError."""
    logits = np.tanh(np.linspace(-3, 3, 32)) * 1e-30
    rows = gn.compare(_Compiled(logits), _Logits(logits), [1, 2], 2)
    assert len(rows) == 3 and all(row[1] == 0.0 for row in rows), rows


@pytest.mark.parametrize("logits,expected", [
    ([0.5], "the model's vocabulary has 1 token"),
    ([0.25] * 8, "step 0: the oracle's logits have standard deviation 0.0"),
])
def test_check_model_refuses_logits_it_cannot_compare(logits, expected):
    with pytest.raises(gn.GenerateError, match=expected.replace(".", r"\.")):
        gn.compare(_Compiled(logits), _Logits(logits), [1], 1)
