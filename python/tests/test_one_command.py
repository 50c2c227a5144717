"""`cq4p run` and `cq4p chat`: a checkpoint directory to streamed text in one
command, through the cache of prepared models (cq4p.cache).

What is checked against independent facts: the text streamed is, byte for
byte, what cq4p-run --prompt / --chat streams from the cache entry's bundle
and library; the entry's bundle is the one `convert` writes; a second run
reads no file of the entry anew and writes none; a copy of the checkpoint
elsewhere finds the same entry (the key is content) while one changed byte
(its size and mtime kept) is prepared again; a damaged entry and a
preparation killed half-way are not used; two processes preparing one
bundle compile it once; bad input is one line and exit status 2.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cq4p.cli import convert as cv
from cq4p.io import bundle as bd
from cq4p.native import tools

PROMPT = "Hello there, is it ok?"
TOKENS = "12"
TURNS = b"Hi!\nhello, is it ok?\n\nthe end"
SAMPLING = ("--ignore-eos", "--threads", "1")
PYTHONPATH = str(Path(bd.__file__).resolve().parents[2])
TIMEOUT = 300


def cq4p(*arguments, cache, stdin=None, env=None, check=True):
    """`python -m cq4p ARGUMENTS` with $CQ4P_CACHE = cache; the completed
    process (bytes)."""
    environment = dict(os.environ, CQ4P_CACHE=str(cache), PYTHONPATH=PYTHONPATH, **(env or {}))
    result = subprocess.run([sys.executable, "-m", "cq4p", *map(str, arguments)], input=stdin,
                            capture_output=True, env=environment, timeout=TIMEOUT, check=False)
    if check:
        assert result.returncode == 0, result.stderr.decode()
    return result


def cq4p_run(*arguments, stdin=None):
    """cq4p-run ARGUMENTS; the completed process (bytes)."""
    result = subprocess.run([tools.find_tool("cq4p-run"), *map(str, arguments)], input=stdin,
                            capture_output=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return result


def entries(cache):
    """The complete entries' directories (named by their key)."""
    return sorted(p for p in Path(cache).iterdir()
                  if p.is_dir() and not p.name.startswith(".") and p.name != "hashes")


def snapshot(directory):
    """(inode, size, mtime_ns) of every file under `directory`."""
    return {str(p.relative_to(directory)): (p.stat().st_ino, p.stat().st_size,
                                            p.stat().st_mtime_ns)
            for p in sorted(Path(directory).rglob("*")) if p.is_file()}


def age(directory, seconds=60):
    """Sets every file's mtime `seconds` in the past (a checkpoint written
    long ago: its hashes are kept with their stamps)."""
    past = time.time() - seconds
    for path in Path(directory).iterdir():
        os.utime(path, (past, past))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A small synthetic llama with a byte-level ChatML tokenizer, written
    by `python -m cq4p synthetic --with-tokenizer`."""
    root = tmp_path_factory.mktemp("one-command")
    path = root / "checkpoint"
    cq4p("synthetic", "--arch", "llama", "--out", path, "--hidden", "128", "--ffn", "256",
         "--vocab", "384", "--layers", "1", "--with-tokenizer", cache=root / "unused")
    assert sorted(os.listdir(path)) == [
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "tokenizer.json", "tokenizer_config.json"]
    age(path)
    return path


@pytest.fixture(scope="module")
def prepared(checkpoint, tmp_path_factory):
    """(cache, entry, the first run): `cq4p run` on a fresh cache."""
    cache = tmp_path_factory.mktemp("cache")
    first = cq4p("run", checkpoint, "--prompt", PROMPT, "-n", TOKENS, *SAMPLING, cache=cache)
    (entry,) = entries(cache)
    return cache, entry, first


def expected_text(entry, bundle=None):
    """What cq4p-run --prompt streams from the entry."""
    return cq4p_run("--bundle", bundle or entry / "bundle", "--library", entry / "libmodel.so",
                    "--prompt", PROMPT, "-n", TOKENS, "--ignore-eos").stdout


def test_the_first_run_prepares_and_streams_what_cq4p_run_streams(checkpoint, prepared,
                                                                  tmp_path):
    cache, entry, first = prepared
    stderr = first.stderr.decode()
    for step in ("preparing the checkpoint", "converting the checkpoint", "compiling model.mlir",
                 "ready in"):
        assert step in stderr, stderr
    assert "time to first token" in stderr.splitlines()[-1]
    assert sorted(os.listdir(entry)) == ["bundle", "libmodel.so", "prepared.json"]
    assert not [name for name in os.listdir(cache) if name.startswith(".")]
    assert first.stdout == expected_text(entry)
    assert len(first.stdout) > 1 and first.stdout.endswith(b"\n")
    # The entry's bundle is what convert writes from the checkpoint.
    with open(os.devnull, "w") as quiet:
        cv.convert(str(checkpoint), str(tmp_path / "bundle"), progress=quiet)
    assert bd.read_manifest(str(entry / "bundle")) == bd.read_manifest(str(tmp_path / "bundle"))
    assert sorted(os.listdir(entry / "bundle")) == sorted(os.listdir(tmp_path / "bundle"))


def test_a_second_run_starts_from_the_cache(checkpoint, prepared):
    cache, entry, first = prepared
    before, hashes = snapshot(entry), snapshot(cache / "hashes")
    again = cq4p("run", checkpoint, "--prompt", PROMPT, "-n", TOKENS, *SAMPLING, cache=cache)
    assert again.stdout == first.stdout
    stderr = again.stderr.decode()
    assert "preparing" not in stderr and "compiling" not in stderr, stderr
    assert stderr.count("\n") == 1 and stderr.startswith("prefill: ")
    assert snapshot(entry) == before
    # Nothing hashed again: the checkpoint's stamps are unchanged.
    assert snapshot(cache / "hashes") == hashes
    assert entries(cache) == [entry]


def test_chat_streams_what_cq4p_run_chat_streams(checkpoint, prepared):
    cache, entry, _ = prepared
    flags = ("-n", "6", "--system", "Be brief.", "--ignore-eos")
    chat = cq4p("chat", checkpoint, *flags, "--threads", "1", cache=cache, stdin=TURNS)
    reference = cq4p_run("--bundle", entry / "bundle", "--library", entry / "libmodel.so",
                         "--chat", *flags, stdin=TURNS)
    assert chat.stdout == reference.stdout
    assert chat.stdout.count(b"\n") == 3  # three turns; the empty line is skipped
    stderr = chat.stderr.decode()
    assert "preparing" not in stderr
    assert stderr.startswith("cq4p chat: ChatML format; one turn per line")
    assert stderr.count("time to first token") == 3
    quiet = cq4p("chat", checkpoint, *flags, "--quiet", cache=cache, stdin=TURNS)
    assert quiet.stdout == chat.stdout and quiet.stderr == b""


def test_a_copy_finds_the_entry_and_a_changed_byte_is_prepared_again(checkpoint, prepared,
                                                                     tmp_path):
    cache, entry, first = prepared
    copy = tmp_path / "copy"
    shutil.copytree(checkpoint, copy)
    age(copy)
    run = ("run", copy, "--prompt", PROMPT, "-n", TOKENS, *SAMPLING)
    found = cq4p(*run, cache=cache)
    assert "preparing" not in found.stderr.decode() and found.stdout == first.stdout
    hashes = snapshot(cache / "hashes")
    cq4p(*run, cache=cache)
    assert snapshot(cache / "hashes") == hashes  # the copy's hashes were kept
    # config.json rewritten with the same bytes: hashed again, the same key.
    config = copy / "config.json"
    config.write_bytes(config.read_bytes())
    age(copy)
    same = cq4p(*run, cache=cache)
    assert "preparing" not in same.stderr.decode() and snapshot(cache / "hashes") != hashes
    # One weight byte changed, the file's size and mtime kept: prepared again.
    shard = copy / "model-00001-of-00002.safetensors"
    stamp = shard.stat()
    data = bytearray(shard.read_bytes())
    data[-2] ^= 0x01  # the low mantissa bit of the last bf16 value
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert (shard.stat().st_size, shard.stat().st_mtime_ns) == (stamp.st_size, stamp.st_mtime_ns)
    changed = cq4p(*run, cache=cache)
    assert "preparing the checkpoint" in changed.stderr.decode()
    assert len(entries(cache)) == 2 and entry in entries(cache)


def test_a_damaged_entry_or_an_interrupted_preparation_is_not_used(checkpoint, tmp_path):
    cache = tmp_path / "cache"
    run = ("run", checkpoint, "--prompt", PROMPT, "-n", TOKENS, *SAMPLING)
    # Killed while compiling: the temporary directory stays, no entry.
    environment = dict(os.environ, CQ4P_CACHE=str(cache), PYTHONPATH=PYTHONPATH)
    process = subprocess.Popen([sys.executable, "-m", "cq4p", *map(str, run)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=environment, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT
    while not list(cache.glob(".prepare-*/bundle/manifest.json")):
        assert process.poll() is None and time.monotonic() < deadline, "no preparation seen"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    (partial,) = cache.glob(".prepare-*")
    assert entries(cache) == []
    resumed = cq4p(*run, cache=cache)
    stderr = resumed.stderr.decode()
    assert f"removing {partial} (an interrupted preparation)" in stderr, stderr
    assert "preparing the checkpoint" in stderr and not partial.exists()
    (entry,) = entries(cache)
    text = expected_text(entry)
    assert resumed.stdout == text

    # A damaged entry (a truncated library; a tensor file missing) is
    # prepared again, never used.
    for damage in (lambda: os.truncate(entry / "libmodel.so", 4096),
                   lambda: os.remove(entry / "bundle" / "model.norm.weight.weights")):
        damage()
        again = cq4p(*run, cache=cache)
        assert f"{entry} is incomplete or damaged: preparing it again" in \
            again.stderr.decode()
        assert again.stdout == text and entries(cache) == [entry]
    assert not [name for name in os.listdir(cache) if name.startswith(".")]


def test_a_bundle_is_compiled_once_by_two_processes(checkpoint, tmp_path):
    bundle = tmp_path / "bundle"
    with open(os.devnull, "w") as quiet:
        cv.convert(str(checkpoint), str(bundle), progress=quiet)
    cache = tmp_path / "cache"
    environment = dict(os.environ, CQ4P_CACHE=str(cache), PYTHONPATH=PYTHONPATH)
    command = [sys.executable, "-m", "cq4p", "run", str(bundle), "--prompt", PROMPT, "-n",
               TOKENS, *SAMPLING]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=environment) for _ in range(2)]
    outputs = [process.communicate(timeout=TIMEOUT) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    stderr = [error.decode() for _, error in outputs]
    assert sum("compiling model.mlir" in text for text in stderr) == 1, stderr
    assert not any("converting" in text for text in stderr)
    (entry,) = entries(cache)
    assert sorted(os.listdir(entry)) == ["libmodel.so", "prepared.json"]
    assert json.loads((entry / "prepared.json").read_text())["bundle"] == str(bundle)
    text = expected_text(entry, bundle)
    assert outputs[0][0] == outputs[1][0] == text
    third = cq4p("run", bundle, "--prompt", PROMPT, "-n", TOKENS, *SAMPLING, cache=cache)
    assert "compiling" not in third.stderr.decode() and third.stdout == text


def test_bad_input_is_one_line_and_status_2(checkpoint, prepared, tmp_path):
    cache, _, _ = prepared
    empty = tmp_path / "empty"
    empty.mkdir()
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(checkpoint, no_tokenizer,
                    ignore=shutil.ignore_patterns("tokenizer*"))
    unsupported = tmp_path / "unsupported"
    shutil.copytree(checkpoint, unsupported)
    config = json.loads((unsupported / "config.json").read_text())
    (unsupported / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    fresh = tmp_path / "fresh-cache"
    failing = tmp_path / "failing-compile"
    failing.write_text("#!/bin/sh\necho 'cq4p-compile: error: no space left' >&2\nexit 1\n")
    failing.chmod(0o755)
    cases = [
        (("run", empty, "--prompt", "x"), {}, cache,
         f"cq4p run: error: {empty}: neither a checkpoint (config.json and *.safetensors) nor "
         f"a cq4p bundle (manifest.json)"),
        (("chat", tmp_path / "missing"), {}, cache,
         f"cq4p chat: error: {tmp_path / 'missing'}: does not exist;"),
        (("run", no_tokenizer, "--prompt", "x"), {}, cache,
         f"cq4p run: error: {no_tokenizer} has no tokenizer.json"),
        (("run", checkpoint, "--prompt", "x"), {"CQ4P_COMPILE": str(tmp_path / "none")}, fresh,
         f"cq4p run: error: cq4p-compile not found: $CQ4P_COMPILE is {tmp_path / 'none'}"),
        (("run", unsupported, "--prompt", "x"), {}, fresh,
         f"cq4p run: error: {unsupported / 'config.json'}: model_type 'bert' is not "
         f"supported"),
        (("run", checkpoint, "--prompt", "x"), {"CQ4P_COMPILE": str(failing)}, fresh,
         "cq4p run: error: cq4p-compile failed (exit status 1): cq4p-compile: error: no space "
         "left"),
        (("chat", checkpoint, "--think"), {}, cache,
         "cq4p chat: error: chat: thinking: the ChatML format has no thinking switch"),
        # Before: mkdir's "File exists", naming no reason to look at the file.
        (("run", checkpoint, "--prompt", "x"), {}, failing,
         f"cq4p run: error: cannot create the cache {failing}: it exists and is not a "
         f"directory (set CQ4P_CACHE to a writable directory)"),
    ]
    for arguments, env, where, message in cases:
        result = cq4p(*arguments, cache=where, env=env, check=False, stdin=b"Hi\n")
        stderr = result.stderr.decode()
        assert result.returncode == 2, (arguments, stderr)
        lines = [line for line in stderr.splitlines()
                 if not line.startswith(("cq4p: ", "[", "model.mlir: not written"))
                 and " parameters in " not in line]
        assert len(lines) == 1 and lines[0].startswith(message), (arguments, stderr)
        assert "Traceback" not in stderr
    # The failed preparations left nothing behind.
    assert entries(fresh) == []
    assert not [name for name in os.listdir(fresh) if name.startswith(".")]
