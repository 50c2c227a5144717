"""Hostile bundles (docs/TRUST.md): every reader refuses, naming the entry,
what would leave the bundle directory, block, or read without end, and
nothing outside the bundle is read, written or deleted.

Each case builds a small bundle next to a sentinel directory, runs
`inspect`, `upgrade` and `check` (the Python readers) and, when it is
built, cq4p-run (the runtime's Bundle::open), and compares the sentinel
directory's listing, bytes and modification times before and after.
"""

import hashlib
import json
import os
import subprocess

import numpy as np
import pytest

from cq4p.cli import main as cli
from cq4p.format import layout as ly
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.io import writer as wr
from cq4p.quant import quantize as qz

# Every reader gives up within this; without O_NONBLOCK a FIFO blocks forever.
TIMEOUT = 60


def _runner():
    path = os.environ.get("CQ4P_RUN")
    return path if path and os.access(path, os.X_OK) else None


def _snapshot(directory):
    """{name: (sha256, mtime_ns)} of every entry, links not followed."""
    state = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        info = os.lstat(path)
        digest = None
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
        state[name] = (digest, info.st_mtime_ns, info.st_mode)
    return state


@pytest.fixture
def place(tmp_path):
    """(bundle dir, sentinel dir): a legacy row-major Hadamard tensor and an
    FP16 norm in the bundle; outside it a victim tensor file that a reader
    escaping the bundle would find (and upgrade would rewrite and delete)."""
    bundle = tmp_path / "bundle"
    sentinel = tmp_path / "victim"
    bundle.mkdir()
    sentinel.mkdir()
    qw = qz.quantize_hadamard(np.random.default_rng(0).standard_normal((64, 128)), 128, seed=1)
    wr.write_row_major_file(str(bundle / "q.cq4.weights"), qw)
    wr.write_dense_file(str(bundle / "norm.weights"), np.ones(128, np.float16), ly.FP16)
    wr.write_row_major_file(str(sentinel / "x.cq4.weights"), qw)
    (sentinel / "secret.txt").write_text("not for cq4p\n")
    return bundle, sentinel


def _entries(q_file="q.weights", norm_file="norm.weights"):
    return [{"name": "q", "file": q_file, "shape": [64, 128], "dtype": "CQ4",
             "rotation": "hadamard", "layout": "row_major", "group_size": 128},
            {"name": "norm", "file": norm_file, "shape": [128], "dtype": "FP16"}]


def _write_manifest(bundle, entries=None, text=None):
    if text is None:
        text = json.dumps({"format": "cq4p-bundle", "version": 1,
                           "tensors": entries if entries is not None else _entries()})
    path = bundle / "manifest.json"
    if os.path.lexists(path):
        os.remove(path)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def _python_tools(bundle, capsys):
    """[(command, exit status, output)] of inspect, upgrade and check, each
    with the manifest checked by the runtime's validator (when the runtime
    is built) and by the Python reader alone (as where it is not)."""
    outcomes = []
    for reader in ("runtime", "python"):
        with pytest.MonkeyPatch.context() as patch:
            if reader == "python":
                patch.setattr(bd, "_runtime_checks_manifest", lambda directory: False)
            for command in (["inspect", str(bundle)], ["upgrade", str(bundle)],
                            ["check", "--bundle", str(bundle), "--library",
                             str(bundle / "none.so")]):
                status = cli.main(command)
                captured = capsys.readouterr()
                outcomes.append((f"{command[0]} ({reader} manifest reader)", status,
                                 captured.out + captured.err))
    return outcomes


def _expect_refused(bundle, sentinel, capsys, needle, runtime_needle=None):
    before = _snapshot(sentinel)
    for command, status, output in _python_tools(bundle, capsys):
        assert status != 0, f"{command} accepted the bundle:\n{output}"
        assert needle in output, f"{command}:\n{output}"
        assert "Traceback" not in output
    runner = _runner()
    if runner:
        result = subprocess.run([runner, "--bundle", str(bundle), "--library",
                                 str(bundle / "none.so"), "--tensor", "q"],
                                capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert result.returncode != 0
        assert (runtime_needle or needle) in result.stderr, result.stderr
    assert _snapshot(sentinel) == before


def test_the_unmodified_bundle_is_accepted(place, capsys):
    bundle, sentinel = place
    _write_manifest(bundle)
    status = cli.main(["inspect", str(bundle)])
    assert status == 0, capsys.readouterr().out


@pytest.mark.parametrize("name", ["../victim/x.weights", "a/../../victim/x.weights",
                                  "/dev/zero", "..", "sub/q.weights"])
def test_names_leaving_the_bundle_are_refused(place, capsys, name):
    bundle, sentinel = place
    _write_manifest(bundle, _entries(q_file=name))
    _expect_refused(bundle, sentinel, capsys,
                    "tensor 'q': expected \"file\" to be a file name inside the bundle")


def test_symbolic_links_are_refused(place, capsys):
    bundle, sentinel = place
    os.remove(bundle / "q.cq4.weights")
    os.symlink(sentinel / "x.cq4.weights", bundle / "q.cq4.weights")
    _write_manifest(bundle)
    _expect_refused(bundle, sentinel, capsys,
                    f"tensor 'q': {bundle / 'q.cq4.weights'}: a symbolic link")


def test_a_link_to_a_system_file_is_refused_unread(place, capsys):
    bundle, sentinel = place
    os.symlink("/etc/passwd", bundle / "norm.cq4.weights")
    _write_manifest(bundle)
    _expect_refused(bundle, sentinel, capsys, "norm.cq4.weights: a symbolic link")


def test_a_linked_manifest_is_refused(place, capsys):
    bundle, sentinel = place
    (sentinel / "manifest.json").write_text(json.dumps(
        {"format": "cq4p-bundle", "version": 1, "tensors": _entries()}))
    os.symlink(sentinel / "manifest.json", bundle / "manifest.json")
    _expect_refused(bundle, sentinel, capsys, "manifest.json: a symbolic link")


def test_fifos_are_refused_without_blocking(place, capsys):
    bundle, sentinel = place
    os.remove(bundle / "norm.weights")
    os.mkfifo(bundle / "norm.weights")
    _write_manifest(bundle)
    _expect_refused(bundle, sentinel, capsys,
                    f"tensor 'norm': {bundle / 'norm.weights'}: a FIFO, expected a regular file")
    os.remove(bundle / "manifest.json")
    os.mkfifo(bundle / "manifest.json")
    _expect_refused(bundle, sentinel, capsys, "manifest.json: a FIFO, expected a regular file")


def test_a_device_is_refused_unread(tmp_path):
    with pytest.raises(rd.FormatError, match="/dev/zero: a character device, expected a "
                                             "regular file"):
        rd.read_tensor("/dev/zero")


def test_duplicate_member_names_are_refused(place, capsys):
    bundle, sentinel = place
    text = json.dumps({"format": "cq4p-bundle", "version": 1, "tensors": _entries()})
    text = text.replace('"file": "q.weights"',
                        '"file": "q.weights", "file": "../victim/x.weights"')
    _write_manifest(bundle, text=text)
    _expect_refused(bundle, sentinel, capsys, 'duplicate member name "file"')


def test_an_oversized_manifest_is_refused_before_it_is_read(place, capsys):
    bundle, sentinel = place
    _write_manifest(bundle)
    os.truncate(bundle / "manifest.json", bd.MAX_MANIFEST_BYTES + 1)
    _expect_refused(bundle, sentinel, capsys,
                    "manifest.json: size: expected at most 16777216 bytes, found 16777217")


@pytest.mark.parametrize("change, needle", [
    ({"shape": [64, 256]}, "tensor 'q': shape [64, 256] in manifest.json, but [64, 128] in"),
    ({"dtype": "FP16"}, "tensor 'q': dtype FP16 in manifest.json, but CQ4 in"),
    ({"rotation": "orthogonal"}, "tensor 'q': rotation 'orthogonal' in manifest.json, but "
                                 "hadamard in"),
    ({"layout": "panels"}, "tensor 'q': layout 'panels' in manifest.json, but row_major in"),
])
def test_manifest_and_file_disagreeing_are_refused(place, capsys, change, needle):
    bundle, sentinel = place
    entries = _entries()
    entries[0].update(change)
    _write_manifest(bundle, entries)
    _expect_refused(bundle, sentinel, capsys, needle)


@pytest.mark.parametrize("text, needle", [
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": {}}', "tensors: expected an array"),
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": [7]}',
     "tensors[0]: expected a non-empty \"name\""),
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": [{"name": "q", "file": 3}]}',
     "tensor 'q': expected \"file\" to be a file name inside the bundle"),
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": [{"name": "q", "file": '
     b'"q.weights", "dtype": "CQ4", "shape": [64, true]}]}',
     "tensor 'q': expected positive integer dimensions in \"shape\""),
    (b'[' * 100 + b']' * 100, "nesting deeper than 64"),
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": [], "x": "\xff"}', "invalid JSON"),
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": [], "x": NaN}', "invalid JSON"),
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": [], "x": 1E400}',
     "invalid JSON: number overflow parsing '1E400'"),
    (b'{"format": "cq4p-bundle", "version": 1, "tensors": [], "x": ' + b'9' * 400 + b'}',
     "invalid JSON: number overflow parsing '999"),
])
def test_malformed_manifests_are_errors_not_tracebacks(place, capsys, text, needle):
    bundle, sentinel = place
    _write_manifest(bundle, text=text)
    _expect_refused(bundle, sentinel, capsys, needle)


def test_the_runtime_validator_decides_when_it_is_built(place):
    from cq4p.native import runtime as native
    try:
        native.library()
    except native.LibraryNotFoundError:
        pytest.skip("the runtime library is not built")
    bundle, _ = place
    _write_manifest(bundle, text=b'{"format": "cq4p-bundle",\n "version": 1,,}')
    # Each reader's own words for the same place: the runtime's (nlohmann-json)
    # by default, Python's json module's where the runtime is not used.
    with pytest.raises(bd.BundleError, match=r"manifest.json:2:15: invalid JSON: syntax error "
                                             r"while parsing object key"):
        bd.read_manifest(str(bundle))
    with pytest.raises(bd.BundleError, match=r"manifest.json:2:15: invalid JSON: Expecting "
                                             r"property name"):
        bd.read_manifest(str(bundle), runtime=False)
    _write_manifest(bundle)
    assert bd.read_manifest(str(bundle)) == bd.read_manifest(str(bundle), runtime=False)


def test_upgrade_keeps_a_hadamard_embedding_row_major(place, capsys):
    bundle, _ = place
    os.rename(bundle / "q.cq4.weights", bundle / "model.embed_tokens.cq4.weights")
    entries = _entries(q_file="model.embed_tokens.weights")
    entries[0]["name"] = "model.embed_tokens"
    _write_manifest(bundle, entries)
    assert cli.main(["upgrade", str(bundle)]) == 0
    assert "kept: model.embed_tokens (row_major: a Hadamard embedding stays row-major" in \
        capsys.readouterr().out
    assert os.path.exists(bundle / "model.embed_tokens.cq4.weights")


def test_upgrade_writes_files_as_the_umask_says(place, capsys):
    bundle, _ = place
    _write_manifest(bundle)
    previous = os.umask(0o027)
    try:
        assert cli.main(["upgrade", str(bundle)]) == 0
    finally:
        os.umask(previous)
    capsys.readouterr()
    for name in ("q.cq4p.weights", "manifest.json"):
        assert os.stat(bundle / name).st_mode & 0o777 == 0o640, name


@pytest.mark.parametrize("names, needle", [
    (["model.layers.0.q\"proj.weight"], "found '\"'"),
    (["model.layers.0.q\nproj.weight"], "found '\\n'"),
    ([".hidden.weight"], "found a leading dot"),
    (["a", "a.cq4p"], "tensor names 'a' and 'a.cq4p' both resolve to the file "
                      "a.cq4p.weights"),
])
def test_convert_refuses_names_it_cannot_write(names, needle):
    from cq4p.cli import convert as cv
    with pytest.raises(cv.ConvertError) as refusal:
        cv.check_tensor_names("checkpoint", names)
    assert needle in str(refusal.value)
    cv.check_tensor_names("checkpoint", ["model.layers.0.self_attn.q_proj.weight", "lm_head"])
