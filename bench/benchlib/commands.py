"""Running the commands a benchmark measures with, and the list of them a
results file shows."""

import os
import shlex
import subprocess
import sys

from . import machine


class Failed(RuntimeError):
    """A command exited with a non-zero status; the message holds its output."""


def run(cmd, who="bench", **kw):
    """The command's stdout; exits naming `who`, the command and its output
    when it fails."""
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, **kw)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        sys.exit("%s: failed (%d): %s" % (who, result.returncode,
                                          " ".join(shlex.quote(c) for c in cmd)))
    return result.stdout


class Recorder:
    """The distinct commands a run used, shown as the results file prints
    them: paths in the build or source tree relative to the repository,
    `replace` pairs (say, the QEMU binary as $CQ4P_QEMU) substituted."""

    def __init__(self, who, root=machine.ROOT, trees=(machine.BUILD, machine.ROOT),
                 replace=(), quote=True, show=None):
        self.who, self.root, self.trees = who, root, trees
        self.replace, self.quote = list(replace), quote
        self.commands = []
        if show:
            self.show = show

    def show(self, cmd):
        text = " ".join(shlex.quote(c) if self.quote else c for c in cmd)
        for old, new in self.replace:
            text = text.replace(old, new)
        for tree in self.trees:
            rel = os.path.relpath(tree, self.root)
            text = text.replace(tree + os.sep, "" if rel == "." else rel + os.sep)
        return text

    def __iter__(self):
        return iter(self.commands)

    def record(self, cmd):
        shown = cmd if isinstance(cmd, str) else self.show(cmd)
        if shown not in self.commands:
            self.commands.append(shown)
        return shown

    def run(self, cmd, record=True, **kw):
        if record:
            self.record(cmd)
        return run(cmd, who=self.who, **kw)
