//===- Sampling.h - picking a token id from a row of logits ----*- C++ -*-===//
//
// The sampler a Model uses after each step (Model::sample, generate), on
// its own so that it can be read and tested apart from the model's
// bindings, memory and threads: the options, the seeded generator whose
// draws are the same on every machine, the one-pass scan of a row of
// logits that the model's check and the sampler share, and the Sampler.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SAMPLING_H
#define CQ4P_RUNTIME_SAMPLING_H

#include "cq4p/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace cq4p::runtime {

struct SamplingOptions {
  /// <= 0: greedy (the lowest id of the largest logit).
  float temperature = 0.0f;
  int32_t topK = 0;         ///< 0: off
  float topP = 1.0f;        ///< >= 1: off
  uint64_t seed = 0;
};

/// xoshiro256** seeded through splitmix64: the same ids for the same seed
/// on every machine.
class Rng {
public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next();
  /// Uniform in [0, 1), from the top 53 bits of next().
  double uniform();

private:
  uint64_t state_[4];
};

/// What one pass over a row of logits learns (scanLogits): the
/// largest logit as an integer key ordered as the floats are (-0.0 and +0.0
/// equal), the start of the first block of logits that holds it, and
/// whether any logit is NaN or an infinity.
struct LogitScan {
  int32_t bestKey = std::numeric_limits<int32_t>::min();
  size_t bestBlock = 0;
  bool nonFinite = false;
};

/// Picks a token id from logits. Scratch is sized once (reserve); sample()
/// never allocates.
class Sampler {
public:
  /// Makes room for a vocabulary of `vocab` ids.
  void reserve(size_t vocab);
  size_t capacity() const { return order_.size(); }

  /// Checks temperature, top_k and top_p (NaN, negative top_k, top_p <= 0).
  static Status validate(const SamplingOptions &options);

  /// Greedy when temperature <= 0 or top_k == 1. Otherwise softmax of
  /// logits / temperature over the top_k largest logits (all when 0), then
  /// the smallest prefix of them, largest first, whose probability reaches
  /// top_p; one draw of `rng` picks among those. Ties between equal logits
  /// go to the lower id throughout. NaN or +inf logits are refused by index.
  /// `scanned`, when given, is the scan of these very logits (the model's
  /// check of its own step's logits), which then are not scanned again.
  Status sample(const float *logits, size_t vocab,
                const SamplingOptions &options, Rng &rng, int64_t &id,
                const LogitScan *scanned = nullptr);

private:
  std::vector<uint32_t> order_;
  std::vector<double> weights_;
};

/// One pass over `count` logits (see LogitScan).
LogitScan scanLogits(const float *logits, size_t count);

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_SAMPLING_H
