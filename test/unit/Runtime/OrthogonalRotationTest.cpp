//===- OrthogonalRotationTest.cpp - the converter's K x K rotation --------===//
//
// cq4p_orthogonal_rotation against a scalar, column-by-column reading of
// its definition (runtime/src/OrthogonalRotation.cpp's file comment), bit
// for bit, at every thread count; its orthogonality; its refusals. The
// numpy implementation is compared with it in python/tests.
//
// This file is compiled with -ffp-contract=off, as the rotation is.
//
//===----------------------------------------------------------------------===//

#include "cq4p/cq4p.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

uint64_t splitMix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The definition, one column and one operation at a time.
std::vector<double> referenceRotation(uint64_t k, uint64_t seed) {
  const uint64_t key = splitMix(splitMix(seed) ^ k);
  uint64_t counter = 0; // the Gaussians are drawn in order: x_0, x_1, ...
  std::vector<std::vector<double>> u(k);
  std::vector<double> beta(k), sign(k);
  for (uint64_t j = 0; j < k; ++j) {
    std::vector<double> x(k - j);
    for (double &value : x) {
      double sum = 0.0;
      for (int l = 0; l < 12; ++l) {
        ++counter;
        const uint64_t bits = splitMix(key + counter * 0x9E3779B97F4A7C15ull);
        const double uniform = std::ldexp(double(bits >> 11), -53);
        sum = l == 0 ? uniform : sum + uniform;
      }
      value = sum - 6.0;
    }
    double squares = 0.0;
    for (double value : x) {
      const double square = value * value;
      squares = squares + square;
    }
    const double norm = std::sqrt(squares);
    const double s = x[0] >= 0.0 ? 1.0 : -1.0;
    sign[j] = -s;
    const double shifted = s * norm;
    const double x0 = x[0];
    x[0] = x0 + shifted;
    const double sum = norm + std::fabs(x0);
    beta[j] = norm * sum;
    u[j] = x;
  }
  std::vector<double> rotation(k * k);
  for (uint64_t c = 0; c < k; ++c) {
    std::vector<double> y(k, 0.0);
    y[c] = 1.0;
    for (int64_t j = int64_t(std::min(c, k >= 2 ? k - 2 : 0)); k >= 2 && j >= 0; --j) {
      if (beta[j] == 0.0)
        continue;
      double acc = 0.0;
      for (uint64_t i = j; i < k; ++i) {
        const double product = u[j][i - j] * y[i];
        acc = acc + product;
      }
      const double w = acc / beta[j];
      for (uint64_t i = j; i < k; ++i) {
        const double product = w * u[j][i - j];
        y[i] = y[i] - product;
      }
    }
    for (uint64_t i = 0; i < k; ++i)
      rotation[i * k + c] = sign[c] * y[i];
  }
  return rotation;
}

std::vector<double> nativeRotation(uint64_t k, uint64_t seed, int threads) {
  std::vector<double> rotation(k * k, -7.0);
  char error[256] = "";
  EXPECT_EQ(cq4p_orthogonal_rotation(k, seed, threads, rotation.data(), error, sizeof(error)),
            CQ4P_OK)
      << error;
  return rotation;
}

bool sameBits(const std::vector<double> &a, const std::vector<double> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(OrthogonalRotation, IsItsDefinitionBitForBitAtEveryThreadCount) {
  for (uint64_t k : {1, 2, 3, 17, 31, 32, 33, 64, 100, 130}) {
    for (uint64_t seed : {uint64_t(0), uint64_t(7), ~uint64_t(0)}) {
      const std::vector<double> expected = referenceRotation(k, seed);
      for (int threads : {1, 2, 3})
        EXPECT_TRUE(sameBits(nativeRotation(k, seed, threads), expected))
            << "K = " << k << ", seed " << seed << ", " << threads << " threads";
    }
  }
}

TEST(OrthogonalRotation, IsOrthogonalAndDense) {
  const uint64_t k = 256;
  const std::vector<double> r = nativeRotation(k, 3, 2);
  double worst = 0.0;
  for (uint64_t a = 0; a < k; ++a)
    for (uint64_t b = 0; b < k; ++b) {
      double dot = 0.0;
      for (uint64_t i = 0; i < k; ++i)
        dot += r[i * k + a] * r[i * k + b];
      worst = std::max(worst, std::fabs(dot - (a == b ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 1e-13);
  uint64_t zeros = 0;
  for (double value : r)
    zeros += value == 0.0;
  EXPECT_EQ(zeros, 0u);
}

TEST(OrthogonalRotation, DependsOnTheSeedAndTheWidth) {
  const std::vector<double> a = nativeRotation(64, 1, 1), b = nativeRotation(64, 2, 1);
  EXPECT_FALSE(sameBits(a, b));
  const std::vector<double> wider = nativeRotation(65, 1, 1);
  EXPECT_NE(wider[0], a[0]);
}

TEST(OrthogonalRotation, RefusesBadArguments) {
  char error[256] = "";
  double one = 0.0;
  EXPECT_EQ(cq4p_orthogonal_rotation(0, 0, 1, &one, error, sizeof(error)), CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(std::string(error).find("K = 0, expected 1 to 65536"), std::string::npos) << error;
  EXPECT_EQ(cq4p_orthogonal_rotation(65537, 0, 1, &one, error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(std::string(error).find("K = 65537"), std::string::npos) << error;
  EXPECT_EQ(cq4p_orthogonal_rotation(4, 0, 1, nullptr, error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(std::string(error).find("no output"), std::string::npos) << error;
}

} // namespace
