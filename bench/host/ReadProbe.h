//===- ReadProbe.h - the read-bandwidth probe of bench/host ---------------===//
//
// A plain vector read: what a streaming kernel can hope for. Used by
// cq4p-bench-host beside each GEMV and by cq4p-bench-decode-probe over the
// bytes of a decode step.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_BENCH_HOST_READPROBE_H
#define CQ4P_BENCH_HOST_READPROBE_H

#include <cstddef>
#include <cstdint>
#include <cstring>

/// Sums 128-byte blocks with AVX2 loads into four independent
/// accumulators; the sum keeps the loads alive.
__attribute__((target("avx2"))) inline uint64_t readProbe(const uint8_t *data,
                                                          size_t bytes) {
  typedef long long v4i64 __attribute__((vector_size(32)));
  v4i64 a = {0, 0, 0, 0}, b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    v4i64 x0, x1, x2, x3;
    std::memcpy(&x0, data + i, 32);
    std::memcpy(&x1, data + i + 32, 32);
    std::memcpy(&x2, data + i + 64, 32);
    std::memcpy(&x3, data + i + 96, 32);
    a += x0;
    b += x1;
    c += x2;
    d += x3;
  }
  v4i64 s = a + b + c + d;
  return uint64_t(s[0] + s[1] + s[2] + s[3]);
}

#endif // CQ4P_BENCH_HOST_READPROBE_H
