"""The fast tier's list of slow cases (conftest.SLOW): every entry names a case
that exists, and pytest's `-m slow` selects exactly those cases, so a renamed
test cannot leave a stale entry behind nor a slow case slip out of the list's
reach unseen."""

import os
import subprocess
import sys
from pathlib import Path

import conftest

HERE = Path(__file__).resolve().parent


def collected(*args):
    """The file::name ids pytest collects from the files the list names."""
    files = sorted({entry.split("::")[0] for entry in conftest.SLOW})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         *args, *files], cwd=HERE, capture_output=True, text=True, env=dict(os.environ),
        timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return {Path(line.split("::")[0]).name + "::" + line.split("::", 1)[1]
            for line in result.stdout.splitlines() if "::" in line}


def test_every_slow_entry_names_a_collected_case():
    everything = collected()
    stale = sorted(conftest.SLOW - everything)
    assert not stale, f"conftest.SLOW names cases that do not exist: {stale}"


def test_the_slow_marker_selects_exactly_the_list():
    assert collected("-m", "slow") == set(conftest.SLOW)
    fast = collected("-m", "not slow")
    assert fast and not fast & conftest.SLOW
