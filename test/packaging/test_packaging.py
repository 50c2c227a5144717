"""cq4p as its users get it: the Python package installed by pip into a
fresh venv and used from outside the repository; the tools, runtime, headers,
CMake package and pkg-config file installed into a prefix; and the C example
built against that prefix alone, on the host and cross-built for aarch64
(run under QEMU 11.1), printing the same tokens as cq4p-run."""

import json
import os
import platform
import re
import shutil
import subprocess
import sysconfig

import pytest

from conftest import (BUILD, LLVM_BIN, QEMU, QEMU_ARGS, SOURCE, SYSTEM_PYTHON, clean_env,
                      ids_line, run)

SUBCOMMANDS = ["chat", "run", "convert", "upgrade", "inspect", "synthetic", "margin", "check",
               "generate", "check-model", "tokenize"]
PROMPT = "3 1 4 1 5"
TOKENS = 8
TOOLCHAIN = SOURCE / "cmake" / "aarch64-linux-gnu.cmake"
HOST_CC = ["-DCMAKE_C_COMPILER=" + str(LLVM_BIN / "clang"),
           "-DCMAKE_CXX_COMPILER=" + str(LLVM_BIN / "clang++")]


def project_version():
    text = (SOURCE / "CMakeLists.txt").read_text()
    return re.search(r"^project\(cq4p VERSION ([\d.]+)", text, re.M).group(1)


# --- the Python package --------------------------------------------------------


@pytest.fixture(scope="session")
def venv(work):
    """A fresh venv (Debian's python3 -m venv --system-site-packages) with the
    package installed by pip, offline, from a copy of python/ (setuptools
    builds in the tree it is given)."""
    source = work / "src" / "python"
    shutil.copytree(SOURCE / "python", source,
                    ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", work / "venv"], cwd=work)
    run([work / "venv" / "bin" / "python", "-m", "pip", "install", "--no-index",
         "--no-build-isolation", "--no-cache-dir", "--disable-pip-version-check", "-q", source],
        cwd=work)
    return work / "venv"


@pytest.fixture(scope="session")
def bundle(venv, work):
    """A synthetic llama checkpoint converted by the venv's cq4p command."""
    cq4p = venv / "bin" / "cq4p"
    run([cq4p, "synthetic", "--arch", "llama", "--out", work / "checkpoint"], cwd=work)
    run([cq4p, "convert", "--model", work / "checkpoint", "--out", work / "bundle"], cwd=work)
    return work / "bundle"


def test_cq4p_command_in_a_fresh_venv(venv, work):
    result = run([venv / "bin" / "cq4p", "--help"], cwd=work)
    assert result.stdout.startswith("usage: cq4p ")
    for command in SUBCOMMANDS:
        assert re.search(rf"^\s+{command}\s", result.stdout, re.M), command
    assert run([venv / "bin" / "cq4p", "--version"], cwd=work).stdout.strip() == \
        f"cq4p {project_version()}"
    assert run([venv / "bin" / "python", "-m", "cq4p", "--version"], cwd=work).stdout.strip() \
        == f"python -m cq4p {project_version()}"
    # The venv's copy runs, every subpackage installed, with the format's
    # constants as generated from the C headers (no header needed).
    where = run([venv / "bin" / "python", "-c",
                 "import cq4p, cq4p.format.constants as f; print(cq4p.__file__); "
                 "print(f.__file__)"], cwd=work).stdout.split()
    site = venv / "lib" / f"python{sysconfig.get_python_version()}" / "site-packages"
    assert where == [str(site / "cq4p" / "__init__.py"),
                     str(site / "cq4p" / "format" / "constants.py")]
    assert (site / "cq4p" / "format" / "constants.py").read_bytes() == \
        (SOURCE / "python" / "cq4p" / "format" / "constants.py").read_bytes()
    installed = {path.parent.name for path in (site / "cq4p").glob("*/__init__.py")}
    source = {path.parent.name for path in (SOURCE / "python" / "cq4p").glob("*/__init__.py")}
    assert installed == source


def test_convert_and_inspect_from_outside_the_repository(bundle, venv, work):
    manifest = json.loads((bundle / "manifest.json").read_text())
    names = [entry["name"] for entry in manifest["tensors"]]
    assert len(names) > 10 and (bundle / "model.mlir").is_file()
    result = run([venv / "bin" / "cq4p", "inspect", bundle], cwd=work)
    for name in names:
        assert name in result.stdout, name
    assert result.stdout.rstrip().endswith("verdict: OK")


def test_a_python_without_numpy_gets_one_line(venv, work):
    site = venv / "lib" / f"python{sysconfig.get_python_version()}" / "site-packages"
    # -S: no site directories, so no numpy (Debian's is in dist-packages);
    # the package comes from PYTHONPATH.
    env = clean_env(PYTHONPATH=str(site))
    expected = (f"cq4p: error: numpy is not installed for {SYSTEM_PYTHON}: install it "
                f"({SYSTEM_PYTHON} -m pip install numpy), or use a Python that has it "
                f"(Debian: apt install python3-numpy, then /usr/bin/python3 -m cq4p)\n")
    for command in ([SYSTEM_PYTHON, "-S", "-m", "cq4p", "--help"],
                    [SYSTEM_PYTHON, "-S", venv / "bin" / "cq4p", "inspect", work]):
        result = run(command, cwd=work, env=env, check=False)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", expected)


def test_missing_tools_are_named(venv, bundle, work):
    """The venv's cq4p with no build in sight: every place looked in."""
    bindir = venv / "bin"
    result = run([venv / "bin" / "cq4p", "check", "--bundle", bundle, "--library",
                  work / "absent.so"], cwd=work, check=False)
    assert result.returncode == 2
    assert result.stderr == (
        f"cq4p check: error: cq4p-run not found: $CQ4P_RUN and $CQ4P_PREFIX are unset, and it "
        f"is not in {bindir} or on PATH; build it (scripts/build) or install cq4p "
        f"(cmake --install <build> --prefix P) and set CQ4P_PREFIX=P\n")
    empty = work / "empty-prefix"
    empty.mkdir(exist_ok=True)
    result = run([venv / "bin" / "cq4p", "generate", "--bundle", bundle, "--library",
                  work / "absent.so", "--prompt-ids", PROMPT],
                 cwd=work, env=clean_env(CQ4P_PREFIX=str(empty)), check=False)
    assert result.returncode == 2
    candidates = [empty / "lib" / "libcq4p_runtime.so", empty / "lib64" / "libcq4p_runtime.so"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        candidates.append(empty / "lib" / multiarch / "libcq4p_runtime.so")
    assert result.stderr == (
        f"cq4p generate: error: the cq4p runtime library (libcq4p_runtime.so) not found: "
        f"$CQ4P_PREFIX is {empty}, which has no {' or '.join(map(str, candidates))}; install "
        f"cq4p there (cmake --install <build> --prefix {empty}) or unset it\n")


# --- the installed tree ----------------------------------------------------------


INSTALLED = ["bin/cq4p-opt", "bin/cq4p-compile", "bin/cq4p-run", "lib/libcq4p_runtime.so",
             "lib/libcq4p_runtime.a", "include/cq4p/cq4p.h", "include/cq4p/kernel_abi.h",
             "include/cq4p/format.h", "lib/cmake/cq4p/cq4pConfig.cmake",
             "lib/cmake/cq4p/cq4pConfigVersion.cmake", "lib/cmake/cq4p/cq4pTargets.cmake",
             "lib/pkgconfig/cq4p.pc"]


@pytest.fixture(scope="session")
def host_prefix(work):
    prefix = work / "host"
    run(["cmake", "--install", BUILD, "--prefix", prefix], cwd=work)
    return prefix


def pkg_config(prefix, *args):
    env = clean_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    return run(["pkg-config", *args, "cq4p"], cwd=prefix, env=env).stdout.split()


def test_installed_tree(host_prefix, work):
    for path in INSTALLED:
        assert (host_prefix / path).is_file(), path
    assert not (host_prefix / "include" / "cq4p" / "runtime").exists()
    assert run([host_prefix / "bin" / "cq4p-opt", "--version"], cwd=work).returncode == 0
    # The runtime needs neither LLVM nor MLIR: not to load, not to be found.
    needed = run([LLVM_BIN / "llvm-readelf", "-d", host_prefix / "lib" / "libcq4p_runtime.so"],
                 cwd=work).stdout
    assert not re.search(r"LLVM|MLIR", needed), needed
    for path in (host_prefix / "lib" / "cmake" / "cq4p").iterdir():
        assert not re.search(r"LLVM|MLIR|llvm-22", path.read_text()), path
    # pkg-config: the install prefix given at install time (relative to the
    # .pc file), not the configured one.
    def flags(*args):
        return [flag[:2] + os.path.normpath(flag[2:]) if flag[:2] in ("-I", "-L") else flag
                for flag in pkg_config(host_prefix, *args)]

    assert pkg_config(host_prefix, "--modversion") == [project_version()]
    assert flags("--cflags") == [f"-I{host_prefix / 'include'}"]
    assert flags("--libs") == [f"-L{host_prefix / 'lib'}", "-lcq4p_runtime"]
    # A static link adds the tokenizer's archives (PCRE2, utf8proc) and the
    # C++ library, libm, dlopen and threads.
    static = flags("--static", "--libs")
    assert static[:2] == [f"-L{host_prefix / 'lib'}", "-lcq4p_runtime"]
    assert [os.path.basename(flag) for flag in static[2:4]] == ["libpcre2-8.a", "libutf8proc.a"]
    assert static[4:] == ["-lstdc++", "-lm", "-ldl", "-pthread"]
    # The C headers stand alone, in C.
    source = work / "headers.c"
    source.write_text("#include <cq4p/cq4p.h>\n#include <cq4p/kernel_abi.h>\n"
                      "int main(void) { return CQ4P_OK; }\n")
    run([LLVM_BIN / "clang", "-std=c99", "-Wall", "-Werror", "-pedantic", "-fsyntax-only",
         *pkg_config(host_prefix, "--cflags"), source], cwd=work)


@pytest.fixture(scope="session")
def host_model(host_prefix, bundle, work):
    library = work / "libmodel-host.so"
    run([host_prefix / "bin" / "cq4p-compile", bundle / "model.mlir", "--target=host", "-o",
         library], cwd=work)
    return library


@pytest.fixture(scope="session")
def host_example(host_prefix, work):
    """examples/ configured with the installed prefix and nothing else."""
    build = work / "example-host"
    run(["cmake", "-S", SOURCE / "examples", "-B", build, "-G", "Ninja", *HOST_CC,
         f"-DCMAKE_PREFIX_PATH={host_prefix}"], cwd=work)
    run(["cmake", "--build", build], cwd=work)
    return build / "cq4p-generate"


def test_example_on_the_host(host_prefix, host_model, host_example, bundle, venv, work):
    reference = run([host_prefix / "bin" / "cq4p-run", "--bundle", bundle, "--library",
                     host_model, "--prompt-ids", PROMPT, "-n", TOKENS], cwd=work).stdout
    expected = ids_line(reference)
    assert len(expected) == TOKENS

    result = run([host_example, bundle, host_model, PROMPT, TOKENS], cwd=work)
    assert ids_line(result.stdout) == expected
    assert re.search(r"^prefill: [\d.]+ tok/s .*, decode: [\d.]+ tok/s", result.stdout, re.M)

    # pkg-config, by hand.
    program = work / "generate-pc"
    run([LLVM_BIN / "clang", "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-o",
         program, SOURCE / "examples" / "generate.c",
         *pkg_config(host_prefix, "--cflags", "--libs"), f"-Wl,-rpath,{host_prefix / 'lib'}"],
        cwd=work)
    assert ids_line(run([program, bundle, host_model, PROMPT, TOKENS], cwd=work).stdout) == \
        expected

    # The venv's cq4p through the installed runtime library.
    result = run([venv / "bin" / "cq4p", "generate", "--bundle", bundle, "--library",
                  host_model, "--prompt-ids", PROMPT, "-n", TOKENS], cwd=work,
                 env=clean_env(CQ4P_PREFIX=str(host_prefix)))
    assert ids_line(result.stdout) == expected


def _byte_char(byte):
    """GPT-2's byte-to-character map."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    others = [b for b in range(256) if b not in printable]
    return chr(byte) if byte in printable else chr(256 + others.index(byte))


def write_chat_tokenizer(directory):
    """A small byte-level BPE tokenizer.json with ChatML (LFM2's layout):
    8 special tokens, the 256 byte pieces, a few merges; 272 ids."""
    specials = ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|fim_pre|>", "<|fim_mid|>",
                "<|fim_suf|>", "<|im_start|>", "<|im_end|>"]
    vocab = {_byte_char(b): 8 + b for b in range(256)}
    merges = [("H", "i"), ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "t"),
              ("i", "s"), ("o", "k")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab) + 8)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(specials)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|startoftext|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [],
                           "special_tokens": {"<|startoftext|>": {
                               "id": "<|startoftext|>", "ids": [1],
                               "tokens": ["<|startoftext|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in merges]}}
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|startoftext|>", "eos_token": "<|im_end|>",
        "chat_template": "{{- bos_token -}}{%- for m in messages -%}{{- '<|im_start|>' + "
                         "m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"}))
    return 8 + len(vocab)


@pytest.fixture(scope="session")
def chat_bundle(venv, work):
    """A synthetic llama with a small ChatML tokenizer, converted by the
    venv's cq4p (which copies the tokenizer files into the bundle)."""
    cq4p = venv / "bin" / "cq4p"
    checkpoint = work / "chat-checkpoint"
    checkpoint.mkdir()
    vocab = write_chat_tokenizer(checkpoint)
    run([cq4p, "synthetic", "--arch", "llama", "--out", checkpoint, "--vocab", vocab], cwd=work)
    run([cq4p, "convert", "--model", checkpoint, "--out", work / "chat-bundle"], cwd=work)
    return work / "chat-bundle"


def test_chat_example_on_the_host(host_prefix, host_example, chat_bundle, work):
    library = work / "libchat-host.so"
    run([host_prefix / "bin" / "cq4p-compile", chat_bundle / "model.mlir", "--target=host",
         "-o", library], cwd=work)
    turns = "Hi!\nhello, is it ok?\n"
    chat = subprocess.run([str(host_example.parent / "cq4p-chat"), str(chat_bundle),
                           str(library), "6"], input=turns, capture_output=True,
                          text=True, cwd=work, env=clean_env(), check=False)
    assert chat.returncode == 0, chat.stderr
    assert len(re.findall(r"^prefill [\d.]+ tok/s", chat.stderr, re.M)) == 2
    reference = subprocess.run([str(host_prefix / "bin" / "cq4p-run"), "--bundle",
                                str(chat_bundle), "--library", str(library), "--chat", "-n",
                                "6"], input=turns, capture_output=True, text=True, cwd=work,
                               env=clean_env(), check=False)
    assert reference.returncode == 0, reference.stderr
    assert chat.stdout == reference.stdout
    assert chat.stdout.count("\n") == 2


def test_cq4p_chat_from_the_venv(venv, host_prefix, chat_bundle, work):
    """`cq4p chat CHECKPOINT` from the venv with an installed prefix: the
    checkpoint prepared into the cache on first use, the replies those of
    the installed cq4p-run --chat on the cache entry."""
    cache = work / "model-cache"
    env = clean_env(CQ4P_PREFIX=str(host_prefix), CQ4P_CACHE=str(cache))
    turns = "Hi!\nhello, is it ok?\n"
    chat = subprocess.run([str(venv / "bin" / "cq4p"), "chat", str(work / "chat-checkpoint"),
                           "-n", "6", "--threads", "1"], input=turns, capture_output=True,
                          text=True, cwd=work, env=env, check=False)
    assert chat.returncode == 0, chat.stderr
    assert "preparing the checkpoint" in chat.stderr
    (entry,) = [path for path in cache.iterdir() if path.is_dir() and path.name != "hashes"]
    reference = subprocess.run([str(host_prefix / "bin" / "cq4p-run"), "--bundle",
                                str(entry / "bundle"), "--library", str(entry / "libmodel.so"),
                                "--chat", "-n", "6"], input=turns, capture_output=True,
                               text=True, cwd=work, env=clean_env(), check=False)
    assert reference.returncode == 0, reference.stderr
    assert chat.stdout == reference.stdout and chat.stdout.count("\n") == 2


def test_example_refuses_what_it_cannot_run(host_model, host_example, bundle, work):
    def refused(*args):
        result = run([host_example, *args], cwd=work, check=False)
        return result.returncode, result.stderr

    assert refused(bundle, host_model, "3 x", TOKENS) == (
        2, "cq4p-generate: a prompt id must be an integer in [0, 9223372036854775807], "
           "found 'x'\n")
    assert refused(bundle, host_model, PROMPT, "0") == (
        2, "cq4p-generate: N must be an integer in [1, 1073741824], found '0'\n")
    # The runtime's own refusals come through the C API's error buffer.
    vocab = json.loads((bundle / "manifest.json").read_text())["config"]["vocab_size"]
    code, message = refused(bundle, host_model, f"3 {vocab}", TOKENS)
    assert (code, message.splitlines()[-1]) == (
        1, f"cq4p-generate: prefill: token id {vocab} at index 1 >= vocab {vocab}")


# --- aarch64 ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def aarch64_prefix(work):
    """The aarch64 sub-build (no MLIR, as every cross build) installed."""
    tree = BUILD / "aarch64"
    if not (tree / "lib" / "libcq4p_runtime.so").is_file():
        pytest.fail(f"{tree} has no lib/libcq4p_runtime.so: build it (scripts/build --aarch64)")
    assert "MLIR_DIR:" not in (tree / "CMakeCache.txt").read_text()
    prefix = work / "aarch64"
    run(["cmake", "--install", tree, "--prefix", prefix], cwd=work)
    return prefix


def test_example_on_aarch64_under_qemu(aarch64_prefix, host_prefix, bundle, work):
    library = work / "libmodel-neon.so"
    run([host_prefix / "bin" / "cq4p-compile", bundle / "model.mlir", "--target=aarch64-neon",
         "-o", library], cwd=work)
    reference = run([QEMU, *QEMU_ARGS, aarch64_prefix / "bin" / "cq4p-run", "--bundle", bundle,
                     "--library", library, "--prompt-ids", PROMPT, "-n", TOKENS],
                    cwd=work).stdout
    expected = ids_line(reference)
    assert len(expected) == TOKENS

    # Cross-built against the aarch64 prefix, the runtime linked statically.
    build = work / "example-aarch64"
    run(["cmake", "-S", SOURCE / "examples", "-B", build, "-G", "Ninja",
         f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", f"-DCMAKE_PREFIX_PATH={aarch64_prefix}",
         "-DCQ4P_EXAMPLES_STATIC=ON"], cwd=work)
    run(["cmake", "--build", build], cwd=work)
    program = build / "cq4p-generate"
    header = program.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
    needed = run([LLVM_BIN / "llvm-readelf", "-d", program], cwd=work).stdout
    assert "libcq4p_runtime" not in needed
    result = run([QEMU, *QEMU_ARGS, program, bundle, library, PROMPT, TOKENS], cwd=work)
    assert ids_line(result.stdout) == expected


def test_a_prefix_for_another_processor_is_refused(host_prefix, work):
    result = run(["cmake", "-S", SOURCE / "examples", "-B", work / "example-mismatch", "-G",
                  "Ninja", f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
                  f"-DCMAKE_PREFIX_PATH={host_prefix}"], cwd=work, check=False)
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert (f"{host_prefix}/lib/cmake/cq4p/cq4pConfig.cmake is cq4p built for Linux "
            f"{platform.machine()}, and this build targets Linux aarch64") in message, \
        result.stderr
