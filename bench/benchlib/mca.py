"""llvm-mca's estimate of a loop body."""

import re

from . import commands, machine

ITERATIONS = 100


def parse(text, iterations=ITERATIONS):
    """(cycles per iteration, Block RThroughput) from llvm-mca's summary."""
    cycles = re.search(r"Total Cycles:\s+(\d+)", text)
    rthroughput = re.search(r"Block RThroughput:\s+([\d.]+)", text)
    if not cycles or not rthroughput:
        raise ValueError("llvm-mca printed no Total Cycles and Block RThroughput")
    return int(cycles.group(1)) / float(iterations), float(rthroughput.group(1))


def estimate(asm, cpu, path, triple="aarch64", who="bench"):
    """llvm-mca of `asm` (written to `path`) for `cpu`: see parse."""
    with open(path, "w") as f:
        f.write(asm)
    return parse(commands.run([machine.llvm_tool("llvm-mca"), "-mtriple=" + triple,
                               "-mcpu=" + cpu, "-iterations=%d" % ITERATIONS, path], who=who))
