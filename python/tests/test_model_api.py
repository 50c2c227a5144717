"""`cq4p.Model`, the Python API: README.md's example run as it is written
(its synthetic checkpoint made by the README's own command), its output
compared with cq4p-run's on the same bundle and library; generation and
chat against cq4p-run and the runtime's own NativeModel / NativeChat;
stopping a generation half-way; errors; a light `import cq4p`.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cq4p import cache as ch
from cq4p.native import runtime as native
from cq4p.native import tools

README = Path(__file__).resolve().parents[2] / "README.md"
PYTHONPATH = str(Path(ch.__file__).resolve().parents[1])
STATS = re.compile(r"prefill: [\d.]+ tok/s \(\d+ tokens in [\d.]+ ms\), decode: [\d.]+ tok/s "
                   r"\(\d+ tokens in [\d.]+ ms\), time to first token: [\d.]+ ms")


def readme_blocks():
    """(the shell line making the example's checkpoint, the Python example)."""
    text = README.read_text()
    shell = re.search(r"^```\n(cq4p synthetic [^\n]*)\n```$", text, re.M)
    example = re.search(r"^```python\n(from cq4p import Model\n.*?)^```$", text, re.M | re.S)
    assert shell and example, "README.md's Python example or its checkpoint command is missing"
    return shell.group(1), example.group(1)


def environment(cache):
    return dict(os.environ, CQ4P_CACHE=str(cache), PYTHONPATH=PYTHONPATH,
                PYTHONIOENCODING="utf-8")


def cq4p_run(*arguments, stdin=None):
    result = subprocess.run([tools.find_tool("cq4p-run"), *map(str, arguments)], input=stdin,
                            capture_output=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """(work directory, cache, the example's completed process): README's
    command and example run in a fresh directory with a fresh cache."""
    work = tmp_path_factory.mktemp("readme")
    shell, code = readme_blocks()
    command = shlex.split(shell)
    assert command[0] == "cq4p"
    subprocess.run([sys.executable, "-m", "cq4p", *command[1:]], cwd=work, check=True,
                   env=environment(work / "cache"), capture_output=True)
    (work / "example.py").write_text(code)
    result = subprocess.run([sys.executable, "example.py"], cwd=work, capture_output=True,
                            env=environment(work / "cache"), check=False, timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    return work, work / "cache", result


@pytest.fixture(scope="module")
def model(example):
    """The example's checkpoint opened again (from the cache)."""
    from cq4p import Model

    work, cache, _ = example
    with Model(work / "checkpoint", cache=cache, progress=None) as opened:
        yield opened


def test_the_readme_example_prints_what_cq4p_run_prints(example):
    work, cache, result = example
    assert "preparing the checkpoint" in result.stderr.decode()
    (entry,) = [p for p in cache.iterdir() if p.is_dir() and p.name != "hashes"]
    bundle, library = entry / "bundle", entry / "libmodel.so"
    generated = cq4p_run("--bundle", bundle, "--library", library, "--prompt",
                         "Once upon a time", "-n", "16")
    reply = cq4p_run("--bundle", bundle, "--library", library, "--chat", "-n", "16",
                     stdin=b"Hello!\n")
    with native.NativeModel(bundle, library) as reference:
        tokenizer = native.model_tokenizer(reference)
        logits = reference.prefill(tokenizer.encode("Hello!"))
        top = tokenizer.decode([int(logits.argmax())])
    out = result.stdout
    assert out.startswith(generated), (out, generated)
    stats, rest = out[len(generated):].split(b"\n", 1)
    assert STATS.fullmatch(stats.decode()), stats
    assert rest == reply + top.encode() + b"\n"


def test_generate_streams_the_runtime_text_and_stats(model):
    prompt = "The cat"
    pieces = list(model.generate(prompt, max_tokens=12, ignore_eos=True))
    ids, text, stats = native.generate_text(model.native, prompt, 12, ignore_stop_ids=True)
    assert len(pieces) > 1 and "".join(pieces) == text
    assert model.stats.prompt_tokens == len(model.encode(prompt)) == stats["prompt_tokens"]
    assert model.stats.generated_tokens == 12 == len(ids)
    assert model.stats.decoded_tokens == 11
    assert model.stats.time_to_first_token > 0 and model.stats.decode_tokens_per_second > 0
    sampled = "".join(model.generate(prompt, max_tokens=12, temperature=0.9, top_k=40,
                                     top_p=0.9, seed=7, ignore_eos=True))
    assert sampled.encode() + b"\n" == cq4p_run(
        "--bundle", model.bundle, "--library", model.library, "--prompt", prompt, "-n", "12",
        "--temperature", "0.9", "--top-k", "40", "--top-p", "0.9", "--seed", "7",
        "--ignore-eos")


def test_a_generation_left_half_way_stops_and_the_model_runs_on(model):
    whole = list(model.generate("abc", max_tokens=20, ignore_eos=True))
    stream = model.generate("abc", max_tokens=20, ignore_eos=True)
    assert [next(stream), next(stream)] == whole[:2]
    stream.close()
    assert list(model.generate("abc", max_tokens=20, ignore_eos=True)) == whole


def test_a_conversation_is_the_runtimes_chat(model):
    turns = ["Hi there!", "What is 2 + 2?"]
    conversation = model.conversation(system="Be brief.")
    replies = ["".join(conversation.send(turn, max_tokens=6, ignore_eos=True))
               for turn in turns]
    expected = cq4p_run("--bundle", model.bundle, "--library", model.library, "--chat",
                        "--system", "Be brief.", "-n", "6", "--ignore-eos",
                        stdin="\n".join(turns).encode() + b"\n")
    assert "".join(reply + "\n" for reply in replies).encode() == expected
    with native.NativeChat(model.native, system_prompt="Be brief.") as chat:
        for turn in turns:
            chat.send(turn, 6, ignore_stop_ids=True)
        assert conversation.history() == chat.history()
    # model.chat continues the model's conversation: the next turn of it.
    after = "".join(model.chat("And 3 + 3?", max_tokens=6, ignore_eos=True))
    assert model.stats.generated_tokens == 6 and after


def test_errors_are_raised_where_they_happen(model, example, tmp_path):
    from cq4p import Model

    with pytest.raises(native.NativeError, match="a stop string is empty"):
        list(model.generate("abc", max_tokens=4, stop=[""]))
    with pytest.raises(ch.PrepareError, match="neither a checkpoint"):
        Model(tmp_path, cache=tmp_path / "cache")
    work, cache, _ = example
    closed = Model(work / "checkpoint", cache=cache, progress=None)
    closed.close()
    with pytest.raises(native.NativeError, match="model: closed"):
        list(closed.generate("abc", max_tokens=2))
    with pytest.raises(native.NativeError, match="model: closed"):
        closed.prefill([1, 2])  # refused, not a null model passed to the runtime


def test_import_cq4p_stays_light():
    code = ("import sys, cq4p; print('numpy' in sys.modules, 'cq4p.api' in sys.modules); "
            "from cq4p import Model; print(Model.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=PYTHONPATH), check=True).stdout
    assert out.split() == ["False", "False", "cq4p.api"]
