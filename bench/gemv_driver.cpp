//===- gemv_driver.cpp - one linear-layer call, for instruction counting -===//
//
// An aarch64 program that bench/run executes under QEMU with
// `-d in_asm,exec,nochain` to count the instructions one call executes.
//
//   cq4p-bench-gemv write FILE N K GS
//       writes a random valid Hadamard packed-panel tensor file (TestFiles.h)
//   cq4p-bench-gemv run LIBRARY FILE ROWS
//       opens the kernel library and the file, binds a LinearLayer, runs
//       one call (quantize + matmul, 1 thread, every super-block in one
//       matmul call) between two marker functions, and prints what the log
//       parser needs: the library's load base, the markers' addresses and
//       the kernels the call used. LIBRARY may be built for any target the
//       CPU runs (aarch64-neon, or aarch64-sme2 at SVL 512).
//   cq4p-bench-gemv compare LIBRARY_A LIBRARY_B FILE ROWS
//       runs the same call (same input) through a layer bound to each
//       library and compares the two outputs bit for bit (not logged).
//
// Everything that allocates, resolves symbols or touches the files for the
// first time happens before the first marker: the instructions between the
// markers are the call alone. The file is written by a separate, unlogged
// run because building it executes far more instructions than the call.
//
//===----------------------------------------------------------------------===//

#include "TestFiles.h"
#include "fp16.h"

#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Linear.h"
#include "cq4p/runtime/TensorFile.h"
#include "cq4p/runtime/ThreadPool.h"

#include <dlfcn.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace cq4p::runtime;

// The call's boundaries in the execution log: two functions that exist
// only to be executed. noinline + an empty asm keep them distinct and real.
extern "C" __attribute__((noinline)) void cq4p_bench_begin() {
  asm volatile("" ::: "memory");
}
extern "C" __attribute__((noinline)) void cq4p_bench_end() {
  asm volatile("" ::: "memory");
}

namespace {

float halfToFloat(uint16_t half) { return cq4p_half_to_float(half); }

int usage() {
  std::fprintf(stderr,
               "usage: cq4p-bench-gemv write FILE N K GS\n"
               "       cq4p-bench-gemv run LIBRARY FILE ROWS\n"
               "       cq4p-bench-gemv compare LIBRARY_A LIBRARY_B FILE "
               "ROWS\n");
  return 2;
}

int fail(const Status &status) {
  std::fprintf(stderr, "cq4p-bench-gemv: %s\n", status.message().c_str());
  return 1;
}

int write(const char *path, uint64_t n, uint64_t k, uint32_t gs) {
  cq4p::test::CqTensor tensor =
      cq4p::test::randomTensor(n, k, gs, false, uint32_t(n * 31 + k));
  std::vector<uint8_t> bytes = cq4p::test::panelFile(tensor, halfToFloat);
  if (!cq4p::test::writeBytes(path, bytes)) {
    std::fprintf(stderr, "cq4p-bench-gemv: cannot write %s\n", path);
    return 1;
  }
  std::printf("wrote %s: %" PRIu64 "x%" PRIu64 " gs %u, %zu bytes\n", path, n,
              k, gs, bytes.size());
  return 0;
}

void printKernel(const char *role, const cq4p_kernel_desc *kernel) {
  Dl_info info = {};
  dladdr(kernel->entry, &info);
  std::printf("kernel %s %s 0x%" PRIxPTR " base 0x%" PRIxPTR "\n", role,
              kernel->name, uintptr_t(kernel->entry),
              uintptr_t(info.dli_fbase));
}

// The call's input: uniform in [-1, 1), the same for every run.
std::vector<float> makeInput(size_t count) {
  std::vector<float> x(count);
  uint32_t state = 12345;
  for (float &v : x) {
    state = state * 1664525u + 1013904223u;
    v = float(int32_t(state >> 8) - (1 << 23)) / float(1 << 23);
  }
  return x;
}

int run(const char *libraryPath, const char *filePath, int64_t rows) {
  std::unique_ptr<KernelLibrary> library;
  if (Status s = KernelLibrary::open(libraryPath, library); !s)
    return fail(s);
  std::unique_ptr<TensorFile> file;
  if (Status s = TensorFile::open(filePath, file); !s)
    return fail(s);
  std::unique_ptr<LinearLayer> layer;
  if (Status s = LinearLayer::bind(*library, *file, layer); !s)
    return fail(s);
  // One matmul call over every super-block.
  if (Status s = layer->setSuperBlocksPerTask(int64_t(layer->superBlocks())); !s)
    return fail(s);
  std::unique_ptr<ThreadPool> pool;
  if (Status s = ThreadPool::create(1, pool); !s)
    return fail(s);

  uint64_t n = layer->n(), k = layer->k();
  ActivationScratch scratch;
  scratch.reserve(size_t(rows), size_t(k), layer->numGroups());
  std::vector<float> x = makeInput(size_t(rows) * k), y(size_t(rows) * n, 0.0f);
  // Touch every page the call reads, so that no first-touch work lands in
  // the measured region (QEMU maps guest pages through the host's mmap, so
  // this only matters for the runtime's own bookkeeping, if any).
  const uint8_t *panels = layer->view().panels;
  volatile uint8_t sink = 0;
  for (uint64_t i = 0; i < cq4p_num_super_blocks(n) * 64 * k / 2; i += 4096)
    sink = sink + panels[i];

  std::printf("marker begin 0x%" PRIxPTR "\n", uintptr_t(&cq4p_bench_begin));
  std::printf("marker end 0x%" PRIxPTR "\n", uintptr_t(&cq4p_bench_end));
  printKernel("quantize", layer->quantizeKernelFor(rows));
  printKernel("matmul", layer->matmulKernelFor(rows));
  std::printf("shape rows %" PRId64 " n %" PRIu64 " k %" PRIu64
              " gs %u superblocks %" PRIu64 "\n",
              rows, n, k, layer->groupSize(), layer->superBlocks());
  std::fflush(stdout);

  cq4p_bench_begin();
  Status ran = layer->run(*pool, x.data(), y.data(), rows, scratch);
  cq4p_bench_end();
  if (!ran)
    return fail(ran);

  double sum = 0, sumSquares = 0;
  for (float v : y) {
    if (!std::isfinite(v)) {
      std::fprintf(stderr, "cq4p-bench-gemv: non-finite output\n");
      return 1;
    }
    sum += v;
    sumSquares += double(v) * v;
  }
  if (sumSquares == 0) {
    std::fprintf(stderr, "cq4p-bench-gemv: the output is all zero\n");
    return 1;
  }
  std::printf("checksum %.6e rms %.6e\n", sum,
              std::sqrt(sumSquares / double(y.size())));
  return 0;
}

// One layer per library over the same file; each runs the call of `run`.
int compare(const char *pathA, const char *pathB, const char *filePath,
            int64_t rows) {
  std::unique_ptr<TensorFile> file;
  if (Status s = TensorFile::open(filePath, file); !s)
    return fail(s);
  std::unique_ptr<KernelLibrary> libraries[2];
  std::unique_ptr<LinearLayer> layers[2];
  const char *paths[2] = {pathA, pathB};
  for (int i = 0; i < 2; ++i) {
    if (Status s = KernelLibrary::open(paths[i], libraries[i]); !s)
      return fail(s);
    if (Status s = LinearLayer::bind(*libraries[i], *file, layers[i]); !s)
      return fail(s);
    if (Status s = layers[i]->setSuperBlocksPerTask(
            int64_t(layers[i]->superBlocks()));
        !s)
      return fail(s);
  }
  std::unique_ptr<ThreadPool> pool;
  if (Status s = ThreadPool::create(1, pool); !s)
    return fail(s);
  uint64_t n = layers[0]->n(), k = layers[0]->k();
  std::vector<float> x = makeInput(size_t(rows) * k);
  std::vector<float> y[2];
  for (int i = 0; i < 2; ++i) {
    ActivationScratch scratch;
    scratch.reserve(size_t(rows), size_t(k), layers[i]->numGroups());
    y[i].assign(size_t(rows) * n, 0.0f);
    if (Status s = layers[i]->run(*pool, x.data(), y[i].data(), rows, scratch);
        !s)
      return fail(s);
    const cq4p_kernel_desc *kernel = layers[i]->matmulKernelFor(rows);
    std::printf("library %c %s target %s\n", 'a' + i, kernel->name,
                kernelTargetName(kernel->target).c_str());
  }
  size_t identical = 0;
  double maxDiff = 0;
  uint64_t maxUlp = 0;
  for (size_t i = 0; i < y[0].size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &y[0][i], 4);
    std::memcpy(&b, &y[1][i], 4);
    if (a == b) {
      ++identical;
      continue;
    }
    maxDiff = std::max(maxDiff, std::fabs(double(y[0][i]) - double(y[1][i])));
    // Distance in representable floats: the bit patterns mapped to a
    // monotonic integer order.
    auto ordered = [](uint32_t bits) {
      int64_t magnitude = int64_t(bits & 0x7fffffffu);
      return (bits & 0x80000000u) ? -magnitude : magnitude;
    };
    maxUlp = std::max<uint64_t>(
        maxUlp, uint64_t(std::llabs(ordered(a) - ordered(b))));
  }
  std::printf("compare rows %" PRId64 " n %" PRIu64 " k %" PRIu64
              " outputs %zu identical %zu max_abs_diff %.9g max_ulp %" PRIu64
              "\n",
              rows, n, k, y[0].size(), identical, maxDiff, maxUlp);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  std::string mode = argv[1];
  if (mode == "write" && argc == 6)
    return write(argv[2], std::strtoull(argv[3], nullptr, 10),
                 std::strtoull(argv[4], nullptr, 10),
                 uint32_t(std::strtoul(argv[5], nullptr, 10)));
  if (mode == "run" && argc == 5)
    return run(argv[2], argv[3], std::strtoll(argv[4], nullptr, 10));
  if (mode == "compare" && argc == 6)
    return compare(argv[2], argv[3], argv[4],
                   std::strtoll(argv[5], nullptr, 10));
  return usage();
}
