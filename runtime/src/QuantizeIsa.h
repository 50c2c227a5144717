//===- QuantizeIsa.h - the converter's kernel paths -------------*- C++ -*-===//
//
// The native quantizer and rotation pick their widest x86 path at run time;
// $CQ4P_QUANTIZE_ISA = generic | avx2 caps it, so that tests run every path
// on one machine (all give the same bits).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_QUANTIZEISA_H
#define CQ4P_RUNTIME_SRC_QUANTIZEISA_H

#include <cstdlib>
#include <cstring>

namespace cq4p::quantize {

/// 0: generic code, 1: at most AVX2, 2: AVX-512 allowed.
inline int isaCap() {
  static const int cap = [] {
    const char *value = std::getenv("CQ4P_QUANTIZE_ISA");
    if (value && std::strcmp(value, "generic") == 0)
      return 0;
    if (value && std::strcmp(value, "avx2") == 0)
      return 1;
    return 2;
  }();
  return cap;
}

} // namespace cq4p::quantize

#endif // CQ4P_RUNTIME_SRC_QUANTIZEISA_H
