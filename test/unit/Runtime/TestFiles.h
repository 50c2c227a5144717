//===- TestFiles.h - tensor files built plainly, for runtime tests -*- C++ -*-===//
//
// Writes valid CQ4 and dense tensor files straight from docs/FORMAT.md
// (sections 1, 3 and 4), field by field, independently of the Python
// writers: the reader and the encoder are tested against these bytes, and
// the malformed cases are these bytes with one thing broken.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TEST_UNIT_RUNTIME_TESTFILES_H
#define CQ4P_TEST_UNIT_RUNTIME_TESTFILES_H

#include "cq4p/cq4p.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace cq4p::test {

/// binary16 bits of a float that binary16 represents exactly (test data is
/// chosen that way; anything else is a bug in the test).
inline uint16_t exactHalf(float value) {
  if (value == 0.0f)
    return std::signbit(value) ? 0x8000 : 0;
  uint16_t sign = value < 0 ? 0x8000 : 0;
  float magnitude = std::fabs(value);
  int exponent;
  float fraction = std::frexp(magnitude, &exponent); // [0.5, 1)
  int biased = exponent - 1 + 15;
  if (biased <= 0 || biased >= 31)
    std::abort();
  float mantissa = (fraction * 2.0f - 1.0f) * 1024.0f;
  if (mantissa != std::floor(mantissa))
    std::abort();
  return uint16_t(sign | biased << 10 | int(mantissa));
}

struct Bytes {
  std::vector<uint8_t> data;
  void u8(uint8_t v) { data.push_back(v); }
  void u16(uint16_t v) { u8(uint8_t(v)); u8(uint8_t(v >> 8)); }
  void u32(uint32_t v) { u16(uint16_t(v)); u16(uint16_t(v >> 16)); }
  void u64(uint64_t v) { u32(uint32_t(v)); u32(uint32_t(v >> 32)); }
  void f32(float v) { uint32_t bits; std::memcpy(&bits, &v, 4); u32(bits); }
  void padTo(uint64_t alignment) {
    while (data.size() % alignment) u8(0);
  }
  void append(const std::vector<uint8_t> &more) {
    data.insert(data.end(), more.begin(), more.end());
  }
};

inline void putU32(std::vector<uint8_t> &file, size_t offset, uint32_t v) {
  for (int i = 0; i < 4; ++i) file[offset + i] = uint8_t(v >> (8 * i));
}
inline void putU64(std::vector<uint8_t> &file, size_t offset, uint64_t v) {
  for (int i = 0; i < 8; ++i) file[offset + i] = uint8_t(v >> (8 * i));
}

/// A CQ4 tensor and the stored values a valid file of it holds.
struct CqTensor {
  uint64_t n = 64, k = 256;
  uint32_t groupSize = 128; ///< source group size (orthogonal: K)
  bool orthogonal = false;
  std::vector<uint8_t> indices;    ///< [N][K], one index per byte
  std::vector<uint16_t> norms;     ///< [N][K / groupSize]
  std::vector<uint16_t> codebook;  ///< 16 levels
  std::vector<int8_t> left, right; ///< Hadamard signs
  std::vector<uint32_t> permutation;
  std::vector<uint16_t> rotation; ///< orthogonal [K][K]
};

inline CqTensor randomTensor(uint64_t n, uint64_t k, uint32_t groupSize,
                             bool orthogonal, uint32_t seed) {
  CqTensor t;
  t.n = n;
  t.k = k;
  t.groupSize = orthogonal ? uint32_t(k) : groupSize;
  t.orthogonal = orthogonal;
  std::mt19937 rng(seed);
  t.indices.resize(n * k);
  for (uint8_t &index : t.indices) index = uint8_t(rng() & 0xF);
  uint64_t groups = k / t.groupSize;
  t.norms.resize(n * groups);
  // Norms in [0.5, 2): every binary16 pattern there is a normal number.
  for (uint16_t &norm : t.norms) norm = uint16_t(0x3800 + rng() % 0x800);
  // A pre-scaled codebook: 16 distinct int-valued levels, max |level| 127.
  const float levels[16] = {-127, -96, -72, -52, -36, -22, -10, -3,
                            3,    10,  22,  36,  52,  72,  96,  127};
  for (float level : levels) t.codebook.push_back(exactHalf(level));
  if (!orthogonal) {
    for (uint32_t i = 0; i < groupSize; ++i) {
      t.left.push_back(rng() & 1 ? 1 : -1);
      t.right.push_back(rng() & 1 ? 1 : -1);
    }
    t.permutation.resize(groupSize);
    std::iota(t.permutation.begin(), t.permutation.end(), 0u);
    std::shuffle(t.permutation.begin(), t.permutation.end(), rng);
  } else {
    t.rotation.resize(k * k);
    for (uint16_t &r : t.rotation) r = uint16_t(0x2000 + rng() % 0x1800);
  }
  return t;
}

/// cb_scale as docs/FORMAT.md section 4 defines it, from the stored codebook.
inline float codebookScale(const std::vector<uint16_t> &codebook,
                           float (*toFloat)(uint16_t)) {
  float maxAbs = 0;
  for (uint16_t level : codebook) maxAbs = std::max(maxAbs, std::fabs(toFloat(level)));
  return maxAbs / 127.0f;
}

inline Bytes header(uint32_t flags, uint32_t ndim, const uint64_t dims[4],
                    uint32_t precision, uint64_t dataBytes, uint64_t scalesBytes,
                    uint32_t groupSize, uint32_t numGroups, uint64_t originalN) {
  Bytes b;
  b.u32(CQ4P_MAGIC);
  b.u32(flags);
  b.u32(CQ4P_WRITER_ALIGNMENT);
  b.u32(ndim);
  for (int i = 0; i < 4; ++i) b.u64(dims[i]);
  b.u32(precision);
  b.u64(dataBytes);
  b.u64(scalesBytes);
  b.u32(groupSize);
  b.u32(numGroups);
  b.u64(originalN);
  return b;
}

/// Assembles header, scales and data with the writer's 32-byte alignment.
inline std::vector<uint8_t> assemble(Bytes head, const Bytes &scales,
                                     const std::vector<uint8_t> &data) {
  head.padTo(CQ4P_WRITER_ALIGNMENT);
  head.append(scales.data);
  head.padTo(CQ4P_WRITER_ALIGNMENT);
  head.append(data);
  return head.data;
}

/// A packed-panel file of `t` (orthogonal: virtual groups of 128), with the
/// panel bytes built from docs/FORMAT.md section 3's byte address formula.
inline std::vector<uint8_t> panelFile(const CqTensor &t,
                                      float (*toFloat)(uint16_t)) {
  uint32_t gs = t.orthogonal ? CQ4P_ORTHOGONAL_VIRTUAL_GROUP : t.groupSize;
  uint64_t ng = t.k / gs, sourceGroups = t.k / t.groupSize;
  uint64_t sb = (t.n + 63) / 64;
  std::vector<uint8_t> data(sb * 64 * t.k / 2, 0);
  for (uint64_t n = 0; n < t.n; ++n)
    for (uint64_t k = 0; k < t.k; ++k) {
      uint64_t s = n / 64, c = n % 64, g = k / gs, kg = (k % gs) / 4, kc = k % 4;
      uint64_t address = ((s * ng + g) * (gs / 4) + kg) * 128 + (c * 4 + kc) / 2;
      data[address] |= uint8_t(t.indices[n * t.k + k] << (4 * ((c * 4 + kc) % 2)));
    }
  Bytes scales;
  for (uint16_t level : t.codebook) scales.u16(level);
  for (uint64_t i = 0; i < 2 * t.k; ++i) scales.u16(0x3C00); // s and 1/s = 1
  for (uint64_t n = 0; n < t.n; ++n)
    for (uint64_t g = 0; g < ng; ++g)
      scales.u16(t.norms[n * sourceGroups + g * gs / t.groupSize]);
  scales.padTo(4);
  float cbScale = codebookScale(t.codebook, toFloat);
  for (uint64_t s = 0; s < sb; ++s)
    for (uint64_t g = 0; g < ng; ++g)
      for (uint64_t c = 0; c < 64; ++c) {
        uint64_t n = s * 64 + c;
        scales.f32(n < t.n ? toFloat(t.norms[n * sourceGroups + g * gs / t.groupSize]) * cbScale
                           : 0.0f);
      }
  if (t.orthogonal) {
    for (uint16_t r : t.rotation) scales.u16(r);
    for (uint64_t i = 0; i < t.k; ++i)
      for (uint64_t j = 0; j < t.k; ++j) scales.u16(t.rotation[j * t.k + i]);
  } else {
    for (int8_t v : t.left) scales.u8(uint8_t(v));
    for (int8_t v : t.right) scales.u8(uint8_t(v));
    for (uint32_t v : t.permutation) scales.u32(v);
  }
  uint64_t dims[4] = {t.n, t.k, 0, 0};
  uint32_t flags = CQ4P_FLAG_PACKED_PANELS |
                   (t.orthogonal ? CQ4P_FLAG_ORTHOGONAL_ROTATION : 0);
  return assemble(header(flags, 2, dims, CQ4P_PRECISION_CQ4, data.size(),
                         scales.data.size(), gs, uint32_t(ng), t.n),
                  scales, data);
}

/// The data region of a legacy file of `t`.
inline std::vector<uint8_t> legacyData(const CqTensor &t, cq4p_layout layout) {
  std::vector<uint8_t> data(t.n * t.k / 2, 0);
  uint64_t ng = t.k / t.groupSize;
  for (uint64_t n = 0; n < t.n; ++n)
    for (uint64_t k = 0; k < t.k; ++k) {
      uint8_t index = t.indices[n * t.k + k];
      if (layout == CQ4P_LAYOUT_ROW_MAJOR) {
        uint64_t nibble = n * t.k + k;
        data[nibble / 2] |= uint8_t(index << (4 * (nibble % 2)));
      } else {
        uint64_t g = k / t.groupSize, within = k % t.groupSize;
        uint64_t chunk = within / 8, j = within % 8;
        uint64_t address = ((n / 4 * ng + g) * (t.groupSize / 8) + chunk) * 16 +
                           (n % 4) * 4 + j % 4;
        data[address] |= uint8_t(index << (j >= 4 ? 4 : 0));
      }
    }
  return data;
}

/// A legacy CQ4 file of `t`: row-major or 4-row interleaved.
inline std::vector<uint8_t> legacyFile(const CqTensor &t, cq4p_layout layout) {
  uint64_t ng = t.k / t.groupSize;
  Bytes scales;
  for (uint16_t level : t.codebook) scales.u16(level);
  for (uint64_t i = 0; i < 2 * t.k; ++i) scales.u16(0x3C00);
  if (layout == CQ4P_LAYOUT_INTERLEAVED_4ROW) {
    for (uint64_t block = 0; block < t.n / 4; ++block)
      for (uint64_t g = 0; g < ng; ++g)
        for (uint64_t r = 0; r < 4; ++r)
          scales.u16(t.norms[(block * 4 + r) * ng + g]);
  } else {
    for (uint16_t norm : t.norms) scales.u16(norm);
  }
  if (t.orthogonal) {
    for (uint16_t r : t.rotation) scales.u16(r);
  } else {
    for (int8_t v : t.left) scales.u8(uint8_t(v));
    for (int8_t v : t.right) scales.u8(uint8_t(v));
    for (uint32_t v : t.permutation) scales.u32(v);
  }
  std::vector<uint8_t> data = legacyData(t, layout);
  uint64_t dims[4] = {t.n, t.k, 0, 0};
  uint32_t flags = (layout == CQ4P_LAYOUT_INTERLEAVED_4ROW ? CQ4P_FLAG_INTERLEAVED_4ROW : 0) |
                   (t.orthogonal ? CQ4P_FLAG_ORTHOGONAL_ROTATION : 0);
  return assemble(header(flags, 2, dims, CQ4P_PRECISION_CQ4, data.size(),
                         scales.data.size(), t.groupSize, uint32_t(ng), t.n),
                  scales, data);
}

/// An FP16 file of the given shape (values 0, 1, 2, ... as halves).
inline std::vector<uint8_t> fp16File(const std::vector<uint64_t> &shape) {
  uint64_t count = 1;
  for (uint64_t d : shape) count *= d;
  std::vector<uint8_t> data;
  for (uint64_t i = 0; i < count; ++i) {
    uint16_t h = exactHalf(float(i % 1024));
    data.push_back(uint8_t(h));
    data.push_back(uint8_t(h >> 8));
  }
  uint64_t dims[4] = {};
  for (size_t i = 0; i < shape.size() && i < 4; ++i) dims[i] = shape[i];
  return assemble(header(0, uint32_t(shape.size()), dims, CQ4P_PRECISION_FP16,
                         data.size(), 0, 0, 0, shape.empty() ? 0 : shape[0]),
                  Bytes(), data);
}

inline bool writeBytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

} // namespace cq4p::test

#endif // CQ4P_TEST_UNIT_RUNTIME_TESTFILES_H
