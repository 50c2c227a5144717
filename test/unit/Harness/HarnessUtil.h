//===- HarnessUtil.h - shared helpers of the aarch64 harness tests -*- C++ -*-===//

#ifndef CQ4P_TEST_UNIT_HARNESS_HARNESSUTIL_H
#define CQ4P_TEST_UNIT_HARNESS_HARNESSUTIL_H

#include <cstdint>
#include <random>
#include <vector>

namespace cq4p::test {

/// Deterministic int8 data covering the whole range, extremes included.
inline std::vector<int8_t> randomInt8(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  std::vector<int8_t> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<int8_t>(dist(rng));
  if (count >= 2) {
    values[0] = -128;
    values[1] = 127;
  }
  return values;
}

/// Deterministic bytes (packed 4-bit indices, two per byte).
inline std::vector<uint8_t> randomBytes(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<uint8_t> values(count);
  for (uint8_t &v : values)
    v = static_cast<uint8_t>(dist(rng));
  return values;
}

/// Nibble j of a packed buffer: byte j/2, low nibble first (docs/FORMAT.md section 3).
inline unsigned nibble(const uint8_t *packed, size_t j) {
  return (packed[j / 2] >> (4 * (j % 2))) & 0xF;
}

} // namespace cq4p::test

#endif // CQ4P_TEST_UNIT_HARNESS_HARNESSUTIL_H
