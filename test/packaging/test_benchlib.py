"""bench/benchlib, the package bench/run, bench/model, bench/host/run and
bench/compile/run share: QEMU log and counter parsing on small logs whose
counts are worked out here by hand, the disassembly's loops, llvm-mca's
summary, interleaved timing, Markdown tables, the targets file, and that
each results file renders again from its committed data unchanged."""

import importlib.machinery
import importlib.util
import json
import re
import subprocess
import sys

import pytest

from conftest import SOURCE

sys.path.insert(0, str(SOURCE / "bench"))
from benchlib import data, disasm, markdown, mca, qemu, timing  # noqa: E402


def load_script(path):
    loader = importlib.machinery.SourceFileLoader(
        "bench_" + re.sub(r"\W", "_", str(path.relative_to(SOURCE))), str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------
# QEMU's execution log

def tb(*insns):
    """A translation block as `-d in_asm` prints it: (pc, mnemonic) pairs."""
    lines = ["IN: ", *("0x%016x:  d503201f  %s" % (pc, m) for pc, m in insns), ""]
    return lines


def trace(pc):
    return "Trace 0: 0x7f0000 [00000000/%016x/00000000/00000000] " % pc


# A kernel "matmul" at [0x1000, 0x1100) whose loop is 0x1010-0x1018; it
# calls memcpy (outside every kernel, at 0x9000). The markers are 0x100
# (begin) and 0x200 (end); 0x300 is the runtime.
LOG = (tb((0x100, "ret")) + tb((0x200, "ret")) + tb((0x300, "add"), (0x304, "b")) +
       tb((0x1000, "mov"), (0x1004, "add"), (0x1008, "cmp"), (0x100c, "b.ne")) +
       tb((0x1010, "sdot"), (0x1014, "sdot"), (0x1018, "b.ne")) +
       tb((0x101c, "mov"), (0x1020, "bl")) +
       tb((0x9000, "ldr"), (0x9004, "str"), (0x9008, "ret")) +
       tb((0x1024, "ret")) +
       [trace(0x300), trace(0x1010),  # before the begin marker: not counted
        trace(0x100), trace(0x300), trace(0x1000)] + [trace(0x1010)] * 5 +
       [trace(0x101c), trace(0x9000), trace(0x1024), trace(0x9000), trace(0x200),
        trace(0x300)])


def test_log_events_split_translations_and_executions():
    events = list(qemu.log_events(LOG))
    translated = [v for k, v in events if k == "translated"]
    executed = [v for k, v in events if k == "executed"]
    assert len(translated) == 8
    assert translated[3] == [(0x1000, "mov"), (0x1004, "add"), (0x1008, "cmp"),
                             (0x100c, "b.ne")]
    assert executed[:3] == [0x300, 0x1010, 0x100] and len(executed) == 16


def test_count_by_category_attributes_by_address_and_pending_call():
    counts, entries = qemu.count_by_category(
        qemu.log_events(LOG), 0x100, 0x200, {"matmul": (0x1000, 0x1100)}, (0x1010, 0x1018))
    # matmul: 4 (entry block) + 5 x 3 (loop) + 2 (call block) + 1 (ret) = 22;
    # the memcpy after `bl` (3) is the matmul's callee until 0x1024 runs;
    # the second memcpy and the runtime block (2) are the runtime's.
    assert counts["matmul"] == 22
    assert counts["loop"] == 15
    assert counts["matmul callees"] == 3
    assert counts["runtime+libc"] == 2 + 3
    assert entries == {"matmul": 1}


def test_count_by_address_counts_each_pc_and_the_phase():
    functions = [(0x1000, 0x1100, "matmul")]
    pcs, outside, entries, before = qemu.count_by_address(
        qemu.log_events(LOG), 0x100, 0x200, functions, {0x1020: "memcpy"}, 0x101c)
    assert pcs[0x1010] == 5 and pcs[0x1000] == 1 and pcs[0x1024] == 1
    assert sum(pcs.values()) == 22
    assert outside == {("matmul", "memcpy"): 3, None: 2 + 3}
    assert entries == {"matmul": 1}
    # Before 0x101c first ran: the entry block and five loop iterations.
    assert sum(before.values()) == 4 + 15


def test_log_without_end_marker_is_refused():
    with pytest.raises(qemu.LogError, match="end marker never executed"):
        qemu.count_by_category(qemu.log_events(LOG[:-2]), 0x100, 0x200, {}, None, name="x.log")


def test_untranslated_block_is_refused():
    with pytest.raises(qemu.LogError, match="block 0x4000 executed, never translated"):
        qemu.count_by_category(qemu.log_events([trace(0x100), trace(0x4000)]), 0x100, 0x200,
                               {}, None)


def test_phase_counts_of_the_counter_output():
    # Library at base 0x10000: f at [0, 0x20), g at [0x20, 0x40).
    symbols = [(0x0, 0x20, "f"), (0x20, 0x20, "g")]
    lines = ["tb a 10000 10004 10020", "tb b 90000 90004",
             "phase", "a 2", "b 1", "phase", "a a", "phase", "b ff"]
    prefill, decode = qemu.phase_counts(lines, 0x10000, symbols)
    assert prefill == {"f": 4, "g": 2, "runtime": 2}
    assert decode == {"f": 20, "g": 10}
    with pytest.raises(qemu.LogError, match="expected 3 marks, found 2"):
        qemu.phase_counts(lines[:6], 0x10000, symbols)


def test_parse_nm_keeps_functions_only():
    text = ("0000000000001000 0000000000000040 T cq4p_gemv\n"
            "0000000000001040 0000000000000010 t local_leaf\n"
            "0000000000002000 0000000000000008 D table\n"
            "                 U memcpy\n")
    assert qemu.parse_nm(text) == [(0x1000, 0x40, "cq4p_gemv"), (0x1040, 0x10, "local_leaf")]


# ----------------------------------------------------------------------------
# Disassembly and llvm-mca

OBJDUMP = """
kernels.o:\tfile format elf64-littleaarch64

Disassembly of section .text:

0000000000000000 <k>:
       0: mov\tx0, #0
       4: add\tx1, x1, #1
       8: sdot\tv0.4s, v1.16b, v2.16b
       c: sdot\tv3.4s, v1.16b, v2.16b
      10: b.ne\t0x8 <k+0x8>
      14: subs\tx2, x2, #1
      18: b.ne\t0x4 <k+0x4>
      1c: ret

0000000000000020 <other>:
      20: ret
"""


def test_objdump_loops():
    functions = disasm.parse_objdump(OBJDUMP)
    assert list(functions) == ["k", "other"]
    k = functions["k"]
    assert len(k) == 8 and k[2] == disasm.Insn(0x8, "sdot", "v0.4s, v1.16b, v2.16b")
    assert disasm.branch_target(k[4]) == 0x8 and disasm.branch_target(k[1]) is None
    spans = list(disasm.backward_spans(k))
    assert [(s[0].addr, s[-1].addr) for s in spans] == [(0x8, 0x10), (0x4, 0x18)]
    inner = disasm.innermost_loop(k, lambda body: any(x.mnem == "sdot" for x in body))
    assert [x.addr for x in inner] == [0x8, 0xc, 0x10]
    outer = disasm.enclosing_loop(k, inner)
    assert (outer[0].addr, outer[-1].addr) == (0x4, 0x18)
    assert disasm.enclosing_loop(k, outer) is None


def test_mca_summary():
    text = ("Iterations:        100\nInstructions:      1200\nTotal Cycles:      412\n"
            "Total uOps:        1200\n\nDispatch Width:    8\nuOps Per Cycle:    2.91\n"
            "IPC:               2.91\nBlock RThroughput: 4.0\n")
    assert mca.parse(text) == (4.12, 4.0)
    with pytest.raises(ValueError, match="no Total Cycles"):
        mca.parse("error: unable to resolve scheduling class")


# ----------------------------------------------------------------------------
# Timing

def test_interleaved_order_medians_and_ranges():
    order, after = [], []
    values = iter([(3.0, 30.0), (1.0, 10.0), (5.0, 50.0), (2.0, 20.0), (4.0, 40.0),
                   (6.0, 60.0)])

    def measure(configuration):
        order.append(configuration)
        return next(values)
    samples = timing.interleaved(3, (1, 2), measure, after.append)
    assert order == [1, 2, 1, 2, 1, 2] and after == [0, 1, 2]
    assert samples == {1: [(3.0, 30.0), (5.0, 50.0), (4.0, 40.0)],
                       2: [(1.0, 10.0), (2.0, 20.0), (6.0, 60.0)]}
    assert timing.medians(samples) == {1: (4.0, 40.0), 2: (2.0, 20.0)}
    assert timing.ranges(samples) == {1: ((3.0, 5.0), (30.0, 50.0)),
                                      2: ((1.0, 6.0), (10.0, 60.0))}


# ----------------------------------------------------------------------------
# Markdown

def test_table_rendering():
    assert markdown.table(["kernel", "count"], "lr", [["GEMV", 12], ["GEMM", "1,024"]]) == [
        "| kernel | count |", "|---|---:|", "| GEMV | 12 |", "| GEMM | 1,024 |"]
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 2 columns"):
        markdown.table(["kernel", "count"], "lr", [["GEMV"]])
    with pytest.raises(ValueError, match="2 columns but 1 alignments"):
        markdown.table(["kernel", "count"], "l", [])


def test_blocks_are_data_and_render_back():
    text = "\n".join(["# Title", "", "Some prose.", ""] +
                     markdown.table(["a", "b"], "lr", [["x", "1"], ["y", "2"]]) +
                     ["", "| odd |  | row |", "|---|", "tail", ""])
    parts = markdown.blocks(text)
    found = [p["table"] for p in parts if "table" in p]
    assert found == [{"header": ["a", "b"], "align": "lr", "rows": [["x", "1"], ["y", "2"]]}]
    assert markdown.render(parts) == text
    assert markdown.tables(text)[0] == ("Title", ["a", "b"], [["x", "1"], ["y", "2"]])


# ----------------------------------------------------------------------------
# Targets and data

def test_targets_check_limits_both_ways(tmp_path):
    path = tmp_path / "targets.json"
    path.write_text(json.dumps({"r.md": {"targets": {
        "most": {"limit": 5.4, "what": "at most"},
        "least": {"limit": 0.53, "at_most": False, "what": "at least"}}}}))
    targets = data.Targets("r.md", str(path))
    assert targets.met("most", 5.4) and not targets.met("most", 5.41)
    assert targets.met("least", 0.53) and not targets.met("least", 0.52)
    assert targets.limit("most") == 5.4 and targets.references == {}
    with pytest.raises(KeyError, match="no target other"):
        targets.met("other", 1)
    with pytest.raises(SystemExit, match="has no targets for s.md"):
        data.Targets("s.md", str(path))


def test_every_target_bench_run_checks_is_in_targets_json():
    targets = data.Targets("results.md")
    for name, entry in targets.entries.items():
        assert isinstance(entry["limit"], (int, float)) and entry["what"], name
    source = (SOURCE / "bench" / "run").read_text()
    used = {name for name in re.findall(r'"((?:sme2|neon|kernels_md)_\w+)"', source)
            if name not in targets.references}
    assert used and used <= set(targets.entries), used - set(targets.entries)
    assert set(targets.entries) <= used, set(targets.entries) - used


def test_data_path_and_round_trip(tmp_path):
    assert data.path_for("bench/host/results.md") == "bench/host/results.json"
    path = str(tmp_path / "x.json")
    assert data.load(path, {}) == {}
    data.save(path, {"b": [1, 2.5], "a": None})
    assert data.load(path) == {"a": None, "b": [1, 2.5]}
    with pytest.raises(SystemExit, match="no data to render from"):
        data.load(str(tmp_path / "missing.json"))


# ----------------------------------------------------------------------------
# The committed results files render again from their data unchanged

def strip_charts(text):
    at = text.find("\n## Charts\n")
    return (text if at < 0 else text[:at + 1]).rstrip("\n")


@pytest.mark.parametrize("script, results", [
    ("compile/run", "compile/results.md"),
    ("host/run", "host/results.md"),
    ("model", "model-results.md"),
    ("run", "results.md"),
])
def test_results_render_from_their_data(script, results):
    path = SOURCE / "bench" / results
    values = data.load(data.path_for(str(path)))
    rendered = load_script(SOURCE / "bench" / script).render(values)
    expected = path.read_text()
    assert strip_charts(rendered) == strip_charts(expected)


def test_model_aarch64_rows_from_counts():
    model = load_script(SOURCE / "bench" / "model")
    counts = {"matmul": 300, "rescale": 0, "quantize": 100, "attention": 50,
              "norms, rope, gating, adds, embedding": 40, "runtime": 10}
    counted = {"aarch64-neon": {"measured": "m", "phases": {
        "decode": {"tokens": 1, "counts": counts},
        "prefill": {"tokens": 2, "counts": counts}}}}
    demo = "demo (llama, hidden 512, ffn 1536, 4 layers, 8/4 heads, vocab 1024)"
    assert model.aarch64_rows("demo", counted) == [
        "| %s | aarch64-neon | per prefill token | 250 | 150 (60.0%%) | 0.0 (0.0%%) | "
        "50.0 (20.0%%) | 25.0 (10.0%%) | 20.0 (8.0%%) | 5.0 (2.0%%) | 40.0%% | m |" % demo,
        "| %s | aarch64-neon | per decode token | 500 | 300 (60.0%%) | 0.0 (0.0%%) | "
        "100 (20.0%%) | 50.0 (10.0%%) | 40.0 (8.0%%) | 10.0 (2.0%%) | 40.0%% | m |" % demo]


def test_model_host_rows_from_measurements():
    model = load_script(SOURCE / "bench" / "model")
    demo = "demo (llama, hidden 512, ffn 1536, 4 layers, 8/4 heads, vocab 1024)"
    host = {"measured": "m", "prompt": 512, "step_bytes": 9.4e6,
            "medians": {"2": [150.0, 30.0, 3.0], "1": [100.0, 20.0, 5.0]},
            "runs": {"1": 5, "2": 4}, "roofline": {"2": [0.6, 2.4], "1": [0.3, 1.2]}}
    assert model.speed_rows("demo", host) == [
        "| %s | 512 | 1 | 100.0 | 20.0 | 5.0 | 5 | m |" % demo,
        "| %s | 512 | 2 | 150.0 | 30.0 | 3.0 | 4 | m |" % demo,
        "| %s | 512 | 2 / 1 | 1.50x | 1.50x | | | |" % demo]
    assert model.roofline_rows("demo", host) == [
        "| %s | 1 | 9.4 MB | 20.0 | 0.3 GB/s | 1.2 GB/s | 25%% | m |" % demo,
        "| %s | 2 | 9.4 MB | 30.0 | 0.6 GB/s | 2.4 GB/s | 25%% | m |" % demo]
    # Paired measurements carry the median of the pairs' ratios, which is
    # not the ratio of the medians.
    paired = dict(host, roofline={"1": [0.3, 1.2, 0.4]})
    assert model.roofline_rows("demo", paired) == [
        "| %s | 1 | 9.4 MB | 20.0 | 0.3 GB/s | 1.2 GB/s | 40%% | m |" % demo]
    perf = {"measured": "m", "shares": {"matmul kernels": 60.0, "attention": 20.0,
                                        "rest (steps, runtime, libc)": 20.0}}
    # A run before the operating system had a column: "-" there (its
    # samples are in the rest).
    assert model.profile_row("demo", perf) == (
        "| %s | 60.0%% | 0.0%% | 20.0%% | 0.0%% | - | 20.0%% | 40.0%% | m |" % demo)
    # A prefill profile with the operating system's samples (page faults):
    # its own column and row, the shares of the whole.
    prefill_perf = {"measured": "p", "shares": {
        "matmul kernels": 70.0, "operating system (page faults, system calls)": 5.0,
        "activation transform": 5.0, "rest (steps, runtime, libc)": 20.0}}
    assert model.profile_row("demo", prefill_perf) == (
        "| %s | 70.0%% | 5.0%% | 0.0%% | 0.0%% | 5.0%% | 20.0%% | 30.0%% | p |" % demo)
    speed, (profile, prefill_profile), labels, roofline, prefill = model.host_rows(
        {"demo": {"host": host, "perf": perf, "perf_prefill": prefill_perf}})
    assert len(speed) == 3 and len(roofline) == 2 and len(profile) == 1 and len(labels) == 6
    assert prefill_profile == [model.profile_row("demo", prefill_perf)]
    # Kernel-side samples go to the operating system whatever their name.
    assert model.category("cq4p_gemm_x", kernel=True) == model.KERNEL
    assert model.category("cq4p_gemm_x") == "matmul kernels"
    # A run before the compute probe was part of the host rows has no
    # prefill rows; one with it, a row per thread count: 100 tok/s of
    # 13 M multiply-adds is 1.3 GMAC/s, 13% of a 10 GMAC/s mix.
    assert prefill == []
    probed = dict(host, prefill_macs=13e6, compute={"1": [12.0, 10.0], "2": [24.0, 20.0]})
    assert model.host_compute_rows("demo", probed) == [
        "| %s | 1 | 100.0 | 13 M | 1 GMAC/s | 12 GMAC/s | 10 GMAC/s | 13%% | m |" % demo,
        "| %s | 2 | 150.0 | 13 M | 2 GMAC/s | 24 GMAC/s | 20 GMAC/s | 10%% | m |" % demo]


def test_model_llamacpp_section_against_the_faster_llamacpp():
    # llama.cpp mapped and read into memory (-mmp 0): a column each, and
    # cq4p's ratios against the better of the two on each measure.
    model = load_script(SOURCE / "bench" / "model")
    medians, ranges = {}, {}
    values = {"llama.cpp Q4_0": [100.0, 10.0, 1000.0],
              "llama.cpp Q4_0, -mmp 0": [80.0, 20.0, 1250.0],
              "cq4p default": [200.0, 30.0, 500.0], "cq4p native": [400.0, 40.0, 250.0]}
    for label, value in values.items():
        for threads in (1, 2):
            medians["%s|%d" % (label, threads)] = [v * threads for v in value]
            ranges["%s|%d" % (label, threads)] = [[v, v] for v in value]
    entry = {"measured": "m", "llamacpp": "b1 (build 1)", "runs": 3, "agreement": "a",
             "medians": medians, "ranges": ranges}
    (section,) = model.peer_sections({"2048": {"llamacpp": entry}})
    name = model.describe("2048")
    assert section[2] == ("| model | threads | measure | llama.cpp Q4_0 | llama.cpp Q4_0, -mmp 0 "
                          "| cq4p default | cq4p native |")
    assert section[3] == "|---|---:|---|---:|---:|---:|---:|"
    assert section[4] == ("| %s | 1 | prefill tok/s | 100.0 (100.0-100.0) | 80.0 (80.0-80.0) | "
                          "200.0 (200.0-200.0): 2.00x | 400.0 (400.0-400.0): 4.00x |" % name)
    assert section[5] == ("| %s | 1 | decode tok/s | 10.0 (10.0-10.0) | 20.0 (20.0-20.0) | "
                          "30.0 (30.0-30.0): 1.50x | 40.0 (40.0-40.0): 2.00x |" % name)
    assert section[6] == ("| %s | 1 | time to first token, ms | 1000 (1000-1000) | "
                          "1250 (1250-1250) | 500 (500-500): 0.50x | 250 (250-250): 0.25x |" % name)
    assert section[-1] == ("| %s | 2 / 1 | cq4p native | prefill 2.00x, decode 2.00x | | | |" %
                           name)
    assert len(section) == 4 + 6 + 4


def test_model_llamacpp_long_prompt_sections():
    # A comparison at another prompt (--prompt N) is kept under its own
    # key beside the model's own prompt's, rendered after it, with
    # llama.cpp's flash attention on and off as its columns and cq4p's
    # ratios against the faster of the two.
    model = load_script(SOURCE / "bench" / "model")
    assert model.entry_key("2048", 512) == "llamacpp"
    assert model.entry_key("2048", 4096) == "llamacpp@4096"
    assert model.entry_key("qwen3-1.7b", 1024) == "llamacpp"

    def entry(prompt, values):
        medians, ranges = {}, {}
        for label, value in values.items():
            for threads in (1, 2):
                medians["%s|%d" % (label, threads)] = [v * threads for v in value]
                ranges["%s|%d" % (label, threads)] = [[v, v] for v in value]
        return {"measured": "m", "llamacpp": "b1 (build 1)", "runs": 2, "agreement": "a",
                "medians": medians, "ranges": ranges, "prompt": prompt}

    own = entry(512, {"llama.cpp Q4_0": [100.0, 10.0, 1000.0],
                      "cq4p default": [200.0, 30.0, 500.0], "cq4p native": [200.0, 30.0, 500.0]})
    long = entry(4096, {"llama.cpp Q4_0, -mmp 0 -fa on": [50.0, 8.0, 8000.0],
                        "llama.cpp Q4_0, -mmp 0 -fa off": [40.0, 6.0, 10000.0],
                        "cq4p default": [100.0, 12.0, 4000.0],
                        "cq4p native": [110.0, 12.0, 3700.0]})
    first, second = model.peer_sections({"2048": {"llamacpp@4096": long, "llamacpp": own}})
    assert "llama.cpp Q4_0, -mmp 0" not in first[2]
    assert "flash attention" not in first[0] and "flash attention" in second[0]
    assert second[2] == ("| model | threads | measure | llama.cpp Q4_0, -mmp 0 -fa on | "
                         "llama.cpp Q4_0, -mmp 0 -fa off | cq4p default | cq4p native |")
    name = model.describe("2048")
    assert second[4] == ("| %s | 1 | prefill tok/s | 50.0 (50.0-50.0) | 40.0 (40.0-40.0) | "
                         "100.0 (100.0-100.0): 2.00x | 110.0 (110.0-110.0): 2.20x |" % name)
    assert second[6] == ("| %s | 1 | time to first token, ms | 8000 (8000-8000) | "
                         "10000 (10000-10000) | 4000 (4000-4000): 0.50x | "
                         "3700 (3700-3700): 0.46x |" % name)


@pytest.mark.parametrize("args, message", [
    (["--prompt", "4096"], "--prompt needs --llamacpp DIR"),
    (["--llamacpp", "DIR", "--prompt", "8"], "--prompt must be 16 to 32768 tokens, got 8"),
])
def test_model_refuses_a_prompt_it_cannot_take(args, message):
    # Refused before anything is built or measured: the usage error names
    # the flag and the number.
    result = subprocess.run([sys.executable, str(SOURCE / "bench" / "model")] + args,
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert message in result.stderr


def test_model_llamacpp_section_from_measurements():
    model = load_script(SOURCE / "bench" / "model")
    medians, ranges = {}, {}
    for i, label in enumerate(("llama.cpp Q4_0", "cq4p default", "cq4p native")):
        for threads in (1, 2):
            value = [100.0 * (i + 1) * threads, 10.0 * (i + 1), 1000.0 / (i + 1)]
            medians["%s|%d" % (label, threads)] = value
            ranges["%s|%d" % (label, threads)] = [[v - 1, v + 1] for v in value]
    entry = {"measured": "m", "llamacpp": "b1 (build 1)", "runs": 3, "agreement": "a",
             "medians": medians, "ranges": ranges}
    (section,) = model.peer_sections({"2048": {"llamacpp": entry}})
    model_name = model.describe("2048")
    assert section[0] == "Measured m; llama.cpp b1 (build 1); 3 runs each. a."
    assert section[4] == ("| %s | 1 | prefill tok/s | 100.0 (99.0-101.0) | 200.0 (199.0-201.0): "
                          "2.00x | 300.0 (299.0-301.0): 3.00x |" % model_name)
    assert section[6] == ("| %s | 1 | time to first token, ms | 1000 (999-1001) | 500 (499-501): "
                          "0.50x | 333 (332-334): 0.33x |" % model_name)
    assert section[-1] == ("| %s | 2 / 1 | cq4p native | prefill 2.00x, decode 1.00x | | |" %
                           model_name)
    assert len(section) == 4 + 6 + 3
