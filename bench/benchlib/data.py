"""A results file's data (JSON beside its .md) and the issue thresholds a
results file checks (bench/targets.json)."""

import json
import os

from . import machine

TARGETS = os.path.join(machine.BENCH, "targets.json")


def path_for(results):
    """The data file of a results file: bench/x.md -> bench/x.json."""
    return os.path.splitext(results)[0] + ".json"


def load(path, default=None):
    """The data at `path`; `default` (when given) if there is none."""
    if default is not None and not os.path.exists(path):
        return default
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as error:
        raise SystemExit("bench: no data to render from (%s): measure first" % error)
    except ValueError as error:
        raise SystemExit("bench: %s is not JSON: %s" % (path, error))


def save(path, data, sort_keys=True):
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=sort_keys)
        f.write("\n")


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


class Targets:
    """One results file's thresholds: targets.json's `section` (the results
    file's name), its "targets" each {"limit": number, "at_most": true (the
    default) or false, "what": text}, and its "references" (measurements the
    file compares with, say KERNELS.md's hand-written kernels)."""

    def __init__(self, section, path=TARGETS):
        targets = load(path)
        if section not in targets:
            raise SystemExit("bench: %s has no targets for %s (it has: %s)" % (
                path, section, ", ".join(sorted(targets))))
        self.section = section
        self.entries = targets[section]["targets"]
        self.references = targets[section].get("references", {})

    def __getitem__(self, name):
        if name not in self.entries:
            raise KeyError("%s: no target %s in bench/targets.json (it has: %s)" % (
                self.section, name, ", ".join(sorted(self.entries))))
        return self.entries[name]

    def limit(self, name):
        return self[name]["limit"]

    def met(self, name, value):
        """Whether `value` meets the target: at most (default) or at least
        its limit."""
        entry = self[name]
        if entry.get("at_most", True):
            return value <= entry["limit"]
        return value >= entry["limit"]
