"""Drives cq4p's command-line tools (no MLIR Python bindings are packaged)."""

import subprocess

from cq4p.native import locate


class ToolError(RuntimeError):
    """A tool refused its input; the message is the tool's own diagnostic."""


def find_tool(name):
    """The path of a cq4p tool: $CQ4P_<NAME>, $CQ4P_PREFIX, the source tree's
    build, this Python's prefix, then PATH (cq4p.native.locate)."""
    try:
        return locate.tool(name)
    except locate.NotFoundError as error:
        raise ToolError(str(error)) from None


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
