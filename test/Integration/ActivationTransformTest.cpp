//===- ActivationTransformTest.cpp - the quantize kernels, bit for bit ----===//
//
// Calls the compiled Hadamard quantize kernels directly and compares their
// int8 activations and fp32 scales, bit for bit, with docs/FORMAT.md section 5's
// steps 1-2 written out as plain scalar fp32 code in the contract's order
// (section 6): the kernels are vector code, the oracle is one float at a
// time. Every group size, group ranges that leave neighbours untouched, and
// rows that stress the scale: all zero (the 1e-10 floor), tiny, huge, ones
// with many equal magnitudes, and one whose transform overflows (an
// infinite scale).
//
//===----------------------------------------------------------------------===//

#include "../unit/Runtime/LayerFiles.h"
#include "../unit/Runtime/TempDir.h"

#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/WeightView.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {

/// docs/FORMAT.md section 5 steps 1-2 for one row and group, scalar fp32.
/// `defined[j]` is cleared where the quotient is NaN (an infinite output
/// over an infinite scale), whose int8 value the contract leaves open.
void referenceGroup(const cq4p_weight_view &view, uint32_t gs, const float *x,
                    uint64_t g, int8_t *act, float *scale, uint8_t *defined) {
  std::vector<float> w(gs);
  for (uint32_t j = 0; j < gs; ++j) {
    float isr = halfToFloat(view.input_scale_recip[g * gs + j]);
    w[j] = x[g * gs + j] * isr * float(view.left_signs[j]);
  }
  for (uint32_t h = 1; h < gs; h *= 2)
    for (uint32_t i = 0; i < gs; ++i)
      if (!(i & h)) {
        float u = w[i], v = w[i + h];
        w[i] = u + v;
        w[i + h] = u - v;
      }
  const float invSqrt = float(1.0 / std::sqrt(double(gs)));
  for (uint32_t j = 0; j < gs; ++j)
    w[j] = w[j] * invSqrt * float(view.right_signs[j]);
  float maxAbs = 0.0f;
  for (uint32_t j = 0; j < gs; ++j)
    maxAbs = std::max(maxAbs, std::fabs(w[view.permutation[j]]));
  *scale = std::max(maxAbs / 127.0f, 1e-10f);
  for (uint32_t j = 0; j < gs; ++j) {
    float q = std::nearbyintf(w[view.permutation[j]] / *scale); // ties to even
    defined[j] = !std::isnan(q);
    act[j] = defined[j] ? int8_t(std::min(std::max(q, -128.0f), 127.0f)) : 0;
  }
}

/// Rows that exercise the scale: Gaussian, zero, tiny, huge, and rows of
/// +-1 whose transform has many equal magnitudes (ties in the abs-max).
std::vector<float> stressRows(uint64_t rows, uint64_t k, uint32_t seed) {
  std::vector<float> x = gaussianRows(rows, k, seed);
  for (uint64_t r = 0; r < rows; ++r) {
    float *row = x.data() + r * k;
    switch (r % 5) {
    case 1:
      std::fill(row, row + k, 0.0f);
      break;
    case 2:
      for (uint64_t i = 0; i < k; ++i)
        row[i] *= 1e-30f;
      break;
    case 3:
      for (uint64_t i = 0; i < k; ++i)
        row[i] *= 1e30f;
      break;
    case 4:
      for (uint64_t i = 0; i < k; ++i)
        row[i] = (i * 7 + r) % 3 ? 1.0f : -1.0f;
      break;
    }
  }
  return x;
}

/// Makes row `x` overflow in each group's transform: w = x * isr * left
/// about 1.75e38 (above half the largest float) at the two partners 2p and
/// 2p + 1 of the first butterfly stage, every other x zero. That stage gives
/// w[2p] + w[2p+1] = inf and a finite difference, so half the group's
/// outputs are +-inf and half finite, and its scale is infinite: the finite
/// ones must quantize to 0 (finite / inf), as the division gives.
void overflowRow(const WeightView &view, uint32_t gs, uint64_t k, float *x) {
  std::fill(x, x + k, 0.0f);
  const cq4p_weight_view &v = view.view();
  for (uint64_t g = 0; g < k / gs; ++g) {
    auto isr = [&](uint32_t j) {
      return halfToFloat(v.input_scale_recip[g * gs + j]);
    };
    // The pair with the largest reciprocal scales keeps x finite.
    uint32_t best = 0;
    for (uint32_t p = 0; p < gs; p += 2)
      if (std::min(isr(p), isr(p + 1)) > std::min(isr(best), isr(best + 1)))
        best = p;
    for (uint32_t j : {best, best + 1}) {
      x[g * gs + j] = 1.75e38f / isr(j) * float(v.left_signs[j]);
      float w = x[g * gs + j] * isr(j) * float(v.left_signs[j]);
      ASSERT_TRUE(std::isfinite(x[g * gs + j]) && w > 1.7015e38f)
          << "group " << g << " k " << j << ": x " << x[g * gs + j] << " w " << w;
    }
  }
}

void checkLibrary(const char *path) {
  std::unique_ptr<KernelLibrary> library;
  Status opened = KernelLibrary::open(path, library);
  ASSERT_TRUE(opened) << opened.message();
  struct Shape {
    uint64_t k;
    uint32_t gs;
  };
  uint32_t seed = 11;
  for (Shape s : {Shape{256, 32}, Shape{256, 64}, Shape{256, 128},
                  Shape{256, 256}, Shape{1536, 128}}) {
    SCOPED_TRACE(::testing::Message() << "K " << s.k << " gs " << s.gs);
    TempDir dir;
    LayerFile layer = realisticLayerFile(64, s.k, s.gs, false, seed++);
    std::string file = dir.file("w.cq4p.weights");
    ASSERT_TRUE(writeBytes(file, layer.bytes));
    std::unique_ptr<TensorFile> tensor;
    ASSERT_TRUE(TensorFile::open(file, tensor));
    WeightView view;
    ASSERT_TRUE(view.bind(*tensor));
    auto kernels =
        library->find(CQ4P_KERNEL_QUANTIZE_HADAMARD, 64, s.k, s.gs, false);
    ASSERT_FALSE(kernels.empty());
    uint64_t ng = s.k / s.gs;
    for (const cq4p_kernel_desc *kernel : kernels) {
      auto quantize = reinterpret_cast<cq4p_quantize_fn>(const_cast<void *>(kernel->entry));
      for (uint64_t m : {1, 3, 5, 16}) {
        if (m < kernel->min_rows || (kernel->max_rows && m > kernel->max_rows))
          continue;
        // All groups, and (when there are three or more) the inner ones
        // only, so that the first and last must stay untouched.
        for (uint64_t begin : {uint64_t(0), uint64_t(1)}) {
          uint64_t end = begin ? ng - 1 : ng;
          if (begin >= end)
            continue;
          SCOPED_TRACE(::testing::Message() << kernel->name << " M " << m
                                            << " groups [" << begin << ", "
                                            << end << ")");
          std::vector<float> x = stressRows(m, s.k, seed++);
          if (m == 16)
            overflowRow(view, s.gs, s.k, x.data() + 15 * s.k);
          std::vector<int8_t> act(m * s.k, 0x55), want = act;
          std::vector<uint8_t> defined(m * s.k, 1);
          std::vector<float> scales(m * ng, -1.0f), wantScales = scales;
          for (uint64_t r = 0; r < m; ++r)
            for (uint64_t g = begin; g < end; ++g)
              referenceGroup(view.view(), s.gs, x.data() + r * s.k, g,
                             want.data() + r * s.k + g * s.gs,
                             wantScales.data() + r * ng + g,
                             defined.data() + r * s.k + g * s.gs);
          quantize(&view.view(), x.data(), act.data(), scales.data(),
                   int64_t(m), int64_t(begin), int64_t(end));
          for (uint64_t i = 0; i < act.size(); ++i)
            if (defined[i])
              ASSERT_EQ(int(want[i]), int(act[i]))
                << "row " << i / s.k << " k " << i % s.k;
          for (uint64_t i = 0; i < scales.size(); ++i)
            ASSERT_EQ(0, std::memcmp(&wantScales[i], &scales[i], 4))
                << "row " << i / ng << " group " << i % ng << ": "
                << wantScales[i] << " vs " << scales[i];
        }
      }
    }
  }
}

TEST(ActivationTransform, QuantizeKernelsMatchTheScalarContractBitForBit) {
  checkLibrary(CQ4P_TEST_KERNEL_LIBRARY);
}

#ifdef CQ4P_TEST_LEVEL_X86_64_V4_AVX512VNNI
// Each x86-64 level lowers the transform its own way (AVX2: 8 lanes and
// PSHUFB per 16 bytes; AVX-512: 16 lanes and word permutes over the group),
// so each is held to the scalar contract itself, where this CPU runs it.
TEST(ActivationTransform, EveryHostLevelsQuantizeKernelsMatchTheScalarContract) {
  for (const char *path : {CQ4P_TEST_LEVEL_X86_64_V3_AVXVNNI,
                           CQ4P_TEST_LEVEL_X86_64_V4_AVX512VNNI}) {
    SCOPED_TRACE(path);
    std::unique_ptr<KernelLibrary> library;
    Status opened = KernelLibrary::open(path, library);
    if (!opened) {
      EXPECT_NE(opened.message().find("which this CPU lacks"), std::string::npos)
          << opened.message();
      std::printf("not run on this CPU: %s\n", opened.message().c_str());
      continue;
    }
    checkLibrary(path);
  }
}
#endif

#ifdef CQ4P_TEST_SME2_KERNEL_LIBRARY
// The SME2 library's quantize kernels: a streaming leaf (16 lanes, TBL
// butterflies, SQCVT, two-vector TBL) for groups of 64, 128 and 256, the
// NEON lowering for groups of 32; held to the same scalar contract.
TEST(ActivationTransform, Sme2LibraryQuantizeKernelsMatchTheScalarContract) {
  checkLibrary(CQ4P_TEST_SME2_KERNEL_LIBRARY);
}
#endif

} // namespace
