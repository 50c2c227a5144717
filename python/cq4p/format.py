"""The CQ4 format's constants, read from their one definition.

runtime/include/cq4p/format.h is the single source of the format's numbers;
this module parses its `#define NAME value` lines and its enumerators
rather than restating them (`load(API_HEADER)` does the same for the C API's
enumerations).
"""

import re
from pathlib import Path

# The package's include/: in the source tree a link to runtime/include/cq4p,
# in an installed package a copy of its C headers (pyproject.toml).
_INCLUDE = Path(__file__).resolve().parent / "include"
HEADER = _INCLUDE / "format.h"
# The runtime's C API: its enumerations (status codes, layouts, regions).
API_HEADER = _INCLUDE / "cq4p.h"

_DEFINE = re.compile(r"^#define\s+(CQ4P_[A-Z0-9_]+)\s+(.+?)\s*(?:/\*.*)?$")
_ENUMERATOR = re.compile(r"^\s*(CQ4P_[A-Z0-9_]+)\s*=\s*(\d+)")
_SHIFT = re.compile(r"^\(1u\s*<<\s*(\d+)\)$")
_NUMBER = re.compile(r"^(0x[0-9a-fA-F]+|\d+)u?$")


def _parse(text):
    constants = {}
    for line in text.splitlines():
        match = _DEFINE.match(line)
        if match:
            name, value = match.groups()
            if _SHIFT.match(value):
                constants[name] = 1 << int(_SHIFT.match(value).group(1))
            elif _NUMBER.match(value):
                constants[name] = int(_NUMBER.match(value).group(1), 0)
            continue
        match = _ENUMERATOR.match(line)
        if match:
            constants[match.group(1)] = int(match.group(2))
    return constants


def load(header=HEADER):
    """All numeric constants of the header, by their C names."""
    return _parse(Path(header).read_text())


globals().update(load())
