"""The runtime's tokenizer under hostile files and text (docs/TOKENIZER.md,
"Limits"): split patterns that could cut a character, JSON nested past the
limit, ids that collide or overflow, text past the size limit, runs that
would need unbounded work, patterns that backtrack without end.

Every case runs as a separate process under a time limit and an address
space limit (hostile.run) and must end in a clean refusal (a non-zero exit
status that is no signal, no hang, no traceback, one line naming the file,
the member, the value and the limit) or the right answer. The files are
small tokenizers written here (a SentencePiece-style BPE with byte
fallback, as Gemma's, and a byte-level BPE, as Qwen's), and the real Qwen3
tokenizer for the size and memory cases.
"""

import json
import os
import sys
from pathlib import Path

import pytest

import hostile
from cq4p.format import constants as fmt

EXIT_BAD_INPUT = 2
SOURCE = Path(__file__).resolve().parents[2]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SOURCE / "python")
    return env


def _added(token_id, content):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def _piece_tokenizer(pre_tokenizer=None):
    """A SentencePiece-style BPE: <unk> 0, <bos> 1, the 256 byte pieces at
    2..257, then U+2581, a, b, x, é, ab (258..263); ' ' -> U+2581."""
    vocab = {"<unk>": 0, "<bos>": 1}
    vocab.update({f"<0x{b:02X}>": 2 + b for b in range(256)})
    for piece in ["\u2581", "a", "b", "x", "\u00e9", "ab"]:
        vocab[piece] = len(vocab)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [_added(1, "<bos>")],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": pre_tokenizer, "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [["a", "b"]]}}


def _split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
            "invert": False}


def _write(directory, tokenizer, generation=None):
    """tokenizer.json (a dict, or the file's bytes) and, when given,
    generation_config.json (likewise); the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in (("tokenizer.json", tokenizer), ("generation_config.json", generation)):
        if content is not None:
            data = content if isinstance(content, bytes) else json.dumps(content).encode()
            (directory / name).write_bytes(data)
    return directory


def _tokenize(directory, text, **options):
    """`python -m cq4p tokenize` of `text` with the tokenizer of `directory`."""
    return hostile.run(hostile.cli("tokenize", "--bundle", directory, "--no-special", text),
                       env=_env(), **options)


def _refused(outcome, *expected):
    """A one-line refusal holding each of `expected`; the line."""
    hostile.assert_refused(outcome, code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)
    line = outcome.stderr.strip().splitlines()[-1]
    for part in expected:
        assert part in line, f"expected {part!r} in: {line}"
    return line


# --- split patterns ----------------------------------------------------------

@pytest.mark.parametrize("regex", ["\\C", "a|\\C", "(?<=\\C)x"])
def test_a_pattern_that_could_cut_a_character_is_refused(tmp_path, regex):
    # Before: \C split "xé語" between the bytes of its characters: a read
    # past the word's end (AddressSanitizer) and ids that decoded to
    # "xé\ufffd\x00語\ufffd\ufffd\ufffd\x00", with no error.
    directory = _write(tmp_path / "t", _piece_tokenizer(_split(regex)))
    line = _refused(_tokenize(directory, "x\u00e9\u8a9e"), "tokenizer.json",
                    "pre_tokenizer.pattern.Regex", f"the pattern '{regex}'",
                    "patterns that match whole characters")
    assert "\\C matches one byte" in line


def test_an_empty_pattern_is_refused(tmp_path):
    # Before: the empty pattern matched nothing, was taken as an empty
    # String, and the first encode split at it forever until memory ran out.
    directory = _write(tmp_path / "t", _piece_tokenizer(_split("")))
    _refused(_tokenize(directory, "ab"), "tokenizer.json", "pre_tokenizer.pattern.Regex",
             "expected a non-empty pattern, found ''")


@pytest.mark.parametrize("regex", [".", "\\X", "\\p{L}+|[^\\p{L}]"])
def test_patterns_of_whole_characters_round_trip(tmp_path, regex):
    directory = _write(tmp_path / "t", _piece_tokenizer(_split(regex)))
    text = "x\u00e9\u8a9e ab \U0001F600"
    outcome = _tokenize(directory, text)
    assert outcome.returncode == 0, outcome.describe()
    ids = outcome.stdout.split()
    decoded = hostile.run(hostile.cli("tokenize", "--bundle", directory, "--decode",
                                      " ".join(ids)), env=_env())
    assert decoded.returncode == 0, decoded.describe()
    assert decoded.stdout == text + "\n"
