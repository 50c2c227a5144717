"""What the packaging tests share: the build under test, an environment
without the source tree's variables, and running commands from outside the
repository.

The build is $CQ4P_BUILD (test/run_suites.py sets it; default build/), with
its aarch64 sub-build in <build>/aarch64 and QEMU 11.1 at $CQ4P_QEMU.
"""

import os
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("CQ4P_BUILD") or SOURCE / "build").resolve()
QEMU = os.environ.get("CQ4P_QEMU") or str(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "cq4p" / "qemu" / "usr" / "bin" / "qemu-aarch64")
QEMU_ARGS = ["-L", "/usr/aarch64-linux-gnu", "-cpu", "max"]
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
SYSTEM_PYTHON = "/usr/bin/python3"


def pytest_configure(config):
    # The full tier's cases (test/run_suites.py): `scripts/test` leaves them
    # out, `scripts/test --all` runs them.
    config.addinivalue_line(
        "markers", "slow: a case of the full tier only (scripts/test --all), e.g. whole "
        "models under QEMU, every family end to end, the fuzzers")



def clean_env(**extra):
    """The environment a new user has: no PYTHONPATH, no CQ4P_* variables,
    the system's PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CQ4P_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.update(extra)
    return env


def run(command, cwd, env=None, check=True):
    """Runs a command (str items) and returns the CompletedProcess; a failure
    shows the command and its output."""
    command = [str(c) for c in command]
    result = subprocess.run(command, cwd=cwd, env=env or clean_env(), capture_output=True,
                            text=True, check=False)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited with {result.returncode}\n"
                    f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def ids_line(output):
    """The "ids: ..." line of cq4p-run, cq4p generate or cq4p-generate."""
    lines = [line for line in output.splitlines() if line.startswith("ids:")]
    assert len(lines) == 1, output
    return lines[0].split()[1:]


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    """A directory outside the repository to run from."""
    return tmp_path_factory.mktemp("packaging")
