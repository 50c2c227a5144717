//===- LayerFiles.h - realistic CQ4 tensors and their fp64 meaning -*- C++ -*-===//
//
// For the layer tests: panel files that look like a converted model's
// (a Lloyd-Max-spaced 16-level codebook, indices distributed like quantized
// Gaussian coordinates, norms near 1, input scales in [1/2, 2], a real
// orthogonal rotation), written with TestFiles.h, and an oracle that
// dequantizes a file plainly from its stored regions (docs/FORMAT.md section 2,
// rotations as explicit matrices) and multiplies in fp64.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TEST_UNIT_RUNTIME_LAYERFILES_H
#define CQ4P_TEST_UNIT_RUNTIME_LAYERFILES_H

#include "TestFiles.h"

#include "cq4p/runtime/TensorFile.h"

#include "fp16.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace cq4p::test {

inline float halfToFloat(uint16_t half) { return cq4p_half_to_float(half); }

/// binary16 bits of `value` rounded to nearest, ties to even (finite
/// values within binary16's range, which is all the tests use).
inline uint16_t roundHalf(float value) {
  uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  double magnitude = std::fabs(double(value));
  if (magnitude == 0.0)
    return sign;
  int exponent;
  std::frexp(magnitude, &exponent); // magnitude in [2^(exponent-1), 2^exponent)
  int e = exponent - 1;
  if (e < -14) // subnormal: a multiple of 2^-24
    return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(magnitude, 24))));
  double mantissa = std::nearbyint(std::ldexp(magnitude, 10 - e)); // [1024, 2048]
  if (mantissa == 2048.0) {
    mantissa = 1024.0;
    ++e;
  }
  if (e > 15)
    std::abort(); // a test value out of binary16's range is a bug in the test
  return uint16_t(sign | (e + 15) << 10 | (uint16_t(mantissa) - 1024));
}

/// The 8 positive levels of the 16-level Lloyd-Max quantizer of a unit
/// Gaussian (the negative ones mirror them).
constexpr double kLloydMax16[8] = {0.1284, 0.3881, 0.6568, 0.9424,
                                   1.2562, 1.6181, 2.0690, 2.7326};

/// Level i (0..15, ascending) in units of the Gaussian's sigma.
inline double lloydMaxLevel(int i) {
  return i < 8 ? -kLloydMax16[7 - i] : kLloydMax16[i - 8];
}

/// A panel file and what went into it.
struct LayerFile {
  CqTensor tensor;
  std::vector<uint8_t> bytes;
};

/// A tensor as a converter would store it. Hadamard: pre-scaled codebook
/// (max |level| exactly 127) and norms carrying the factor; orthogonal: the
/// raw codebook for d = K and a rotation orthonormalised in fp64, stored as
/// fp16. Input scales 2^u, u uniform in [-1, 1], and their fp16 reciprocals.
inline LayerFile realisticLayerFile(uint64_t n, uint64_t k, uint32_t groupSize,
                                    bool orthogonal, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gaussian(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  CqTensor t;
  t.n = n;
  t.k = k;
  t.orthogonal = orthogonal;
  t.groupSize = orthogonal ? uint32_t(k) : groupSize;

  // Levels for one coordinate of a unit vector in d dimensions: sigma
  // 1/sqrt(d).
  double d = orthogonal ? double(k) : double(groupSize);
  double sigma = 1.0 / std::sqrt(d);
  double prescale = orthogonal ? 1.0 : 127.0 / (kLloydMax16[7] * sigma);
  for (int i = 0; i < 16; ++i)
    t.codebook.push_back(roundHalf(float(lloydMaxLevel(i) * sigma * prescale)));

  t.indices.resize(n * k);
  for (uint8_t &index : t.indices) {
    double z = gaussian(rng);
    int best = 0;
    for (int i = 1; i < 16; ++i)
      if (std::fabs(lloydMaxLevel(i) - z) < std::fabs(lloydMaxLevel(best) - z))
        best = i;
    index = uint8_t(best);
  }
  uint64_t groups = k / t.groupSize;
  for (uint64_t i = 0; i < n * groups; ++i)
    t.norms.push_back(roundHalf(float((0.5 + 1.5 * uniform(rng)) / prescale)));

  if (orthogonal) {
    // A random orthogonal matrix in O(K^2): random signs on the diagonal,
    // then eight Householder reflections R <- (I - 2 v v^T) R with random
    // unit v. (Orthonormalising a Gaussian matrix costs O(K^3), too slow
    // for K = 1536 under emulation.)
    std::vector<double> r(k * k, 0.0);
    for (uint64_t i = 0; i < k; ++i)
      r[i * k + i] = rng() & 1 ? 1.0 : -1.0;
    std::vector<double> v(k), w(k);
    for (int reflection = 0; reflection < 8; ++reflection) {
      double norm = 0;
      for (double &value : v) {
        value = gaussian(rng);
        norm += value * value;
      }
      for (double &value : v)
        value /= std::sqrt(norm);
      std::fill(w.begin(), w.end(), 0.0);
      for (uint64_t i = 0; i < k; ++i)
        for (uint64_t c = 0; c < k; ++c)
          w[c] += v[i] * r[i * k + c];
      for (uint64_t i = 0; i < k; ++i)
        for (uint64_t c = 0; c < k; ++c)
          r[i * k + c] -= 2.0 * v[i] * w[c];
    }
    for (double v : r)
      t.rotation.push_back(roundHalf(float(v)));
  } else {
    for (uint32_t i = 0; i < groupSize; ++i) {
      t.left.push_back(rng() & 1 ? 1 : -1);
      t.right.push_back(rng() & 1 ? 1 : -1);
    }
    t.permutation.resize(groupSize);
    for (uint32_t i = 0; i < groupSize; ++i)
      t.permutation[i] = i;
    std::shuffle(t.permutation.begin(), t.permutation.end(), rng);
  }

  LayerFile file;
  file.bytes = panelFile(t, halfToFloat);
  // panelFile writes s = 1/s = 1: put real input scales in their place.
  cq4p_tensor_info info;
  runtime::RegionTable regions;
  if (!runtime::validateTensorBytes("realistic", file.bytes.data(),
                                    file.bytes.size(), info, regions))
    std::abort();
  for (uint64_t i = 0; i < k; ++i) {
    uint16_t scale = roundHalf(float(std::exp2(2.0 * uniform(rng) - 1.0)));
    uint16_t recip = roundHalf(1.0f / halfToFloat(scale));
    std::memcpy(&file.bytes[regions.offset[CQ4P_REGION_INPUT_SCALE] + 2 * i],
                &scale, 2);
    std::memcpy(
        &file.bytes[regions.offset[CQ4P_REGION_INPUT_SCALE_RECIP] + 2 * i],
        &recip, 2);
  }
  file.tensor = std::move(t);
  return file;
}

/// Reads a little-endian value of type T from a region (no alignment needed).
template <typename T> T regionValue(const runtime::TensorFile &file,
                                    cq4p_region region, uint64_t index) {
  T value;
  std::memcpy(&value, file.region(region).data + index * sizeof(T), sizeof(T));
  return value;
}

inline double storedHalf(const runtime::TensorFile &file, cq4p_region region,
                         uint64_t index) {
  return halfToFloat(regionValue<uint16_t>(file, region, index));
}

/// The 4-bit index of weight (n, k), found with docs/FORMAT.md section 3's byte address.
inline unsigned panelIndexOf(const runtime::TensorFile &file, uint64_t n,
                             uint64_t k) {
  uint64_t gs = file.info().group_size, ng = file.info().num_groups;
  uint64_t s = n / 64, c = n % 64, g = k / gs, kg = (k % gs) / 4, kc = k % 4;
  uint64_t address = ((s * ng + g) * (gs / 4) + kg) * 128 + (c * 4 + kc) / 2;
  uint8_t byte = file.region(CQ4P_REGION_DATA).data[address];
  return (c * 4 + kc) % 2 ? byte >> 4 : byte & 0xF;
}

/// W[N][K] in fp64, dequantized from the file's stored values:
///   Hadamard:   W[n, g*gs:(g+1)*gs] = norm[n,g] * (cb[idx] @ rot^T) / s,
///               rot = (diag(left) H/sqrt(gs) diag(right))[:, perm];
///   orthogonal: W[n, :] = norm[n] * (cb[idx] @ R^T) / s.
inline std::vector<double> dequantize(const runtime::TensorFile &file) {
  uint64_t n = file.n(), k = file.k();
  uint64_t gs = file.info().group_size, ng = file.info().num_groups;
  double cb[16];
  for (int i = 0; i < 16; ++i)
    cb[i] = storedHalf(file, CQ4P_REGION_CODEBOOK, i);
  std::vector<double> scale(k);
  for (uint64_t i = 0; i < k; ++i)
    scale[i] = storedHalf(file, CQ4P_REGION_INPUT_SCALE, i);

  std::vector<double> w(n * k, 0.0);
  if (file.isOrthogonal()) {
    std::vector<double> rotation(k * k);
    for (uint64_t i = 0; i < k * k; ++i)
      rotation[i] = storedHalf(file, CQ4P_REGION_ROTATION, i);
    for (uint64_t row = 0; row < n; ++row) {
      double norm = storedHalf(file, CQ4P_REGION_NORMS, row * ng);
      std::vector<double> levels(k);
      for (uint64_t j = 0; j < k; ++j)
        levels[j] = cb[panelIndexOf(file, row, j)];
      for (uint64_t i = 0; i < k; ++i) {
        double sum = 0;
        for (uint64_t j = 0; j < k; ++j)
          sum += levels[j] * rotation[i * k + j];
        w[row * k + i] = norm * sum / scale[i];
      }
    }
    return w;
  }

  std::vector<double> rot(gs * gs);
  for (uint64_t i = 0; i < gs; ++i)
    for (uint64_t j = 0; j < gs; ++j) {
      uint32_t p = regionValue<uint32_t>(file, CQ4P_REGION_PERMUTATION, j);
      double hadamard = __builtin_popcountll(i & p) % 2 ? -1.0 : 1.0;
      rot[i * gs + j] =
          regionValue<int8_t>(file, CQ4P_REGION_LEFT_SIGNS, i) * hadamard /
          std::sqrt(double(gs)) *
          regionValue<int8_t>(file, CQ4P_REGION_RIGHT_SIGNS, p);
    }
  for (uint64_t row = 0; row < n; ++row)
    for (uint64_t g = 0; g < ng; ++g) {
      double norm = storedHalf(file, CQ4P_REGION_NORMS, row * ng + g);
      std::vector<double> levels(gs);
      for (uint64_t j = 0; j < gs; ++j)
        levels[j] = cb[panelIndexOf(file, row, g * gs + j)];
      for (uint64_t i = 0; i < gs; ++i) {
        double sum = 0;
        for (uint64_t j = 0; j < gs; ++j)
          sum += levels[j] * rot[i * gs + j];
        w[row * k + g * gs + i] = norm * sum / scale[g * gs + i];
      }
    }
  return w;
}

/// rows x k activations drawn from N(0, 1), deterministic per seed.
inline std::vector<float> gaussianRows(uint64_t rows, uint64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gaussian(0.0f, 1.0f);
  std::vector<float> x(rows * k);
  for (float &v : x)
    v = gaussian(rng);
  return x;
}

/// y[rows][N] = x[rows][K] * W^T in fp64 for an orthogonal file, without
/// forming W (O(rows * (K^2 + N*K)) instead of O(N * K^2)):
///   y[r][n] = norm[n] * sum_j cb[idx(n, j)] * u[r][j],
///   u[r][j] = sum_i (x[r][i] / s[i]) * R[i][j].
inline std::vector<double> referenceOrthogonalLinear(const runtime::TensorFile &file,
                                                     const std::vector<float> &x,
                                                     uint64_t rows) {
  uint64_t n = file.n(), k = file.k(), ng = file.info().num_groups;
  double cb[16];
  for (int i = 0; i < 16; ++i)
    cb[i] = storedHalf(file, CQ4P_REGION_CODEBOOK, i);
  std::vector<double> y(rows * n, 0.0), u(k);
  for (uint64_t row = 0; row < rows; ++row) {
    std::fill(u.begin(), u.end(), 0.0);
    for (uint64_t i = 0; i < k; ++i) {
      double scaled = double(x[row * k + i]) /
                      storedHalf(file, CQ4P_REGION_INPUT_SCALE, i);
      for (uint64_t j = 0; j < k; ++j)
        u[j] += scaled * storedHalf(file, CQ4P_REGION_ROTATION, i * k + j);
    }
    for (uint64_t o = 0; o < n; ++o) {
      double sum = 0;
      for (uint64_t j = 0; j < k; ++j)
        sum += cb[panelIndexOf(file, o, j)] * u[j];
      y[row * n + o] = storedHalf(file, CQ4P_REGION_NORMS, o * ng) * sum;
    }
  }
  return y;
}

/// Rows `ids` of an orthogonal file's dequantized weight, in fp64.
inline std::vector<double> dequantizeOrthogonalRows(const runtime::TensorFile &file,
                                                    const std::vector<int64_t> &ids) {
  uint64_t k = file.k(), ng = file.info().num_groups;
  double cb[16];
  for (int i = 0; i < 16; ++i)
    cb[i] = storedHalf(file, CQ4P_REGION_CODEBOOK, i);
  std::vector<double> rows;
  std::vector<double> levels(k);
  for (int64_t id : ids) {
    uint64_t row = uint64_t(id);
    double norm = storedHalf(file, CQ4P_REGION_NORMS, row * ng);
    for (uint64_t j = 0; j < k; ++j)
      levels[j] = cb[panelIndexOf(file, row, j)];
    for (uint64_t i = 0; i < k; ++i) {
      double sum = 0;
      for (uint64_t j = 0; j < k; ++j)
        sum += levels[j] * storedHalf(file, CQ4P_REGION_ROTATION, i * k + j);
      rows.push_back(norm * sum / storedHalf(file, CQ4P_REGION_INPUT_SCALE, i));
    }
  }
  return rows;
}

/// y[rows][N] = x[rows][K] * W^T in fp64.
inline std::vector<double> referenceLinear(const std::vector<double> &w,
                                           uint64_t n, uint64_t k,
                                           const std::vector<float> &x,
                                           uint64_t rows) {
  std::vector<double> y(rows * n, 0.0);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t o = 0; o < n; ++o) {
      double sum = 0;
      for (uint64_t i = 0; i < k; ++i)
        sum += w[o * k + i] * double(x[r * k + i]);
      y[r * n + o] = sum;
    }
  return y;
}

} // namespace cq4p::test

#endif // CQ4P_TEST_UNIT_RUNTIME_LAYERFILES_H
