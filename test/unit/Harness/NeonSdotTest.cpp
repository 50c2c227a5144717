//===- NeonSdotTest.cpp - SDOT executes as the scalar math says -----------===//
//
// The NEON kernels are built on SDOT: lane i of the accumulator gains
// sum_{j<4} a[4i+j] * b[4i+j]. Checked lane by lane against plain scalar
// math, for the ACLE form and for the same instruction emitted by cq4p-opt
// from `arm_neon.intr.sdot` (the lowering's own path: MLIR -> LLVM IR ->
// llc), and for the indexed form the GEMV uses to broadcast one activation
// lane against 16 channels.
//
//===----------------------------------------------------------------------===//

#include "HarnessUtil.h"

#include <arm_neon.h>
#include <gtest/gtest.h>

// Emitted from kernels/sdot.mlir by cq4p-opt (see CMakeLists.txt).
extern "C" int32x4_t cq4p_harness_sdot(int32x4_t acc, int8x16_t a,
                                       int8x16_t b);

namespace {
using cq4p::test::randomInt8;

constexpr int kVectors = 257;

std::vector<int32_t> scalarLaneDots(const std::vector<int8_t> &a,
                                    const std::vector<int8_t> &b) {
  std::vector<int32_t> expected(4, 0);
  for (int v = 0; v < kVectors; ++v)
    for (int lane = 0; lane < 4; ++lane)
      for (int j = 0; j < 4; ++j) {
        size_t i = v * 16 + lane * 4 + j;
        expected[lane] += int32_t(a[i]) * int32_t(b[i]);
      }
  return expected;
}

template <typename Dot>
std::vector<int32_t> vectorLaneDots(const std::vector<int8_t> &a,
                                    const std::vector<int8_t> &b, Dot dot) {
  int32x4_t acc = vdupq_n_s32(0);
  for (int v = 0; v < kVectors; ++v)
    acc = dot(acc, vld1q_s8(&a[v * 16]), vld1q_s8(&b[v * 16]));
  std::vector<int32_t> lanes(4);
  vst1q_s32(lanes.data(), acc);
  return lanes;
}

TEST(NeonSdot, AcleMatchesScalar) {
  auto a = randomInt8(kVectors * 16, 1), b = randomInt8(kVectors * 16, 2);
  auto got = vectorLaneDots(a, b, [](int32x4_t acc, int8x16_t x, int8x16_t y) {
    return vdotq_s32(acc, x, y);
  });
  EXPECT_EQ(got, scalarLaneDots(a, b));
}

TEST(NeonSdot, EmittedByCq4pOptMatchesScalar) {
  auto a = randomInt8(kVectors * 16, 3), b = randomInt8(kVectors * 16, 4);
  auto got = vectorLaneDots(a, b, cq4p_harness_sdot);
  EXPECT_EQ(got, scalarLaneDots(a, b));
}

TEST(NeonSdot, ExtremesDoNotSaturate) {
  // 257 vectors of (-128 * -128) * 4 per lane: 16,842,752, far past int16.
  std::vector<int8_t> a(kVectors * 16, -128), b(kVectors * 16, -128);
  auto got = vectorLaneDots(a, b, cq4p_harness_sdot);
  for (int32_t lane : got)
    EXPECT_EQ(lane, kVectors * 4 * 128 * 128);
}

TEST(NeonSdot, IndexedLaneMatchesScalar) {
  // acc[i] += sum_j w[4i+j] * x[4*lane+j]: one activation group against
  // four channels, as a GEMV inner step does.
  auto w = randomInt8(16, 5), x = randomInt8(16, 6);
  int8x16_t wv = vld1q_s8(w.data()), xv = vld1q_s8(x.data());
  int32_t got[4][4];
  vst1q_s32(got[0], vdotq_laneq_s32(vdupq_n_s32(0), wv, xv, 0));
  vst1q_s32(got[1], vdotq_laneq_s32(vdupq_n_s32(0), wv, xv, 1));
  vst1q_s32(got[2], vdotq_laneq_s32(vdupq_n_s32(0), wv, xv, 2));
  vst1q_s32(got[3], vdotq_laneq_s32(vdupq_n_s32(0), wv, xv, 3));
  for (int lane = 0; lane < 4; ++lane)
    for (int i = 0; i < 4; ++i) {
      int32_t expected = 0;
      for (int j = 0; j < 4; ++j)
        expected += int32_t(w[4 * i + j]) * int32_t(x[4 * lane + j]);
      EXPECT_EQ(got[lane][i], expected) << "lane " << lane << " channel " << i;
    }
}

} // namespace
