"""Running a cq4p command as a hostile input would: bounded in time and in
memory (RLIMIT_AS, `ulimit -v`), with the outcome classified. Shared by the
model-layer hostile suite (test_hostile_model.py) and the fuzzers
(test_fuzz_model.py)."""

import hashlib
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass

# Every case ends within this: a FIFO read without O_NONBLOCK blocks forever.
TIMEOUT = 60
# The address space a command may map: above what the tools need for a small
# model (cq4p-compile ~0.3 GiB, the Python CLI with numpy ~0.5 GiB, thread
# stacks), far below what reading /dev/zero or 10^11 token ids would take.
MEMORY_BYTES = 4 << 30
# What a crash prints instead of a diagnostic.
CRASH_MARKERS = ("Traceback (most recent call last)", "PLEASE submit a bug report",
                 "Stack dump:", "LLVM ERROR", "Segmentation fault", "Assertion", "core dumped",
                 "AddressSanitizer")


def _limits(memory):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


@dataclass
class Outcome:
    command: list
    returncode: int  # negative: the signal that ended it; None: timed out
    stdout: str
    stderr: str

    @property
    def signal(self):
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    def describe(self):
        return (f"{' '.join(map(str, self.command))[:300]}\nexit {self.returncode}\n"
                f"stderr: {self.stderr[-2000:]}")


def run(command, timeout=TIMEOUT, memory=MEMORY_BYTES, cwd=None, env=None, stdin=None):
    """Runs `command` (a list) under the limits; the Outcome (returncode
    None when it outlived `timeout` and was killed)."""
    try:
        result = subprocess.run([str(part) for part in command], capture_output=True,
                                timeout=timeout, preexec_fn=_limits(memory), cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL if stdin is None else stdin,
                                check=False)
    except subprocess.TimeoutExpired as expired:
        return Outcome(command, None, (expired.stdout or b"").decode("utf-8", "replace"),
                       (expired.stderr or b"").decode("utf-8", "replace"))
    return Outcome(command, result.returncode, result.stdout.decode("utf-8", "replace"),
                   result.stderr.decode("utf-8", "replace"))


def cli(*arguments):
    """The command line of `python -m cq4p ARGUMENTS`."""
    return [sys.executable, "-m", "cq4p", *arguments]


def crashed(outcome):
    """Why the outcome is a crash (a signal, a hang, a crash dump), or None."""
    if outcome.returncode is None:
        return "timed out (a hang)"
    if outcome.signal is not None:
        return f"killed by signal {signal.Signals(outcome.signal).name}"
    for marker in CRASH_MARKERS:
        if marker in outcome.stderr:
            return f"printed {marker!r}"
    return None


def assert_refused(outcome, expected=None, code=None):
    """A clean refusal: a non-zero exit status that is no signal and no
    hang, no crash dump, a diagnostic (containing `expected` when given) and
    the exit status `code` when given."""
    problem = crashed(outcome)
    assert problem is None, f"{problem}: {outcome.describe()}"
    assert outcome.returncode != 0, f"accepted: {outcome.describe()}"
    if code is not None:
        assert outcome.returncode == code, outcome.describe()
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert lines, f"refused without a word: {outcome.describe()}"
    if expected is not None:
        assert expected in outcome.stderr, f"expected {expected!r}: {outcome.describe()}"


def assert_one_line(outcome):
    """The Python CLI's refusals: one error line, the last (progress lines
    and argparse's usage line may come before it)."""
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error: " in line]
    assert len(errors) == 1 and lines[-1] == errors[0], \
        f"expected one error line, last: {outcome.describe()}"


def snapshot(directory):
    """{relative path: (sha256 or None, mode, mtime_ns)} of everything under
    `directory`, links not followed."""
    state = {}
    for root, directories, files in os.walk(directory):
        for name in directories + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            digest = None
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
            state[os.path.relpath(path, directory)] = (digest, info.st_mode, info.st_mtime_ns)
    return state
