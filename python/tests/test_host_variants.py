"""One x86-64 host library, every level: cq4p-compile --target=host without
--host-cpu compiles the model for x86-64-v3, x86-64-v3+avxvnni and
x86-64-v4+avx512vnni into one library, and the runtime runs the widest this
CPU has (CQ4P_HOST_LEVEL forces another). Every level's logits are the same
bits. Also: model libraries name the system libraries they call into
(DT_NEEDED), and the sme2 backend refuses a library of other code.

Needs the build tree's cq4p-compile, cq4p-run, cq4p-dlopen-model and the
runtime library (as test_model_e2e.py).
"""

import os
import platform
import re
import struct
import subprocess

import numpy as np
import pytest

from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

LEVELS = ["x86-64-v3", "x86-64-v3+avxvnni", "x86-64-v4+avx512vnni"]
CHUNK = 8

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="x86-64 host libraries")


def cpu_flags():
    """The flags /proc/cpuinfo lists for the first CPU: the oracle of which
    level this machine runs, independent of the runtime's detection."""
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def runs(level, flags):
    """Whether a CPU with `flags` runs `level` (every machine the suite runs
    on has x86-64-v3)."""
    v4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= flags
    return {"x86-64-v3": True, "x86-64-v3+avxvnni": "avx_vnni" in flags,
            "x86-64-v4+avx512vnni": v4 and "avx512_vnni" in flags}[level]


def widest_level(flags):
    return [level for level in LEVELS if runs(level, flags)][-1]


def compile_model(bundle, library, *options):
    result = subprocess.run([tools.find_tool("cq4p-compile"), str(bundle / "model.mlir"),
                             "--target=host", "--prefill-chunk", str(CHUNK), *options,
                             "-o", str(library)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return str(library)


@pytest.fixture(scope="module")
def model(synthetic_model, tmp_path_factory):
    """(bundle, default library, library pinned to x86-64-v3, config)."""
    _, bundle, config = synthetic_model("llama")
    directory = tmp_path_factory.mktemp("variants")
    return (bundle, compile_model(bundle, directory / "libmodel.so"),
            compile_model(bundle, directory / "libmodel-v3.so", "--host-cpu=x86-64-v3"), config)


def run_steps(bundle, library, prompt):
    """The logits of a chunked prefill then 4 greedy decode steps, and the
    (variant, count) the model reports."""
    with native.NativeModel(str(bundle), library, threads=2) as opened:
        steps = [opened.prefill(prompt)]
        for _ in range(4):
            steps.append(opened.decode(int(np.argmax(steps[-1]))))
        return np.stack(steps), opened.kernel_variant()


@pytest.fixture
def host_level(monkeypatch):
    def force(level):
        if level is None:
            monkeypatch.delenv("CQ4P_HOST_LEVEL", raising=False)
        else:
            monkeypatch.setenv("CQ4P_HOST_LEVEL", level)
    return force


def test_every_variant_gives_the_same_logits_and_the_widest_runs(model, host_level):
    bundle, library, pinned, config = model
    prompt = synthetic.prompt(config, 2 * CHUNK + 3, seed=2)
    flags = cpu_flags()
    widest = widest_level(flags)
    host_level(None)
    reference, chosen = run_steps(bundle, pinned, prompt)
    assert chosen == ("x86-64-v3", 1)
    automatic, chosen = run_steps(bundle, library, prompt)
    assert chosen == (widest, 3)
    assert np.array_equal(automatic.view(np.uint32), reference.view(np.uint32))
    ran = []
    for level in LEVELS:
        host_level(level)
        if not runs(level, flags):
            with pytest.raises(native.NativeError, match=re.escape(
                    f"asks for the {level} variant, which needs ") + ".*: this CPU lacks it"):
                run_steps(bundle, library, prompt)
            continue
        logits, chosen = run_steps(bundle, library, prompt)
        assert chosen == (level, 3)
        assert np.array_equal(logits.view(np.uint32), reference.view(np.uint32)), level
        ran.append(level)
    print(f"variants run bit for bit: {', '.join(ran)}; automatic: {widest}")
    assert "x86-64-v3" in ran and widest in ran


def test_a_level_the_library_lacks_is_refused(model, host_level):
    bundle, library, pinned, _ = model
    host_level("x86-64-v2")
    with pytest.raises(native.NativeError, match="CQ4P_HOST_LEVEL asks for the x86-64-v2 "
                       "variant; the library has 3: x86-64-v3, x86-64-v3\\+avxvnni, "
                       "x86-64-v4\\+avx512vnni"):
        native.NativeModel(str(bundle), library)
    host_level("x86-64-v3+avxvnni")
    with pytest.raises(native.NativeError, match="the library has 1: x86-64-v3"):
        native.NativeModel(str(bundle), pinned)


def test_cq4p_run_names_the_variant(model, host_level):
    bundle, library, _, config = model
    host_level(None)
    prompt = " ".join(str(i) for i in synthetic.prompt(config, 4, seed=1))
    command = [tools.find_tool("cq4p-run"), "--bundle", str(bundle), "--library", library,
               "--prompt-ids", prompt, "-n", "2"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert f"cq4p-run: kernels: {widest_level(cpu_flags())} (of 3 variants)" in result.stderr
    forced = subprocess.run(command, capture_output=True, text=True, check=False,
                            env={**os.environ, "CQ4P_HOST_LEVEL": "x86-64-v3"})
    assert forced.returncode == 0, forced.stderr
    assert "cq4p-run: kernels: x86-64-v3 (of 3 variants)" in forced.stderr
    assert forced.stdout.splitlines()[0] == result.stdout.splitlines()[0]  # the ids


def test_the_sme2_backend_refuses_a_host_library(model):
    bundle, library, _, _ = model
    result = subprocess.run([tools.find_tool("cq4p-run"), "--bundle", str(bundle),
                             "--library", library, "--backend", "sme2", "--sme2-library",
                             library, "--prompt-ids", "1 2", "-n", "2"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert (f"backend sme2: {library}: not an SME2 library: its code targets host; the sme2 "
            "backend needs a library compiled with cq4p-compile --target=aarch64-sme2") \
        in result.stderr


def needed_libraries(path):
    """The DT_NEEDED names of a little-endian ELF64 shared library."""
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize)
        if kind == 1:
            loads.append((vaddr, offset, filesz))
        elif kind == 2:
            dynamic = (offset, filesz)
    assert dynamic is not None

    def file_offset(address):
        for vaddr, offset, size in loads:
            if vaddr <= address < vaddr + size:
                return address - vaddr + offset
        raise AssertionError(f"address {address:#x} in no segment")

    entries = [struct.unpack_from("<qQ", data, dynamic[0] + i)
               for i in range(0, dynamic[1], 16)]
    strtab = file_offset(next(value for tag, value in entries if tag == 5))
    names = []
    for tag, value in entries:
        if tag == 0:
            break
        if tag == 1:
            end = data.index(b"\0", strtab + value)
            names.append(data[strtab + value:end].decode())
    return names


def test_model_libraries_name_the_system_libraries_they_call(model, synthetic_model, tmp_path):
    # libc for memcpy and memset; no libm: the kernels' exponentials, tanh,
    # sine and cosine are vector code (a linked-in libm would be named too,
    # --as-needed drops it where nothing calls it).
    bundle, library, pinned, _ = model
    assert sorted(needed_libraries(library)) == ["libc.so.6"]
    assert sorted(needed_libraries(pinned)) == ["libc.so.6"]
    aarch64 = tmp_path / "libmodel-neon.so"
    result = subprocess.run([tools.find_tool("cq4p-compile"), str(bundle / "model.mlir"),
                             "--target=aarch64-neon", "-o", str(aarch64)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert sorted(needed_libraries(str(aarch64))) == ["libc.so.6"]


def test_a_program_without_libm_loads_a_model_through_the_runtime(model):
    # cq4p-dlopen-model links neither libm nor the runtime; it dlopens the
    # runtime RTLD_LOCAL, which loads the model library RTLD_LOCAL: libm is
    # in no global scope, so the model library's calls (memcpy, memset)
    # resolve only through its own DT_NEEDED.
    bundle, library, pinned, _ = model
    runtime = str(native.library_path())
    program = tools.find_tool("cq4p-dlopen-model")
    with native.NativeModel(str(bundle), pinned) as opened:
        expected = int(np.argmax(opened.decode(1)))
    for path in (library, pinned):
        result = subprocess.run([program, runtime, str(bundle), path],
                                capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"vocab 512, largest logit at {expected}\n"
