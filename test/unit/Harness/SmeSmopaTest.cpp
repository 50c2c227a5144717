//===- SmeSmopaTest.cpp - SMOPA accumulates int8 outer products -----------===//
//
// The SME2 GEMM accumulates 4-way int8 outer products into the four 32-bit
// ZA tiles: ZAt[i][j] += sum_{k<4} a[4i+k] * b[4j+k]. Checked element by
// element against a plain int32 matmul, for all four tiles, over enough
// steps that the sums pass int16. (QEMU 7.2 computes these wrongly.)
//
//===----------------------------------------------------------------------===//

#include "HarnessUtil.h"

#include <arm_sme.h>
#include <gtest/gtest.h>

namespace {
using cq4p::test::randomInt8;

constexpr int kSteps = 24;

/// Accumulates `steps` outer products of a[step] x b[tile][step] into tile
/// `tile` (0..3) of ZA and stores the four tiles, row-major, to `out`.
__arm_locally_streaming __arm_new("za") void
outerProducts(const int8_t *a, const int8_t *b, int steps, int32_t *out) {
  const svbool_t all = svptrue_b8();
  const uint64_t svl = svcntsb();
  for (int s = 0; s < steps; ++s) {
    svint8_t zn = svld1_s8(all, a + s * svl);
    svmopa_za32_s8_m(0, all, all, zn, svld1_s8(all, b + (0 * steps + s) * svl));
    svmopa_za32_s8_m(1, all, all, zn, svld1_s8(all, b + (1 * steps + s) * svl));
    svmopa_za32_s8_m(2, all, all, zn, svld1_s8(all, b + (2 * steps + s) * svl));
    svmopa_za32_s8_m(3, all, all, zn, svld1_s8(all, b + (3 * steps + s) * svl));
  }
  const uint64_t rows = svcntsw();
  const svbool_t words = svptrue_b32();
  for (uint32_t i = 0; i < rows; ++i) {
    svst1_hor_za32(0, i, words, out + (0 * rows + i) * rows);
    svst1_hor_za32(1, i, words, out + (1 * rows + i) * rows);
    svst1_hor_za32(2, i, words, out + (2 * rows + i) * rows);
    svst1_hor_za32(3, i, words, out + (3 * rows + i) * rows);
  }
}

TEST(SmeSmopa, FourTilesMatchScalarMatmul) {
  const size_t svl = svcntsb(), rows = svl / 4;
  auto a = randomInt8(kSteps * svl, 21);
  auto b = randomInt8(4 * kSteps * svl, 22);
  std::vector<int32_t> out(4 * rows * rows, 0x7eadbeef);
  outerProducts(a.data(), b.data(), kSteps, out.data());
  for (size_t t = 0; t < 4; ++t)
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < rows; ++j) {
        int32_t expected = 0;
        for (int s = 0; s < kSteps; ++s)
          for (size_t k = 0; k < 4; ++k)
            expected += int32_t(a[s * svl + 4 * i + k]) *
                        int32_t(b[(t * kSteps + s) * svl + 4 * j + k]);
        ASSERT_EQ(out[(t * rows + i) * rows + j], expected)
            << "tile " << t << " row " << i << " column " << j;
      }
}

TEST(SmeSmopa, StreamingVectorLengthIs512Bits) {
  // The kernels assume a 512-bit streaming vector length: 16 int32 rows.
  EXPECT_EQ(svcntsb(), 64u);
}

} // namespace
