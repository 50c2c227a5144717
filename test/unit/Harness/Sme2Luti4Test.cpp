//===- Sme2Luti4Test.cpp - LUTI4 from ZT0 expands nibble j to byte j ------===//
//
// The SME2 kernels expand a 128-byte kg-block of panel nibbles through ZT0
// (holding the int8 codebook) with LUTI4: result byte j = codebook[nibble j],
// nibbles taken low first, the codebook as the low bytes of ZT0's sixteen
// 32-bit entries. Checked value by value against scalar math for
// the ACLE forms (single vector with segment index, and x2) and for the LLVM
// intrinsic path the cq4p lowering emits (kernels/luti4.mlir).
//
//===----------------------------------------------------------------------===//

#include "HarnessUtil.h"

#include <arm_sme.h>
#include <gtest/gtest.h>
#include <sys/auxv.h>

#ifndef HWCAP2_SME2
#define HWCAP2_SME2 (1UL << 37)
#endif

// Emitted from kernels/luti4.mlir by cq4p-opt: expands `packed` (one
// streaming vector of nibbles) into 2 vectors at `out` with two LUTI4 of
// segments 0 and 1, ZT0 loaded from `table` (64 bytes). Locally streaming
// with a new ZT0, so it is called like any C function.
extern "C" void cq4p_harness_luti4(const uint8_t *table, const uint8_t *packed,
                                   int8_t *out);

namespace {
using cq4p::test::nibble;
using cq4p::test::randomBytes;
using cq4p::test::randomInt8;

const int8_t kLevels[16] = {-127, -95, -71, -52, -36, -22, -10, -3,
                            3,    10,  22,  36,  52,  71,  95,  127};

/// The 64-byte ZT0 image of an int8 codebook. ZT0 holds sixteen 32-bit
/// table entries and LUTI4 on bytes takes the low byte of entry i for index
/// i; the other bytes are filled with 0xA5 to show that they are not read.
std::vector<uint8_t> codebookTable() {
  std::vector<uint8_t> table(64, 0xA5);
  for (int i = 0; i < 16; ++i)
    table[4 * i] = static_cast<uint8_t>(kLevels[i]);
  return table;
}

// Locally streaming with a new ZT0: plain C-ABI functions, as compiled
// kernels are, callable from ordinary code.
__arm_locally_streaming __arm_new("zt0") void
expandSegments(const uint8_t *table, const uint8_t *packed, int8_t *out) {
  svldr_zt(0, table);
  svuint8_t indices = svld1_u8(svptrue_b8(), packed);
  svst1_s8(svptrue_b8(), out, svluti4_lane_zt_s8(0, indices, 0));
  svst1_s8(svptrue_b8(), out + svcntb(), svluti4_lane_zt_s8(0, indices, 1));
}

__arm_locally_streaming __arm_new("zt0") void
expandPair(const uint8_t *table, const uint8_t *packed, int8_t *out) {
  svldr_zt(0, table);
  svuint8_t indices = svld1_u8(svptrue_b8(), packed);
  svint8x2_t pair = svluti4_lane_zt_s8_x2(0, indices, 0);
  svst1_s8(svptrue_b8(), out, svget2(pair, 0));
  svst1_s8(svptrue_b8(), out + svcntb(), svget2(pair, 1));
}

void expectExpansion(void (*expand)(const uint8_t *, const uint8_t *,
                                    int8_t *),
                     uint32_t seed) {
  size_t svlBytes = svcntsb();
  auto table = codebookTable();
  auto packed = randomBytes(svlBytes, seed);
  std::vector<int8_t> out(2 * svlBytes, 0);
  expand(table.data(), packed.data(), out.data());
  // Segment s covers nibbles [s * svl, (s + 1) * svl): half of the vector.
  for (size_t j = 0; j < 2 * svlBytes; ++j)
    ASSERT_EQ(out[j], kLevels[nibble(packed.data(), j)])
        << "byte " << j;
}

TEST(Sme2Luti4, HarnessHasSme2) {
  ASSERT_NE(getauxval(AT_HWCAP2) & HWCAP2_SME2, 0u)
      << "the aarch64 suites must run on an SME2 CPU (QEMU 11.1 -cpu max)";
}

TEST(Sme2Luti4, AcleSegmentsMatchScalar) { expectExpansion(expandSegments, 11); }

TEST(Sme2Luti4, AclePairMatchesScalar) { expectExpansion(expandPair, 12); }

TEST(Sme2Luti4, EmittedIntrinsicMatchesScalar) {
  expectExpansion(cq4p_harness_luti4, 13);
}

} // namespace
