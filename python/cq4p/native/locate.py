"""Where the package finds cq4p's native parts, and what it needs to run.

The package itself is pure Python over numpy. The tools (cq4p-opt,
cq4p-compile, cq4p-run) and the runtime's shared library come from a CMake
build tree or an install prefix (`cmake --install <build> --prefix P`), and
each is looked for in this order:

1. its own variable, naming the file: $CQ4P_OPT, $CQ4P_COMPILE, $CQ4P_RUN,
   $CQ4P_RUNTIME_LIB;
2. $CQ4P_PREFIX: an install prefix or a build tree (both hold bin/ and lib/);
3. the source tree's build/, when the package runs from its checkout;
4. this Python's prefix (sys.prefix): `cmake --install <build> --prefix
   "$VIRTUAL_ENV"` puts them beside the venv's `cq4p` command;
5. tools: PATH; the runtime library: the lib/ beside a cq4p-run on PATH.

A variable that is set is the answer: when it names nothing usable the
lookup fails with its name and value instead of finding something else.
Nothing here imports numpy, so that a Python without it can be told so.
"""

import importlib
import os
import shutil
import sys
import sysconfig
from pathlib import Path

PREFIX_VARIABLE = "CQ4P_PREFIX"
RUNTIME_VARIABLE = "CQ4P_RUNTIME_LIB"
RUNTIME_NAME = "libcq4p_runtime.dylib" if sys.platform == "darwin" else "libcq4p_runtime.so"

# python/cq4p/native/locate.py -> the repository, when the package runs from it.
_CHECKOUT = Path(__file__).resolve().parents[3]
_FIX = ("build it (scripts/build) or install cq4p (cmake --install <build> --prefix P) "
        "and set CQ4P_PREFIX=P")


class NotFoundError(RuntimeError):
    """A native part is missing; the message lists every place looked at."""


def tool_variable(name):
    """cq4p-opt -> CQ4P_OPT, cq4p-compile -> CQ4P_COMPILE."""
    return "CQ4P_" + name[len("cq4p-"):].upper().replace("-", "_")


def _installed_prefixes():
    """The prefixes searched when no variable is set: the checkout's build/
    (when this package is the checkout's python/cq4p), then sys.prefix."""
    prefixes = []
    if (_CHECKOUT / "runtime" / "include" / "cq4p" / "format.h").is_file():
        prefixes.append(_CHECKOUT / "build")
    prefixes.append(Path(sys.prefix))
    return prefixes


def _library_dirs(prefix):
    """GNUInstallDirs' choices: lib, lib64, or lib/<multiarch> under /usr."""
    dirs = [prefix / "lib", prefix / "lib64"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.append(prefix / "lib" / multiarch)
    return dirs


# A path longer than this names no file: what a message echoes of one.
PATH_MAX = 4096
ECHO_CHARACTERS = 64


def excerpt(text, limit=ECHO_CHARACTERS):
    """What a message echoes of a value the user gave (an environment
    variable, a flag): its first `limit` characters, then "... (N
    characters)" when it was longer, so that an error stays one short
    line."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _find(what, variable, candidates_in, usable):
    """The variable's file; else the first usable of candidates_in(prefix)
    under $CQ4P_PREFIX alone, or under each installed prefix; else None and
    the directories looked in."""
    value = os.environ.get(variable)
    if value:
        if not os.path.isfile(value):
            raise NotFoundError(f"{what} not found: ${variable} is "
                                f"{excerpt(value, PATH_MAX)}, which is not a file")
        return value, []
    prefix = os.environ.get(PREFIX_VARIABLE)
    if prefix:
        candidates = candidates_in(Path(prefix))
        for candidate in candidates:
            if usable(candidate):
                return str(candidate), []
        shown = excerpt(prefix, PATH_MAX)
        wanted = " or ".join(excerpt(str(c), PATH_MAX) for c in candidates)
        raise NotFoundError(f"{what} not found: ${PREFIX_VARIABLE} is {shown}, which has no "
                            f"{wanted}; install cq4p there (cmake --install <build> --prefix "
                            f"{shown}) or unset it")
    looked = []
    for prefix in _installed_prefixes():
        for candidate in candidates_in(prefix):
            if usable(candidate):
                return str(candidate), []
            looked.append(str(candidate.parent))
    return None, looked


def _executable(path):
    return path.is_file() and os.access(path, os.X_OK)


def tool(name):
    """The path of the cq4p tool `name` (e.g. "cq4p-compile")."""
    variable = tool_variable(name)
    found, looked = _find(name, variable, lambda prefix: [prefix / "bin" / name], _executable)
    found = found or shutil.which(name)
    if found:
        return found
    raise NotFoundError(f"{name} not found: ${variable} and ${PREFIX_VARIABLE} are unset, and "
                        f"it is not in {', '.join(looked)} or on PATH; {_FIX}")


def runtime_library():
    """The path of the runtime's shared library (the C API, cq4p.h)."""
    what = f"the cq4p runtime library ({RUNTIME_NAME})"
    found, looked = _find(what, RUNTIME_VARIABLE,
                          lambda prefix: [d / RUNTIME_NAME for d in _library_dirs(prefix)],
                          Path.is_file)
    if found:
        return found
    runner = shutil.which("cq4p-run")
    if runner:
        for directory in _library_dirs(Path(runner).resolve().parent.parent):
            if (directory / RUNTIME_NAME).is_file():
                return str(directory / RUNTIME_NAME)
        looked.append(f"the lib/ beside {runner}")
    raise NotFoundError(f"{what} not found: ${RUNTIME_VARIABLE} and ${PREFIX_VARIABLE} are "
                        f"unset, and it is not in {', '.join(looked)}; {_FIX}")


def numpy_missing_message(executable=None):
    """The one line a Python without numpy prints."""
    executable = executable or sys.executable or "python3"
    return (f"cq4p: error: numpy is not installed for {executable}: install it "
            f"({executable} -m pip install numpy), or use a Python that has it "
            "(Debian: apt install python3-numpy, then /usr/bin/python3 -m cq4p)")


def require_numpy():
    """Exits with numpy_missing_message() when numpy cannot be imported."""
    try:
        importlib.import_module("numpy")
    except ImportError:
        sys.exit(numpy_missing_message())
