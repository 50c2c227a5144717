//===- SmeLazyZaTest.cpp - live ZA survives calls through the SME ABI -----===//
//
// A function holding live ZA state calls a plain function, which calls a
// function that uses ZA itself. The SME ABI's lazy save must keep the
// caller's ZA: __arm_tpidr2_save commits it to the caller's buffer when the
// callee claims ZA, __arm_tpidr2_restore brings it back. Both routines come
// from cq4p's runtime (runtime/src/sme_abi).
//
// Built a second time against routines that do nothing
// (CQ4P_NOOP_SME_ABI): there the caller's ZA must be lost, which proves
// that this test can tell a working ABI from a broken one.
//
//===----------------------------------------------------------------------===//

#include <arm_sme.h>
#include <gtest/gtest.h>

#include <vector>

extern "C" void cq4p_callee_using_za();
extern "C" int cq4p_callee_without_za(int);

namespace {

int32_t pattern(uint32_t tile, uint32_t row, uint32_t column) {
  return int32_t(tile * 100000 + row * 1000 + column + 1);
}

/// Fills the four 32-bit tiles with a pattern, calls `callee` (a plain
/// function), then stores what ZA holds afterwards to `out`.
template <void (*callee)()>
__arm_locally_streaming __arm_new("za") void holdZaAcrossCall(int32_t *out) {
  const svbool_t words = svptrue_b32();
  const uint32_t rows = svcntsw();
  for (uint32_t i = 0; i < rows; ++i) {
    svint32_t base = svindex_s32(pattern(0, i, 0), 1);
    svwrite_hor_za32_s32_m(0, i, words, base);
    svwrite_hor_za32_s32_m(1, i, words, svadd_n_s32_x(words, base, 100000));
    svwrite_hor_za32_s32_m(2, i, words, svadd_n_s32_x(words, base, 200000));
    svwrite_hor_za32_s32_m(3, i, words, svadd_n_s32_x(words, base, 300000));
  }
  callee();
  for (uint32_t i = 0; i < rows; ++i) {
    svst1_hor_za32(0, i, words, out + (0 * rows + i) * rows);
    svst1_hor_za32(1, i, words, out + (1 * rows + i) * rows);
    svst1_hor_za32(2, i, words, out + (2 * rows + i) * rows);
    svst1_hor_za32(3, i, words, out + (3 * rows + i) * rows);
  }
}

void calleeWithoutZa() {
  volatile int sink = cq4p_callee_without_za(41);
  (void)sink;
}

/// Number of ZA elements that differ from the pattern.
size_t mismatches(const std::vector<int32_t> &out) {
  const uint32_t rows = svcntsw();
  size_t count = 0;
  for (uint32_t t = 0; t < 4; ++t)
    for (uint32_t i = 0; i < rows; ++i)
      for (uint32_t j = 0; j < rows; ++j)
        count += out[(t * rows + i) * rows + j] != pattern(t, i, j);
  return count;
}

#ifndef CQ4P_NOOP_SME_ABI

TEST(SmeLazyZa, SurvivesCalleeThatUsesZa) {
  std::vector<int32_t> out(4 * svcntsw() * svcntsw(), 0);
  holdZaAcrossCall<cq4p_callee_using_za>(out.data());
  EXPECT_EQ(mismatches(out), 0u);
}

TEST(SmeLazyZa, SurvivesCalleeWithoutZa) {
  std::vector<int32_t> out(4 * svcntsw() * svcntsw(), 0);
  holdZaAcrossCall<calleeWithoutZa>(out.data());
  EXPECT_EQ(mismatches(out), 0u);
}

#else

TEST(SmeLazyZaNoopAbi, LosesZaWhenCalleeUsesZa) {
  std::vector<int32_t> out(4 * svcntsw() * svcntsw(), 0);
  holdZaAcrossCall<cq4p_callee_using_za>(out.data());
  // Nothing was saved, so what comes back is not the caller's ZA.
  EXPECT_EQ(mismatches(out), out.size());
}

#endif

} // namespace
