//===- SplitMix64.h - the SplitMix64 generator's steps ---------*- C++ -*-===//
//
// One definition of SplitMix64 (Steele, Lea and Flood, "Fast splittable
// pseudorandom number generators", 2014) for the runtime's two users: the
// sampler seeds xoshiro256** with it (Sampling.cpp) and the converter's
// orthogonal rotation draws its numbers from it (OrthogonalRotation.cpp,
// whose bits python/cq4p/quantize.py repeats).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_SPLITMIX64_H
#define CQ4P_RUNTIME_SRC_SPLITMIX64_H

#include <cstdint>

namespace cq4p::splitmix64 {

/// The step added to the state before each output (2^64 / golden ratio).
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

/// The finalizer: a bijection of 64-bit words that spreads every input bit
/// over the output.
constexpr uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

} // namespace cq4p::splitmix64

#endif // CQ4P_RUNTIME_SRC_SPLITMIX64_H
