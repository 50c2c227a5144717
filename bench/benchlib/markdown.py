"""Markdown pipe tables: rendered from rows, and read back from a results
file (the charts and the data of older results files are read this way)."""

import re

SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def row(cells):
    return "| " + " | ".join(str(c) for c in cells) + " |"


def separator(align):
    """align: one of "l" (---) or "r" (---:) per column."""
    return "|" + "".join("---:|" if a == "r" else "---|" for a in align)


def table(header, align, rows):
    """The lines of a pipe table."""
    if len(align) != len(header):
        raise ValueError("%d columns but %d alignments" % (len(header), len(align)))
    for cells in rows:
        if len(cells) != len(header):
            raise ValueError("a row of %d cells in a table of %d columns: %s" % (
                len(cells), len(header), row(cells)))
    return [row(header), separator(align)] + [row(cells) for cells in rows]


def cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(text):
    """[(heading, [header cells], [[cells]])] of every pipe table, with the
    nearest heading above it."""
    found, heading, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|") and i + 1 < len(lines) and SEPARATOR.match(lines[i + 1].strip()):
            header = cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(cells(lines[i].strip()))
                i += 1
            found.append((heading, header, rows))
            continue
        i += 1
    return found


def blocks(text):
    """The text as data: [{"text": lines} or {"table": {"header", "align",
    "rows"}}], tables parsed into cells, everything else kept line for line;
    render(blocks(text)) == text for tables written as `table` writes them."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and SEPARATOR.match(lines[i + 1]) and \
                lines[i + 1] == separator(alignments(lines[i + 1])) and \
                line == row(cells(line)) and len(cells(line)) == len(alignments(lines[i + 1])):
            header, align, rows = cells(line), alignments(lines[i + 1]), []
            i += 2
            while i < len(lines) and lines[i].startswith("|") and \
                    lines[i] == row(cells(lines[i])) and len(cells(lines[i])) == len(header):
                rows.append(cells(lines[i]))
                i += 1
            out.append({"table": {"header": header, "align": align, "rows": rows}})
            continue
        if out and "text" in out[-1]:
            out[-1]["text"].append(line)
        else:
            out.append({"text": [line]})
        i += 1
    return out


def alignments(line):
    return "".join("r" if c.endswith(":") else "l" for c in cells(line))


def render(parts):
    """The text of blocks(): the inverse of blocks."""
    lines = []
    for part in parts:
        if "table" in part:
            t = part["table"]
            lines += table(t["header"], t["align"], t["rows"])
        else:
            lines += part["text"]
    return "\n".join(lines)
