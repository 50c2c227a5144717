"""The model layer under hostile input (docs/TRUST.md): prompt and sampling
arguments, a library run with a bundle it was not compiled for, mutated
model.mlir under cq4p-opt and cq4p-compile, cq4p-compile's own arguments and
--bundle reader, and hostile checkpoints for convert.

Every case runs as a separate process under a time limit and an address
space limit (hostile.run: `ulimit -v`), and must be refused cleanly: a
non-zero exit status that is no signal, no hang, no crash dump, a one-line
diagnostic naming the value, and nothing outside the output touched.
"""

import json
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import hostile
from cq4p.cli import convert as cv
from cq4p.io import safetensors as st
from cq4p.model import synthetic
from cq4p.native import tools

EXIT_BAD_INPUT = 2


def _tool(name):
    try:
        return tools.find_tool(name)
    except tools.ToolError:
        pytest.skip(f"{name} is not built")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(synthetic.__file__).resolve().parents[2])
    return env


SHAPE = synthetic.Shape(hidden=128, ffn=256, vocab=256, layers=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(checkpoint, bundle, library, other bundle): a small Llama converted
    twice (seeds 0 and 1, so different digests) and compiled for the first."""
    root = tmp_path_factory.mktemp("hostile-model")
    made = {}
    for seed in (0, 1):
        checkpoint = root / f"checkpoint{seed}"
        synthetic.write_model(str(checkpoint), "llama", SHAPE, seed=seed)
        bundle = root / f"bundle{seed}"
        with open(os.devnull, "w") as quiet:
            cv.convert(str(checkpoint), str(bundle), seed=seed, progress=quiet)
        made[seed] = (checkpoint, bundle)
    library = root / "libmodel.so"
    outcome = hostile.run([_tool("cq4p-compile"), made[0][1] / "model.mlir", "--target=host",
                           "--prefill-chunk=8", "-o", library], timeout=600)
    assert outcome.returncode == 0, outcome.describe()
    return made[0][0], made[0][1], library, made[1][1]


# --- prompt and sampling arguments -------------------------------------------

SAMPLING_CASES = [
    (["-n", "100000000000"], "-n: expected an integer in [0, 1073741824]"),
    (["-n", "-1"], "-n: expected an integer in [0"),
    (["--top-k", "4294967297"], "--top-k: expected an integer in [0, 2147483647]"),
    (["--top-k", "-1"], "--top-k: expected an integer"),
    (["--seed", "-1"], "--seed: expected an integer in [0, 18446744073709551615]"),
    (["--seed", str(2**64)], "--seed: expected an integer"),
    (["--temperature", "1e39"], "--temperature: expected a finite number (float32)"),
    (["--temperature", "nan"], "--temperature: expected a finite number"),
    (["--temperature=-inf"], "--temperature: expected a finite number"),
    (["--top-p", "0"], "--top-p: expected a number > 0.0"),
    (["--top-p", "1.5"], "--top-p: expected a number <= 1.0"),
    (["--threads", "0"], "--threads: expected an integer in [1, 1024]"),
    (["--threads", "4294967297"], "--threads: expected an integer in [1, 1024]"),
    (["--context", "-1"], "--context: expected an integer in [0"),
    (["--context", str(2**63)], "--context: expected an integer in [0"),
]


@pytest.mark.parametrize("arguments,expected", SAMPLING_CASES,
                         ids=[" ".join(case[0]) for case in SAMPLING_CASES])
def test_generate_arguments_are_refused(model, arguments, expected):
    _, bundle, library, _ = model
    outcome = hostile.run(hostile.cli("generate", "--bundle", bundle, "--library", library,
                                      "--prompt-ids", "1 2 3", *arguments), env=_env())
    hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)


LONG = 300


@pytest.mark.parametrize("arguments,expected", [
    (["y" * LONG], "invalid choice: '" + "y" * 64 + f"... ({LONG} characters)'"),
    (["generate", "--bundle", "b", "--library", "l", "--bogus" + "z" * LONG],
     "unrecognized arguments: --bogus" + "z" * 57 + f"... ({LONG + 7} characters)"),
    (["generate", "--threads", "x" * LONG], "expected an integer, found 'x"),
    (["run", "m", "--temperature", "1" * LONG], "expected a finite number (float32), found 1"),
], ids=["command", "flag", "integer", "number"])
def test_argument_refusals_echo_at_most_64_characters_of_a_value(arguments, expected):
    # Before: argparse's own refusals (an unknown command or flag) echoed the
    # whole value, a 300-character line or longer.
    outcome = hostile.run(hostile.cli(*arguments), env=_env())
    hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
    last = outcome.stderr.strip().splitlines()[-1]
    assert len(last) < 64 + 220, last
    assert ("y" * 65) not in last and ("z" * 65) not in last and ("x" * 65) not in last
    assert ("1" * 65) not in last, last


PROMPT_CASES = [
    ("1 100000000000000000000000", "item 1 (100000000000000000000000) is not a token id"),
    ("1 -5", "item 1 (-5) is not a token id"),
    ("1 2.5", "expected integers"),
    ("", "no ids"),
    ("1 4000", "4000"),  # past the vocabulary (256): the runtime's refusal
]


@pytest.mark.parametrize("ids,expected", PROMPT_CASES, ids=[case[0] or "empty"
                                                             for case in PROMPT_CASES])
def test_prompt_ids_are_refused(model, ids, expected):
    _, bundle, library, _ = model
    for command in ("generate", "check-model"):
        outcome = hostile.run(hostile.cli(command, "--bundle", bundle, "--library", library,
                                          "--prompt-ids", ids), env=_env())
        hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
        hostile.assert_one_line(outcome)


@pytest.mark.parametrize("arguments,expected", [
    (["--steps", "-1"], "--steps: expected an integer in [0"),
    (["--tolerance", "nan"], "--tolerance: expected a finite number"),
    (["--tolerance", "inf"], "--tolerance: expected a finite number"),
    (["--tolerance", "-1"], "--tolerance: expected a number >= 0.0"),
    (["--seed", "-1"], "--seed: expected an integer"),
])
def test_check_model_arguments_are_refused(model, arguments, expected):
    _, bundle, library, _ = model
    outcome = hostile.run(hostile.cli("check-model", "--bundle", bundle, "--library", library,
                                      *arguments), env=_env())
    hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)


def test_generate_runs_within_the_limits(model):
    """The control: the same command with good arguments, under the same
    limits, generates."""
    _, bundle, library, _ = model
    outcome = hostile.run(hostile.cli("generate", "--bundle", bundle, "--library", library,
                                      "--prompt-ids", "1 2 3", "-n", "4", "--temperature", "0.7",
                                      "--top-k", "5", "--seed", str(2**64 - 1)), env=_env())
    assert outcome.returncode == 0, outcome.describe()
    assert "ids: " in outcome.stdout


def _copy_bundle(source, target):
    target.mkdir()
    for name in os.listdir(source):
        (target / name).write_bytes((source / name).read_bytes())
    return target


def test_a_manifest_claiming_more_layers_is_refused(model, tmp_path):
    _, bundle, library, _ = model
    edited = _copy_bundle(bundle, tmp_path / "edited")
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["config"]["num_hidden_layers"] = 7
    (edited / "manifest.json").write_text(json.dumps(manifest))
    outcome = hostile.run(hostile.cli("check-model", "--bundle", edited, "--library", library,
                                      "--steps", "1"), env=_env())
    hostile.assert_refused(outcome, "7 layers", code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    manifest["config"]["num_hidden_layers"] = 10**9
    (edited / "manifest.json").write_text(json.dumps(manifest))
    outcome = hostile.run(hostile.cli("check-model", "--bundle", edited, "--library", library,
                                      "--steps", "1"), env=_env())
    hostile.assert_refused(outcome, "num_hidden_layers", code=EXIT_BAD_INPUT)


# --- a library run with another bundle --------------------------------------

def test_a_library_with_another_bundle_is_refused(model):
    _, _, library, other = model
    outcome = hostile.run(hostile.cli("generate", "--bundle", other, "--library", library,
                                      "--prompt-ids", "1 2 3", "-n", "2"), env=_env())
    hostile.assert_refused(outcome, "digest", code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    runner = os.environ.get("CQ4P_RUN")
    if runner and os.access(runner, os.X_OK):
        outcome = hostile.run([runner, "--bundle", other, "--library", library,
                               "--prompt-ids", "1 2 3", "-n", "2"])
        hostile.assert_refused(outcome, "digest")


# --- mutated model.mlir under both tools -------------------------------------

DEPTH = 10_000


def _deep(kind):
    """model.mlir text nested DEPTH deep in one way."""
    if kind == "attribute arrays":
        return ("module attributes {x = " + "[" * DEPTH + "1" + "]" * DEPTH + "} {\n}\n")
    if kind == "modules":
        return "module {\n" * DEPTH + "}\n" * DEPTH
    if kind == "types":
        return ("func.func private @f(" + "tuple<" * DEPTH + "i32" + ">" * DEPTH + ")\n")
    if kind == "parentheses":
        return ("#map = affine_map<(d0) -> (" + "(" * DEPTH + "d0" + ")" * DEPTH + ")>\n"
                "module {\n}\n")
    if kind == "dense literal":
        return ("module attributes {x = dense<" + "[" * DEPTH + "1" + "]" * DEPTH +
                "> : tensor<1xi32>} {\n}\n")
    raise ValueError(kind)


DEEP_KINDS = ("attribute arrays", "modules", "types", "parentheses", "dense literal")


@pytest.mark.parametrize("kind", DEEP_KINDS)
def test_deep_nesting_is_a_diagnostic(tmp_path, kind):
    source = tmp_path / "deep.mlir"
    source.write_text(_deep(kind))
    before = hostile.snapshot(tmp_path)
    for command in ([_tool("cq4p-opt"), source],
                    [_tool("cq4p-compile"), source, "--target=host", "-o", tmp_path / "lib.so"]):
        outcome = hostile.run(command, cwd=tmp_path)
        hostile.assert_refused(outcome, "nesting deeper than 256 levels", code=1)
    assert hostile.snapshot(tmp_path) == before


def test_nesting_within_the_bound_parses(tmp_path):
    """The bound is no lower than it claims: 250 levels of arrays verify."""
    source = tmp_path / "nested.mlir"
    source.write_text("module attributes {test.x = " + "[" * 250 + "1" + "]" * 250 + "} {\n}\n")
    outcome = hostile.run([_tool("cq4p-opt"), source])
    assert outcome.returncode == 0, outcome.describe()


def _mutations(text):
    """(name, mutated model.mlir, expected diagnostic) of a converted graph."""
    attention = text.index("cq4p.cached_attention")
    line_start = text.rindex("\n", 0, attention) + 1
    line_end = text.index("\n", attention)
    line = text[line_start:line_end]
    layer_one = text.index("layer = 1 : i64")
    yield ("truncated", text[:len(text) // 2], "error")
    yield ("rms_norm epsilon inf",
           text.replace("epsilon = ", "epsilon = 0x7F800000 : f32, eps_was = ", 1),
           "expected a finite epsilon")
    yield ("attention scale nan",
           text[:line_start] + line.replace("scale = ", "scale = 0x7FC00000 : f32, was = ")
           + text[line_end:], "expected a finite scale")
    yield ("two attentions with one layer",
           text[:layer_one] + "layer = 0 : i64" + text[layer_one + len("layer = 1 : i64"):],
           "which an earlier cq4p.cached_attention writes")
    yield ("layers attribute", text.replace("layers = 2 : i64", "layers = 3 : i64", 1),
           "expected one per layer of the model's 3 layers")
    yield ("hidden attribute", text.replace("hidden = 128 : i64", "hidden = 512 : i64", 1),
           "to be the model's hidden (512)")
    yield ("vocab attribute", text.replace("vocab = 256 : i64", "vocab = 4096 : i64", 1),
           "vocab")
    yield ("binary garbage", "\x00\xff" * 100 + text[:100], "error")


def test_mutated_graphs_are_refused_by_both_tools(model, tmp_path):
    _, bundle, _, _ = model
    text = (bundle / "model.mlir").read_text()
    opt, compiler = _tool("cq4p-opt"), _tool("cq4p-compile")
    for name, mutated, expected in _mutations(text):
        assert mutated != text, name
        source = tmp_path / "model.mlir"
        source.write_text(mutated, errors="surrogateescape")
        verify = hostile.run([opt, source, "--cq4p-lower-model"])
        compile_ = hostile.run([compiler, source, "--target=host", "-o", tmp_path / "lib.so"])
        for outcome in (verify, compile_):
            hostile.assert_refused(outcome, expected)
        assert not (tmp_path / "lib.so").exists(), name


# --- cq4p-compile's arguments and --bundle reader ----------------------------

def _compile(model, *arguments, cwd=None, timeout=hostile.TIMEOUT):
    _, bundle, _, _ = model
    return hostile.run([_tool("cq4p-compile"), bundle / "model.mlir", "--target=host",
                        *arguments], cwd=cwd, timeout=timeout)


def _fake_bundle(tmp_path, manifest):
    """A --bundle directory whose manifest.json is `manifest`: bytes, or a
    callable making it at the path."""
    directory = tmp_path / "fake-bundle"
    directory.mkdir()
    if callable(manifest):
        manifest(directory / "manifest.json")
    else:
        (directory / "manifest.json").write_bytes(manifest)
    return directory


BUNDLE_CASES = {
    "2 MB of brackets": (lambda p: p.write_bytes(b"[" * (2 << 20)), "nesting deeper than 64"),
    "a symbolic link": (lambda p: os.symlink("/etc/hostname", p), "a symbolic link"),
    "a FIFO": (lambda p: os.mkfifo(p), "a FIFO"),
    "a link to /dev/zero": (lambda p: os.symlink("/dev/zero", p), "a symbolic link"),
    "a directory": (lambda p: p.mkdir(), "a directory"),
    "17 MiB": (lambda p: p.write_bytes(b" " * (17 << 20)), "expected at most 16777216 bytes"),
    "not JSON": (lambda p: p.write_bytes(b"{\"model_digest\": "), "not JSON"),
}


@pytest.mark.parametrize("case", list(BUNDLE_CASES))
def test_compile_bundle_reader_refuses(model, tmp_path, case):
    make, expected = BUNDLE_CASES[case]
    directory = _fake_bundle(tmp_path, make)
    outcome = _compile(model, "--bundle", directory, "-o", tmp_path / "lib.so", timeout=30)
    hostile.assert_refused(outcome, expected, code=1)
    assert not (tmp_path / "lib.so").exists()


def test_compile_refuses_its_input_as_output(model, tmp_path):
    _, bundle, _, _ = model
    source = tmp_path / "model.mlir"
    source.write_bytes((bundle / "model.mlir").read_bytes())
    os.link(source, tmp_path / "hard-link.so")
    os.symlink(source, tmp_path / "soft-link.so")
    before = hostile.snapshot(tmp_path)
    for output in (source, tmp_path / "hard-link.so", tmp_path / "soft-link.so",
                   tmp_path / "." / "model.mlir"):
        outcome = hostile.run([_tool("cq4p-compile"), source, "--target=host", "-o", output])
        hostile.assert_refused(outcome, "is the input", code=1)
    assert hostile.snapshot(tmp_path) == before


def test_compile_refuses_its_manifest_as_output(model, tmp_path):
    _, bundle, _, _ = model
    copy = _copy_bundle(bundle, tmp_path / "bundle")
    before = hostile.snapshot(copy)
    outcome = _compile(model, "--bundle", copy, "-o", copy / "manifest.json")
    hostile.assert_refused(outcome, "is the input", code=1)
    assert hostile.snapshot(copy) == before


def test_compile_refuses_an_unknown_tune_cpu(model, tmp_path):
    outcome = hostile.run([_tool("cq4p-compile"), "/nonexistent.mlir", "--target=aarch64-neon",
                           "--tune-cpu=banana", "-o", tmp_path / "lib.so"])
    hostile.assert_refused(outcome, "unknown --tune-cpu 'banana'", code=1)
    assert "warning" not in outcome.stderr
    outcome = _compile(model, "--tune-cpu=neoverse-v2", "-o", tmp_path / "lib.so")
    hostile.assert_refused(outcome, "--tune-cpu applies to AArch64 targets", code=1)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("emit", ["lib", "obj", "llvm", "mlir"])
def test_compile_reports_a_write_failure(model, emit):
    outcome = _compile(model, f"--emit={emit}", "-o", "/dev/full")
    hostile.assert_refused(outcome, "a character device; --emit=lib writes a regular file"
                           if emit == "lib" else "cannot write /dev/full: No space left on device")


# --- hostile checkpoints for convert -----------------------------------------

def _checkpoint(root, config_text=None, tensors=None, edit=None):
    """A small synthetic Llama checkpoint in root/model, then changed: its
    config.json replaced by `config_text` (bytes), its config edited by
    `edit(config)`, or its tensors replaced by `tensors`({name: array})."""
    model_dir = root / "model"
    config = synthetic.write_model(str(model_dir), "llama", SHAPE, seed=0)
    if edit is not None:
        edit(config)
        (model_dir / "config.json").write_text(json.dumps(config))
    if config_text is not None:
        (model_dir / "config.json").write_bytes(config_text)
    if tensors is not None:
        for path in model_dir.glob("*.safetensors"):
            path.unlink()
        st.write(str(model_dir / "model.safetensors"), tensors)
    return model_dir


def _tensors():
    return synthetic.model_tensors("llama", SHAPE, 0)


def _raw_safetensors(path, header, data=b""):
    encoded = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def _set(config, key, value):
    config[key] = value


def _nan_norm():
    tensors = _tensors()
    tensors["model.layers.0.input_layernorm.weight"][3] = np.nan
    return tensors


def _inf_norm():
    tensors = _tensors()
    tensors["model.norm.weight"][0] = np.inf
    return tensors


def _overflowing_linear():
    tensors = _tensors()
    tensors["model.layers.0.self_attn.q_proj.weight"] *= 1e9
    return tensors


def _config_bytes():
    config = synthetic.model_config("llama", SHAPE)
    return json.dumps(config)[:-1]


CONVERT_CASES = {
    "config NaN": (dict(config_text=(_config_bytes() + ', "x": NaN}').encode()), "NaN is not JSON"),
    "config Infinity": (dict(config_text=(_config_bytes() + ', "x": -Infinity}').encode()),
                        "-Infinity is not JSON"),
    "config 1e400": (dict(config_text=(_config_bytes() + ', "x": 1e400}').encode()),
                     "x: inf is not a finite number"),
    "config lone surrogate": (dict(config_text=(_config_bytes() + ', "x": "\\ud800"}').encode()),
                              "lone surrogate (U+D800)"),
    "config invalid UTF-8": (dict(config_text=(_config_bytes() + ', "x": "').encode()
                                  + b"\xff\"}"), "not UTF-8"),
    "config 100 levels": (dict(config_text=(_config_bytes() + ', "x": ' + "[" * 100 +
                                            "]" * 100 + "}").encode()), "nesting deeper than 64"),
    "config 10^5 levels": (dict(config_text=(_config_bytes() + ', "x": ' + "[" * 100000 +
                                             "]" * 100000 + "}").encode()),
                           "nesting deeper than 64"),
    "config 17 MiB": (dict(config_text=(_config_bytes() + ', "x": "' + "a" * (17 << 20) +
                                        '"}').encode()), "expected at most 16777216 bytes"),
    "config duplicate name": (dict(config_text=(_config_bytes() + ', "vocab_size": 7}').encode()),
                              "duplicate member name \"vocab_size\""),
    "config a huge integer": (dict(config_text=(_config_bytes() + ', "x": 1' + "0" * 30 +
                                                "}").encode()), "outside int64"),
    "rope_theta 1e300": (dict(edit=lambda c: _set(c, "rope_theta", 1e300)), "1e+300"),
    "rope factor 1e300": (dict(edit=lambda c: _set(c, "rope_scaling",
                                                   {"rope_type": "linear", "factor": 1e300})),
                          "1e+300"),
    "rms_norm_eps 1e39": (dict(edit=lambda c: _set(c, "rms_norm_eps", 1e39)), "1e+39"),
    "NaN norm weight": (dict(tensors=_nan_norm), "model.layers.0.input_layernorm.weight: 1 "
                                                 "non-finite values"),
    "infinite norm weight": (dict(tensors=_inf_norm), "model.norm.weight: 1 non-finite"),
    "a linear whose norms overflow fp16": (dict(tensors=_overflowing_linear),
                                           "q_proj.weight: cannot be stored as CQ4"),
}


def _convert_and_check(tmp_path, model_dir, expected):
    out = tmp_path / "out" / "bundle"
    (tmp_path / "out").mkdir(exist_ok=True)
    before = hostile.snapshot(model_dir)
    outcome = hostile.run(hostile.cli("convert", "--model", model_dir, "--out", out),
                          env=_env(), timeout=120)
    hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    assert hostile.snapshot(model_dir) == before
    assert os.listdir(tmp_path / "out") == [], "a bundle or a temporary was left"


@pytest.mark.parametrize("case", list(CONVERT_CASES))
def test_convert_refuses(tmp_path, case):
    arguments, expected = CONVERT_CASES[case]
    arguments = dict(arguments)
    if callable(arguments.get("tensors")):
        arguments["tensors"] = arguments["tensors"]()
    model_dir = _checkpoint(tmp_path, **arguments)
    _convert_and_check(tmp_path, model_dir, expected)


def _header(names_and_offsets):
    return {name: {"dtype": "F32", "shape": [2], "data_offsets": list(offsets)}
            for name, offsets in names_and_offsets}


SAFETENSORS_CASES = {
    "overlapping offsets": (lambda p: _raw_safetensors(
        p, _header([("a", (0, 8)), ("b", (4, 12))]), bytes(12)), "overlap"),
    "duplicate keys": (lambda p: _raw_safetensors(
        p, b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
           b'"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}', bytes(16)),
        "tensor a is listed twice"),
    "a 200 MB header": (lambda p: p.write_bytes(struct.pack("<Q", 200_000_000) + b"{}"),
                        "over the format's limit of 100000000 bytes"),
    "a header nested 10^5 deep": (lambda p: _raw_safetensors(p, b"[" * 100000), "nested"),
    "a FIFO": (lambda p: os.mkfifo(p), "a FIFO"),
}


@pytest.mark.parametrize("case", list(SAFETENSORS_CASES))
def test_convert_refuses_safetensors(tmp_path, case):
    make, expected = SAFETENSORS_CASES[case]
    model_dir = _checkpoint(tmp_path)
    for path in model_dir.glob("*.safetensors"):
        path.unlink()
    make(model_dir / "model.safetensors")
    _convert_and_check(tmp_path, model_dir, expected)


def test_convert_refuses_a_config_that_is_a_device_or_fifo(tmp_path):
    model_dir = _checkpoint(tmp_path)
    (model_dir / "config.json").unlink()
    os.symlink("/dev/zero", model_dir / "config.json")
    _convert_and_check(tmp_path, model_dir, "a character device")
    (model_dir / "config.json").unlink()
    os.mkfifo(model_dir / "config.json")
    _convert_and_check(tmp_path, model_dir, "a FIFO")


def _bigger_checkpoint(root):
    """A checkpoint that takes a few seconds to convert (numpy quantizer)."""
    shape = synthetic.Shape(hidden=512, ffn=1536, vocab=4096, layers=4)
    synthetic.write_model(str(root / "model"), "llama", shape, seed=0)
    return root / "model"


def test_convert_cleans_its_temporary_on_sigterm_and_sigint(tmp_path):
    model_dir = _bigger_checkpoint(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for signum in (signal.SIGTERM, signal.SIGINT):
        # SIGINT's default action in the child: a suite started as a
        # background job of a shell without job control inherits SIGINT
        # ignored (POSIX), and Python then installs no KeyboardInterrupt
        # handler, so the interrupt would never arrive.
        process = subprocess.Popen(hostile.cli("convert", "--model", model_dir, "--out",
                                               out_dir / "bundle", "--quantizer", "numpy"),
                                   env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                    signal.SIG_DFL))
        # The signal goes in as soon as the first tensor's progress line is
        # out: the conversion is then under way with its temporary in place
        # and most tensors still to write (a fixed delay raced a fast machine).
        seen = b""
        while True:
            line = process.stderr.readline()
            seen += line
            if not line or line.startswith(b"[1/"):
                break
        assert line, ("the conversion ended before its first progress line", seen)
        assert os.listdir(out_dir), "no temporary directory appeared"
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
        err = seen + err
        assert process.returncode > 0, (signum, process.returncode, err)
        assert b"Traceback" not in err, err
        assert os.listdir(out_dir) == [], (signum, os.listdir(out_dir))


def test_convert_removes_the_temporary_of_a_killed_run(tmp_path):
    model_dir = _checkpoint(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = out_dir / f".bundle.convert-{gone.pid}.abc123.tmp"
    stale.mkdir()
    (stale / "model.layers.0.mlp.up_proj.weight.cq4p.weights").write_bytes(b"partial")
    alive = out_dir / f".bundle.convert-{os.getpid()}.def456.tmp"  # a running conversion's
    alive.mkdir()
    other = out_dir / f".other.convert-{gone.pid}.ghi789.tmp"  # another output's
    other.mkdir()
    outcome = hostile.run(hostile.cli("convert", "--model", model_dir, "--out",
                                      out_dir / "bundle"), env=_env(), timeout=120)
    assert outcome.returncode == 0, outcome.describe()
    assert f"{stale}: removed (left by an interrupted conversion)" in outcome.stderr
    assert sorted(os.listdir(out_dir)) == sorted(["bundle", alive.name, other.name])


def test_convert_output_reads_back_by_the_runtime(model):
    """The control: the bundle convert wrote passes the runtime's full check."""
    runner = os.environ.get("CQ4P_RUN")
    if not runner or not os.access(runner, os.X_OK):
        pytest.skip("cq4p-run is not built")
    _, bundle, _, _ = model
    outcome = hostile.run([runner, "--bundle", bundle, "--verify"])
    assert outcome.returncode == 0, outcome.describe()

