"""convert, upgrade and inspect on small synthetic checkpoints."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import RELATIVE_ERRORS, relative_error
from cq4p.cli import convert as cv
from cq4p.cli import main as cli
from cq4p.format import layout as ly
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import safetensors as st
from cq4p.io import writer as wr
from cq4p.model import synthetic
from cq4p.quant import quantize as qz

SPIKE = 1e5  # outside fp16's finite range (65504)
ERROR_BOUND = 0.12


llama_tensors = synthetic.llama_tensors


def write_model(directory, tensors, config=None, shards=2, dtype="BF16"):
    return synthetic.write_checkpoint(directory, tensors,
                                      config or synthetic.llama_config(128, 256, 256, 2),
                                      shards=shards, dtype=dtype)


def bf16_widened(values):
    """What a BF16 checkpoint holds: fp32 rounded to bf16 (nearest even),
    widened back by a 16-bit shift."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32)
    return (rounded << 16).view(np.float32)


@pytest.fixture(scope="module")
def spiked_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("model")
    tensors = llama_tensors()
    tensors["model.layers.0.self_attn.q_proj.weight"][3, 5] = SPIKE
    tensors["model.layers.1.input_layernorm.weight"][7] = SPIKE
    config = write_model(root / "model", tensors)
    return root, tensors, config


def run(capsys, *argv):
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def leftovers(parent):
    return sorted(name for name in os.listdir(parent) if name.startswith("."))


def test_convert_matches_the_checkpoint(spiked_model, tmp_path, capsys):
    root, tensors, config = spiked_model
    out = tmp_path / "bundle"
    status, _, err = run(capsys, "convert", "--model", root / "model", "--out", out)
    assert status == 0, err
    assert "[1/" in err and f"/{len(tensors)}]" in err
    assert "mlp.up_proj.weight: CQ4 hadamard panels 256x128" in err
    assert "model.layers.1.input_layernorm.weight: FP32 128 (values outside the fp16 range)" in err

    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["format"], manifest["version"]) == ("cq4p-bundle", 1)
    assert manifest["model_type"] == "llama" and manifest["architectures"] == ["LlamaForCausalLM"]
    assert manifest["config"] == config
    records = {record["name"]: record for record in manifest["tensors"]}
    assert set(records) == set(tensors)
    for name, original in tensors.items():
        record = records[name]
        assert record["file"] == name + ".weights"
        assert record["original_shape"] == list(original.shape)
        path = bd.resolve(out, record["file"])
        widened = bf16_widened(original)
        with rd.read_tensor(path) as tensor:
            assert list(tensor.dims) == record["shape"]
            values = tensor.dequantize()
            assert np.all(np.isfinite(values)), name
            if record["dtype"] == "CQ4":
                orthogonal = "embed_tokens" in name or name == "lm_head.weight"
                assert record["rotation"] == ("orthogonal" if orthogonal else "hadamard")
                assert record["layout"] == "panels" and record["group_size"] == 128
                assert path.endswith(".cq4p.weights")
                error = relative_error(values, widened)
                RELATIVE_ERRORS[f"convert {name}"] = error
                assert error < ERROR_BOUND, name
            elif np.any(np.abs(widened) > 65504):
                assert record["dtype"] == "FP32" and tensor.precision == ly.FP32
                assert values.view(np.uint32).tobytes() == widened.view(np.uint32).tobytes()
            else:
                assert record["dtype"] == "FP16" and "rotation" not in record
                assert np.array_equal(tensor.data, widened.astype(np.float16))
    assert not leftovers(tmp_path)


def test_bf16_is_widened_exactly(tmp_path):
    path = tmp_path / "x.safetensors"
    bits = np.array([0x3F81, 0xC7C3, 0x0001, 0x7F7F, 0x8000], dtype="<u2")
    header = json.dumps({"x": {"dtype": "BF16", "shape": [5], "data_offsets": [0, 10]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bits.tobytes())
    values = st.load(st.read_header(path)[0])
    assert values.dtype == np.float32
    assert np.array_equal(values.view(np.uint32), bits.astype(np.uint32) << 16)
    assert values[0] == 1.0078125 and values[1] == -99840.0


def test_a_streamed_checkpoint_holds_the_values_given(tmp_path):
    """write_streamed (checkpoints larger than memory) block by block: the
    values read back are the BF16 rounding of those given, every block in
    its place."""
    rng = np.random.default_rng(4)
    values = {"a": rng.standard_normal((37, 5), dtype=np.float32),
              "b": rng.standard_normal((3,), dtype=np.float32)}
    path = tmp_path / "x.safetensors"
    st.write_streamed(str(path), {name: v.shape for name, v in values.items()},
                      lambda name, shape, begin, end: values[name][begin:end], block_rows=8)
    entries = {entry.name: entry for entry in st.read_header(str(path))}
    for name, v in values.items():
        bits = v.view(np.uint32).astype(np.uint64)
        rounded = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
        assert np.array_equal(st.load(entries[name]).view(np.uint32), rounded)
    with pytest.raises(ValueError, match="rows 0..8 came as"):
        st.write_streamed(str(path), {"a": (37, 5)},
                          lambda name, shape, begin, end: values["a"][:1], block_rows=8)


def test_convert_refuses_an_existing_bundle_unless_forced(spiked_model, tmp_path, capsys):
    root, _, _ = spiked_model
    out = tmp_path / "bundle"
    cv.convert(root / "model", out, progress=open(os.devnull, "w"))
    (out / "old.txt").write_text("old")
    status, _, err = run(capsys, "convert", "--model", root / "model", "--out", out)
    assert status == 2 and "already exists" in err and "--force" in err
    assert (out / "old.txt").exists()
    # --force replaces only the bundle's own files: a file of the user's
    # makes it refuse, naming the file, and nothing is deleted.
    status, _, err = run(capsys, "convert", "--model", root / "model", "--out", out, "--force")
    assert status == 2 and f"{out / 'old.txt'}: --force replaces only the files" in err
    assert (out / "old.txt").read_text() == "old"
    (out / "old.txt").unlink()
    status, _, err = run(capsys, "convert", "--model", root / "model", "--out", out, "--force")
    assert status == 0, err
    assert (out / "manifest.json").exists()
    assert not leftovers(tmp_path)


def test_a_corrupt_second_shard_leaves_nothing(spiked_model, tmp_path, capsys):
    root, tensors, _ = spiked_model
    model = tmp_path / "model"
    write_model(model, tensors)
    second = model / "model-00002-of-00002.safetensors"
    second.write_bytes(second.read_bytes()[:-100])
    status, _, err = run(capsys, "convert", "--model", model, "--out", tmp_path / "bundle")
    assert status == 2
    assert err.count("\n") == 1 and "model-00002-of-00002.safetensors" in err
    assert "truncated data" in err
    assert not (tmp_path / "bundle").exists() and not leftovers(tmp_path)


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_a_failure_mid_conversion_leaves_nothing(spiked_model, tmp_path, capsys, monkeypatch,
                                                 failure):
    root, _, _ = spiked_model
    out = tmp_path / "bundle"
    # An existing bundle (--force) must survive a failed replacement.
    cv.convert(root / "model", out, progress=open(os.devnull, "w"))
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    calls = []
    panels = wr.WRITERS["panels"]

    def failing_writer(path, weight):
        calls.append(path)
        if len(calls) == 5:
            assert len(os.listdir(os.path.dirname(path))) == 5  # 4 files + 1 dense so far
            raise failure("injected")
        panels(path, weight)

    monkeypatch.setitem(wr.WRITERS, "panels", failing_writer)
    if failure is KeyboardInterrupt:
        status, _, err = run(capsys, "convert", "--model", root / "model", "--out", out, "--force")
        assert status == 130 and "interrupted" in err
    else:
        with pytest.raises(RuntimeError, match="injected"):
            cv.convert(root / "model", out, force=True, progress=open(os.devnull, "w"))
    assert len(calls) == 5
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    assert not leftovers(tmp_path)


def write_safetensors_raw(path, header, data=b""):
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data)


@pytest.mark.parametrize("defect,message", [
    ("no_config", "missing config.json"),
    ("no_safetensors", "no *.safetensors files"),
    ("header_length", "corrupt header: header length 1000000 exceeds the 20 bytes after it"),
    ("not_json", "corrupt header: not JSON"),
    ("dtype", "tensor x: unsupported dtype 'I64' (supported: F32, F16, BF16)"),
    ("truncated", "tensor x: truncated data: needs bytes up to"),
    ("span", "tensor x: data_offsets [0, 6] span 6 bytes, F32 shape [2] needs 8"),
])
def test_bad_input_is_one_clear_line_and_status_2(tmp_path, capsys, defect, message):
    model = tmp_path / "model"
    model.mkdir()
    if defect != "no_config":
        (model / "config.json").write_text('{"model_type": "llama"}')
    shard = model / "model.safetensors"
    entry = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    if defect == "header_length":
        shard.write_bytes((1000000).to_bytes(8, "little") + bytes(20))
    elif defect == "not_json":
        shard.write_bytes((4).to_bytes(8, "little") + b"{x:1")
    elif defect == "dtype":
        write_safetensors_raw(shard, {"x": dict(entry, dtype="I64", shape=[1])}, bytes(8))
    elif defect == "truncated":
        write_safetensors_raw(shard, {"x": entry}, bytes(4))
    elif defect == "span":
        write_safetensors_raw(shard, {"x": dict(entry, data_offsets=[0, 6])}, bytes(8))
    elif defect != "no_safetensors":
        write_safetensors_raw(shard, {"x": entry}, bytes(8))
    status, _, err = run(capsys, "convert", "--model", model, "--out", tmp_path / "bundle")
    assert status == 2
    assert err.count("\n") == 1 and message in err, err
    if defect not in ("no_config", "no_safetensors"):
        assert str(shard) in err
    assert not (tmp_path / "bundle").exists() and not leftovers(tmp_path)


def test_policy_for_k_that_is_not_a_multiple_of_128(tmp_path):
    # K = 96: embeddings (orthogonal) and linear layers (Hadamard) are both
    # stored as panels with K zero-padded to 128 and the true shape
    # recorded; the legacy layouts, when asked for, keep K = 96
    # (interleaved where N % 4 == 0, else row-major).
    rng = np.random.default_rng(0)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((126, 96)) * 0.02,
               "lm_head.weight": rng.standard_normal((128, 96)) * 0.02,
               "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((96, 96)) * 0.05}
    st.write(tmp_path / "model.safetensors", tensors, "F32")
    out = tmp_path / "bundle"
    out.mkdir()
    records, lines = {}, {}
    for entry in st.read_header(tmp_path / "model.safetensors"):
        records[entry.name], lines[entry.name] = cv.convert_tensor(str(out), entry, 0, {})
    embed, head = records["model.embed_tokens.weight"], records["lm_head.weight"]
    for record, n in ((embed, 126), (head, 128)):
        assert (record["layout"], record["group_size"]) == ("panels", 128)
        assert record["shape"] == [n, 128] and record["original_shape"] == [n, 96]
        with rd.read_tensor(bd.resolve(out, record["file"])) as tensor:
            values = tensor.dequantize()
        assert relative_error(values[:, :96], tensors[record["name"]]) < ERROR_BOUND
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for entry in st.read_header(tmp_path / "model.safetensors"):
        if "embed" in entry.name or "lm_head" in entry.name:
            records[entry.name], _ = cv.convert_tensor(str(legacy), entry, 0, {},
                                                       legacy="interleaved4row")
    embed, head = records["model.embed_tokens.weight"], records["lm_head.weight"]
    assert (embed["layout"], embed["group_size"]) == ("row_major", 96)  # 126 % 4 != 0
    assert (head["layout"], head["group_size"]) == ("interleaved4row", 96)
    assert (legacy / "lm_head.weight.cq4.weights").exists()
    q = records["model.layers.0.self_attn.q_proj.weight"]
    assert q["shape"] == [96, 128] and q["original_shape"] == [96, 96]
    assert lines[q["name"]] == "CQ4 hadamard panels 96x128 (K padded from 96)"
    with rd.read_tensor(bd.resolve(out, q["file"])) as tensor:
        values = tensor.dequantize()
    # The padded columns meet zero activations; only the original ones count.
    original = tensors["model.layers.0.self_attn.q_proj.weight"]
    assert relative_error(values[:, :96], original) < ERROR_BOUND


def test_calibration_sets_the_input_scale(tmp_path, capsys):
    tensors = llama_tensors(layers=1)
    write_model(tmp_path / "model", tensors, synthetic.llama_config(128, 256, 256, 1), shards=1,
                dtype="F32")
    stat = np.random.default_rng(0).uniform(0.01, 4.0, 128)
    name = "model.layers.0.mlp.up_proj.weight"
    np.savez(tmp_path / "stats.npz", **{name: stat})
    status, _, err = run(capsys, "convert", "--model", tmp_path / "model", "--out",
                         tmp_path / "bundle", "--calibration", tmp_path / "stats.npz")
    assert status == 0, err
    s = np.clip(np.sqrt(stat) / np.exp(np.mean(np.log(np.sqrt(stat)))), 1 / 8, 8)
    with rd.read_tensor(tmp_path / f"bundle/{name}.cq4p.weights") as tensor:
        assert np.array_equal(tensor.input_scale, s.astype(np.float16))
        # Scales spread over [1/8, 8] amplify the plain weight error of the
        # columns with s < 1 (what they buy is a smaller activation-weighted error).
        assert relative_error(tensor.dequantize(), tensors[name]) < 0.25


def dequantized_bundle(directory):
    manifest = bd.read_manifest(directory)
    out = {}
    for record in manifest["tensors"]:
        with rd.read_tensor(bd.resolve(directory, record["file"])) as tensor:
            out[record["name"]] = tensor.dequantize()
    return manifest, out


@pytest.mark.parametrize("legacy", ["interleaved4row", "row_major"])
def test_upgrade_keeps_the_dequantized_weights(spiked_model, tmp_path, capsys, legacy):
    root, _, _ = spiked_model
    out = tmp_path / "bundle"
    status, _, err = run(capsys, "convert", "--model", root / "model", "--out", out,
                         "--legacy", legacy)
    assert status == 0, err
    before_manifest, before = dequantized_bundle(out)
    legacy_records = [r for r in before_manifest["tensors"] if r["dtype"] == "CQ4"]
    assert {r["layout"] for r in legacy_records} == {legacy}
    assert not list(out.glob("*.cq4p.weights"))

    status, text, err = run(capsys, "upgrade", out)
    assert status == 0, err
    assert f"{len(legacy_records)} upgraded, 0 kept" in text
    after_manifest, after = dequantized_bundle(out)
    assert not list(out.glob("*.cq4.weights")) and not leftovers(out)
    for record in after_manifest["tensors"]:
        if record["dtype"] == "CQ4":
            assert record["layout"] == "panels" and record["group_size"] == 128
            assert os.path.exists(out / (record["name"] + ".cq4p.weights"))
        assert np.max(np.abs(after[record["name"]] - before[record["name"]])) == 0.0


def test_upgrade_leaves_tensors_panels_cannot_hold(tmp_path, capsys):
    out = tmp_path / "bundle"
    out.mkdir()
    rng = np.random.default_rng(0)
    orthogonal = qz.quantize_orthogonal(rng.standard_normal((8, 96)), seed=0)
    small_groups = qz.quantize_hadamard(rng.standard_normal((8, 64)), 16, seed=0, prescale=False)
    wr.write_interleaved_file(out / "embed.cq4.weights", orthogonal)
    wr.write_row_major_file(out / "proj.cq4.weights", small_groups)
    records = [{"name": "embed", "file": "embed.weights", "shape": [8, 96],
                "original_shape": [8, 96], "dtype": "CQ4", "rotation": "orthogonal",
                "layout": "interleaved4row", "group_size": 96},
               {"name": "proj", "file": "proj.weights", "shape": [8, 64],
                "original_shape": [8, 64], "dtype": "CQ4", "rotation": "hadamard",
                "layout": "row_major", "group_size": 16}]
    bd.write_manifest(out, bd.manifest({"model_type": "x"}, records))
    status, text, _ = run(capsys, "upgrade", out)
    assert status == 0
    assert "kept: embed (interleaved4row: orthogonal K (96) is not a multiple of 128)" in text
    assert "kept: proj (row_major: group size (16)" in text and "0 upgraded, 2 kept" in text
    assert sorted(os.listdir(out)) == ["embed.cq4.weights", "manifest.json", "proj.cq4.weights"]


def test_the_module_runs_as_a_command(tmp_path):
    path = tmp_path / "broken.weights"
    path.write_bytes(b"CACT" + bytes(40))
    environment = dict(os.environ, PYTHONPATH=str(Path(cv.__file__).resolve().parents[2]))
    result = subprocess.run([sys.executable, "-m", "cq4p", "inspect", str(path)],
                            capture_output=True, text=True, env=environment, check=False)
    assert result.returncode == 1
    assert result.stdout == f"INVALID: {path}: header: expected at least 84 bytes, found 44 bytes\n"


def test_inspect_verdicts(spiked_model, tmp_path, capsys):
    root, _, _ = spiked_model
    out = tmp_path / "bundle"
    assert run(capsys, "convert", "--model", root / "model", "--out", out)[0] == 0
    status, text, _ = run(capsys, "inspect", out)
    assert status == 0 and text.rstrip().endswith("verdict: OK")
    assert ("lm_head.weight: lm_head.weight.cq4p.weights CQ4 orthogonal panels gs 128 256x128"
            in text)

    path = out / "model.layers.0.mlp.up_proj.weight.cq4p.weights"
    status, text, _ = run(capsys, "inspect", path)
    assert status == 0
    assert "flags: 0x20 (PACKED_PANELS)" in text and "layout: panels, rotation hadamard" in text
    assert "norm_panels" in text and "codebook: -127" in text

    path.write_bytes(path.read_bytes()[:-1])
    status, text, _ = run(capsys, "inspect", path)
    assert status == 1
    assert text.strip() == (f"INVALID: {path}: file size: expected {path.stat().st_size + 1} "
                            f"bytes, found {path.stat().st_size} bytes")
    status, text, _ = run(capsys, "inspect", out)
    assert status == 1 and "mlp.up_proj.weight: INVALID:" in text
    assert text.rstrip().endswith("verdict: INVALID: 1 tensors")


def test_force_replaces_only_a_bundle_or_an_empty_directory(tmp_path):
    # --force never deletes the checkpoint, a directory holding it, or a
    # directory that is not a bundle; it does replace a bundle and an empty
    # directory.
    model = tmp_path / "work" / "model"
    write_model(model, llama_tensors(layers=1), synthetic.llama_config(128, 256, 256, 1),
                shards=1, dtype="F32")
    (tmp_path / "work" / "notes.txt").write_text("mine")
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    for out, message in ((model, "would replace the checkpoint being converted"),
                         (tmp_path / "work", "would replace the checkpoint being converted"),
                         (other, "neither")):
        with pytest.raises(cv.ConvertError, match=message):
            cv.convert(str(model), str(out), force=True, progress=io.StringIO())
    assert (model / "config.json").exists() and (tmp_path / "work" / "notes.txt").exists()
    assert (other / "keep.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    cv.convert(str(model), str(empty), force=True, progress=io.StringIO())
    cv.convert(str(model), str(empty), force=True, progress=io.StringIO())  # a bundle now
    assert (empty / "manifest.json").exists()


def test_config_architectures_must_be_a_list_of_names(tmp_path):
    # Found by the config.json fuzzer: an `architectures` that is not a
    # list of names passed the reader and broke the manifest writer.
    from cq4p.cli import convert as cv
    for value in ("512", "\"LlamaForCausalLM\"", "[1, 2]", "{\"a\": 1}"):
        raw = ("{\"model_type\": \"llama\", \"architectures\": %s}" % value).encode()
        with pytest.raises(cv.ConvertError, match="architectures: expected a list of class names"):
            cv.parse_config(str(tmp_path / "config.json"), raw)
    assert cv.parse_config("c", b"{\"architectures\": [\"LlamaForCausalLM\"]}")["architectures"] \
        == ["LlamaForCausalLM"]


def test_every_file_is_on_disk_before_the_bundle_is_moved_into_place(spiked_model, tmp_path,
                                                                     monkeypatch):
    """The bundle appears under its name only after each of its files and
    its directory were synced (and the parent after the rename), so a crash
    cannot leave a bundle of partly written files."""
    root, _, _ = spiked_model
    out = tmp_path / "bundle"
    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(handle):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{handle}")))
        real_fsync(handle)

    def rename(source, target):
        events.append(("rename", str(source), str(target)))
        real_rename(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    cv.convert(root / "model", out, progress=open(os.devnull, "w"))
    moves = [i for i, event in enumerate(events) if event[0] == "rename"]
    assert len(moves) == 1 and events[moves[0]][2] == str(out)
    temporary = events[moves[0]][1]
    synced_before = {event[1] for event in events[:moves[0]] if event[0] == "fsync"}
    files = sorted(os.listdir(out))
    assert "manifest.json" in files and any(name.endswith(".weights") for name in files)
    missing = [name for name in files if os.path.join(temporary, name) not in synced_before]
    assert not missing, f"not synced before the rename: {missing}"
    assert temporary in synced_before
    assert ("fsync", str(tmp_path)) in events[moves[0] + 1:]
