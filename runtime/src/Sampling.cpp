//===- Sampling.cpp - picking a token id from a row of logits -------------===//

#include "cq4p/runtime/Sampling.h"

#include "SplitMix64.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace cq4p::runtime {
namespace {

std::string str(uint64_t value) { return std::to_string(value); }

} // namespace

void Rng::reseed(uint64_t seed) {
  // splitmix64 spreads any seed (0 included) over xoshiro's whole state,
  // which must not be all zero.
  for (uint64_t &word : state_) {
    seed += splitmix64::kGamma;
    word = splitmix64::mix(seed);
  }
}

uint64_t Rng::next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  uint64_t result = rotl(state_[1] * 5, 7) * 9;
  uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

void Sampler::reserve(size_t vocab) {
  if (order_.size() < vocab) {
    order_.resize(vocab);
    weights_.resize(vocab);
  }
}

Status Sampler::validate(const SamplingOptions &options) {
  if (!std::isfinite(options.temperature))
    return Status(CQ4P_ERROR_ARGUMENT,
                  "sampling: temperature: expected a finite number (<= 0: "
                  "greedy), found " +
                      std::string(std::isnan(options.temperature) ? "nan"
                                  : options.temperature > 0   ? "+inf"
                                                              : "-inf"));
  if (options.topK < 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "sampling: top_k: expected >= 0 (0: off), found " +
                      std::to_string(options.topK));
  if (std::isnan(options.topP) || options.topP < 0.0f)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "sampling: top_p: expected a number >= 0 (>= 1: off), found " +
                      std::to_string(options.topP));
  // Greedy reads no top_p, so a zero-filled cq4p_sampling (temperature 0,
  // top_p 0) is greedy; a nucleus of probability 0 when sampling is not.
  bool greedy = options.temperature <= 0.0f || options.topK == 1;
  if (!greedy && options.topP == 0.0f)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "sampling: top_p: expected > 0 when sampling (temperature " +
                      std::to_string(options.temperature) +
                      "; >= 1: off), found 0");
  return Status::ok();
}

namespace {
/// The order sampling ranks ids in: larger logit first, then lower id.
struct ByLogit {
  const float *logits;
  bool operator()(uint32_t a, uint32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

/// One pass over a row of logits in a form the compiler vectorizes (integer
/// max and or reductions; a loop over floats with early exits or NaN-aware
/// comparisons stays scalar): every logit becomes an integer key ordered as
/// the floats are, with -0.0 and +0.0 equal, and a flag says whether any
/// logit is NaN or an infinity. A step's check scans its logits once, and
/// sampling them reuses that scan, so a decode token costs one pass over the
/// vocabulary before the greedy pick, a fraction of the scalar loops it
/// fronts.

int32_t orderedKey(uint32_t bits) {
  // Negative floats order backwards as integers: flip their magnitude
  // bits, then shift them up by one so that -0.0 lands on +0.0's key.
  int32_t s = int32_t(bits);
  return (s ^ ((s >> 31) & 0x7fffffff)) + int32_t(bits >> 31);
}

uint32_t floatBits(const float *value) {
  uint32_t bits;
  std::memcpy(&bits, value, sizeof bits);
  return bits;
}

/// The lowest index of the largest logit, from a scan of finite logits.
size_t firstBest(const float *logits, const LogitScan &scan) {
  size_t i = scan.bestBlock;
  while (orderedKey(floatBits(logits + i)) != scan.bestKey)
    ++i;
  return i;
}
} // namespace

LogitScan scanLogits(const float *logits, size_t count) {
  constexpr size_t block = 1024;
  constexpr uint32_t exponent = 0x7f800000u;
  LogitScan scan;
  uint32_t nonFinite = 0;
  for (size_t start = 0; start < count; start += block) {
    size_t end = std::min(count, start + block);
    int32_t most = std::numeric_limits<int32_t>::min();
    for (size_t i = start; i < end; ++i) {
      uint32_t bits = floatBits(logits + i);
      nonFinite |= uint32_t((bits & exponent) == exponent);
      most = std::max(most, orderedKey(bits));
    }
    if (most > scan.bestKey) {
      scan.bestKey = most;
      scan.bestBlock = start;
    }
  }
  scan.nonFinite = nonFinite != 0;
  return scan;
}

Status Sampler::sample(const float *logits, size_t vocab,
                       const SamplingOptions &options, Rng &rng, int64_t &id,
                       const LogitScan *scanned) {
  if (vocab == 0 || vocab > order_.size())
    return Status(CQ4P_ERROR_ARGUMENT,
                  "sampling: vocabulary of " + str(vocab) +
                      " ids; this sampler has room for 1.." +
                      str(order_.size()));
  if (Status status = validate(options); !status)
    return status;
  size_t best = 0;
  LogitScan scan = scanned != nullptr ? *scanned : scanLogits(logits, vocab);
  if (!scan.nonFinite) {
    best = firstBest(logits, scan);
  } else {
    // Any NaN or infinity: the plain loop, which names the first bad logit
    // and lets -inf through.
    for (size_t i = 0; i < vocab; ++i) {
      float logit = logits[i];
      if (std::isnan(logit) || logit == std::numeric_limits<float>::infinity())
        return Status(CQ4P_ERROR_ARGUMENT,
                      "sampling: logits[" + str(i) + "] is " +
                          (std::isnan(logit) ? "nan" : "+inf"));
      if (logit > logits[best])
        best = i;
    }
  }
  if (logits[best] == -std::numeric_limits<float>::infinity())
    return Status(CQ4P_ERROR_ARGUMENT,
                  "sampling: every one of the " + str(vocab) +
                      " logits is -inf");
  if (options.temperature <= 0.0f || options.topK == 1) {
    id = int64_t(best);
    return Status::ok();
  }

  for (size_t i = 0; i < vocab; ++i)
    order_[i] = uint32_t(i);
  ByLogit byLogit{logits};
  size_t candidates = vocab;
  size_t sorted = 0; // order_[0, sorted) holds the largest, in order
  if (options.topK > 0 && size_t(options.topK) < vocab) {
    candidates = size_t(options.topK);
    std::partial_sort(order_.begin(), order_.begin() + candidates,
                      order_.begin() + vocab, byLogit);
    sorted = candidates;
  }
  // Weights relative to the largest logit, so the largest weighs 1.
  double inverseTemperature = 1.0 / double(options.temperature);
  auto weight = [&](uint32_t candidate) {
    return std::exp((double(logits[candidate]) - double(logits[best])) *
                    inverseTemperature);
  };
  double total = 0;
  for (size_t i = 0; i < candidates; ++i)
    total += weight(order_[i]);

  if (options.topP < 1.0f) {
    // The nucleus is usually a handful of ids: sort a growing prefix
    // rather than the whole vocabulary.
    double target = double(options.topP) * total, kept = 0;
    size_t nucleus = 0, want = 64;
    for (;;) {
      size_t end = std::min(want, candidates);
      if (end > sorted) {
        std::partial_sort(order_.begin() + sorted, order_.begin() + end,
                          order_.begin() + candidates, byLogit);
        sorted = end;
      }
      for (; nucleus < end && kept < target; ++nucleus)
        kept += weight(order_[nucleus]);
      if (kept >= target || end == candidates)
        break;
      want *= 4;
    }
    candidates = std::max<size_t>(nucleus, 1);
  }
  total = 0;
  for (size_t i = 0; i < candidates; ++i) {
    weights_[i] = weight(order_[i]);
    total += weights_[i];
  }

  double threshold = rng.uniform() * total, sum = 0;
  size_t last = 0;
  for (size_t i = 0; i < candidates; ++i) {
    if (weights_[i] <= 0.0)
      continue;
    last = i;
    sum += weights_[i];
    if (threshold < sum)
      break;
  }
  id = int64_t(order_[last]);
  return Status::ok();
}

} // namespace cq4p::runtime
