"""llvm-objdump's disassembly as instructions, and the loops in it (spans
from a backward branch's target to the branch)."""

import collections
import re

from . import commands, machine

Insn = collections.namedtuple("Insn", "addr mnem ops")
BRANCHES = re.compile(r"^(b|b\..+|cbn?z|tbn?z)$")
LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
FUNC = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")


def parse_objdump(text):
    """{function: [Insn]} from `llvm-objdump -d --no-show-raw-insn` output."""
    functions, current = {}, None
    for line in text.splitlines():
        m = FUNC.match(line)
        if m:
            current = functions.setdefault(m.group(2), [])
            continue
        m = LINE.match(line)
        if m and current is not None:
            ops = m.group(3).split("//")[0].strip()
            current.append(Insn(int(m.group(1), 16), m.group(2), ops))
    return functions


def disassemble(path, mattr=None, runner=None):
    """{function: [Insn]} of an object or library (with --mattr=MATTR if
    given); `runner` (a commands.Recorder's run) records the command."""
    cmd = [machine.llvm_tool("llvm-objdump"), "-d", "--no-show-raw-insn"]
    if mattr:
        cmd.append("--mattr=" + mattr)
    return parse_objdump((runner or commands.run)(cmd + [path]))


def branch_target(insn):
    """The address a direct branch goes to, else None."""
    if not BRANCHES.match(insn.mnem):
        return None
    m = re.search(r"0x([0-9a-f]+)", insn.ops)
    return int(m.group(1), 16) if m else None


def backward_spans(insns):
    """Every loop of a function, [Insn] from a backward branch's target (in
    the function) to the branch, in the order of the branches."""
    for i, insn in enumerate(insns):
        target = branch_target(insn)
        if target is None or target > insn.addr or target < insns[0].addr:
            continue
        yield [x for x in insns[:i + 1] if x.addr >= target]


def innermost_loop(insns, wanted):
    """The smallest loop whose body satisfies wanted(body), else None."""
    best = None
    for body in backward_spans(insns):
        if wanted(body) and (best is None or len(body) < len(best)):
            best = body
    return best


def enclosing_loop(insns, inner):
    """The smallest loop that strictly contains `inner`, else None."""
    best = None
    for body in backward_spans(insns):
        if body[0].addr <= inner[0].addr and body[-1].addr >= inner[-1].addr and \
                (body[0].addr, body[-1].addr) != (inner[0].addr, inner[-1].addr):
            if best is None or len(body) < len(best):
                best = body
    return best
