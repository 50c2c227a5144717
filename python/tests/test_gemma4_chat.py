"""Gemma 4's chat format (MODELS.md section 6.1a) in the runtime.

No Gemma 4 tokenizer ships on npm, so the tokenizer here is a small one with
Gemma 4's layout (SentencePiece-style BPE, byte fallback, <bos>, and the
special tokens <|turn>, <turn|>, <|channel>, <channel|>, <|think|>), 512 ids,
the synthetic gemma4 model's vocabulary.

- Rendering: Jinja2 templates written here from section 6.1a (one that
  writes the empty thought channel after the generation prompt when thinking
  is off, as the larger models' templates do, one that does not) render
  conversations under Jinja2 as Hugging Face does; cq4p, given the same
  template as the checkpoint's chat_template.jinja, must render them byte
  for byte (through the C API's cq4p_tokenizer_render_chat_with).
- cq4p-run --chat and the Python binding on a synthetic bundle with this
  tokenizer: its model's next token is the current token's successor
  (cq4p.model.synthetic; the chat format is the tokenizer's, whatever the
  architecture, MODEL_ARCH),
  so after finding the successors of the prompt's last token, a tokenizer
  that puts <|channel>, a thought, <channel|>, an answer and <turn|> at those
  ids makes the model reply with a thought and then stop at <turn|>. Checked:
  each turn's prompt ids are the Jinja rendering's, the reply stops at
  <turn|>, the thought is hidden (or shown with the option), the next turn
  re-renders the conversation without the thought.

Needs the build tree's runtime library and cq4p-run, and cq4p-compile.
"""

import json
import os
import shutil
import subprocess

import pytest

from cq4p.cli import convert as cv
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

from test_model_e2e import compile_model

VOCAB = 512
# The model under the chat: any synthetic family of VOCAB tokens follows its
# successor chain; Gemma 4's own (per-layer embeddings, shared KV, soft-capped
# logits), as a Gemma 4 bundle is what the chat format is for.
MODEL_ARCH = "gemma4"
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
GEMMA4_SPECIALS = ["<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>"]
WORDS = ["user", "model", "system", "thought", "hmm", "Yes", "Hi", "Again", "Be", "brief"]

# The layout of section 6.1a as Jinja, independently of cq4p's C++: the
# system turn (first message system or developer, or thinking on), past
# replies without their thought channels (split at each close, keep what
# precedes an open: the public templates' way), consecutive replies as one
# model turn, the generation prompt.
TEMPLATE = r"""
{%- macro strip_thoughts(text) -%}
  {%- set kept = namespace(text='') -%}
  {%- for part in text.split('<channel|>') -%}
    {%- set kept.text = kept.text + part.split('<|channel>')[0] -%}
  {%- endfor -%}
  {{- kept.text | trim -}}
{%- endmacro -%}
{{- bos_token -}}
{%- set thinking = enable_thinking | default(false) -%}
{%- if messages and messages[0]['role'] in ['system', 'developer'] -%}
  {%- set system = messages[0]['content'] -%}
  {%- set rest = messages[1:] -%}
{%- else -%}
  {%- set system = none -%}
  {%- set rest = messages -%}
{%- endif -%}
{%- if system is not none or thinking -%}
  {{- '<|turn>system\n' -}}
  {%- if thinking -%}{{- '<|think|>\n' -}}{%- endif -%}
  {{- (system or '') | trim -}}
  {{- '<turn|>\n' -}}
{%- endif -%}
{%- for message in rest -%}
  {%- set reply = message['role'] == 'assistant' -%}
  {%- if not (reply and loop.previtem is defined and loop.previtem['role'] == 'assistant') -%}
    {{- '<|turn>' + ('model' if reply else message['role']) + '\n' -}}
  {%- endif -%}
  {%- if reply -%}
    {{- strip_thoughts(message['content']) -}}
  {%- else -%}
    {{- message['content'] | trim -}}
  {%- endif -%}
  {%- if not (reply and loop.nextitem is defined and loop.nextitem['role'] == 'assistant') -%}
    {{- '<turn|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|turn>model\n' -}}
  EMPTY_THOUGHT
{%- endif -%}
"""
TEMPLATES = {
    "bare": TEMPLATE.replace("EMPTY_THOUGHT", ""),
    "empty-thought": TEMPLATE.replace(
        "EMPTY_THOUGHT", "{%- if not thinking -%}{{- '<|channel>thought\\n<channel|>' -}}"
                         "{%- endif -%}"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": "Hi there"}],
    [{"role": "developer", "content": "Answer in French."},
     {"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Answer in French."},
     {"role": "user", "content": "What is 2 + 2?"},
     {"role": "assistant", "content": "<|channel>thought\nEasy.<channel|>Quatre. "},
     {"role": "assistant", "content": "\tC'est tout."},
     {"role": "user", "content": "\u3000 And 3 + 3? \U0001F600\n\u00a0"}],
    [{"role": "user", "content": "first"},
     {"role": "assistant", "content": "second<|channel>thought\nunfinished"},
     {"role": "user", "content": " third <b>x</b> "},
     {"role": "assistant", "content": "a<channel|>b"},
     {"role": "assistant", "content": ""},
     {"role": "user", "content": "\n"}],
]


def write_tokenizer(directory, template, placement=None):
    """A Gemma-4-like tokenizer.json (512 ids), its config and the template
    as chat_template.jinja; placement {token: id} moves a token to an id,
    the token there taking its place. Returns {token: id}."""
    pieces = SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + GEMMA4_SPECIALS
    pieces += ["\u2581", "\n"] + [chr(c) for c in range(0x21, 0x7f)]
    merges = []
    for word in WORDS + ["\u2581Yes"]:
        for end in range(2, len(word) + 1):
            if word[:end] not in pieces:
                pieces.append(word[:end])
                merges.append([word[:end - 1], word[end - 1]])
    pieces += SPELLED
    pieces += [f"\u2581filler{i}" for i in range(VOCAB - len(pieces))]
    assert len(pieces) == VOCAB
    for token, target in (placement or {}).items():
        source = pieces.index(token)
        pieces[source], pieces[target] = pieces[target], pieces[source]
    ids = {piece: i for i, piece in enumerate(pieces)}
    special = set(SPECIALS + GEMMA4_SPECIALS)
    added = [{"id": ids[t], "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for t in pieces if t in special]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [ids["<bos>"]],
                                                        "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": ids, "merges": merges}}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True}))
    (directory / "chat_template.jinja").write_text(template)
    return ids


def jinja_render(template, messages, enable_thinking, add_generation_prompt=True):
    """As Hugging Face's apply_chat_template renders (tokenizer_data.jinja_chat)."""
    import jinja2.ext
    import jinja2.sandbox

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    return environment.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<bos>",
        eos_token="<eos>", enable_thinking=enable_thinking)


def open_tokenizer(directory):
    return native.NativeTokenizer(tokenizer_json=directory / "tokenizer.json",
                                  tokenizer_config=directory / "tokenizer_config.json",
                                  chat_template=directory / "chat_template.jinja")


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
@pytest.mark.parametrize("thinking", [False, True])
def test_rendering_is_the_templates_byte_for_byte(tmp_path, kind, thinking):
    ids = write_tokenizer(tmp_path, TEMPLATES[kind])
    with open_tokenizer(tmp_path) as tokenizer:
        info = tokenizer.info()
        assert info["chat_format"] == "Gemma 4"
        assert info["stop_ids"] == sorted([ids["<eos>"], ids["<turn|>"]])
        for messages in CONVERSATIONS:
            expected = jinja_render(TEMPLATES[kind], messages, thinking)
            assert tokenizer.render_chat(messages, enable_thinking=thinking) == expected, messages
        # The layouts themselves, so that a template and cq4p wrong alike
        # cannot pass.
        first = jinja_render(TEMPLATES[kind], CONVERSATIONS[1], thinking)
        think = "<|think|>\n" if thinking else ""
        empty = "<|channel>thought\n<channel|>" if kind == "empty-thought" and not thinking else ""
        assert first == (f"<bos><|turn>system\n{think}Be brief.<turn|>\n<|turn>user\nHi there"
                         f"<turn|>\n<|turn>model\n{empty}")


def test_other_formats_refuse_thinking(tmp_path):
    write_tokenizer(tmp_path, "{{ bos_token }}{% for m in messages %}<start_of_turn>"
                              "{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}")
    tokenizer_json = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab = tokenizer_json["model"]["vocab"]
    for filler, token in (("\u2581filler0", "<start_of_turn>"),
                          ("\u2581filler1", "<end_of_turn>")):
        # Gemma 3's markers on two filler pieces' ids, as pieces and added
        # tokens both (an added token on another piece's id is refused).
        vocab[token] = vocab.pop(filler)
        tokenizer_json["added_tokens"].append(
            {"id": vocab[token], "content": token, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True})
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    with open_tokenizer(tmp_path) as tokenizer:
        assert tokenizer.info()["chat_format"] == "Gemma"
        with pytest.raises(native.NativeError) as error:
            tokenizer.render_chat([{"role": "user", "content": "hi"}], enable_thinking=True)
        assert error.value.message == ("chat: thinking: the Gemma format has no thinking switch "
                                       "cq4p knows (Gemma 4's has)")


def test_chat_options_are_versioned_by_their_size(tmp_path):
    """cq4p_chat_options: the fields its size covers are read; a larger
    struct (a newer header) is refused only when it sets what this runtime
    does not know."""
    import ctypes

    from cq4p.format import constants as fmt

    class Newer(ctypes.Structure):
        _fields_ = native.ChatOptions._fields_ + [("later", ctypes.c_int32)]

    write_tokenizer(tmp_path, TEMPLATES["bare"])
    with open_tokenizer(tmp_path) as tokenizer:
        def render(options):
            roles, contents = (ctypes.c_char_p * 1)(b"user"), (ctypes.c_char_p * 1)(b"hi")
            text, length = ctypes.create_string_buffer(256), ctypes.c_size_t()
            error = ctypes.create_string_buffer(512)
            code = tokenizer._lib.cq4p_tokenizer_render_chat_with(
                tokenizer._handle, roles, contents, 1, 1,
                ctypes.cast(ctypes.pointer(options), ctypes.POINTER(native.ChatOptions)), text,
                256, ctypes.byref(length), error, 512)
            return code, (text.value if code == 0 else error.value).decode()

        known = ctypes.sizeof(native.ChatOptions)
        thinking = "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n"
        plain = "<bos><|turn>user\nhi<turn|>\n<|turn>model\n"
        assert render(native.ChatOptions(known, 1, 0)) == (0, thinking)
        # An older header's struct, without enable_thinking: the default.
        assert render(native.ChatOptions(4, 1, 0)) == (0, plain)
        assert render(Newer(known + 4, 1, 0, 0)) == (0, thinking)
        assert render(Newer(known + 4, 1, 0, 7)) == (
            fmt.CQ4P_ERROR_UNSUPPORTED,
            f"cq4p_tokenizer_render_chat_with: cq4p_chat_options of {known + 4} bytes sets byte "
            f"{known}, past the {known} this runtime knows (an option it does not implement)")
        code, message = render(native.ChatOptions(0, 1, 0))
        assert code == fmt.CQ4P_ERROR_ARGUMENT
        assert message == ("cq4p_tokenizer_render_chat_with: cq4p_chat_options.size: expected >= "
                           f"4 (sizeof(cq4p_chat_options) is {known}), found 0")


# --- cq4p-run --chat and the Python binding on a synthetic bundle -----------------

# The reply the tokenizer is arranged to make: successor ids of the
# generation prompt's last token ("\n") get these tokens.
REPLY = ["<|channel>", "hmm", "<channel|>", "Yes", ".", "<turn|>"]
# Another: the markers spelled by ordinary pieces, cut inside, and "é" as
# its two byte pieces.
SPELLED = ["<|chan", "nel>hmm", "<chan", "nel|>"]
REPLY_SPELLED = SPELLED + ["<0xC3>", "<0xA9>", "<turn|>"]


def run_chat(bundle, library, turns, *flags, tokenizer=None):
    command = [tools.find_tool("cq4p-run"), "--bundle", str(bundle), "--library", library,
               "--chat", "-n", str(len(REPLY) + 2), *flags]
    if tokenizer is not None:
        command += ["--tokenizer", str(tokenizer)]
    result = subprocess.run(command, input="".join(t + "\n" for t in turns).encode(),
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    stderr = result.stderr.decode().splitlines()

    def lines(prefix):
        return [[int(i) for i in line.split()[len(prefix.split()):]]
                for line in stderr if line.startswith(prefix + " ") or line == prefix]

    return result.stdout.decode(), lines("prompt ids:"), lines("ids:")


@pytest.fixture(scope="module")
def gemma4_chat(tmp_path_factory):
    """(bundle, library, ids, chain, spelled): a synthetic bundle whose
    tokenizer puts REPLY at the successors of "\\n", the library compiled
    from it, the tokenizer's ids, the chain found, and the directory of a
    tokenizer that puts REPLY_SPELLED there."""
    root = tmp_path_factory.mktemp("gemma4-chat")
    checkpoint = root / "checkpoint"
    shape = synthetic.default_shape(MODEL_ARCH, vocab=VOCAB)
    synthetic.write_model(str(checkpoint), MODEL_ARCH, shape, seed=5)
    first_ids = write_tokenizer(checkpoint, TEMPLATES["bare"])
    with open(os.devnull, "w") as quiet:
        cv.convert(str(checkpoint), str(root / "first"), progress=quiet)
    library = compile_model(str(root / "first"), str(root / "libmodel.so"))
    # The successors of "\n" under the first tokenizer.
    _, _, replies = run_chat(root / "first", library, ["Hi"], "--think", "--ignore-eos")
    chain = replies[0]
    assert len(set(chain)) == len(chain) >= len(REPLY_SPELLED), chain
    assert first_ids["\n"] not in chain, chain
    write_tokenizer(root / "spelled", TEMPLATES["bare"], dict(zip(REPLY_SPELLED, chain)))
    chain = chain[:len(REPLY)]
    ids = write_tokenizer(checkpoint, TEMPLATES["bare"], dict(zip(REPLY, chain)))
    with open(os.devnull, "w") as quiet:
        cv.convert(str(checkpoint), str(root / "bundle"), progress=quiet)
    return root / "bundle", library, ids, chain, root / "spelled"


def encode(bundle, text):
    with native.NativeTokenizer(directory=bundle) as tokenizer:
        return tokenizer.encode(text, add_special=False)


def test_cq4p_run_chat_renders_hides_the_thought_and_stops(gemma4_chat):
    bundle, library, ids, chain, _ = gemma4_chat
    out, prompts, replies = run_chat(bundle, library, ["Hi", "Again"], "--think")
    reply_text = "<|channel>hmm<channel|>Yes."
    first = [{"role": "user", "content": "Hi"}]
    assert prompts[0] == encode(bundle, jinja_render(TEMPLATES["bare"], first, True))
    # The model's successors: a thought, the answer, and the stop at <turn|>
    # before -n ran out.
    assert replies[0] == chain and replies[0][-1] == ids["<turn|>"]
    # The turn after a reply with a thought: the conversation again, the
    # reply without its thought (the template's rendering), from position 0.
    second = first + [{"role": "assistant", "content": reply_text},
                      {"role": "user", "content": "Again"}]
    rendered = jinja_render(TEMPLATES["bare"], second, True)
    assert "<|turn>model\nYes.<turn|>\n<|turn>user\nAgain" in rendered
    assert prompts[1] == encode(bundle, rendered)
    assert replies[1] == chain
    # stdout: the answers alone, one line a turn.
    assert out == "Yes.\nYes.\n"

    shown, _, _ = run_chat(bundle, library, ["Hi"], "--think", "--show-thinking")
    assert shown == reply_text + "\n"


def test_cq4p_run_chat_with_the_empty_thought_channel(gemma4_chat, tmp_path):
    bundle, library, ids, chain, _ = gemma4_chat
    # The same tokenizer with the template that closes the thought channel
    # after the generation prompt: the prompt ends with <channel|>, whose
    # successors are the answer and <turn|>.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(bundle / name, tmp_path / name)
    (tmp_path / "chat_template.jinja").write_text(TEMPLATES["empty-thought"])
    out, prompts, replies = run_chat(bundle, library, ["Hi"], tokenizer=tmp_path)
    rendered = jinja_render(TEMPLATES["empty-thought"], [{"role": "user", "content": "Hi"}],
                            False)
    assert rendered.endswith("<|turn>model\n<|channel>thought\n<channel|>")
    with native.NativeTokenizer(directory=tmp_path) as tokenizer:
        assert prompts[0] == tokenizer.encode(rendered, add_special=False)
    assert replies[0] == chain[3:]
    assert out == "Yes.\n"


def test_python_chat_keeps_the_thought_apart(gemma4_chat):
    bundle, library, ids, chain, _ = gemma4_chat
    with native.NativeModel(str(bundle), library) as model:
        pieces = []
        with native.NativeChat(model, enable_thinking=True) as chat:
            reply, text, stats = chat.send("Hi", 10, on_text=pieces.append)
            # The stop id ends the reply and is not delivered.
            assert reply == chain[:-1] and stats["generated_tokens"] == len(chain)
            assert text == "Yes." and "".join(pieces) == text
            history = chat.history()
        with native.NativeChat(model, enable_thinking=True, show_thinking=True) as chat:
            pieces = []
            _, text, _ = chat.send("Hi", 10, on_text=pieces.append)
            assert text == "<|channel>hmm<channel|>Yes." and "".join(pieces) == text
            # Markers arrive whole, never split between two pieces.
            assert "<|channel>" in pieces and "<channel|>" in pieces
            assert chat.history() == history


def test_streaming_never_delivers_part_of_a_marker_or_a_character(gemma4_chat):
    bundle, library, _, _, spelled = gemma4_chat
    with native.NativeModel(str(bundle), library) as model:
        with native.NativeTokenizer(directory=spelled) as tokenizer:
            with native.NativeChat(model, tokenizer=tokenizer, enable_thinking=True) as chat:
                pieces = []
                _, text, stats = chat.send("Hi", 10, on_text=pieces.append)
                assert stats["generated_tokens"] == len(REPLY_SPELLED)
                assert text == "\u00e9" and pieces == ["\u00e9"]
            with native.NativeChat(model, tokenizer=tokenizer, enable_thinking=True,
                                   show_thinking=True) as chat:
                _, text, _ = chat.send("Hi", 10)
                assert text == "<|channel>hmm<channel|>\u00e9"
