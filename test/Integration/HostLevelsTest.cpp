//===- HostLevelsTest.cpp - every x86-64 level's kernels, bit for bit -----===//
//
// kernels.mlir compiled by cq4p-compile at each --host-cpu level with its
// own panel dot (x86-64-v3: AVX2, the default; x86-64-v3+avxvnni: 256-bit
// vpdpbusd; x86-64-v4+avx512vnni: 512-bit vpdpbusd). The int32 partials
// are exact and the rescale and the rotations sum in one order, so every
// level must give the bits of the default library, which KernelTest.cpp
// holds to the fp64 oracle; here each level is also checked against that
// oracle directly. The attention kernels too: their prompt rows sum in
// one order at every vector width and whatever heads share a block, so
// each level gives the default's bits, and a call split in two head ranges
// gives those of one call. A level this CPU cannot run is refused at load, naming
// what it lacks. The default library, holding the three levels' kernels,
// runs each level's bits.
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
#include <cmath>
#include <cstring>

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {

struct Level {
  const char *name, *path;
  uint64_t features; ///< what the library must record
};

constexpr uint64_t kV2 = CQ4P_FEATURE_X86_64_V2 | CQ4P_FEATURE_X86_SSSE3;
constexpr uint64_t kV3 = kV2 | CQ4P_FEATURE_X86_64_V3 | CQ4P_FEATURE_X86_AVX2;

const Level kLevels[] = {
    {"x86-64-v3", CQ4P_TEST_LEVEL_X86_64_V3, kV3},
    {"x86-64-v3+avxvnni", CQ4P_TEST_LEVEL_X86_64_V3_AVXVNNI,
     kV3 | CQ4P_FEATURE_X86_AVXVNNI},
    {"x86-64-v4+avx512vnni", CQ4P_TEST_LEVEL_X86_64_V4_AVX512VNNI,
     kV3 | CQ4P_FEATURE_X86_64_V4 | CQ4P_FEATURE_X86_AVX512BW |
         CQ4P_FEATURE_X86_AVX512VNNI},
};

struct Mapped {
  TempDir dir;
  std::unique_ptr<TensorFile> file;
  Mapped(uint64_t n, uint64_t k, uint32_t gs, bool orthogonal, uint32_t seed) {
    std::string path = dir.file("w.cq4p.weights");
    EXPECT_TRUE(writeBytes(path, realisticLayerFile(n, k, gs, orthogonal, seed).bytes));
    Status status = TensorFile::open(path, file);
    EXPECT_TRUE(status) << status.message();
  }
};

/// The outputs of every case, one vector per case, from `library`.
std::vector<std::vector<float>> outputs(const KernelLibrary &library) {
  std::vector<std::vector<float>> all;
  std::unique_ptr<ThreadPool> pool;
  EXPECT_TRUE(ThreadPool::create(2, pool));
  ActivationScratch scratch;
  struct Case {
    uint64_t n, k;
    uint32_t gs;
  };
  for (Case c : {Case{72, 256, 32}, Case{100, 256, 64}, Case{192, 256, 256},
                 Case{100, 1536, 128}}) {
    Mapped layer(c.n, c.k, c.gs, false, uint32_t(c.n + c.gs));
    std::unique_ptr<LinearLayer> linear;
    Status bound = LinearLayer::bind(library, *layer.file, linear);
    EXPECT_TRUE(bound) << bound.message();
    if (!linear)
      return all;
    std::vector<double> weight = dequantize(*layer.file);
    for (uint64_t m : {1, 5, 16}) {
      std::vector<float> x = gaussianRows(m, c.k, uint32_t(m));
      std::vector<float> y(m * c.n);
      EXPECT_TRUE(linear->run(*pool, x.data(), y.data(), int64_t(m), scratch));
      std::vector<double> ref = referenceLinear(weight, c.n, c.k, x, m);
      double diff2 = 0, ref2 = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        diff2 += (y[i] - ref[i]) * (y[i] - ref[i]);
        ref2 += ref[i] * ref[i];
      }
      EXPECT_LT(std::sqrt(diff2 / ref2), 0.02) << c.n << "x" << c.k << " M " << m;
      all.push_back(y);
    }
  }
  Mapped head(1024, 1536, 128, true, 5);
  std::unique_ptr<LinearLayer> linear;
  EXPECT_TRUE(LinearLayer::bind(library, *head.file, linear));
  for (uint64_t m : {1, 3}) {
    std::vector<float> x = gaussianRows(m, 1536, 6);
    std::vector<float> y(m * 1024);
    EXPECT_TRUE(linear->run(*pool, x.data(), y.data(), int64_t(m), scratch));
    std::vector<double> ref = referenceOrthogonalLinear(*head.file, x, m);
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      diff2 += (y[i] - ref[i]) * (y[i] - ref[i]);
      ref2 += ref[i] * ref[i];
    }
    EXPECT_LT(std::sqrt(diff2 / ref2), 0.02) << "lm_head M " << m;
    all.push_back(y);
  }
  std::unique_ptr<EmbeddingLayer> embedding;
  EXPECT_TRUE(EmbeddingLayer::bind(library, *head.file, embedding));
  // More ids than one tile of rows, so full tiles and single rows both run.
  std::vector<int64_t> ids = {0, 1023, 64, 63, 500, 0, 7, 8, 9, 1000, 12};
  std::vector<float> out(ids.size() * 1536);
  EXPECT_TRUE(embedding->run(ids.data(), out.data(), int64_t(ids.size())));
  std::vector<double> ref = dequantizeOrthogonalRows(*head.file, ids);
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint64_t j = 0; j < 1536; ++j) {
      double s = storedHalf(*head.file, CQ4P_REGION_INPUT_SCALE, j);
      double isr = storedHalf(*head.file, CQ4P_REGION_INPUT_SCALE_RECIP, j);
      EXPECT_NEAR(out[i * 1536 + j], ref[i * 1536 + j] * s * isr, 1e-2);
    }
  all.push_back(out);
  // Every attention kernel over a prompt of 40 rows (more than a block of
  // rows and than two tiles of keys) and one row: the heads whole, then in
  // the two ranges two threads would take, which give the same bits (a
  // row's outputs do not depend on which heads share its block).
  for (size_t i = 0; i < library.kernelCount(); ++i) {
    const cq4p_kernel_desc &kernel = library.kernel(i);
    if (kernel.op != CQ4P_KERNEL_ATTENTION)
      continue;
    auto attention =
        reinterpret_cast<cq4p_attention_fn>(const_cast<void *>(kernel.entry));
    int64_t heads = int64_t(kernel.n), kvHeads = int64_t(kernel.group_size),
            dim = int64_t(kernel.k);
    for (int64_t seq : {40, 1}) {
      std::vector<float> q = gaussianRows(seq, heads * dim, uint32_t(i + 7));
      std::vector<float> k = gaussianRows(seq, kvHeads * dim, uint32_t(i + 8));
      std::vector<float> v = gaussianRows(seq, kvHeads * dim, uint32_t(i + 9));
      std::vector<float> whole(q.size(), std::nanf("")), split = whole;
      attention(q.data(), k.data(), v.data(), whole.data(), seq, 0, heads);
      attention(q.data(), k.data(), v.data(), split.data(), seq, 0, 3);
      attention(q.data(), k.data(), v.data(), split.data(), seq, 3, heads);
      EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
          << "attention " << heads << "/" << kvHeads << " heads, d " << dim << ", "
          << seq << " rows: the split heads differ from the whole";
      EXPECT_TRUE(std::all_of(whole.begin(), whole.end(),
                              [](float x) { return std::isfinite(x); }))
          << "attention " << heads << "/" << kvHeads << ": an output not written";
      all.push_back(whole);
    }
  }
  return all;
}

TEST(HostLevels, EveryLevelRecordsItsFeaturesAndGivesTheDefaultLevelsBits) {
  CpuFeatures cpu = detectCpuFeatures();
  std::unique_ptr<KernelLibrary> reference;
  Status opened = KernelLibrary::open(kLevels[0].path, reference);
  if (!opened)
    GTEST_SKIP() << opened.message();
  std::vector<std::vector<float>> expected = outputs(*reference);
  for (const Level &level : kLevels) {
    SCOPED_TRACE(level.name);
    std::unique_ptr<KernelLibrary> library;
    Status status = KernelLibrary::open(level.path, library);
    if (level.features & ~cpu.features) {
      EXPECT_FALSE(status);
      EXPECT_NE(status.message().find("which this CPU lacks"), std::string::npos)
          << status.message();
      std::printf("%s: not run on this CPU: %s\n", level.name,
                  status.message().c_str());
      continue;
    }
    ASSERT_TRUE(status) << status.message();
    for (size_t i = 0; i < library->kernelCount(); ++i)
      EXPECT_EQ(library->table().kernels[i].features, level.features)
          << library->table().kernels[i].name;
    std::vector<std::vector<float>> got = outputs(*library);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t c = 0; c < got.size(); ++c)
      EXPECT_EQ(0, std::memcmp(got[c].data(), expected[c].data(),
                               got[c].size() * sizeof(float)))
          << "case " << c;
  }
}

// The default library (no --host-cpu) holds the three levels' kernels:
// each, forced in turn, gives the bits of its pinned library, and without
// a level asked for the widest this CPU runs is chosen.
TEST(HostLevels, TheDefaultLibraryRunsEachLevelBitForBit) {
  CpuFeatures cpu = detectCpuFeatures();
  std::unique_ptr<KernelLibrary> reference;
  ASSERT_TRUE(KernelLibrary::open(kLevels[0].path, cpu, "", "--test", reference));
  std::vector<std::vector<float>> expected = outputs(*reference);
  // The widest level, asked of the CPU directly (not through CpuFeatures).
  __builtin_cpu_init();
  const char *widest = "x86-64-v3";
  if (__builtin_cpu_supports("avxvnni"))
    widest = "x86-64-v3+avxvnni";
  if (__builtin_cpu_supports("x86-64-v4") && __builtin_cpu_supports("avx512vnni"))
    widest = "x86-64-v4+avx512vnni";
  std::unique_ptr<KernelLibrary> library;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_TEST_EVERY_LEVEL, cpu, "", "--test", library));
  EXPECT_EQ(library->variant(), widest);
  EXPECT_EQ(library->variantCount(), 3u);
  int ran = 0;
  for (const Level &level : kLevels) {
    SCOPED_TRACE(level.name);
    Status status = KernelLibrary::open(CQ4P_TEST_EVERY_LEVEL, cpu, level.name,
                                        "--test", library);
    if (level.features & ~cpu.features) {
      EXPECT_FALSE(status);
      EXPECT_NE(status.message().find("this CPU lacks it"), std::string::npos)
          << status.message();
      continue;
    }
    ASSERT_TRUE(status) << status.message();
    EXPECT_EQ(library->variant(), level.name);
    for (size_t i = 0; i < library->kernelCount(); ++i)
      EXPECT_EQ(library->table().kernels[i].features, level.features)
          << library->table().kernels[i].name;
    std::vector<std::vector<float>> got = outputs(*library);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t c = 0; c < got.size(); ++c)
      EXPECT_EQ(0, std::memcmp(got[c].data(), expected[c].data(),
                               got[c].size() * sizeof(float)))
          << "case " << c;
    ++ran;
  }
  std::printf("default library: %d of 3 levels run here, chosen: %s\n", ran,
              widest);
  // Where the CPU lacks the widest, the next one down is chosen.
  CpuFeatures v3 = cpu;
  v3.features = kV3;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_TEST_EVERY_LEVEL, v3, "", "--test", library));
  EXPECT_EQ(library->variant(), "x86-64-v3");
}

TEST(HostLevels, ALevelTheCpuLacksIsRefusedNamingTheMissingFeatures) {
  CpuFeatures v3 = detectCpuFeatures();
  v3.features = kV3;
  std::unique_ptr<KernelLibrary> library;
  Status status =
      KernelLibrary::open(CQ4P_TEST_LEVEL_X86_64_V4_AVX512VNNI, v3, library);
  EXPECT_FALSE(status);
  EXPECT_FALSE(library);
  EXPECT_NE(status.message().find("needs avx512bw, avx512vnni, x86-64-v4, "
                                  "which this CPU lacks (it has: ssse3, avx2, "
                                  "x86-64-v2, x86-64-v3)"),
            std::string::npos)
      << status.message();
  // The default level runs on any x86-64-v3 CPU.
  EXPECT_TRUE(KernelLibrary::open(CQ4P_TEST_LEVEL_X86_64_V3, v3, library));
}

// Phase-2 tasks sized from the work: a layer too small to split runs as
// one task on the calling thread (no worker woken), a larger one gives
// every thread tasks.
TEST(HostRuntime, MatmulTasksAreSizedFromTheWorkAndTheThreads) {
  std::unique_ptr<KernelLibrary> library;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_TEST_LEVEL_X86_64_V3, library));
  std::unique_ptr<ThreadPool> pool;
  ASSERT_TRUE(ThreadPool::create(2, pool));
  ActivationScratch scratch;
  struct Case {
    uint64_t n, k;
    uint32_t gs;
    int64_t rows, tasks;
  };
  // 64 x K multiply-adds per super-block and row; at least 2^16 per task.
  for (Case c : {Case{192, 256, 64, 1, 1}, Case{100, 1536, 128, 1, 2},
                 Case{192, 256, 64, 5, 3}}) {
    Mapped layer(c.n, c.k, c.gs, false, 3);
    std::unique_ptr<LinearLayer> linear;
    ASSERT_TRUE(LinearLayer::bind(*library, *layer.file, linear));
    std::vector<float> x = gaussianRows(uint64_t(c.rows), c.k, 4);
    std::vector<float> y(size_t(c.rows) * c.n);
    LinearRunTrace trace;
    ASSERT_TRUE(linear->run(*pool, x.data(), y.data(), c.rows, scratch, &trace));
    EXPECT_EQ(int64_t(trace.matmulTasks.size()), c.tasks)
        << c.n << "x" << c.k << ", " << c.rows << " rows";
    if (c.tasks == 1)
      EXPECT_EQ(trace.matmulTasks[0].thread, 0);
  }
}

} // namespace
