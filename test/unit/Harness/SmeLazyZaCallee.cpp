//===- SmeLazyZaCallee.cpp - callees without ZA state ---------------------===//
//
// Kept in a translation unit of its own so that the compiler cannot see
// through the calls of SmeLazyZaTest.cpp: it must follow the SME ABI's
// lazy-save protocol for real.
//
//===----------------------------------------------------------------------===//

#include <arm_sme.h>

namespace {
/// A function with ZA state of its own: entering it commits any pending
/// lazy save of the caller's ZA, and it then overwrites all of ZA.
__arm_locally_streaming __arm_new("za") __attribute__((noinline)) void
clobberZa() {
  const svbool_t words = svptrue_b32();
  const svint32_t junk = svdup_n_s32(-1);
  for (uint32_t i = 0; i < svcntsw(); ++i) {
    svwrite_hor_za32_s32_m(0, i, words, junk);
    svwrite_hor_za32_s32_m(1, i, words, junk);
    svwrite_hor_za32_s32_m(2, i, words, junk);
    svwrite_hor_za32_s32_m(3, i, words, junk);
  }
}
} // namespace

/// Plain functions (private ZA): callers holding live ZA must set up a
/// lazy save before calling them.
extern "C" __attribute__((noinline)) void cq4p_callee_using_za() { clobberZa(); }

extern "C" __attribute__((noinline)) int cq4p_callee_without_za(int x) {
  return x * 3 + 1;
}
