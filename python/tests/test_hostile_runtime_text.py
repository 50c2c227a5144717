"""The runtime's text layer under hostile input (docs/TRUST.md): cq4p-run's
output paths and text flags, the echo of what a user gave in a refusal, and
the Python API's text calls (a callback that raises, text holding a NUL, a
stop string that is not UTF-8, a chat whose model was used between turns).

Every case runs as a separate process under a time limit and an address
space limit (hostile.run) and must end in a clean refusal (a non-zero exit
status that is no signal, no hang, no traceback, one line naming the value
and the limit, nothing outside the outputs touched) or the right answer.
The model is a synthetic llama with a small ChatML byte-level tokenizer
(272 ids), converted and compiled once for the module.
"""

import json
import os
import sys
from pathlib import Path

import pytest

import hostile
from cq4p.cli import convert as cv
from cq4p.model import synthetic
from cq4p.native import tools

EXIT_BAD_INPUT = 2
VOCAB = 272


def _tool(name):
    try:
        return tools.find_tool(name)
    except tools.ToolError:
        pytest.skip(f"{name} is not built")


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(synthetic.__file__).resolve().parents[2])
    env.update(extra)
    return env


def _byte_char(byte):
    """GPT-2's byte-to-character map."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    others = [b for b in range(256) if b not in printable]
    return chr(byte) if byte in printable else chr(256 + others.index(byte))


def _write_tokenizer(directory):
    """Byte-level BPE: the 256 bytes at their own ids, 14 merges, then
    ChatML's two markers (270, 271, EOS <|im_end|>)."""
    vocab = {_byte_char(b): b for b in range(256)}
    merges = [("h", "i"), ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "t"),
              ("i", "s"), ("o", "k"), ("a", "n"), ("Ġ", "a"), ("e", "r"), ("Ġt", "he"),
              ("o", "n"), ("i", "n")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    assert len(vocab) == VOCAB - 2
    added = [{"id": VOCAB - 2 + i, "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, t in enumerate(["<|im_start|>", "<|im_end|>"])]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in merges]}}
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>",
        "chat_template": "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + "
                         "m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"}))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(bundle, library): the small llama with its tokenizer, compiled."""
    root = tmp_path_factory.mktemp("hostile-runtime-text")
    checkpoint, bundle = root / "checkpoint", root / "bundle"
    shape = synthetic.Shape(hidden=128, ffn=256, vocab=VOCAB, layers=1)
    synthetic.write_model(str(checkpoint), "llama", shape, seed=4)
    _write_tokenizer(checkpoint)
    with open(os.devnull, "w") as quiet:
        cv.convert(str(checkpoint), str(bundle), progress=quiet)
    library = root / "libmodel.so"
    outcome = hostile.run([_tool("cq4p-compile"), bundle / "model.mlir", "--target=host",
                           "--prefill-chunk=8", "-o", library], timeout=600)
    assert outcome.returncode == 0, outcome.describe()
    return bundle, library


def _run(model, *arguments, **options):
    bundle, library = model
    return hostile.run([_tool("cq4p-run"), "--bundle", bundle, "--library", library,
                        *arguments], **options)


def _one_line(outcome):
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("cq4p-run: ")]
    assert errors, outcome.describe()
    return errors[0]


# --- cq4p-run's output paths --------------------------------------------------

OUTPUT_KINDS = {
    "a FIFO": (lambda p: os.mkfifo(p), "a FIFO, expected a regular file"),
    "a directory": (lambda p: p.mkdir(), "a directory, expected a regular file"),
    "a device": (lambda p: os.symlink("/dev/null", p), "a character device"),
}


@pytest.mark.parametrize("kind", list(OUTPUT_KINDS))
def test_logits_out_refuses_what_is_no_regular_file(model, tmp_path, kind):
    # Before: a FIFO with no reader blocked the open forever.
    make, expected = OUTPUT_KINDS[kind]
    target = tmp_path / "logits"
    make(target)
    outcome = _run(model, "--prompt-ids", "1 2 3", "-n", "2", "--logits-out", target,
                   timeout=30)
    hostile.assert_refused(outcome, f"--logits-out {target}: {expected}", code=EXIT_BAD_INPUT)


def test_outputs_refuse_an_input(model, tmp_path):
    bundle, library = model
    before = hostile.snapshot(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    name = next(t["name"] for t in manifest["tensors"] if t["dtype"] == "CQ4")
    victim = sorted(bundle.glob("*.weights"))[0]
    for path in (victim, bundle / "manifest.json", library):
        outcome = _run(model, "--prompt-ids", "1 2 3", "-n", "2", "--logits-out", path)
        hostile.assert_refused(outcome, "refusing to overwrite it", code=EXIT_BAD_INPUT)
        outcome = _run(model, "--tensor", name, "--output", path, "--repeat", "1")
        hostile.assert_refused(outcome, "refusing to overwrite it", code=EXIT_BAD_INPUT)
    assert hostile.snapshot(bundle) == before
    # A regular file is written.
    good = tmp_path / "logits.f32"
    outcome = _run(model, "--prompt-ids", "1 2 3", "-n", "2", "--logits-out", good)
    assert outcome.returncode == 0, outcome.describe()
    assert good.stat().st_size == 2 * VOCAB * 4


@pytest.mark.parametrize("kind", list(OUTPUT_KINDS))
def test_tensor_output_and_input_refuse_what_is_no_regular_file(model, tmp_path, kind):
    bundle, _ = model
    manifest = json.loads((bundle / "manifest.json").read_text())
    name = next(t["name"] for t in manifest["tensors"] if t["dtype"] == "CQ4")
    make, expected = OUTPUT_KINDS[kind]
    target = tmp_path / "target"
    make(target)
    outcome = _run(model, "--tensor", name, "--output", target, "--repeat", "1", timeout=30)
    hostile.assert_refused(outcome, f"--output {target}: {expected}", code=EXIT_BAD_INPUT)
    outcome = _run(model, "--tensor", name, "--input", target, "--repeat", "1", timeout=30)
    hostile.assert_refused(outcome, f"--input {target}: ", code=EXIT_BAD_INPUT)


# --- text that is not UTF-8 ---------------------------------------------------

@pytest.mark.parametrize("flag", ["--stop", "--system"])
def test_text_flags_that_are_not_utf8_are_refused(model, flag):
    # Before: --stop "\xbf" matched inside a character ("¿" is C2 BF) and
    # its first byte alone went to stdout.
    mode = ["--chat"] if flag == "--system" else ["--prompt", "hi", "--ignore-eos"]
    for value in (b"\xbf", b"ok\xc3", b"\xed\xa0\x80"):
        outcome = _run(model, *mode, "-n", "4", flag, os.fsdecode(value))
        hostile.assert_refused(outcome, f"{flag}: not valid UTF-8 at byte", code=EXIT_BAD_INPUT)
        assert outcome.stdout == ""


def test_python_cli_refuses_a_stop_string_that_is_not_utf8(model):
    bundle, library = model
    outcome = hostile.run(hostile.cli("generate", "--bundle", bundle, "--library", library,
                                      "--prompt", "hi", "--stop", os.fsdecode(b"\xbf")),
                          env=_env())
    hostile.assert_refused(outcome, "stop string 0: not valid UTF-8", code=EXIT_BAD_INPUT)
    hostile.assert_one_line(outcome)


# --- what a refusal echoes ----------------------------------------------------

ECHO_CASES = {
    "CQ4P_HOST_LEVEL": ([], {"CQ4P_HOST_LEVEL": "v" * 102400}, "... (102400 bytes)"),
    "--top-k": (["--top-k", "9" * 102400], {}, "... (102400 bytes)"),
    "--temperature": (["--temperature", "x" * 102400], {}, "... (102400 bytes)"),
    "an unknown flag": (["--" + "u" * 102400], {}, "... (102402 bytes)"),
    "--prompt-ids": (["--prompt-ids", "1 " + "x" * 102400], {}, "... (102400 bytes)"),
}


@pytest.mark.parametrize("case", list(ECHO_CASES))
def test_refusals_echo_at_most_a_line_of_what_was_given(model, case):
    # Before: a 100 KiB value was echoed whole.
    arguments, env, expected = ECHO_CASES[case]
    if "--prompt-ids" not in arguments:
        arguments = ["--prompt-ids", "1 2", *arguments]
    outcome = _run(model, *arguments, "-n", "2", env=_env(**env))
    hostile.assert_refused(outcome, expected, code=EXIT_BAD_INPUT)
    assert len(_one_line(outcome)) < 600, outcome.stderr[:600]


def test_python_cli_echoes_at_most_a_line_of_what_was_given(model):
    bundle, library = model
    for flag in ("-n", "--temperature", "--top-k"):
        outcome = hostile.run(hostile.cli("generate", "--bundle", bundle, "--library", library,
                                          "--prompt-ids", "1 2", flag, "7" * 3000 + "x"),
                              env=_env())
        hostile.assert_refused(outcome, "characters)", code=EXIT_BAD_INPUT)
        assert len(outcome.stderr) < 1200, outcome.stderr[:600]


# --- the Python API's text calls ----------------------------------------------

def _python(model, body):
    """Runs `body` with `native`, `model` (a NativeModel) and `ArgumentError`
    in scope, as a separate process; the Outcome."""
    bundle, library = model
    script = ("import sys\nfrom cq4p.native import runtime as native\n"
              "ArgumentError = native.ArgumentError\n"
              f"model = native.NativeModel({str(bundle)!r}, {str(library)!r})\n" + body)
    return hostile.run([sys.executable, "-c", script], env=_env())


def test_a_callback_that_raises_stops_the_generation_and_propagates(model):
    # Before: ctypes printed the exception, the callback returned as if it
    # had continued, and generate_text returned 24 ids.
    outcome = _python(model, """
class Stop(Exception):
    pass
seen = []
def on_text(piece):
    seen.append(piece)
    raise Stop("enough")
try:
    native.generate_text(model, "hello", 24, ignore_stop_ids=True, on_text=on_text)
except Stop as error:
    print("raised", error, len(seen))
chat = native.NativeChat(model)
try:
    chat.send("hello", 24, ignore_stop_ids=True, on_text=on_text)
except Stop as error:
    print("chat raised", error, len(seen))
ids, _, _ = native.generate_text(model, "hello", 3, ignore_stop_ids=True)
print("after", len(ids))
""")
    assert outcome.returncode == 0, outcome.describe()
    assert "Exception ignored" not in outcome.stderr, outcome.stderr
    assert outcome.stdout.splitlines() == ["raised enough 1", "chat raised enough 2", "after 3"]


def test_text_holding_a_nul_is_refused(model):
    # Before: the prompt was cut at the NUL without a word.
    outcome = _python(model, """
chat = native.NativeChat(model)
calls = [
    ("prompt", lambda: native.generate_text(model, "hi\\0there", 2)),
    ("stop", lambda: native.generate_text(model, "hi", 2, stop_strings=["a\\0b"])),
    ("chat", lambda: chat.send("hi\\0there", 2)),
    ("system", lambda: native.NativeChat(model, system_prompt="be\\0brief")),
    ("bytes", lambda: native.generate_text(model, "hi", 2, stop_strings=[b"\\xbf"])),
    ("render", lambda: native.model_tokenizer(model).render_chat(
        [{"role": "user", "content": "x\\0y"}])),
]
for name, call in calls:
    try:
        call()
        print(name, "accepted")
    except ArgumentError as error:
        print(name, error)
""")
    assert outcome.returncode == 0, outcome.describe()
    lines = outcome.stdout.splitlines()
    assert lines == [
        "prompt prompt: holds a NUL byte at byte 2 of 8; the C API takes NUL-terminated text, "
        "so the rest would be lost",
        "stop stop string 0: holds a NUL byte at byte 1 of 3; the C API takes NUL-terminated "
        "text, so the rest would be lost",
        "chat text: holds a NUL byte at byte 2 of 8; the C API takes NUL-terminated text, so "
        "the rest would be lost",
        "system system prompt: holds a NUL byte at byte 2 of 8; the C API takes "
        "NUL-terminated text, so the rest would be lost",
        "bytes stop string 0: not valid UTF-8 text (invalid start byte at byte 0 of 1)",
        "render messages[0] content: holds a NUL byte at byte 1 of 3; the C API takes "
        "NUL-terminated text, so the rest would be lost",
    ], outcome.stdout


def test_a_chat_whose_model_was_used_between_turns_answers_from_its_conversation(model):
    # Before: after a reset and a prefill of as many other ids, the second
    # turn continued from the other ids.
    outcome = _python(model, """
def second_reply(between):
    chat = native.NativeChat(model)
    chat.send("hello there", 6, ignore_stop_ids=True)
    between()
    ids, _, _ = chat.send("and then?", 6, ignore_stop_ids=True)
    chat.close()
    return ids
expected = second_reply(lambda: None)
def refill():
    count = model.position
    model.reset()
    model.prefill([(7 * i + 3) % 256 for i in range(count)])
print(second_reply(refill) == expected, len(expected))
print(second_reply(lambda: model.generate([1, 2, 3], 2)) == expected)
""")
    assert outcome.returncode == 0, outcome.describe()
    assert outcome.stdout.splitlines() == ["True 6", "True"]


def test_a_tokenizer_or_chat_of_a_closed_model_is_refused(model):
    # Before: the model's tokenizer and a chat kept pointers into the freed
    # model: a use after free (a crash, or text from freed memory).
    outcome = _python(model, """
tokenizer = native.model_tokenizer(model)
chat = native.NativeChat(model)
chat.send("hi", 2, ignore_stop_ids=True)
model.close()
calls = [
    ("encode", lambda: tokenizer.encode("hello")),
    ("decode", lambda: tokenizer.decode([104, 105])),
    ("info", lambda: tokenizer.info()),
    ("send", lambda: chat.send("again", 2)),
    ("history", lambda: chat.history()),
    ("generate", lambda: native.generate_text(model, "hi", 2)),
    ("tokenizer", lambda: native.model_tokenizer(model)),
]
for name, call in calls:
    try:
        call()
        print(name, "accepted")
    except native.NativeError as error:
        print(name, error)
chat.close()
""")
    assert outcome.returncode == 0, outcome.describe()
    assert outcome.stdout.splitlines() == [
        "encode tokenizer: its model was closed (a model's tokenizer lives as long as the "
        "model)",
        "decode tokenizer: its model was closed (a model's tokenizer lives as long as the "
        "model)",
        "info tokenizer: its model was closed (a model's tokenizer lives as long as the model)",
        "send chat: its model was closed",
        "history chat: its model was closed",
        "generate model: closed",
        "tokenizer model: closed",
    ], outcome.stdout
