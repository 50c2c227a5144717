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


def listed(case):
    """Whether conftest.SLOW lists the case, by itself or by its file."""
    return case in conftest.SLOW or case.split("::")[0] in conftest.SLOW


def test_every_slow_entry_names_a_collected_case():
    everything = collected()
    files = {case.split("::")[0] for case in everything}
    stale = sorted(entry for entry in conftest.SLOW
                   if entry not in everything and entry not in files)
    assert not stale, f"conftest.SLOW names cases or files that do not exist: {stale}"


def test_the_slow_marker_selects_exactly_the_list():
    everything = collected()
    assert collected("-m", "slow") == {case for case in everything if listed(case)}
    fast = collected("-m", "not slow")
    assert fast and not any(listed(case) for case in fast)
