//===- QuantizeIsa.h - the converter's kernel paths -------------*- C++ -*-===//
//
// The native quantizer and rotation pick their widest x86 path at run time
// and refuse bad arguments the same way;
// $CQ4P_QUANTIZE_ISA = generic | avx2 caps it (avx512 or unset: no cap;
// `convert` refuses any other value), so that tests run every path on one
// machine (all give the same bits).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_QUANTIZEISA_H
#define CQ4P_RUNTIME_SRC_QUANTIZEISA_H

#include <cstdarg>
#include <cstddef>
#include <cstdio>
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

/// The most threads a quantizer or rotation call takes (ThreadPool's bound):
/// a larger count is refused, not tried thread by thread until the system
/// runs out of them.
inline constexpr int kMaxThreads = 1024;

/// Writes the formatted message into error (when there is room) and returns
/// code: how the quantizer's and the rotation's C entry points refuse.
inline int fail(int code, char *error, size_t error_size, const char *format,
                ...) {
  if (error != nullptr && error_size > 0) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error, error_size, format, args);
    va_end(args);
  }
  return code;
}

} // namespace cq4p::quantize

#endif // CQ4P_RUNTIME_SRC_QUANTIZEISA_H
