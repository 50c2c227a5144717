"""--help and -h of every tool: cq4p-run, cq4p-compile, cq4p-opt,
cq4p-translate and every `python -m cq4p` command. Each exits 0, says what
the tool does, and describes every flag the tool accepts, the flags read
from the tool's own source (cq4p-run's argument loop, cq4p-compile's
cl::opt declarations, the Passes.td options and pipeline options of
cq4p-opt) or its argparse parser: a description for each, with its default
and range for those that take a number. The Python commands shared with
cq4p-run use cq4p-run's flag names.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cq4p.cli import main as cli
from cq4p.native import tools

SOURCE = Path(__file__).resolve().parents[2]
PYTHONPATH = str(SOURCE / "python")


def help_text(command):
    """The output of `command --help`, which -h prints too; both exit 0."""
    outputs = []
    for flag in ("--help", "-h"):
        result = subprocess.run([*map(str, command), flag], capture_output=True, text=True,
                                check=False, timeout=120,
                                env={"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin:/bin"})
        assert result.returncode == 0, (command, flag, result.stderr)
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1], command
    return outputs[0]


# --- cq4p-run: its own argument loop ---------------------------------------------

def cq4p_run_flags():
    """{flag: the branch of main()'s argument loop that reads it}."""
    source = (SOURCE / "tools" / "cq4p-run" / "cq4p-run.cpp").read_text()
    loop = source[source.index("int main("):]
    return set(re.findall(r'arg == "(-[-\w]*)"', loop)), loop


def described_flags(text):
    """{flag: its description} of cq4p-run --help's flag lines: two spaces,
    the flags (comma-separated), a value, then the text (on the next line
    when the flags are long)."""
    described, lines = {}, text.splitlines()
    pattern = re.compile(r'^  (-[-\w]+(?:, -[-\w]+)*)(?: (?:"[^"]*"|\S+))?(?:\s{2,}(\S.*))?$')
    for number, line in enumerate(lines):
        match = pattern.match(line)
        if not match:
            continue
        description, rest = match.group(2), lines[number + 1:]
        if description is None and rest:
            description, rest = rest[0].strip(), rest[1:]
        for following in rest:  # the wrapped rest of the text
            if not following.startswith(" " * 10):
                break
            description += " " + following.strip()
        for flag in match.group(1).split(", "):
            described[flag] = description
    return described


def test_cq4p_run_describes_every_flag_it_accepts():
    text = help_text([tools.find_tool("cq4p-run")])
    assert text.startswith("cq4p-run: runs a cq4p bundle with the model library")
    accepted, loop = cq4p_run_flags()
    assert {"--bundle", "--prompt", "--chat", "-n", "--seed", "--help", "-h"} <= accepted
    described = described_flags(text)
    assert set(described) == accepted
    for flag, description in described.items():
        assert description and len(description) > 12, (flag, description)
    # Every flag whose value is a number: its range and its default.
    numeric = set(re.findall(r'arg == "(-[-\w]*)"\)(?:(?!arg ==).)*?parse(?:Int|Float|Unsigned)',
                             loop, re.S))
    numeric |= {"-n"}  # `arg == "-n" || arg == "--max-new-tokens"` reads one number
    assert {"--threads", "--top-p", "--seed", "--max-new-tokens", "--rows"} <= numeric
    for flag in numeric:
        assert "(default" in described[flag], (flag, described[flag])
        assert re.search(r"\d to \d|\(0, 1\]|a finite number", described[flag]), flag


def test_cq4p_run_without_help_still_refuses_unknown_flags():
    result = subprocess.run([tools.find_tool("cq4p-run"), "--helpme"], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("cq4p-run: unknown argument '--helpme'\nusage: ")
    assert result.stderr.endswith("cq4p-run --help describes every flag\n")


# --- the LLVM command-line tools --------------------------------------------------

LLVM_OPTION = re.compile(r"^\s+(-{1,2}[\w-]+)(?:=<[^>]*>| <[^>]*>)?\s+- (.*)$")


def test_cq4p_compile_describes_its_options():
    text = help_text([tools.find_tool("cq4p-compile")])
    assert text.startswith("OVERVIEW: cq4p-compile: builds the kernel library of a model")
    assert "cq4p-compile bundle/model.mlir --target=host -o libmodel.so" in text
    source = (SOURCE / "tools" / "cq4p-compile" / "cq4p-compile.cpp").read_text()
    declared = re.findall(r'cl::opt<[^;]*?>\s*\w+\(\s*"([\w-]+)"', source)
    assert {"o", "target", "emit", "prefill-chunk", "host-cpu", "bundle"} <= set(declared)
    ours = text[text.index("cq4p-compile options:"):]
    described = {}
    for line in ours.splitlines():
        match = LLVM_OPTION.match(line)
        if match:
            described[match.group(1).lstrip("-")] = match.group(2)
    assert set(described) == set(declared)
    for name, description in described.items():
        assert len(description) > 20, name
        assert "default" in description or "required" in description, (name, description)


def pass_options():
    """{pass or pipeline name: [its option names]} of cq4p's Passes.td files
    and pipelines."""
    passes = {}
    for td in ("include/cq4p/Dialect/CQ4P/Transforms/Passes.td",
               "include/cq4p/Conversion/Passes.td"):
        text = (SOURCE / td).read_text()
        for block in re.split(r"^def ", text, flags=re.M)[1:]:
            name = re.match(r'\w+ : Pass<"([\w-]+)"', block)
            if name:
                passes[name.group(1)] = re.findall(r'Option<"\w+", "([\w-]+)"', block)
    pipelines = (SOURCE / "lib" / "Pipelines" / "Pipelines.cpp").read_text()
    header = (SOURCE / "include" / "cq4p" / "Pipelines" / "Pipelines.h").read_text()
    options = re.findall(r'\*this, "([\w-]+)"', header)
    for name in re.findall(r'PassPipelineRegistration<KernelPipelineOptions>\(\s*"([\w-]+)"',
                           pipelines):
        passes[name] = options
    return passes


def test_cq4p_opt_describes_cq4p_passes_and_their_options():
    text = help_text([tools.find_tool("cq4p-opt")])
    assert text.startswith("OVERVIEW: cq4p-opt: the cq4p optimizer driver")
    passes = pass_options()
    assert {"cq4p-lower-model", "convert-cq4p-to-neon", "cq4p-host-pipeline"} <= set(passes)
    lines = text.splitlines()
    for name, options in passes.items():
        (start,) = [i for i, line in enumerate(lines) if re.match(rf"^\s+--{name}\s+-\s+\S",
                                                                   line)]
        indent = len(lines[start]) - len(lines[start].lstrip())
        described = {}
        for line in lines[start + 1:]:
            if len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith("="):
                break
            match = LLVM_OPTION.match(line)
            if match:
                described[match.group(1).lstrip("-")] = match.group(2)
        assert set(described) == set(options), name
        for option, description in described.items():
            assert "default" in description, (name, option, description)


def test_cq4p_translate_describes_its_translation():
    text = help_text([tools.find_tool("cq4p-translate")])
    assert text.startswith("OVERVIEW: cq4p-translate: the cq4p translation driver")
    assert re.search(r"^\s+--cq4p-to-llvmir\s+- Translate the LLVM dialect \(with ArmNeon, "
                     r"ArmSME and cq4p_intr operations\) to LLVM IR$", text, re.M)


# --- python -m cq4p ------------------------------------------------------------------

def commands():
    (subparsers,) = [action for action in cli.parser()._actions
                     if isinstance(action, argparse._SubParsersAction)]
    return subparsers.choices


def test_every_python_command_describes_every_flag():
    assert {"chat", "run", "convert", "generate", "synthetic"} <= set(commands())
    for name, command in commands().items():
        assert command.description, name
        for action in command._actions:
            where = (name, action.dest)
            assert action.help and action.help != argparse.SUPPRESS, where
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            bounds = getattr(action.type, "bounds", None)
            if bounds is not None:
                assert cli.span(*bounds) in action.help, (where, action.help)
            if action.required and action.option_strings:
                assert "required" in action.help, where
            elif action.option_strings and action.default not in (None, False):
                assert "default" in action.help, (where, action.help)


@pytest.mark.parametrize("command", [None, *commands()])
def test_python_help_exits_0_and_lists_every_flag(command):
    arguments = [] if command is None else [command]
    text = help_text([sys.executable, "-m", "cq4p", *arguments])
    assert text.startswith(f"usage: python -m cq4p {command or ''}".rstrip())
    if command is not None:
        for action in commands()[command]._actions:
            for flag in action.option_strings:
                assert re.search(rf"(^|\s|,){re.escape(flag)}\b", text), (command, flag)


def test_python_commands_use_cq4p_runs_flag_names():
    accepted, _ = cq4p_run_flags()
    for name in ("chat", "run", "generate"):
        flags = {flag for action in commands()[name]._actions for flag in action.option_strings}
        own = {"-h", "--help", "--quiet", "-q"}
        assert flags - own <= accepted, (name, sorted(flags - own - accepted))
