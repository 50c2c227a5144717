"""Malformed files: both readers refuse each one, naming the same field."""

import collections
import os

import pytest

from cq4p.format import constants as fmt
from cq4p.format import corpus
from cq4p.io import reader as rd
from cq4p.io import writer as wr
from cq4p.native import runtime as native

# Every validation step must be exercised by at least one file.
FIELDS = ("header", "magic", "alignment", "precision", "flags", "ndim", "dims", "original_n",
          "group_size", "num_groups", "scales_bytes", "data_bytes", "file size", "codebook",
          "left_signs", "right_signs", "permutation", "norms")


@pytest.fixture(scope="module")
def malformed(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpus")
    return directory, corpus.write_malformed_corpus(directory)


def test_corpus_covers_every_field_and_lists_itself(malformed):
    directory, listing = malformed
    counts = collections.Counter(field for _, field in listing)
    assert set(counts) == set(FIELDS)
    lines = (directory / corpus.EXPECTED_LIST).read_text().splitlines()
    assert [tuple(line.split("\t")) for line in lines] == listing
    names = {name for name, _ in listing}
    assert {f"hpanel_truncated_at_{offset}" + ".weights"
            for offset in (0, 4, 8, 12, 16, 24, 32, 40, 48, 52, 60, 68, 72, 76)} <= names
    assert {"hpanel_n_2pow40.weights", "hpanel_n_2pow63.weights"} <= names


def test_python_reader_names_the_expected_field(malformed):
    directory, listing = malformed
    wrong = []
    for name, field in listing:
        path = os.path.join(directory, name)
        with pytest.raises(rd.FormatError) as caught:
            rd.read_tensor(path)
        error = caught.value
        if error.field != field or not str(error).startswith(f"{path}: {field}: expected "):
            wrong.append((name, field, str(error)))
    assert not wrong


def test_native_reader_names_the_same_field(malformed):
    directory, listing = malformed
    wrong = []
    for name, field in listing:
        path = os.path.join(directory, name)
        try:
            native.open_tensor(path).close()
            wrong.append((name, field, "accepted"))
            continue
        except native.NativeError as error:
            if error.code != fmt.CQ4P_ERROR_FORMAT or error.field != field:
                wrong.append((name, field, error.message))
    assert not wrong


def test_absurd_dims_are_refused_before_any_size_is_used(tmp_path):
    # N = 2^40 with a matching original_n: refused at dims, not at a size.
    qw = corpus._weight("hadamard", 8, 128, 128)
    path = tmp_path / "x.weights"
    wr.write_panel_file(path, qw)
    raw = bytearray(path.read_bytes())
    raw[fmt.CQ4P_OFFSET_DIMS:fmt.CQ4P_OFFSET_DIMS + 8] = (1 << 40).to_bytes(8, "little")
    raw[fmt.CQ4P_OFFSET_ORIGINAL_N:fmt.CQ4P_OFFSET_ORIGINAL_N + 8] = (1 << 40).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(rd.FormatError, match=r": dims: expected N < 2\^32, found 1099511627776"):
        rd.read_tensor(path)
