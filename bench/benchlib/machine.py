"""The tree's paths and tools, and the facts of the machine a result was
measured on (recorded with the result, never a machine path)."""

import os
import platform

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
LLVM = os.environ.get("CQ4P_LLVM", "/usr/lib/llvm-22")
BUILD = os.environ.get("CQ4P_BUILD", os.path.join(ROOT, "build"))
PYTHON = "/usr/bin/python3"
TOOLS = os.environ.get(
    "CQ4P_TOOLS",
    os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cq4p"))
QEMU = os.environ.get("CQ4P_QEMU", os.path.join(TOOLS, "qemu/usr/bin/qemu-aarch64"))
SYSROOT = "/usr/aarch64-linux-gnu"
# QEMU's -cpu for each AArch64 target (SME2 at a 512-bit streaming vector
# length).
QEMU_CPU = {"aarch64-neon": "max", "aarch64-sme2": "max,sme-default-vector-length=64"}


def llvm_tool(name):
    return os.path.join(LLVM, "bin", name)


def cpu_name(default="unknown CPU"):
    """The processor's model name from /proc/cpuinfo, else `default`."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


def load():
    """The 1-minute load average."""
    return os.getloadavg()[0]


def facts():
    """The machine a measurement ran on, as data."""
    return {"cpu": cpu_name(platform.processor() or "unknown CPU"),
            "cpus": os.cpu_count(), "arch": platform.machine(), "load": load()}
