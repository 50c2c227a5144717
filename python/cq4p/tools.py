"""Drives cq4p's command-line tools (no MLIR Python bindings are packaged)."""

import os
import shutil
import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent.parent


class ToolError(RuntimeError):
    """A tool refused its input; the message is the tool's own diagnostic."""


def find_tool(name):
    """The path of a cq4p tool: $CQ4P_<NAME>, the source tree's build/bin,
    then PATH."""
    variable = "CQ4P_" + name.upper().replace("CQ4P-", "").replace("-", "_")
    candidates = [os.environ.get(variable), str(_ROOT / "build" / "bin" / name), shutil.which(name)]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ToolError(f"{name} not found: set {variable} or build it with scripts/build")


def run_opt(ir, *options):
    """Runs cq4p-opt on IR text with the given options; returns its output.

    Raises ToolError with cq4p-opt's diagnostics when the IR does not verify
    or a pass fails.
    """
    result = subprocess.run([find_tool("cq4p-opt"), "-", *options], input=ir,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ToolError(result.stderr.strip() or f"cq4p-opt exited with {result.returncode}")
    return result.stdout
