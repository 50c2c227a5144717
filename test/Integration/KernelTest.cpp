//===- KernelTest.cpp - compiled kernels against the fp64 oracle ----------===//
//
// Runs the kernels that cq4p-compile built from kernels.mlir (for this
// machine's target: the host path natively, AArch64 NEON under QEMU)
// through the runtime, on panel files that look like a converted model's,
// and checks them against an oracle that dequantizes each file plainly from
// its stored values (LayerFiles.h) and multiplies in fp64.
//
// The tolerances of docs/FORMAT.md section 5 are the floor (MSE <= 0.1,
// embedding rows max |error| <= 1e-2); the tests hold the kernels to much
// tighter relative-error bounds, and print every measured error.
//
//===----------------------------------------------------------------------===//

#include "../unit/Runtime/LayerFiles.h"
#include "../unit/Runtime/TempDir.h"

#include "cq4p/runtime/CpuFeatures.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Linear.h"
#include "cq4p/runtime/ThreadPool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {

/// Opens the library under test once per process.
const KernelLibrary &library() {
  static std::unique_ptr<KernelLibrary> opened = [] {
    std::unique_ptr<KernelLibrary> lib;
    Status status = KernelLibrary::open(CQ4P_TEST_KERNEL_LIBRARY, lib);
    if (!status) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      std::abort();
    }
    return lib;
  }();
  return *opened;
}

struct Errors {
  double mse = 0, relative = 0; ///< relative: ||y - ref|| / ||ref||
  double maxAbs = 0;
};

Errors compare(const std::vector<float> &y, const std::vector<double> &ref) {
  Errors e;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    double d = double(y[i]) - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    e.maxAbs = std::max(e.maxAbs, std::fabs(d));
  }
  e.mse = diff2 / double(y.size());
  e.relative = std::sqrt(diff2 / ref2);
  return e;
}


/// A panel file written to disk and mapped, with its fp64 dequantization.
struct MappedLayer {
  TempDir dir;
  std::unique_ptr<TensorFile> file;
  std::vector<double> weight;

  /// Orthogonal layers are not dequantized whole (O(N K^2)): their tests
  /// use the row-wise and factored oracles of LayerFiles.h.
  MappedLayer(uint64_t n, uint64_t k, uint32_t gs, bool orthogonal,
              uint32_t seed) {
    LayerFile layer = realisticLayerFile(n, k, gs, orthogonal, seed);
    std::string path = dir.file("w.cq4p.weights");
    EXPECT_TRUE(writeBytes(path, layer.bytes));
    Status status = TensorFile::open(path, file);
    EXPECT_TRUE(status) << status.message();
    if (file && !orthogonal)
      weight = dequantize(*file);
  }
};

/// Measured errors, printed once at the end as a table.
std::map<std::string, Errors> &measured() {
  static std::map<std::string, Errors> table;
  return table;
}

class ErrorReport : public ::testing::Environment {
public:
  void TearDown() override {
    std::printf("\n%-34s %12s %12s %12s\n", "case", "MSE", "rel. error",
                "max |error|");
    for (const auto &[name, e] : measured())
      std::printf("%-34s %12.3e %12.3e %12.3e\n", name.c_str(), e.mse,
                  e.relative, e.maxAbs);
  }
};
const auto *const kReport =
    ::testing::AddGlobalTestEnvironment(new ErrorReport());

struct GridCase {
  uint64_t n, k;
  uint32_t gs;
};

std::vector<GridCase> grid() {
  std::vector<GridCase> cases;
  for (uint64_t n : {64, 72, 100, 192})
    for (uint32_t gs : {32, 64, 128, 256})
      cases.push_back({n, 256, gs});
  cases.push_back({64, 1536, 128});
  cases.push_back({100, 1536, 128});
  return cases;
}

TEST(Kernels, LinearMatchesTheOracleOverTheShapeGrid) {
  std::unique_ptr<ThreadPool> pool;
  ASSERT_TRUE(ThreadPool::create(1, pool));
  ActivationScratch scratch;
  uint32_t seed = 1;
  for (const GridCase &c : grid()) {
    MappedLayer layer(c.n, c.k, c.gs, false, seed++);
    ASSERT_TRUE(layer.file);
    std::unique_ptr<LinearLayer> linear;
    Status bound = LinearLayer::bind(library(), *layer.file, linear);
    ASSERT_TRUE(bound) << bound.message();
    for (uint64_t m : {1, 2, 5, 16, 20, 64}) {
      std::string name = std::to_string(m) + "x" + std::to_string(c.k) +
                         "->" + std::to_string(c.n) + " gs" +
                         std::to_string(c.gs);
      SCOPED_TRACE(name);
      std::vector<float> x = gaussianRows(m, c.k, seed++);
      std::vector<float> y(m * c.n, std::nanf(""));
      Status ran = linear->run(*pool, x.data(), y.data(), int64_t(m), scratch);
      ASSERT_TRUE(ran) << ran.message();
      Errors e = compare(y, referenceLinear(layer.weight, c.n, c.k, x, m));
      measured()[name] = e;
      EXPECT_LE(e.mse, 0.1);
      // int8 activations over 16-level weights: about 1% relative error.
      EXPECT_LT(e.relative, 0.02);
    }
  }
}

TEST(Kernels, ResultsAreBitIdenticalForAnyThreadCountAndSplit) {
  for (GridCase c : {GridCase{192, 256, 64}, GridCase{100, 1536, 128}}) {
    MappedLayer layer(c.n, c.k, c.gs, false, 77);
    std::unique_ptr<LinearLayer> linear;
    ASSERT_TRUE(LinearLayer::bind(library(), *layer.file, linear));
    for (uint64_t m : {1, 5}) {
      std::vector<float> x = gaussianRows(m, c.k, 78);
      std::vector<float> first;
      for (int threads : {1, 2, 3})
        for (int64_t perTask : {1, 8}) {
          SCOPED_TRACE(::testing::Message() << threads << " threads, "
                                            << perTask << " per task, M " << m);
          std::unique_ptr<ThreadPool> pool;
          ASSERT_TRUE(ThreadPool::create(threads, pool));
          ASSERT_TRUE(linear->setSuperBlocksPerTask(perTask));
          ActivationScratch scratch;
          std::vector<float> y(m * c.n, 0.0f);
          ASSERT_TRUE(linear->run(*pool, x.data(), y.data(), int64_t(m), scratch));
          if (first.empty())
            first = y;
          else
            EXPECT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * 4));
        }
    }
  }
}

TEST(Kernels, OrthogonalLmHeadMatchesTheOracle) {
  MappedLayer layer(1024, 1536, 128, true, 5);
  ASSERT_TRUE(layer.file);
  std::unique_ptr<LinearLayer> linear;
  Status bound = LinearLayer::bind(library(), *layer.file, linear);
  ASSERT_TRUE(bound) << bound.message();
  std::unique_ptr<ThreadPool> pool;
  ASSERT_TRUE(ThreadPool::create(2, pool));
  ActivationScratch scratch;
  for (uint64_t m : {1, 3}) {
    std::vector<float> x = gaussianRows(m, 1536, 6);
    std::vector<float> y(m * 1024);
    ASSERT_TRUE(linear->run(*pool, x.data(), y.data(), int64_t(m), scratch));
    Errors e = compare(y, referenceOrthogonalLinear(*layer.file, x, m));
    measured()["lm_head " + std::to_string(m) + "x1536->1024"] = e;
    EXPECT_LE(e.mse, 0.1);
    EXPECT_LT(e.relative, 0.02);
  }
}

TEST(Kernels, EmbeddingRowsMatchTheDequantizedRows) {
  MappedLayer layer(1024, 1536, 128, true, 9);
  ASSERT_TRUE(layer.file);
  std::unique_ptr<EmbeddingLayer> embedding;
  Status bound = EmbeddingLayer::bind(library(), *layer.file, embedding);
  ASSERT_TRUE(bound) << bound.message();
  // More rows than one chunk (at K = 1536, 40 rows on every target), so
  // the rotation is read by two chunks, the second of 7 rows: tiles of 4,
  // 2 and 1 rows past the full tiles of the first.
  std::vector<int64_t> ids = {0, 1023, 64, 63, 500, 0};
  for (int64_t i = 0; i < 41; ++i)
    ids.push_back((i * 389 + 11) % 1024);
  std::vector<float> out(ids.size() * 1536);
  ASSERT_TRUE(embedding->run(ids.data(), out.data(), int64_t(ids.size())));
  // The decoded row is the dequantized weight's row (docs/FORMAT.md section 5):
  // norm * (cb[idx] @ R^T) * isr, with isr = 1/s.
  std::vector<double> ref = dequantizeOrthogonalRows(*layer.file, ids);
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint64_t j = 0; j < 1536; ++j) {
      double s = storedHalf(*layer.file, CQ4P_REGION_INPUT_SCALE, j);
      double isr = storedHalf(*layer.file, CQ4P_REGION_INPUT_SCALE_RECIP, j);
      ref[i * 1536 + j] *= s * isr;
    }
  Errors e = compare(out, ref);
  measured()["embedding 47 rows x1536"] = e;
  EXPECT_LE(e.maxAbs, 1e-2);
}

namespace {

/// The embedding rows `ids` of `file` through `lib`.
std::vector<float> embedWith(const KernelLibrary &lib, const TensorFile &file,
                             const std::vector<int64_t> &ids) {
  std::unique_ptr<EmbeddingLayer> embedding;
  Status bound = EmbeddingLayer::bind(lib, file, embedding);
  EXPECT_TRUE(bound) << bound.message();
  std::vector<float> out(ids.size() * file.k(), std::nanf(""));
  if (embedding)
    EXPECT_TRUE(embedding->run(ids.data(), out.data(), int64_t(ids.size())));
  return out;
}

/// The decoded rows' oracle (docs/FORMAT.md section 5): the dequantized
/// weight's rows, norm * (cb[idx] @ R^T) / s, times s * isr (the decode
/// multiplies by the stored isr, not by 1 / s).
std::vector<double> embeddingOracle(const TensorFile &file,
                                    const std::vector<int64_t> &ids) {
  uint64_t k = file.k();
  std::vector<double> ref = dequantizeOrthogonalRows(file, ids);
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint64_t j = 0; j < k; ++j)
      ref[i * k + j] *= storedHalf(file, CQ4P_REGION_INPUT_SCALE, j) *
                        storedHalf(file, CQ4P_REGION_INPUT_SCALE_RECIP, j);
  return ref;
}

/// y of an orthogonal lm_head through `lib` on a pool of `threads` (which
/// split its groups between tasks).
std::vector<float> lmHeadWith(const KernelLibrary &lib, const TensorFile &file,
                              const std::vector<float> &x, uint64_t rows, int threads) {
  std::unique_ptr<LinearLayer> linear;
  Status bound = LinearLayer::bind(lib, file, linear);
  EXPECT_TRUE(bound) << bound.message();
  std::unique_ptr<ThreadPool> pool;
  EXPECT_TRUE(ThreadPool::create(threads, pool));
  ActivationScratch scratch;
  std::vector<float> y(rows * file.n(), std::nanf(""));
  if (linear)
    EXPECT_TRUE(linear->run(*pool, x.data(), y.data(), int64_t(rows), scratch));
  return y;
}

/// The small-K rotation cases: K of one and two 128-wide groups, one row
/// and the odd counts that leave single rows past groups of 4 and tiles.
struct RotationCase {
  uint64_t n, k;
};
constexpr RotationCase kRotationCases[] = {{192, 128}, {200, 256}};
const std::vector<uint64_t> kRotationRows = {1, 3, 9};

/// ids of `count` rows spread over the vocab, the first and last included.
std::vector<int64_t> spreadIds(uint64_t count, uint64_t n) {
  std::vector<int64_t> ids;
  for (uint64_t i = 0; i < count; ++i)
    ids.push_back(int64_t(i == 0 ? n - 1 : (i * 37 + 5) % n));
  return ids;
}

} // namespace

// The rotations at K = 128 and 256, one and several rows, against the
// fp64 oracles: embedding rows within the format's 1e-2 (and far tighter in
// relative terms), the lm_head's y as the other linears.
TEST(Kernels, RotationsAtSmallKMatchTheOracle) {
  uint32_t seed = 400;
  for (const RotationCase &c : kRotationCases) {
    MappedLayer layer(c.n, c.k, 128, true, seed++);
    ASSERT_TRUE(layer.file);
    for (uint64_t m : kRotationRows) {
      SCOPED_TRACE(::testing::Message() << m << " rows, K " << c.k);
      std::vector<int64_t> ids = spreadIds(m, c.n);
      Errors rows = compare(embedWith(library(), *layer.file, ids),
                            embeddingOracle(*layer.file, ids));
      measured()["embedding " + std::to_string(m) + " rows x" + std::to_string(c.k)] =
          rows;
      EXPECT_LE(rows.maxAbs, 1e-2);
      EXPECT_LT(rows.relative, 1e-3);
      std::vector<float> x = gaussianRows(m, c.k, seed++);
      Errors y = compare(lmHeadWith(library(), *layer.file, x, m, 2),
                         referenceOrthogonalLinear(*layer.file, x, m));
      measured()["lm_head " + std::to_string(m) + "x" + std::to_string(c.k) + "->" +
                 std::to_string(c.n)] = y;
      EXPECT_LE(y.mse, 0.1);
      EXPECT_LT(y.relative, 0.02);
    }
  }
}

TEST(Kernels, ShapesTheLibraryLacksAreRefusedBeforeAnyKernel) {
  MappedLayer layer(96, 256, 128, false, 11);
  std::unique_ptr<LinearLayer> linear;
  Status status = LinearLayer::bind(library(), *layer.file, linear);
  EXPECT_FALSE(status);
  EXPECT_FALSE(linear);
  EXPECT_NE(status.message().find("96"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(layer.file->path()), std::string::npos)
      << status.message();
}

TEST(Kernels, ALibraryForAnotherMachineIsRefused) {
  std::unique_ptr<KernelLibrary> other;
  Status status = KernelLibrary::open(CQ4P_TEST_FOREIGN_KERNEL_LIBRARY, other);
  EXPECT_FALSE(status);
  EXPECT_FALSE(other);
  EXPECT_NE(status.message().find(CQ4P_TEST_FOREIGN_KERNEL_LIBRARY),
            std::string::npos)
      << status.message();
  std::printf("refusal: %s\n", status.message().c_str());
}

/// The attention kernel of `library` for these parameters, or null.
cq4p_attention_fn attentionKernel(const KernelLibrary &lib, uint64_t heads,
                                  uint64_t kvHeads, uint64_t dim,
                                  uint32_t window) {
  for (size_t i = 0; i < lib.kernelCount(); ++i) {
    const cq4p_kernel_desc &kernel = lib.kernel(i);
    if (kernel.op == CQ4P_KERNEL_ATTENTION && kernel.n == heads &&
        kernel.k == dim && kernel.group_size == kvHeads &&
        kernel.window == window)
      return reinterpret_cast<cq4p_attention_fn>(const_cast<void *>(kernel.entry));
  }
  return nullptr;
}

/// Causal grouped-query attention in fp64, written plainly.
std::vector<double> referenceAttention(const std::vector<float> &q,
                                       const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t seq,
                                       int64_t heads, int64_t kvHeads,
                                       int64_t dim, int64_t window, double scale) {
  std::vector<double> out(size_t(seq * heads * dim), 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    int64_t kvh = h / (heads / kvHeads);
    for (int64_t i = 0; i < seq; ++i) {
      int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
      std::vector<double> p;
      double maximum = -1e300;
      for (int64_t j = first; j <= i; ++j) {
        double s = 0;
        for (int64_t d = 0; d < dim; ++d)
          s += double(q[(i * heads + h) * dim + d]) * k[(j * kvHeads + kvh) * dim + d];
        p.push_back(s * scale);
        maximum = std::max(maximum, p.back());
      }
      double sum = 0;
      for (double &x : p)
        sum += (x = std::exp(x - maximum));
      for (int64_t j = first; j <= i; ++j)
        for (int64_t d = 0; d < dim; ++d)
          out[(i * heads + h) * dim + d] +=
              p[j - first] / sum * v[(j * kvHeads + kvh) * dim + d];
    }
  }
  return out;
}

/// Runs every attention case through `lib` and checks it against fp64.
void checkAttention(const KernelLibrary &lib, const std::string &label) {
  // scale: kernels.mlir's (1 / sqrt(d), or Gemma 4's 1).
  struct Case {
    int64_t heads, kvHeads, dim, window;
    double scale;
  } cases[] = {{8, 4, 64, 0, 0.125},        {8, 4, 256, 0, 0.0625},
               {8, 4, 64, 32, 0.125},       {8, 4, 64, 20, 0.125},
               {12, 4, 64, 0, 0.125},       {24, 1, 32, 24, 1.0 / std::sqrt(32.0)},
               {8, 1, 256, 16, 1.0},        {8, 1, 512, 0, 1.0}};
  uint32_t seed = 300;
  for (const Case &c : cases) {
    cq4p_attention_fn kernel =
        attentionKernel(lib, c.heads, c.kvHeads, c.dim, uint32_t(c.window));
    ASSERT_NE(kernel, nullptr) << "no attention kernel for " << c.heads << "/"
                               << c.kvHeads << " heads, d " << c.dim;
    for (int64_t seq : {1, 17, 128}) {
      std::string name = label + "attention " + std::to_string(c.heads) + "/" +
                         std::to_string(c.kvHeads) + " d" + std::to_string(c.dim) +
                         (c.window ? " w" + std::to_string(c.window) : "") +
                         " S" + std::to_string(seq);
      SCOPED_TRACE(name);
      std::vector<float> q = gaussianRows(seq, c.heads * c.dim, seed++);
      std::vector<float> k = gaussianRows(seq, c.kvHeads * c.dim, seed++);
      std::vector<float> v = gaussianRows(seq, c.kvHeads * c.dim, seed++);
      std::vector<float> out(q.size(), std::nanf(""));
      // Two calls over head ranges, as two threads would make them (the
      // first cuts a group).
      kernel(q.data(), k.data(), v.data(), out.data(), seq, 0, 3);
      kernel(q.data(), k.data(), v.data(), out.data(), seq, 3, c.heads);
      Errors e = compare(out, referenceAttention(q, k, v, seq, c.heads, c.kvHeads,
                                                 c.dim, c.window, c.scale));
      measured()[name] = e;
      EXPECT_LT(e.relative, 0.01);
    }
  }
}

TEST(Kernels, PrefillAttentionMatchesTheFp64Oracle) {
  checkAttention(library(), "");
}

#ifdef CQ4P_TEST_SME2_KERNEL_LIBRARY

bool cpuRunsSme2(const CpuFeatures &cpu) {
  return (cpu.features & CQ4P_FEATURE_AARCH64_SME2) &&
         cpu.smeVectorBits == kSme2VectorBits;
}

/// y of one layer through the library at `path`.
std::vector<float> runWith(const std::string &path, const TensorFile &file,
                           const std::vector<float> &x, uint64_t rows) {
  std::unique_ptr<KernelLibrary> lib;
  Status opened = KernelLibrary::open(path, lib);
  EXPECT_TRUE(opened) << opened.message();
  if (!lib)
    return {};
  std::unique_ptr<LinearLayer> linear;
  Status bound = LinearLayer::bind(*lib, file, linear);
  EXPECT_TRUE(bound) << bound.message();
  std::unique_ptr<ThreadPool> pool;
  EXPECT_TRUE(ThreadPool::create(2, pool));
  ActivationScratch scratch;
  std::vector<float> y(rows * file.n(), std::nanf(""));
  Status ran = linear->run(*pool, x.data(), y.data(), int64_t(rows), scratch);
  EXPECT_TRUE(ran) << ran.message();
  return y;
}

// Runs at both streaming vector lengths (ctest starts it under QEMU at 512
// and at 256 bits): SME2 only where it is 512, NEON otherwise, by itself.
TEST(Sme2, TheBackendFollowsTheCpu) {
  CpuFeatures cpu = detectCpuFeatures();
  std::unique_ptr<KernelLibrary> lib;
  Backend chosen = Backend::Auto;
  std::string declined;
  Status status = KernelLibrary::openForBackend(
      Backend::Auto, CQ4P_TEST_KERNEL_LIBRARY, CQ4P_TEST_SME2_KERNEL_LIBRARY,
      cpu, lib, chosen, &declined);
  ASSERT_TRUE(status) << status.message();
  std::printf("streaming vector length %u bits: backend %s%s%s\n",
              cpu.smeVectorBits, backendName(chosen),
              declined.empty() ? "" : "; SME2 declined: ", declined.c_str());
  std::unique_ptr<KernelLibrary> forced;
  Status forcedStatus = KernelLibrary::openForBackend(
      Backend::Sme2, CQ4P_TEST_KERNEL_LIBRARY, CQ4P_TEST_SME2_KERNEL_LIBRARY,
      cpu, forced, chosen, nullptr);
  if (cpuRunsSme2(cpu)) {
    EXPECT_TRUE(forcedStatus) << forcedStatus.message();
    EXPECT_TRUE(declined.empty());
  } else {
    EXPECT_FALSE(forcedStatus);
    EXPECT_FALSE(forced);
    EXPECT_NE(forcedStatus.message().find("512"), std::string::npos)
        << forcedStatus.message();
    EXPECT_NE(declined.find("512"), std::string::npos) << declined;
  }
  // Whatever was chosen computes what NEON computes, bit for bit.
  MappedLayer layer(100, 256, 128, false, 31);
  std::vector<float> x = gaussianRows(3, 256, 32);
  std::vector<float> neon = runWith(CQ4P_TEST_KERNEL_LIBRARY, *layer.file, x, 3);
  std::vector<float> chosenY = runWith(lib->path(), *layer.file, x, 3);
  ASSERT_EQ(neon.size(), chosenY.size());
  EXPECT_EQ(0, std::memcmp(neon.data(), chosenY.data(), neon.size() * 4));
}

// SME2 partials (LUTI4 + SDOT into ZA) and NEON partials (TBL + SDOT) over
// the same inputs: the shared rescale makes equal partials equal outputs,
// so the outputs are compared bit for bit, and with the oracle.
TEST(Sme2, AgreesWithNeonBitForBitOverTheShapeGrid) {
  if (!cpuRunsSme2(detectCpuFeatures()))
    GTEST_SKIP() << "this CPU does not run SME2 at 512 bits";
  uint32_t seed = 200;
  for (const GridCase &c : grid()) {
    MappedLayer layer(c.n, c.k, c.gs, false, seed++);
    // The R-row leaves (R = 1, 2, 5 and, past a tile, 4), whole tiles (16,
    // 64); with a last super-block short of 64 channels also R = 3 and 6
    // (3, 22), R = 1 past a tile (17) and a padded tile (7): every kind of
    // row block, kept to a few shapes for QEMU's sake.
    std::vector<uint64_t> rows = {1, 2, 5, 16, 20, 64};
    if (c.n == 100)
      rows.insert(rows.end(), {3, 7, 17, 22});
    for (uint64_t m : rows) {
      SCOPED_TRACE(::testing::Message() << m << "x" << c.k << "->" << c.n
                                        << " gs" << c.gs);
      std::vector<float> x = gaussianRows(m, c.k, seed++);
      std::vector<float> neon = runWith(CQ4P_TEST_KERNEL_LIBRARY, *layer.file, x, m);
      std::vector<float> sme2 =
          runWith(CQ4P_TEST_SME2_KERNEL_LIBRARY, *layer.file, x, m);
      ASSERT_EQ(neon.size(), sme2.size());
      EXPECT_EQ(0, std::memcmp(neon.data(), sme2.data(), neon.size() * 4));
      Errors e = compare(sme2, referenceLinear(layer.weight, c.n, c.k, x, m));
      measured()["sme2 " + std::to_string(m) + "x" + std::to_string(c.k) + "->" +
                 std::to_string(c.n) + " gs" + std::to_string(c.gs)] = e;
      EXPECT_LT(e.relative, 0.02);
    }
  }
}

namespace {

/// The embedding rows of `count` spread ids of `file` through NEON's vector
/// code (the test library) and through `sme2`: the same bits, within the
/// format's 1e-2 of the fp64 oracle (recorded as `label`).
Errors expectEmbeddingRowsAgreeWithNeon(const KernelLibrary &sme2,
                                        const TensorFile &file, uint64_t count,
                                        const std::string &label) {
  std::vector<int64_t> ids = spreadIds(count, file.n());
  std::vector<float> neonRows = embedWith(library(), file, ids);
  std::vector<float> smeRows = embedWith(sme2, file, ids);
  EXPECT_EQ(neonRows.size(), smeRows.size());
  if (neonRows.size() == smeRows.size())
    EXPECT_EQ(0, std::memcmp(neonRows.data(), smeRows.data(), smeRows.size() * 4));
  Errors rows = compare(smeRows, embeddingOracle(file, ids));
  measured()[label] = rows;
  EXPECT_LE(rows.maxAbs, 1e-2);
  return rows;
}

} // namespace

// The embedding's prompt rows on SME2: chunks of 64 rows, those of at least
// 32 through the outer-product leaf (indices transposed through ZA, LUTI4,
// FP32 FMOPA), the rest through the FMLAL leaf. Counts below, at and past
// the threshold, a whole chunk, a chunk and one row, and two chunks and a
// short one: the same bits as NEON's vector code and within the fp64
// oracle's bounds, ids repeated and spread over the vocab.
TEST(Sme2, EmbeddingPromptRowsAgreeWithNeonBitForBit) {
  if (!cpuRunsSme2(detectCpuFeatures()))
    GTEST_SKIP() << "this CPU does not run SME2 at 512 bits";
  std::unique_ptr<KernelLibrary> sme2;
  Status opened = KernelLibrary::open(CQ4P_TEST_SME2_KERNEL_LIBRARY, sme2);
  ASSERT_TRUE(opened) << opened.message();
  uint32_t seed = 700;
  std::vector<RotationCase> cases(std::begin(kRotationCases), std::end(kRotationCases));
  cases.push_back({1024, 1536});
  for (const RotationCase &c : cases) {
    MappedLayer layer(c.n, c.k, 128, true, seed++);
    ASSERT_TRUE(layer.file);
    std::vector<uint64_t> counts = {1, 17, 31, 32, 50, 64, 65, 130};
    if (c.k == 1536)
      counts = {17, 33, 130};
    for (uint64_t m : counts) {
      SCOPED_TRACE(::testing::Message() << m << " rows, K " << c.k);
      Errors rows = expectEmbeddingRowsAgreeWithNeon(
          *sme2, *layer.file, m,
          "sme2 embedding prompt " + std::to_string(m) + " rows x" + std::to_string(c.k));
      EXPECT_LT(rows.relative, 1e-3);
    }
  }
}

// The rotations' streaming leaf (multi-vector FMLA into ZA; the library
// built with --sme2-fmlal-rotation=false) against the NEON vector code: each
// sum is the same chain of fused multiply-adds, so the embedding rows and
// the lm_head's y are equal bit for bit, and within the oracle's bounds.
// K = 1536 adds one-row passes of 16 and 8 blocks.
TEST(Sme2, RotationsAgreeWithNeonBitForBit) {
  if (!cpuRunsSme2(detectCpuFeatures()))
    GTEST_SKIP() << "this CPU does not run SME2 at 512 bits";
  std::unique_ptr<KernelLibrary> sme2;
  Status opened = KernelLibrary::open(CQ4P_TEST_SME2_NEON_ROTATION_KERNEL_LIBRARY, sme2);
  ASSERT_TRUE(opened) << opened.message();
  uint32_t seed = 500;
  std::vector<RotationCase> cases(std::begin(kRotationCases), std::end(kRotationCases));
  cases.push_back({1024, 1536});
  for (const RotationCase &c : cases) {
    MappedLayer layer(c.n, c.k, 128, true, seed++);
    ASSERT_TRUE(layer.file);
    std::vector<uint64_t> counts =
        c.k == 1536 ? std::vector<uint64_t>{1, 7, 15} : kRotationRows;
    for (uint64_t m : counts) {
      SCOPED_TRACE(::testing::Message() << m << " rows, K " << c.k);
      expectEmbeddingRowsAgreeWithNeon(
          *sme2, *layer.file, m,
          "sme2 embedding " + std::to_string(m) + " rows x" + std::to_string(c.k));
      std::vector<float> x = gaussianRows(m, c.k, seed++);
      for (int threads : {1, 2}) {
        std::vector<float> neonY = lmHeadWith(library(), *layer.file, x, m, threads);
        std::vector<float> smeY = lmHeadWith(*sme2, *layer.file, x, m, threads);
        ASSERT_EQ(neonY.size(), smeY.size());
        EXPECT_EQ(0, std::memcmp(neonY.data(), smeY.data(), smeY.size() * 4))
            << threads << " threads";
      }
      Errors y = compare(lmHeadWith(*sme2, *layer.file, x, m, 2),
                         referenceOrthogonalLinear(*layer.file, x, m));
      measured()["sme2 lm_head " + std::to_string(m) + "x" + std::to_string(c.k)] = y;
      EXPECT_LT(y.relative, 0.02);
    }
  }
}

// The default SME2 library's lm_head (--sme2-fmlal-rotation: a = x * isr
// rounded to fp16 after a power-of-two scaling, FMLAL into ZA) against the
// fp64 oracle, beside NEON's error on the same inputs: the rounding of a
// (about 2^-12 relative error per value) moves a few int8 activations
// across a rounding boundary of the quantization, so its y must stay within
// the bound the other linears meet, within 1.25 times NEON's relative error,
// and closer to NEON's y than half of NEON's error (measured: 0.16% to
// 0.25% apart, against 0.9% to 1% from the oracle). The embedding, whose values are exact in fp16, is
// still NEON's bit for bit, for one row (FMLAL leaf) and a prompt's rows
// (outer-product leaf). Rows of 1 and 9 at K 256, and one row at 1536 (a
// pass of 16 blocks and one of 8); also a row of large activations
// (4096 times the Gaussians: past fp16's range without the scaling).
TEST(Sme2, FmlalRotationMatchesTheOracle) {
  if (!cpuRunsSme2(detectCpuFeatures()))
    GTEST_SKIP() << "this CPU does not run SME2 at 512 bits";
  std::unique_ptr<KernelLibrary> sme2;
  Status opened = KernelLibrary::open(CQ4P_TEST_SME2_KERNEL_LIBRARY, sme2);
  ASSERT_TRUE(opened) << opened.message();
  struct Case {
    uint64_t n, k, rows;
    float magnitude;
  };
  uint32_t seed = 800;
  for (Case c : {Case{200, 256, 1, 1.0f}, Case{200, 256, 9, 1.0f},
                 Case{1024, 1536, 1, 1.0f}, Case{200, 256, 3, 4096.0f}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, K " << c.k << ", x times "
                                      << c.magnitude);
    MappedLayer layer(c.n, c.k, 128, true, seed++);
    ASSERT_TRUE(layer.file);
    expectEmbeddingRowsAgreeWithNeon(*sme2, *layer.file, c.rows,
                                     "sme2 fmlal embedding " + std::to_string(c.rows) +
                                         " rows x" + std::to_string(c.k));
    std::vector<float> x = gaussianRows(c.rows, c.k, seed++);
    for (float &v : x)
      v *= c.magnitude;
    std::vector<double> ref = referenceOrthogonalLinear(*layer.file, x, c.rows);
    std::vector<float> smeY = lmHeadWith(*sme2, *layer.file, x, c.rows, 2);
    std::vector<float> neonY = lmHeadWith(library(), *layer.file, x, c.rows, 2);
    Errors fmlal = compare(smeY, ref);
    Errors neon = compare(neonY, ref);
    Errors apart = compare(smeY, std::vector<double>(neonY.begin(), neonY.end()));
    std::string name = std::to_string(c.rows) + "x" + std::to_string(c.k) +
                       (c.magnitude != 1.0f ? " large" : "");
    measured()["sme2 fmlal lm_head " + name] = fmlal;
    measured()["sme2 fmlal vs neon lm_head " + name] = apart;
    EXPECT_LT(fmlal.relative, 0.02);
    EXPECT_LT(fmlal.relative, 1.25 * neon.relative);
    EXPECT_LT(apart.relative, 0.5 * neon.relative);
  }
}

// SME workers and NEON workers in one layer (Linear.h): of a pool's working
// threads (3 asked for, at most the CPUs: ThreadPool.h) all but the last
// run the SME2 matmul (up to 2), the last the NEON one, and y is the
// NEON-only y bit for bit. Which thread takes which task is the
// scheduler's choice (a loop does not wait for a worker that has not
// started, so under load the caller may take every task), so the test
// asserts what holds for any schedule: every call's y, and each task on the
// backend of the thread that ran it. Each backend's run of the same layer
// is then pinned: a pool of one thread runs every task as thread 0, an SME
// thread while SME workers are set, and NEON once they are 0.
TEST(Sme2, SmeAndNeonWorkersShareALayerBitForBit) {
  if (!cpuRunsSme2(detectCpuFeatures()))
    GTEST_SKIP() << "this CPU does not run SME2 at 512 bits";
  std::unique_ptr<KernelLibrary> sme2;
  Status opened = KernelLibrary::open(CQ4P_TEST_SME2_KERNEL_LIBRARY, sme2);
  ASSERT_TRUE(opened) << opened.message();
  std::unique_ptr<ThreadPool> one, three;
  ASSERT_TRUE(ThreadPool::create(1, one));
  ASSERT_TRUE(ThreadPool::create(3, three));
  int working = three->workingThreads();
  if (working < 2)
    GTEST_SKIP() << "one CPU: a pool works with one thread, SME2 alone";
  struct Case {
    uint64_t n, k;
    uint32_t gs;
    bool orthogonal;
  };
  for (Case c : {Case{192, 256, 64, false}, Case{1024, 1536, 128, true}}) {
    MappedLayer layer(c.n, c.k, c.gs, c.orthogonal, 300);
    ASSERT_TRUE(layer.file);
    std::unique_ptr<LinearLayer> neonOnly, mixed;
    ASSERT_TRUE(LinearLayer::bind(library(), *layer.file, neonOnly));
    ASSERT_TRUE(LinearLayer::bind(library(), *layer.file, mixed));
    Status attached = mixed->attachSme2(*sme2);
    ASSERT_TRUE(attached) << attached.message();
    ASSERT_TRUE(mixed->setSuperBlocksPerTask(1));
    int smeWorkers = mixed->smeWorkers();
    EXPECT_EQ(mixed->smeThreadsFor(3), 2);
    for (uint64_t m : {1, 5}) {
      SCOPED_TRACE(::testing::Message() << m << "x" << c.k << "->" << c.n);
      std::vector<float> x = gaussianRows(m, c.k, 301);
      ActivationScratch scratch;
      std::vector<float> want(m * c.n, std::nanf(""));
      ASSERT_TRUE(neonOnly->run(*one, x.data(), want.data(), int64_t(m), scratch));
      // Runs `mixed` on `pool`, checks y and each task's backend, and
      // returns the trace.
      auto run = [&](ThreadPool &pool, int smeThreads) {
        std::vector<float> y(m * c.n, std::nanf(""));
        LinearRunTrace trace;
        EXPECT_TRUE(mixed->run(pool, x.data(), y.data(), int64_t(m), scratch,
                               &trace));
        EXPECT_EQ(0, std::memcmp(want.data(), y.data(), y.size() * 4));
        EXPECT_EQ(trace.smeThreads, smeThreads);
        EXPECT_EQ(trace.neonMatmul->target, uint32_t(CQ4P_TARGET_AARCH64_NEON));
        if (smeThreads > 0) {
          EXPECT_NE(trace.sme2Matmul, nullptr);
          if (trace.sme2Matmul)
            EXPECT_EQ(trace.sme2Matmul->target,
                      uint32_t(CQ4P_TARGET_AARCH64_SME2));
        }
        for (const LinearRunTrace::MatmulTask &task : trace.matmulTasks)
          EXPECT_EQ(task.backend,
                    task.thread < trace.smeThreads ? Backend::Sme2 : Backend::Neon)
              << "super-blocks [" << task.superBlockBegin << ", "
              << task.superBlockEnd << ") on thread " << task.thread;
        return trace;
      };
      // Both backends at once, however the scheduler hands out the tasks.
      int64_t sme2Tasks = 0, neonTasks = 0;
      for (int call = 0; call < 4; ++call) {
        LinearRunTrace trace = run(*three, std::min(2, working - 1));
        sme2Tasks += trace.tasksOn(Backend::Sme2);
        neonTasks += trace.tasksOn(Backend::Neon);
        if (HasFailure())
          return;
      }
      std::printf("%llux%llu->%llu at 3 threads: %lld SME2 and %lld NEON "
                  "phase-2 tasks in 4 calls\n",
                  (unsigned long long)m, (unsigned long long)c.k,
                  (unsigned long long)c.n, (long long)sme2Tasks,
                  (long long)neonTasks);
      // Each backend alone, pinned: every task on thread 0.
      LinearRunTrace smeAlone = run(*one, 1);
      EXPECT_GT(smeAlone.tasksOn(Backend::Sme2), 0) << "the SME2 kernel never ran";
      EXPECT_EQ(smeAlone.tasksOn(Backend::Neon), 0);
      ASSERT_TRUE(mixed->setSmeWorkers(0));
      LinearRunTrace neonAlone = run(*one, 0);
      EXPECT_GT(neonAlone.tasksOn(Backend::Neon), 0) << "the NEON kernel never ran";
      EXPECT_EQ(neonAlone.tasksOn(Backend::Sme2), 0);
      ASSERT_TRUE(mixed->setSmeWorkers(smeWorkers));
      if (HasFailure())
        return;
    }
  }
}

// Attention through fp32 outer products (FMOPA) at a 512-bit streaming
// vector length.
TEST(Sme2, PrefillAttentionMatchesTheFp64Oracle) {
  if (!cpuRunsSme2(detectCpuFeatures()))
    GTEST_SKIP() << "this CPU does not run SME2 at 512 bits";
  std::unique_ptr<KernelLibrary> lib;
  Status opened = KernelLibrary::open(CQ4P_TEST_SME2_KERNEL_LIBRARY, lib);
  ASSERT_TRUE(opened) << opened.message();
  checkAttention(*lib, "sme2 ");
}

#endif // CQ4P_TEST_SME2_KERNEL_LIBRARY

} // namespace
