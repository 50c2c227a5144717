"""Where the package finds the tools and the runtime library (cq4p.native.locate):
the order of the places it looks in, and the exact message when a part is
missing."""

import os
import sys
import sysconfig

import pytest

from cq4p.native import locate
from cq4p.native import runtime as native
from cq4p.native import tools

VARIABLES = ("CQ4P_OPT", "CQ4P_COMPILE", "CQ4P_RUN", "CQ4P_RUNTIME_LIB", "CQ4P_PREFIX")


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """No variable set, an installed package (not the checkout's), sys.prefix
    and PATH empty directories of tmp_path; returns tmp_path."""
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    (tmp_path / "site").mkdir()
    (tmp_path / "python").mkdir()
    (tmp_path / "empty").mkdir()
    monkeypatch.setattr(locate, "_CHECKOUT", tmp_path / "site")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    return tmp_path


def executable(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def library(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")
    return str(path)


def test_tool_variables_follow_the_tool_names():
    assert [locate.tool_variable(n) for n in ("cq4p-opt", "cq4p-compile", "cq4p-run")] == \
        ["CQ4P_OPT", "CQ4P_COMPILE", "CQ4P_RUN"]


def test_nothing_found_names_every_place_looked_in(bare):
    python = bare / "python"
    with pytest.raises(locate.NotFoundError) as caught:
        locate.tool("cq4p-compile")
    assert str(caught.value) == (
        f"cq4p-compile not found: $CQ4P_COMPILE and $CQ4P_PREFIX are unset, and it is not in "
        f"{python}/bin or on PATH; build it (scripts/build) or install cq4p (cmake --install "
        f"<build> --prefix P) and set CQ4P_PREFIX=P")
    with pytest.raises(locate.NotFoundError) as caught:
        locate.runtime_library()
    multiarch = sysconfig.get_config_var("MULTIARCH")
    assert str(caught.value) == (
        f"the cq4p runtime library ({locate.RUNTIME_NAME}) not found: $CQ4P_RUNTIME_LIB and "
        f"$CQ4P_PREFIX are unset, and it is not in {python}/lib, {python}/lib64"
        f"{f', {python}/lib/{multiarch}' if multiarch else ''}; build it (scripts/build) or install cq4p (cmake --install "
        f"<build> --prefix P) and set CQ4P_PREFIX=P")


def test_the_callers_raise_their_own_errors_with_the_message(bare):
    with pytest.raises(tools.ToolError, match=r"^cq4p-opt not found: \$CQ4P_OPT and"):
        tools.find_tool("cq4p-opt")
    with pytest.raises(native.LibraryNotFoundError,
                       match=r"^the cq4p runtime library \(libcq4p_runtime"):
        native.library_path()


def test_a_set_variable_is_the_answer(bare, monkeypatch):
    chosen = executable(bare / "elsewhere" / "my-compile")
    executable(bare / "python" / "bin" / "cq4p-compile")
    monkeypatch.setenv("CQ4P_COMPILE", chosen)
    assert locate.tool("cq4p-compile") == chosen
    missing = str(bare / "absent")
    monkeypatch.setenv("CQ4P_COMPILE", missing)
    with pytest.raises(locate.NotFoundError) as caught:
        locate.tool("cq4p-compile")
    assert str(caught.value) == f"cq4p-compile not found: $CQ4P_COMPILE is {missing}, " \
                                "which is not a file"
    monkeypatch.setenv("CQ4P_RUNTIME_LIB", missing)
    with pytest.raises(locate.NotFoundError) as caught:
        locate.runtime_library()
    assert str(caught.value) == (f"the cq4p runtime library ({locate.RUNTIME_NAME}) not found: "
                                 f"$CQ4P_RUNTIME_LIB is {missing}, which is not a file")


def test_the_prefix_variable_is_searched_alone(bare, monkeypatch):
    prefix = bare / "install"
    executable(bare / "python" / "bin" / "cq4p-run")  # found only without CQ4P_PREFIX
    monkeypatch.setenv("CQ4P_PREFIX", str(prefix))
    with pytest.raises(locate.NotFoundError) as caught:
        locate.tool("cq4p-run")
    assert str(caught.value) == (
        f"cq4p-run not found: $CQ4P_PREFIX is {prefix}, which has no {prefix}/bin/cq4p-run; "
        f"install cq4p there (cmake --install <build> --prefix {prefix}) or unset it")
    tool = executable(prefix / "bin" / "cq4p-run")
    assert locate.tool("cq4p-run") == tool
    lib = library(prefix / "lib64" / locate.RUNTIME_NAME)
    assert locate.runtime_library() == lib
    monkeypatch.delenv("CQ4P_PREFIX")
    assert locate.tool("cq4p-run") == str(bare / "python" / "bin" / "cq4p-run")


def test_order_checkout_build_then_python_prefix_then_path(bare, monkeypatch):
    # The package in a checkout: the checkout's build/ comes first.
    checkout = bare / "checkout"
    (checkout / "runtime" / "include" / "cq4p").mkdir(parents=True)
    (checkout / "runtime" / "include" / "cq4p" / "format.h").write_text("")
    monkeypatch.setattr(locate, "_CHECKOUT", checkout)
    on_path = executable(bare / "empty" / "cq4p-opt")
    assert locate.tool("cq4p-opt") == on_path
    in_prefix = executable(bare / "python" / "bin" / "cq4p-opt")
    assert locate.tool("cq4p-opt") == in_prefix
    in_build = executable(checkout / "build" / "bin" / "cq4p-opt")
    assert locate.tool("cq4p-opt") == in_build
    # A file that is not executable is not a tool.
    os.chmod(in_build, 0o644)
    assert locate.tool("cq4p-opt") == in_prefix


def test_runtime_library_beside_a_cq4p_run_on_path(bare, monkeypatch):
    tree = bare / "opt" / "cq4p"
    monkeypatch.setenv("PATH", str(tree / "bin"))
    executable(tree / "bin" / "cq4p-run")
    with pytest.raises(locate.NotFoundError, match=f"the lib/ beside {tree}/bin/cq4p-run;"):
        locate.runtime_library()
    lib = library(tree / "lib" / locate.RUNTIME_NAME)
    assert locate.runtime_library() == lib


def test_numpy_message_is_one_line_naming_the_fix():
    message = locate.numpy_missing_message("/opt/py/bin/python3")
    assert message == ("cq4p: error: numpy is not installed for /opt/py/bin/python3: install "
                       "it (/opt/py/bin/python3 -m pip install numpy), or use a Python that has "
                       "it (Debian: apt install python3-numpy, then /usr/bin/python3 -m cq4p)")
