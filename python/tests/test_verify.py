"""Content verification: `inspect --deep` (cq4p.io.reader.verify_content) and
the runtime's `cq4p-run --verify` (Bundle::verify) refuse a file breaking
each content rule of docs/FORMAT.md with the same words, and accept valid files
of every layout."""

import dataclasses
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from cq4p.cli import main as cli
from cq4p.format import layout as ly
from cq4p.io import reader as rd
from cq4p.io import writer as wr
from cq4p.quant import quantize as qz


def _runner():
    path = os.environ.get("CQ4P_RUN")
    return path if path and os.access(path, os.X_OK) else None


def _runtime_verdict(path):
    """cq4p-run --verify over a one-tensor bundle of `path`: (ok, message)."""
    runner = _runner()
    if runner is None:
        return None
    bundle = os.path.join(os.path.dirname(path), "bundle-" + os.path.basename(path))
    shutil.rmtree(bundle, ignore_errors=True)
    os.mkdir(bundle)
    shutil.copyfile(path, os.path.join(bundle, os.path.basename(path)))
    with rd.read_tensor(path) as tensor:
        entry = {"name": "t", "file": os.path.basename(path), "shape": list(tensor.dims),
                 "dtype": tensor.precision_name}
    with open(os.path.join(bundle, "manifest.json"), "w") as out:
        json.dump({"format": "cq4p-bundle", "version": 1, "tensors": [entry]}, out)
    result = subprocess.run([runner, "--bundle", bundle, "--verify"], capture_output=True,
                            text=True, timeout=120, check=False)
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def _hadamard(n=100, k=256, gs=128, codebook=None):
    qw = qz.quantize_hadamard(np.random.default_rng(n).standard_normal((n, k)), gs, seed=3)
    if codebook is not None:
        qw = dataclasses.replace(qw, codebook=np.asarray(codebook, dtype=np.float16))
    return qw


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    """{kind: path} of valid files of every layout."""
    root = tmp_path_factory.mktemp("valid")
    paths = {}
    hadamard = _hadamard()
    paths["panels"] = str(root / "h.cq4p.weights")
    wr.write_panel_file(paths["panels"], hadamard)
    paths["row_major"] = str(root / "h.cq4.weights")
    wr.write_row_major_file(paths["row_major"], hadamard)
    orthogonal = qz.quantize_orthogonal(np.random.default_rng(5).standard_normal((70, 128)),
                                        seed=2)
    paths["orthogonal"] = str(root / "o.cq4p.weights")
    wr.write_panel_file(paths["orthogonal"], orthogonal)
    paths["fp16"] = str(root / "d16.weights")
    wr.write_dense_file(paths["fp16"], np.linspace(-2, 2, 24).reshape(4, 6), ly.FP16)
    paths["fp32"] = str(root / "d32.weights")
    wr.write_dense_file(paths["fp32"], np.linspace(-2, 2, 24).reshape(4, 6), ly.FP32)
    return paths


@pytest.mark.parametrize("kind", ["panels", "row_major", "orthogonal", "fp16", "fp32"])
def test_valid_files_pass(valid, kind, capsys):
    with rd.read_tensor(valid[kind]) as tensor:
        rd.verify_content(tensor)
    assert cli.main(["inspect", "--deep", valid[kind]]) == 0
    assert "content: every rule of FORMAT.md holds" in capsys.readouterr().out
    verdict = _runtime_verdict(valid[kind])
    if verdict is not None:
        assert verdict[0], verdict[1]


def _patch(source, target, region, offset_in_region, data):
    """A copy of `source` with `data` written into a region."""
    shutil.copyfile(source, target)
    with rd.read_tensor(source) as tensor:
        offset = tensor.regions[region][0] + offset_in_region
    with open(target, "r+b") as out:
        out.seek(offset)
        out.write(data)
    return target


def _first_index_position(tensor, wanted, rows):
    """Byte offset (in the data region) and nibble shift of the first index
    `wanted` in rows < `rows`."""
    indices = tensor.indices()
    row, col = (int(v) for v in np.argwhere(indices[:rows] == wanted)[0])
    c, kc = row % 64, col % 4
    nibble = c * 4 + kc
    block = (row // 64) * (tensor.k // 4) + col // 4
    return block * 128 + nibble // 2, 4 * (nibble % 2), row, col


def _defects(valid, root):
    """[(path, field, words in the message)], one file per rule."""
    cases = []
    panels, orthogonal = valid["panels"], valid["orthogonal"]
    path = str(root / "padding.cq4p.weights")
    shutil.copyfile(panels, path)
    with open(path, "r+b") as out:
        out.seek(90)  # between the 84-byte header and the scales at 96
        out.write(b"\x01")
    cases.append((path, "padding", "expected zero bytes, found 0x1 at offset 90"))

    with rd.read_tensor(panels) as tensor:
        first = float(tensor.norm_panels.reshape(-1)[0])
    bumped = np.nextafter(np.float32(first), np.float32(np.inf))
    cases.append((_patch(panels, str(root / "fold.cq4p.weights"), "norm_panels", 0,
                         struct.pack("<f", bumped)),
                  "norm_panels", f"expected fp32(norm) * cb_scale = {first:.9g}, found "
                                 f"{float(bumped):.9g} at super-block 0, group 0, channel 0"))
    # Channel 100 % 64 = 36 of super-block 1, group 0: past N.
    cases.append((_patch(panels, str(root / "past.cq4p.weights"), "norm_panels",
                         4 * ((1 * 2 + 0) * 64 + 36), struct.pack("<f", 1.0)),
                  "norm_panels", "expected 0.0 past N: 0, found 1 at super-block 1, group 0, "
                                 "channel 36 (row 100)"))
    # Row 100, column 0: super-block 1, kg-block 0, channel 36, nibble 144.
    cases.append((_patch(panels, str(root / "channel.cq4p.weights"), "data",
                         (1 * 64 + 0) * 128 + 72, b"\x05"),
                  "data", "expected index 0 in channels past N, found index 5 at row 100, "
                          "column 0"))

    twins = [-1.0, -0.999, 0.0, 0.001] + [0.5] * 11 + [1.0]
    path = str(root / "twins.cq4p.weights")
    wr.write_panel_file(path, _hadamard(codebook=twins))
    with rd.read_tensor(path) as tensor:
        offset, shift, row, col = _first_index_position(tensor, 0, tensor.n)
        data_offset = tensor.regions["data"][0]
    with open(path, "r+b") as out:
        out.seek(data_offset + offset)
        byte = out.read(1)[0]
        out.seek(data_offset + offset)
        out.write(bytes([(byte & ~(0xF << shift)) | (1 << shift)]))
    cases.append((path, "data", f"found index 1 (int8 level -127) at row {row}, column {col}"))

    cases.append((_patch(orthogonal, str(root / "transpose.cq4p.weights"), "rotation_t", 2,
                         b"\x00\x3c"),
                  "rotation_t", "expected the transpose of rotation, found rotation_t[0][1] "
                                "= 0x3c00"))
    cases.append((_patch(panels, str(root / "scale.cq4p.weights"), "input_scale", 6,
                         b"\x00\x7c"),
                  "input_scale", "expected finite values, found 0x7c00 at element 3"))
    cases.append((_patch(valid["fp32"], str(root / "nan.weights"), "data", 8,
                         struct.pack("<f", float("nan"))),
                  "data", "expected finite values, found nan at element 2"))
    return cases


def test_each_content_rule_is_refused_alike(valid, tmp_path, capsys):
    for path, field, words in _defects(valid, tmp_path):
        with rd.read_tensor(path) as tensor:  # opening still accepts it
            with pytest.raises(rd.FormatError) as refusal:
                rd.verify_content(tensor)
        message = str(refusal.value)
        assert refusal.value.field == field, message
        assert words in message, message
        assert cli.main(["inspect", "--deep", path]) == 1
        assert f"INVALID: {message}" in capsys.readouterr().out
        verdict = _runtime_verdict(path)
        if verdict is not None:
            ok, runtime = verdict
            assert not ok, path
            # The same words after the path: "field: expected ..., found ...".
            assert message.split(": ", 1)[1] in runtime, (message, runtime)
