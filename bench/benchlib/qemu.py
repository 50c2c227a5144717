"""Executed instructions from QEMU 11.1's execution log
(`qemu-aarch64 -d in_asm,exec,nochain`) and from bench/qemu_exec_count.cpp's
summary of one, attributed to a library's functions by address."""

import bisect
import collections
import re

from . import commands, machine

INSN = re.compile(r"^0x([0-9a-f]+):\s+[0-9a-f]{8}\s+(\S+)")


class LogError(RuntimeError):
    """The log does not hold what the count needs; the message says what."""


def library_symbols(path, who="bench"):
    """[(start, size, name)] of a library's functions (file offsets), from
    llvm-nm."""
    out = commands.run([machine.llvm_tool("llvm-nm"), "--defined-only", "-S",
                        "--numeric-sort", path], who=who)
    return parse_nm(out)


def parse_nm(text):
    symbols = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            symbols.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    return symbols


def log_events(lines):
    """The log as events, in order: ("translated", [(pc, mnemonic)]) for a
    translation block (TB) QEMU translated (`IN:` and its instructions), and
    ("executed", pc) for each execution of the TB starting at pc (`Trace`)."""
    block = None
    for line in lines:
        if line.startswith("Trace"):
            if block:
                yield "translated", block
            block = None
            yield "executed", int(line.split("[", 1)[1].split("/", 2)[1], 16)
            continue
        if line.startswith("IN:"):
            if block:
                yield "translated", block
            block = []
            continue
        if block is not None:
            m = INSN.match(line)
            if m:
                block.append((int(m.group(1), 16), m.group(2)))
            elif line.strip() == "" or line.startswith("---"):
                if block:
                    yield "translated", block
                block = None


def read_log(path):
    with open(path, errors="replace") as f:
        yield from log_events(f)


def marked(events, begin, end, name):
    """The executions strictly between the first execution of `begin` and
    the next of `end`, with the translations up to then: (event, value)
    pairs, "translated" ones before `begin` included; raises LogError when
    `end` never runs."""
    active = False
    for kind, value in events:
        if kind == "translated":
            yield kind, value
            continue
        if not active:
            active = value == begin
            continue
        if value == end:
            return
        yield kind, value
    if active:
        raise LogError("%s: the end marker never executed" % name)


def count_by_category(events, begin, end, ranges, loop_range, name="log"):
    """Instructions executed between the markers, by category:
    (Counter, entries Counter).

    ranges: {category: (lo, hi)} of kernel functions. Every instruction of
    an executed TB is attributed by its own address, so a TB that runs from
    a loop's preheader into the loop counts exactly. A call out of a kernel
    (a TB of it ending in bl/blr) attributes everything outside the kernels
    to "<category> callees" until the return address executes; everything
    else is "runtime+libc". "loop" counts the instructions of the "matmul"
    category inside loop_range (inclusive).
    """
    tbs = {}  # start pc -> (kernel-only counts, instructions, last pc, last mnemonic)
    counts = collections.Counter()
    entries = collections.Counter()
    stack = []  # (return address, category)
    items = sorted(ranges.items(), key=lambda kv: kv[1][0])

    def where(pc):
        for category, (lo, hi) in items:
            if lo <= pc < hi:
                return category
        return None

    for kind, value in marked(events, begin, end, name):
        if kind == "translated":
            own = collections.Counter()
            for pc, _ in value:
                kernel = where(pc)
                if kernel:
                    own[kernel] += 1
                    if kernel == "matmul" and loop_range and \
                            loop_range[0] <= pc <= loop_range[1]:
                        own["loop"] += 1
            tbs[value[0][0]] = (own, len(value), value[-1][0], value[-1][1])
            continue
        pc = value
        if pc not in tbs:
            raise LogError("%s: block 0x%x executed, never translated" % (name, pc))
        own, size, last_pc, last_mnem = tbs[pc]
        if stack and pc == stack[-1][0]:
            stack.pop()
        counts.update(own)
        rest = size - sum(v for k, v in own.items() if k != "loop")
        if rest:
            counts[stack[-1][1] + " callees" if stack else "runtime+libc"] += rest
        first = where(pc)
        if first and pc == ranges[first][0]:
            entries[first] += 1
        last = where(last_pc)
        if last and last_mnem in ("bl", "blr"):
            stack.append((last_pc + 4, last))
    return counts, entries


def count_by_address(events, begin, end, functions, call_targets, phase_pc, name="log"):
    """Instructions executed between the markers, by address:
    (pcs, outside, entries, before), Counters.

    functions: [(lo, hi, name)], the library's functions (absolute). An
    executed TB counts each of its instructions by its own address: pcs for
    those in a library function; the others (libc, PLT stubs, the runtime)
    count in outside[(caller, callee)] while a call made by a library
    function is pending (a TB of it ending in bl/blr, until the return
    address runs; callee: the call's target symbol, from call_targets), else
    in outside[None]. entries counts entries of each function; before
    counts, by address, what ran before phase_pc first did.
    """
    where = symbol_finder(functions)
    translations = []  # (library addresses, instructions outside them, last pc, last mnemonic)
    tbs = {}  # start pc -> index in translations (the latest translation)
    runs = collections.Counter()  # translation -> executions
    runs_before = collections.Counter()
    outside = collections.Counter()
    entries = collections.Counter()
    starts = {lo: fn for lo, _, fn in functions}
    stack = []  # (return address, (caller, callee))
    reached = False
    for kind, value in marked(events, begin, end, name):
        if kind == "translated":
            own = [pc for pc, _ in value if where(pc)]
            translations.append((own, len(value) - len(own), value[-1][0], value[-1][1]))
            tbs[value[0][0]] = len(translations) - 1
            continue
        pc = value
        if pc not in tbs:
            raise LogError("%s: block 0x%x executed, never translated" % (name, pc))
        if pc == phase_pc:
            reached = True
        index = tbs[pc]
        own, rest, last_pc, last_mnem = translations[index]
        if stack and pc == stack[-1][0]:
            stack.pop()
        runs[index] += 1
        if not reached:
            runs_before[index] += 1
        if rest:
            outside[stack[-1][1] if stack else None] += rest
        if pc in starts:
            entries[starts[pc]] += 1
        caller = where(last_pc)
        if caller and last_mnem in ("bl", "blr"):
            stack.append((last_pc + 4, (caller, call_targets.get(last_pc, "blr"))))
    pcs, before = collections.Counter(), collections.Counter()
    for index, n in runs.items():
        for pc in translations[index][0]:
            pcs[pc] += n
    for index, n in runs_before.items():
        for pc in translations[index][0]:
            before[pc] += n
    return pcs, outside, entries, before


def symbol_finder(functions, default=None):
    """pc -> the name of the function [(lo, hi, name)] holding it, else
    `default`."""
    functions = sorted(functions)
    los = [f[0] for f in functions]

    def where(pc):
        i = bisect.bisect_right(los, pc) - 1
        if i >= 0 and pc < functions[i][1]:
            return functions[i][2]
        return default
    return where


def phase_counts(lines, base, symbols, phases_expected=3, name="counts"):
    """Executed instructions by symbol (anything outside the library as
    "runtime"), per phase, from bench/qemu_exec_count.cpp's output (`tb ID
    PC...` per translation, `ID COUNT` in hex per executed block, `phase` at
    each execution of the driver's marker): the Counters of the phases
    between the first `phases_expected` marks."""
    symbol = symbol_finder([(base + start, base + start + size, fn)
                            for start, size, fn in symbols], "runtime")
    blocks, phases = {}, []
    for line in lines:
        fields = line.split()
        if fields[0] == "tb":
            blocks[fields[1]] = collections.Counter(symbol(int(pc, 16)) for pc in fields[2:])
        elif fields[0] == "phase":
            phases.append(collections.Counter())
        else:
            count = int(fields[1], 16)
            for fn, instructions in blocks[fields[0]].items():
                phases[-1][fn] += instructions * count
    if len(phases) < phases_expected:
        raise LogError("%s: expected %d marks, found %d" % (name, phases_expected, len(phases)))
    return phases[:phases_expected - 1]
