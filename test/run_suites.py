#!/usr/bin/env python3
"""Runs cq4p's test suites and prints one summary line.

Suites: lit (pass output, diagnostics), GoogleTest on the host, GoogleTest
cross-built for aarch64 and run under QEMU 11.1, pytest for python/, and the
packaging tests (test/packaging: pip, cmake --install, the example). Each
writes a JUnit XML report; the test cases in them are counted together and
the last line printed is `N passed, N failed`. The exit status is non-zero
when any test fails or any suite cannot run.

Two tiers. The fast tier (the default) runs every suite but the cases marked
slow: CTest's label `slow` (`ctest -LE slow`) and pytest's marker `slow`
(`-m "not slow"`, the list in python/tests/conftest.py): whole models under
QEMU, every family end to end, the bounded fuzzing runs. `--all` runs every case (CI does). The fast tier
counts the slow cases it left out and says so before the summary line, so
that nothing is dropped silently.
"""

import argparse
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-numpy and python3-pytest


def count_junit(path):
    """(passed, failed, skipped) over the test cases of a JUnit report."""
    passed = failed = skipped = 0
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        if "failure" in tags or "error" in tags or case.get("status") == "fail":
            failed += 1
        elif "skipped" in tags or case.get("status") in ("notrun", "disabled"):
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def slow_cases(command, env, cwd):
    """How many cases the fast tier leaves out: CTest's count of the tests
    labelled slow, or pytest's of the items marked slow."""
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    text = result.stdout
    ctest = re.search(r"^Total Tests: (\d+)", text, re.M)
    if ctest:
        return int(ctest.group(1))
    # pytest -q --collect-only -m slow: "3/120 tests collected (117 deselected)",
    # or "120 tests collected" when every item is slow, or none at all.
    collected = re.search(r"^(\d+)(?:/\d+)? tests? collected", text, re.M)
    if collected:
        return int(collected.group(1))
    if re.search(r"no tests (collected|ran)|deselected", text):
        return 0
    raise SystemExit(f"cannot count the slow cases: {' '.join(command)} printed\n"
                     f"{text}{result.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, required=True, help="host build directory")
    parser.add_argument("--suite", action="append",
                        help="run only this suite (repeatable): lit, host-gtest, aarch64-gtest, "
                             "pytest, packaging")
    parser.add_argument("--all", action="store_true",
                        help="run every case, the slow ones too (default: the fast tier)")
    args = parser.parse_args()

    build = args.build.resolve()
    results = build / "test-results"
    results.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for tool in ("cq4p-opt", "cq4p-compile", "cq4p-run"):
        env["CQ4P_" + tool[len("cq4p-"):].upper()] = str(build / "bin" / tool)
    env["PYTHONPATH"] = str(SOURCE / "python")
    env["CQ4P_RUNTIME_LIB"] = str(build / "lib" / "libcq4p_runtime.so")
    # Whole models on AArch64 (python/tests/test_model_aarch64.py): the
    # cross-built cq4p-run under QEMU 11.1.
    env["CQ4P_AARCH64_RUN"] = str(build / "aarch64" / "bin" / "cq4p-run")
    # test/packaging installs this build (and its aarch64 sub-build).
    env["CQ4P_BUILD"] = str(build)

    # Each suite: its command, its report, and in the fast tier the extra
    # arguments that leave the slow cases out and the command that counts them.
    pytest = [PYTHON, "-m", "pytest", "-p", "no:cacheprovider"]
    # Each GoogleTest case is a process of its own (one thread for most, and
    # under QEMU one emulated core), so CTest runs as many at once as there
    # are cores: the aarch64 suite's wall time about halves on two. Every
    # case writes only below a directory of its own (TempDir.h, mkdtemp).
    jobs = ["-j", str(max(1, len(os.sched_getaffinity(0))))]
    suites = [
        ("lit", [str(LLVM_BIN / "lit"), "-sv", str(build / "test"),
                 "--xunit-xml-output", str(results / "lit.xml")], results / "lit.xml",
         [], None),
        ("host-gtest", ["ctest", "--test-dir", str(build), "--output-on-failure", *jobs,
                        "--output-junit", str(results / "host-gtest.xml")],
         results / "host-gtest.xml",
         ["-LE", "slow"], ["ctest", "--test-dir", str(build), "-N", "-L", "slow"]),
        ("aarch64-gtest", ["ctest", "--test-dir", str(build / "aarch64"), "--output-on-failure",
                           *jobs,
                           "--output-junit", str(results / "aarch64-gtest.xml")],
         results / "aarch64-gtest.xml",
         ["-LE", "slow"], ["ctest", "--test-dir", str(build / "aarch64"), "-N", "-L", "slow"]),
        ("pytest", pytest + ["-q", str(SOURCE / "python" / "tests"),
                             "--junitxml", str(results / "pytest.xml")], results / "pytest.xml",
         ["-m", "not slow"],
         pytest + ["-q", "--collect-only", "-m", "slow", str(SOURCE / "python" / "tests")]),
        ("packaging", pytest + ["-q", str(SOURCE / "test" / "packaging"),
                                "--junitxml", str(results / "packaging.xml")],
         results / "packaging.xml",
         ["-m", "not slow"],
         pytest + ["-q", "--collect-only", "-m", "slow", str(SOURCE / "test" / "packaging")]),
    ]
    if args.suite:
        unknown = set(args.suite) - {suite[0] for suite in suites}
        if unknown:
            parser.error(f"unknown suite(s): {', '.join(sorted(unknown))}")
        suites = [s for s in suites if s[0] in args.suite]

    total_passed = total_failed = total_left = 0
    lines = []
    for name, command, report, fast_args, count_slow in suites:
        if report.exists():
            report.unlink()
        if not args.all and fast_args:
            command = command + fast_args
            left = slow_cases(count_slow, env, build)
            total_left += left
        print(f"==> {name}: {' '.join(command)}", flush=True)
        code = subprocess.run(command, env=env, cwd=build).returncode
        if not report.exists():
            # The runner died before reporting: count the suite as one failure.
            lines.append(f"{name}: no report (exit status {code}), counted as 1 failure")
            total_failed += 1
            continue
        passed, failed, skipped = count_junit(report)
        if code != 0 and failed == 0:
            lines.append(f"{name}: runner exited with {code} but reported no failure; "
                         "counted as 1 failure")
            failed = 1
        if passed + failed == 0:
            lines.append(f"{name}: ran no test, counted as 1 failure")
            failed = 1
        lines.append(f"{name}: {passed} passed, {failed} failed, {skipped} skipped")
        total_passed += passed
        total_failed += failed

    print()
    for line in lines:
        print(line)
    if not args.all:
        print(f"fast tier: {total_left} slow cases left to `scripts/test --all`")
    print(f"{total_passed} passed, {total_failed} failed")
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
