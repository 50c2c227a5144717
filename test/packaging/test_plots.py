"""bench/plot: the PNGs it draws from the committed bench/results.md (checked
as PNG files by a reader written here), the numbers it takes from the
tables, its refusals, and that linking the charts changes no count."""

import importlib.machinery
import importlib.util
import struct
import zlib

import pytest

from conftest import SOURCE, SYSTEM_PYTHON, run

PLOT = SOURCE / "bench" / "plot"


def load_plot():
    loader = importlib.machinery.SourceFileLoader("bench_plot", str(PLOT))
    spec = importlib.util.spec_from_loader("bench_plot", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def png_size(path):
    """(width, height) of a PNG after checking its signature, every chunk's
    CRC, IHDR first, IEND last, and that the IDAT stream inflates to exactly
    height rows of (1 filter byte + width pixels)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    at, chunks = 8, []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert zlib.crc32(kind + body) == crc, (path, kind)
        chunks.append((kind, body))
        at += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b""), path
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert len(pixels) == height * (1 + (width * channels * depth + 7) // 8), path
    return width, height


HOST_TABLE = """# Host kernel results

### GEMV from DRAM, 1 thread (working set 4.0x the 32 MiB LLC)

| shape (N x K) | read probe | libhost.so | libhost.so / probe | target |
|---|---:|---:|---:|---|
| 4096x4096 | 20.0 GB/s | 18.0 GB/s | 90% | >= 90% of the probe |
| 14336x4096 | 20.0 GB/s | 15.0 GB/s | 75% | >= 90% of the probe |
"""


def test_pngs_from_the_committed_results(tmp_path):
    host = tmp_path / "host.md"
    host.write_text(HOST_TABLE)
    run([SYSTEM_PYTHON, PLOT, "--results", SOURCE / "bench" / "results.md", "--host-results",
         host, "--out-dir", tmp_path], cwd=tmp_path)
    for name in ("kg-block-parts.png", "dram-bandwidth.png"):
        width, height = png_size(tmp_path / name)
        assert 400 <= width <= 3000 and 200 <= height <= 3000, (name, width, height)
    assert host.read_text() == HOST_TABLE  # --out-dir leaves the tables alone


def test_committed_charts_are_linked_and_valid():
    png_size(SOURCE / "bench" / "kg-block-parts.png")
    assert "![instructions per kg-block by part](kg-block-parts.png)" in \
        (SOURCE / "bench" / "results.md").read_text()
    assert "bench/kg-block-parts.png" in (SOURCE / "README.md").read_text()


def test_linking_the_charts_changes_no_count(tmp_path):
    original = (SOURCE / "bench" / "results.md").read_text()
    tables = original[:original.find("\n## Charts\n") + 1] if "\n## Charts\n" in original \
        else original
    results = tmp_path / "results.md"
    results.write_text(tables)
    plot = load_plot()
    for _ in range(2):  # a second run replaces its section, adds no other
        assert plot.main(["--results", str(results), "--host-results",
                          str(tmp_path / "absent.md")]) == 0
        text = results.read_text()
        assert text.startswith(tables.rstrip("\n") + "\n\n## Charts\n")
        assert text.count("## Charts") == 1
    png_size(tmp_path / "kg-block-parts.png")
    assert not (tmp_path / "dram-bandwidth.png").exists()


# A report with numbers worked out by hand: GEMV 1x256->64 has 1 x 64 = 64
# kg-blocks (64 channels, K / 4 = 64); the GEMM 16x512->128, 2 x 128 = 256;
# GEMV 1x256->100, 2 x 64 = 128 (channels padded to 128).
NEON = """## Summary (default tuning, `--tune-cpu=neoverse-v2`)

## 3. Executed instructions

| tune-cpu | kernel | weights | quantize | matmul (own) | matmul callees | runtime+libc | whole call | loop share of matmul | whole / kg-block |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|
| neoverse-v2 | GEMV 1x256->64 | 16384 | 640 | 6400 | 64 | 0 | 7104 | 75.0% | 111.00 |
| cortex-x4 | GEMV 1x256->64 | 16384 | 1 | 1 | 1 | 1 | 4 | 50.0% | 0.06 |
| neoverse-v2 | GEMM 16x512->128 | 65536 | 2560 | 25600 | 0 | 256 | 28416 | 50.0% | 111.00 |
| neoverse-v2 | GEMV 1x256->100 | 25600 | 1280 | 12800 | 0 | 128 | 14208 | 50.0% | 111.00 |

### 5.3 Executed instructions (QEMU, SVL 512)

| kernel | kg-blocks | leaf calls | quantize | matmul own, before the first leaf call | matmul own, after | matmul callees | leaf inner loop | leaf rest | SME ABI routines | runtime+libc | whole call |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| GEMV 1x256->64 | 64 | 1 | 640 | 64 | 128 | 64 (64 memcpy) | 320 | 64 | 0 | 0 | 1280 |
"""


def test_parts_per_kg_block():
    plot = load_plot()
    neon = plot.neon_parts(NEON)
    assert list(neon) == ["GEMV 1x256->64", "GEMM 16x512->128", "GEMV 1x256->100"]
    parts, whole = neon["GEMV 1x256->64"]
    assert whole == 111.0
    assert parts == {"leaf inner loop": 75.0, "matmul (own), outside the inner loop": 25.0,
                     "quantize": 10.0, "matmul callees": 1.0, "runtime+libc": 0.0}
    parts, whole = neon["GEMM 16x512->128"]
    assert (parts["leaf inner loop"], parts["quantize"], parts["runtime+libc"], whole) == \
        (50.0, 10.0, 1.0, 111.0)
    parts, whole = neon["GEMV 1x256->100"]
    assert (parts["leaf inner loop"], parts["quantize"], parts["runtime+libc"], whole) == \
        (50.0, 10.0, 1.0, 111.0)
    parts, whole = plot.sme2_parts(NEON)["GEMV 1x256->64"]
    assert whole == 20.0
    assert parts == {"quantize": 10.0, "matmul own, before the first leaf call": 1.0,
                     "matmul own, after": 2.0, "matmul callees": 1.0, "leaf inner loop": 5.0,
                     "leaf rest": 1.0, "SME ABI routines": 0.0, "runtime+libc": 0.0}
    (title, shapes, probe, rates), = plot.host_bandwidth(HOST_TABLE)
    assert (shapes, probe, rates) == (["4096x4096", "14336x4096"], [20.0, 20.0],
                                      {"libhost.so": [18.0, 15.0]})


@pytest.mark.parametrize("old, new, message", [
    ("| 6400 | 64 | 0 | 7104 |", "| 6400 | 64 | 0 | 7000 |",
     "section 3, neoverse-v2 GEMV 1x256->64: the parts (quantize 640, matmul (own) 6400, "
     "matmul callees 64, runtime+libc 0) add up to 7104, not the whole call's 7000"),
    ("| 75.0% | 111.00 |", "| 75.0% | 112.00 |",
     "section 3, neoverse-v2 GEMV 1x256->64: 7104 instructions / 64 kg-blocks = 111.00, "
     "the table says 112.00"),
    ("| GEMV 1x256->64 | 64 | 1 |", "| GEMV 1x256->64 | 65 | 1 |",
     "section 5.3, GEMV 1x256->64: 65 kg-blocks in the table, 64 from the shape"),
    ("`--tune-cpu=neoverse-v2`", "`--tune-cpu=apple-m4`",
     "section 3 has no row at the default tuning (apple-m4)"),
])
def test_tables_that_do_not_add_up_are_refused(tmp_path, old, new, message):
    assert old in NEON
    results = tmp_path / "results.md"
    results.write_text(NEON.replace(old, new))
    result = run([SYSTEM_PYTHON, PLOT, "--results", results, "--host-results",
                  tmp_path / "absent.md"], cwd=tmp_path, check=False)
    assert (result.returncode, result.stderr) == (1, f"bench/plot: {message}\n")
    assert not (tmp_path / "kg-block-parts.png").exists()
    assert "## Charts" not in results.read_text()
