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


# --- JSON nested past the limit -----------------------------------------------

MARK = "@@nested@@"


def _template_processing(single, ids):
    return {"type": "TemplateProcessing", "single": single, "pair": [],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": ids, "tokens": ["<bos>"]}}}


def _sequence_a():
    return {"Sequence": {"id": "A", "type_id": 0}}


# Where a deeply nested value goes: (file, how to place it, the path the
# refusal names).
NESTED = {
    "truncation": ("tokenizer.json", lambda t: t.update(truncation=MARK), "truncation[0]"),
    "padding": ("tokenizer.json", lambda t: t.update(padding=MARK), "padding[0]"),
    "model.dropout": ("tokenizer.json", lambda t: t["model"].update(dropout=MARK),
                      "model.dropout[0]"),
    "a merge": ("tokenizer.json", lambda t: t["model"]["merges"].append(MARK),
                "model.merges[1][0]"),
    "an added token's id": ("tokenizer.json", lambda t: t["added_tokens"][0].update(id=MARK),
                            "added_tokens[0].id[0]"),
    "a Replace pattern": ("tokenizer.json", lambda t: t["normalizer"].update(pattern=MARK),
                          "normalizer.pattern[0]"),
    "a post-processor item": (
        "tokenizer.json",
        lambda t: t.update(post_processor=_template_processing([MARK, _sequence_a()], [1])),
        "post_processor.single[0][0]"),
    "a special token's id": (
        "tokenizer.json",
        lambda t: t.update(post_processor=_template_processing(
            [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, _sequence_a()], [MARK])),
        "post_processor.special_tokens.<bos>.ids[0]"),
    "a decoder member": ("tokenizer.json", lambda t: t["decoder"]["decoders"].append(MARK),
                         "decoder.decoders[3][0]"),
    "eos_token_id": ("generation_config.json", None, "eos_token_id[0]"),
}


@pytest.mark.parametrize("depth", [200_000, 1_000_000])
@pytest.mark.parametrize("where", list(NESTED))
def test_json_nested_past_the_limit_is_refused(tmp_path, where, depth):
    # Before: SIGSEGV (the tree was copied or printed by recursion, one
    # stack frame per level).
    file, place, path = NESTED[where]
    tokenizer = _piece_tokenizer()
    generation = {"eos_token_id": 1}
    if place is None:
        generation["eos_token_id"] = MARK
    else:
        place(tokenizer)
    nested = ("[" * depth + "]" * depth).encode()
    directory = _write(tmp_path / "t",
                       json.dumps(tokenizer).encode().replace(f'"{MARK}"'.encode(), nested),
                       json.dumps(generation).encode().replace(f'"{MARK}"'.encode(), nested))
    _refused(_tokenize(directory, "ab"), f"{file}: {path}",
             f"expected at most {fmt.CQ4P_TOKENIZER_MAX_NESTING} levels of nested [] and {{}}",
             "found a level deeper")


# --- what a JSON file holds besides the document ---------------------------------

# A piece of the vocabulary spelled with bytes or escapes that are no text:
# (what replaces "Q" in the piece "xQx", what the refusal quotes).
BAD_PIECES = {
    "raw invalid UTF-8": (b"\xff", "ill-formed UTF-8 byte; last read: '\"x\\xFF'"),
    "an overlong encoding": (b"\xc0\xaf", "ill-formed UTF-8 byte; last read: '\"x\\xC0'"),
    "a lone high surrogate": (b"\\ud800", "surrogate U+D800..U+DBFF must be followed by"),
    "a lone low surrogate": (b"\\udc00", "surrogate U+DC00..U+DFFF must follow"),
}


@pytest.mark.parametrize("case", list(BAD_PIECES))
def test_a_piece_that_is_no_text_is_refused_by_member(tmp_path, case):
    # Before: "not valid JSON (or not valid UTF-8 inside a string)", naming
    # neither the member nor the bytes.
    spelled, expected = BAD_PIECES[case]
    tokenizer = _piece_tokenizer()
    tokenizer["model"]["vocab"]["xQx"] = 300
    data = json.dumps(tokenizer).encode().replace(b"xQx", b"x" + spelled + b"x")
    directory = _write(tmp_path / "t", data)
    line = _refused(_tokenize(directory, "ab"), "tokenizer.json: model.vocab: not valid JSON",
                    expected)
    line.encode("utf-8")  # the message itself is text


@pytest.mark.parametrize("after", [b"\0", b"\0{\"model\": 1}", b"\0\xff garbage"])
def test_bytes_after_a_nul_are_refused(tmp_path, after):
    # Before: the lexer took the NUL for the end of the text and the file
    # opened, whatever followed.
    data = json.dumps(_piece_tokenizer()).encode()
    directory = _write(tmp_path / "t", data + after)
    _refused(_tokenize(directory, "ab"), "tokenizer.json: (document): expected nothing after "
             f"the JSON document but white space, found a NUL byte at byte {len(data)}")


def test_a_member_named_twice_is_refused(tmp_path):
    # Before: the second "a" silently replaced the first, leaving id 259 with
    # no piece.
    data = json.dumps(_piece_tokenizer()).encode().replace(b'"a": 259', b'"a": 259, "a": 263')
    directory = _write(tmp_path / "t", data)
    _refused(_tokenize(directory, "ab"),
             "tokenizer.json: model.vocab.a: expected each member name once, found 'a' twice")


# --- ids ------------------------------------------------------------------------

def test_two_pieces_on_one_id_are_refused(tmp_path):
    # Before: accepted; "a" lost its id to "zz" and was encoded as its byte.
    tokenizer = _piece_tokenizer()
    tokenizer["model"]["vocab"]["zz"] = 259
    _refused(_tokenize(_write(tmp_path / "t", tokenizer), "ab"),
             "tokenizer.json: model.vocab['zz']: expected an id no other piece has, found 259, "
             "the id of 'a'")


ADDED_COLLISIONS = {
    # An added token on another added token's id.
    "an added token's": ([(300, "<x>"), (300, "<y>")],
                         "added_tokens[2].id: expected an id no other added token has, found "
                         "300, the id of the added token '<x>'"),
    # On a byte piece's id: "語" (E8 AA 9E, no piece) encoded to <0xE8> ...
    # and decoded as "<x>\ufffd\ufffd".
    "a byte piece's": ([(2 + 0xE8, "<x>")],
                       "added_tokens[1].id: expected the id of the piece '<x>' or an id no "
                       "piece has, found 234, the id of the piece '<0xE8>'"),
    "a piece's": ([(259, "<x>")],
                  "added_tokens[1].id: expected the id of the piece '<x>' or an id no piece "
                  "has, found 259, the id of the piece 'a'"),
}


@pytest.mark.parametrize("case", list(ADDED_COLLISIONS))
def test_an_added_token_on_an_id_taken_is_refused(tmp_path, case):
    added, expected = ADDED_COLLISIONS[case]
    tokenizer = _piece_tokenizer()
    tokenizer["added_tokens"] += [_added(token_id, content) for token_id, content in added]
    _refused(_tokenize(_write(tmp_path / "t", tokenizer), "\u8a9e"), "tokenizer.json: " + expected)


def test_an_added_token_on_its_own_pieces_id_is_read(tmp_path):
    # Gemma's layout: <bos> is both a piece and an added token, on one id.
    tokenizer = _piece_tokenizer()
    tokenizer["added_tokens"].append(_added(0, "<unk>"))
    outcome = _tokenize(_write(tmp_path / "t", tokenizer), "<unk>ab")
    assert outcome.returncode == 0, outcome.describe()
    assert outcome.stdout.split() == ["0", "263"]


@pytest.mark.parametrize("value, path", [(2**63, "eos_token_id"), (2**64 - 1, "eos_token_id"),
                                         ([1, 2**63], "eos_token_id[1]"),
                                         (264, "eos_token_id")])
def test_an_eos_id_outside_the_vocabulary_is_refused(tmp_path, value, path):
    # Before: 2^63 and 2^64 - 1 were negative as int64, so below the
    # vocabulary's size: accepted as stop ids.
    shown = value[-1] if isinstance(value, list) else value
    directory = _write(tmp_path / "t", _piece_tokenizer(), {"eos_token_id": value})
    _refused(_tokenize(directory, "ab"), f"generation_config.json: {path}: expected an id below "
             f"264 (the vocabulary's size), found {shown}")


# --- text past the limit, and the memory an encode takes -------------------------

def _encode_with_qwen3(text_expression, extra=""):
    """Encodes `text_expression` (Python, evaluated in the child) with the
    real Qwen3 tokenizer through the C API into a buffer made beforehand,
    in a child process; prints the number of ids and the resident memory
    the call added (VmHWM after it over VmRSS before it)."""
    import tokenizer_data

    directory = tokenizer_data.require_data("qwen3")
    script = f"""
import ctypes, re, sys, time
import numpy as np
from cq4p.native import runtime as native

def status(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1)) << 10

tokenizer = native.NativeTokenizer(directory={str(directory)!r})
lib = native.text_library()
data = {text_expression}
ids = np.ones(len(data) + 16, dtype=np.int64)
error = ctypes.create_string_buffer(native.ERROR_BUFFER_BYTES)
count = ctypes.c_size_t()
ctypes.CDLL("libc.so.6").malloc_trim(0)
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
before = status("VmRSS")
code = lib.cq4p_tokenizer_encode(tokenizer._handle, data, len(data), 0,
                                 ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), len(ids),
                                 ctypes.byref(count), error, native.ERROR_BUFFER_BYTES)
if code != 0:
    print(error.value.decode(), file=sys.stderr)
    sys.exit(2)
print(count.value, status("VmHWM") - before)
{extra}
"""
    return hostile.run([sys.executable, "-c", script], env=_env())


def test_text_past_the_limit_is_refused_by_size(tmp_path):
    # Before: 50 MiB of digits took 3.9 GB and 14 s (std::bad_alloc after
    # 22 s where memory was shorter); the limit is 4 GiB of address space.
    size = 50 << 20
    outcome = _encode_with_qwen3(f"b'1234567890' * {size // 10} + b'{'1' * (size % 10)}'")
    hostile.assert_refused(outcome, code=EXIT_BAD_INPUT)
    assert outcome.stderr.strip() == (
        f"encode: the text is {size} bytes, more than the limit of "
        f"{fmt.CQ4P_TOKENIZER_MAX_TEXT_BYTES} for one encode (CQ4P_TOKENIZER_MAX_TEXT_BYTES)")


# What an encode of 24 MiB may add to resident memory, per byte of text:
# the ids (8 bytes each, up to one a byte, in a vector that grows by
# doubling) and a little. Before: 66 bytes a byte of digits (every
# pre-token's view and segment held at once), 38 for one long word.
BYTES_PER_BYTE = 14
TEXTS = {
    "digits (one id a byte)": "b'1234567890' * ((24 << 20) // 10)",
    "one letter (a single pre-token)": "b'a' * (24 << 20)",
    "characters of every width": "'x\\u00e9\\u8a9e 12 \\U0001F600!'.encode() * ((24 << 20) // 16)",
}


@pytest.mark.parametrize("kind", list(TEXTS))
def test_encoding_takes_memory_linear_in_the_text(kind):
    outcome = _encode_with_qwen3(TEXTS[kind], extra="print(len(data))")
    assert outcome.returncode == 0, outcome.describe()
    count, added, size = map(int, outcome.stdout.split())
    assert 0 < count <= size
    assert added <= BYTES_PER_BYTE * size + (16 << 20), \
        f"{kind}: {added / size:.1f} bytes a byte of text"


def _encode(directory, text_expression, **options):
    """Encodes `text_expression` (Python, evaluated in a child process) with
    the tokenizer of `directory` through the Python API; the child prints
    the number of ids, or the refusal on stderr (exit status 2)."""
    script = f"""
import sys
from cq4p.native import runtime as native
tokenizer = native.NativeTokenizer(directory={str(directory)!r})
try:
    print(len(tokenizer.encode({text_expression}, add_special=False)))
except native.NativeError as error:
    print(error, file=sys.stderr)
    sys.exit(2)
"""
    return hostile.run([sys.executable, "-c", script], env=_env(), **options)


def test_a_normalizer_that_grows_the_text_without_end_is_refused(tmp_path):
    # Before: each "a" of 1 MiB became 4096 bytes: std::bad_alloc (SIGABRT)
    # within 4 GiB of address space.
    tokenizer = _piece_tokenizer()
    tokenizer["normalizer"] = {"type": "Sequence", "normalizers": [
        tokenizer["normalizer"],
        {"type": "Replace", "pattern": {"String": "a"}, "content": "b" * 4096}]}
    outcome = _encode(_write(tmp_path / "t", tokenizer), "'a' * (1 << 20)")
    hostile.assert_refused(outcome, code=EXIT_BAD_INPUT)
    assert outcome.stderr.strip().endswith(
        "tokenizer.json: normalizer.normalizers[1] would make the text 4294967296 bytes, more "
        "than cq4p's limit for the normalized text (4 times the text's bytes plus 65536)")


@pytest.mark.parametrize("kind", ["normalizer", "pre-tokenizer", "decoder"])
def test_more_steps_than_the_limit_are_refused(tmp_path, kind):
    # Before: a Sequence of any length was read; each step is a pass over
    # every text (a decoder step, over every piece at open).
    tokenizer = _piece_tokenizer()
    steps = fmt.CQ4P_TOKENIZER_MAX_STEPS + 1
    replace = {"type": "Replace", "pattern": {"String": "q"}, "content": "r"}
    if kind == "normalizer":
        tokenizer["normalizer"] = {"type": "Sequence", "normalizers": [replace] * steps}
        path = f"normalizer.normalizers[{steps - 1}]"
    elif kind == "pre-tokenizer":
        tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [_split("q")] * steps}
        path = f"pre_tokenizer.pretokenizers[{steps - 1}]"
    else:
        tokenizer["decoder"]["decoders"] += [replace] * (steps - 3)
        path = "decoder.decoders"
    _refused(_tokenize(_write(tmp_path / "t", tokenizer), "ab"), f"tokenizer.json: {path}: "
             f"expected at most {fmt.CQ4P_TOKENIZER_MAX_STEPS} {kind} steps "
             f"(CQ4P_TOKENIZER_MAX_STEPS), found more")


# --- patterns that backtrack without end ------------------------------------------

BACKTRACKING = "(?:(?:a|aa){0,20}b|.)"


@pytest.mark.parametrize("size", [20_000, 2_000_000])
def test_a_pattern_that_backtracks_at_every_character_is_stopped(tmp_path, size):
    # Before: just under PCRE2's match limit at every character, 6.5 ms
    # each: 20 KB took 130 s, and 2 MB would take 4 hours.
    directory = _write(tmp_path / "t", _piece_tokenizer(_split(BACKTRACKING)))
    outcome = _encode(directory, f"'a' * {size}", timeout=20)
    hostile.assert_refused(outcome, code=EXIT_BAD_INPUT)
    assert outcome.stderr.strip() == (
        f"encode: {directory / 'tokenizer.json'}: pre_tokenizer.pattern.Regex: the split "
        "pattern needs more work on this text than cq4p's match budget "
        f"(CQ4P_TOKENIZER_MATCH_STEPS_BASE {fmt.CQ4P_TOKENIZER_MATCH_STEPS_BASE} + "
        f"{fmt.CQ4P_TOKENIZER_MATCH_STEPS_PER_BYTE} a byte of text, in PCRE2's match-limit "
        "steps): a pattern this slow is refused rather than run for minutes")
    # Where it backtracks little, the same pattern runs.
    outcome = _encode(directory, f"'ab' * {size // 2}", timeout=20)
    assert outcome.returncode == 0, outcome.describe()
    assert int(outcome.stdout) == size // 2


def test_a_long_run_of_white_space_is_encoded():
    # Before: refused ("match limit exceeded"): \s*[\r\n]+ backtracks over
    # the whole run before \s+(?!\S) matches it, past PCRE2's fixed limit.
    outcome = _encode_with_qwen3("b' ' * (16 << 20)", extra="print(len(data))")
    assert outcome.returncode == 0, outcome.describe()
    count, _, size = map(int, outcome.stdout.split())
    assert 0 < count < size // 64


# --- added tokens ---------------------------------------------------------------

def test_a_long_added_token_costs_no_more_than_a_short_one(tmp_path):
    # Before: a trie walked from every byte of the text: a 4 KiB token
    # "aa...ab" over 1 MiB of "a" took 4,095 steps a byte (26 s), a 1 MiB
    # token about a million.
    tokenizer = _piece_tokenizer()
    tokenizer["added_tokens"] += [_added(300, "a" * 4095 + "b"),
                                  _added(301, "a" * (1 << 20) + "b")]
    directory = _write(tmp_path / "t", tokenizer)
    outcome = _encode(directory, "'a' * (1 << 20)", timeout=20)
    assert outcome.returncode == 0, outcome.describe()
    assert int(outcome.stdout) == 1 << 20
    # The token is taken where it starts, after "x" and one "a" as pieces.
    outcome = _tokenize(directory, "xa" + "a" * 4095 + "bab")
    assert outcome.returncode == 0, outcome.describe()
    assert outcome.stdout.split() == ["261", "259", "300", "263"]  # x a [a...ab] ab
