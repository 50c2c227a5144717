//===- TensorFile.cpp - mapping and validating a tensor file --------------===//
//
// Validation runs in a fixed order and stops at the first defect; the
// Python reader follows the same order with the same field names:
//
//   header, magic, alignment, precision, flags, header (extended), ndim,
//   dims, original_n, group_size, num_groups, scales_bytes, data_bytes,
//   file size, then content: codebook, left_signs, right_signs,
//   permutation, norms.
//
// Every size is computed in checked 64-bit arithmetic; a size that does not
// fit is refused at the field it belongs to. No region pointer exists
// before the whole header and the exact file size have been checked.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/TensorFile.h"

#include "Sha256.h"

#include "LargePages.h"
#include "MappingGuard.h"
#include "SafeOpen.h"
#include "fp16.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace cq4p::runtime {
namespace {

uint32_t readU32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
         uint32_t(p[3]) << 24;
}

uint64_t readU64(const uint8_t *p) {
  return uint64_t(readU32(p)) | uint64_t(readU32(p + 4)) << 32;
}

uint16_t readU16(const uint8_t *p) { return uint16_t(p[0] | p[1] << 8); }

std::string hex(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "0x%llx",
                static_cast<unsigned long long>(value));
  return buffer;
}

std::string str(uint64_t value) { return std::to_string(value); }

bool isPowerOfTwo(uint64_t value) {
  return value != 0 && (value & (value - 1)) == 0;
}

/// Checked 64-bit arithmetic: once any step overflows, the result is
/// unusable and `overflowed` stays set.
struct CheckedSize {
  uint64_t value = 0;
  bool overflowed = false;

  CheckedSize &add(uint64_t term) {
    overflowed |= __builtin_add_overflow(value, term, &value);
    return *this;
  }
  CheckedSize &addProduct(uint64_t a, uint64_t b, uint64_t c = 1) {
    uint64_t product;
    bool bad = __builtin_mul_overflow(a, b, &product);
    bad |= __builtin_mul_overflow(product, c, &product);
    overflowed |= bad;
    if (!bad)
      add(product);
    return *this;
  }
  CheckedSize &alignUp(uint64_t alignment) {
    uint64_t rest = value % alignment;
    if (rest != 0)
      add(alignment - rest);
    return *this;
  }
};

constexpr const char *kTooLarge = "a size that fits in 64 bits";

/// Region sizes of a CQ4 file's scales region, in order, with the
/// offsets within it.
struct ScalesLayout {
  uint64_t offset[CQ4P_REGION_COUNT] = {};
  uint64_t size[CQ4P_REGION_COUNT] = {};
  CheckedSize end;

  void place(cq4p_region region, uint64_t a, uint64_t b = 1, uint64_t c = 1) {
    offset[region] = end.value;
    uint64_t bytes = 0;
    bool bad = __builtin_mul_overflow(a, b, &bytes) ||
               __builtin_mul_overflow(bytes, c, &bytes);
    end.overflowed |= bad;
    size[region] = bad ? 0 : bytes;
    end.add(size[region]);
  }
};

ScalesLayout cq4ScalesLayout(cq4p_layout layout, bool orthogonal, uint64_t n,
                             uint64_t k, uint64_t groupSize,
                             uint64_t numGroups) {
  ScalesLayout scales;
  scales.place(CQ4P_REGION_CODEBOOK, CQ4P_CODEBOOK_LEVELS, 2);
  scales.place(CQ4P_REGION_INPUT_SCALE, k, 2);
  scales.place(CQ4P_REGION_INPUT_SCALE_RECIP, k, 2);
  bool panels = layout == CQ4P_LAYOUT_PANELS;
  // Legacy orthogonal files hold one norm per row; every other CQ4 file one
  // per (row, group), which for an orthogonal panel file are the row's
  // virtual groups.
  scales.place(CQ4P_REGION_NORMS, n, (orthogonal && !panels) ? 1 : numGroups,
               2);
  if (panels) {
    scales.end.alignUp(4);
    scales.place(CQ4P_REGION_NORM_PANELS, cq4p_num_super_blocks(n),
                 numGroups * CQ4P_PANEL_CHANNELS, 4);
  }
  if (orthogonal) {
    scales.place(CQ4P_REGION_ROTATION, k, k, 2);
    if (panels)
      scales.place(CQ4P_REGION_ROTATION_T, k, k, 2);
  } else {
    scales.place(CQ4P_REGION_LEFT_SIGNS, groupSize);
    scales.place(CQ4P_REGION_RIGHT_SIGNS, groupSize);
    scales.place(CQ4P_REGION_PERMUTATION, groupSize, 4);
  }
  return scales;
}

Status checkGroupSize(const std::string &path, cq4p_layout layout,
                      bool orthogonal, uint64_t k, uint32_t groupSize) {
  auto refuse = [&](const std::string &expected) {
    return formatError(path, "group_size", expected, str(groupSize));
  };
  bool panelCompatible = isPowerOfTwo(groupSize) &&
                         groupSize % CQ4P_PANEL_GROUP_MULTIPLE == 0 &&
                         groupSize <= CQ4P_PANEL_MAX_GROUP_SIZE;
  if (layout == CQ4P_LAYOUT_PANELS && orthogonal) {
    if (groupSize != CQ4P_ORTHOGONAL_VIRTUAL_GROUP)
      return refuse("128 (the virtual group of an orthogonal panel file)");
  } else if (orthogonal) {
    if (groupSize != k)
      return refuse(str(k) + " (K: a legacy orthogonal group spans the row)");
  } else if (layout == CQ4P_LAYOUT_ROW_MAJOR) {
    if (!isPowerOfTwo(groupSize) || groupSize < 8)
      return refuse("a power of two of at least 8");
  } else if (!panelCompatible) {
    return refuse("a power of two, a multiple of 32, at most 256");
  }
  return Status::ok();
}

Status checkContent(const std::string &path, const uint8_t *bytes,
                    const cq4p_tensor_info &info, const RegionTable &regions) {
  const uint8_t *codebook = bytes + regions.offset[CQ4P_REGION_CODEBOOK];
  float maxAbs = 0.0f;
  for (int i = 0; i < CQ4P_CODEBOOK_LEVELS; ++i) {
    uint16_t level = readU16(codebook + 2 * i);
    if (!cq4p_half_is_finite(level))
      return formatError(path, "codebook", "16 finite levels",
                         "level " + str(i) + " = " + hex(level));
    float magnitude = cq4p_half_to_float(level);
    magnitude = magnitude < 0 ? -magnitude : magnitude;
    maxAbs = magnitude > maxAbs ? magnitude : maxAbs;
  }
  if (maxAbs == 0.0f)
    return formatError(path, "codebook", "a level other than zero",
                       "all 16 levels zero");

  uint64_t groupSize = info.group_size;
  if (!info.orthogonal) {
    for (cq4p_region region : {CQ4P_REGION_LEFT_SIGNS, CQ4P_REGION_RIGHT_SIGNS}) {
      const char *field =
          region == CQ4P_REGION_LEFT_SIGNS ? "left_signs" : "right_signs";
      const int8_t *signs =
          reinterpret_cast<const int8_t *>(bytes + regions.offset[region]);
      for (uint64_t i = 0; i < groupSize; ++i)
        if (signs[i] != 1 && signs[i] != -1)
          return formatError(path, field, "+1 or -1",
                             std::string(field) + "[" + str(i) +
                                 "] = " + std::to_string(signs[i]));
    }
    const uint8_t *permutation =
        bytes + regions.offset[CQ4P_REGION_PERMUTATION];
    std::vector<bool> seen(groupSize, false);
    for (uint64_t i = 0; i < groupSize; ++i) {
      uint32_t target = readU32(permutation + 4 * i);
      if (target >= groupSize)
        return formatError(path, "permutation",
                           "a permutation of 0.." + str(groupSize - 1),
                           "permutation[" + str(i) + "] = " + str(target));
      if (seen[target])
        return formatError(path, "permutation",
                           "a permutation of 0.." + str(groupSize - 1),
                           str(target) + " twice (again at " + str(i) + ")");
      seen[target] = true;
    }
  }

  if (info.orthogonal && info.layout == CQ4P_LAYOUT_PANELS) {
    const uint8_t *norms = bytes + regions.offset[CQ4P_REGION_NORMS];
    uint64_t numGroups = info.num_groups;
    for (uint64_t row = 0; row < info.dims[0]; ++row) {
      const uint8_t *rowNorms = norms + 2 * row * numGroups;
      uint16_t first = readU16(rowNorms);
      for (uint64_t g = 1; g < numGroups; ++g) {
        uint16_t norm = readU16(rowNorms + 2 * g);
        if (norm != first)
          return formatError(
              path, "norms",
              "row " + str(row) + "'s norm repeated over its " +
                  str(numGroups) + " virtual groups",
              "group " + str(g) + " = " + hex(norm) + ", group 0 = " +
                  hex(first));
      }
    }
  }
  return Status::ok();
}

} // namespace

Status validateTensorBytes(const std::string &path, const uint8_t *bytes,
                           uint64_t size, cq4p_tensor_info &info,
                           RegionTable &regions) {
  info = {};
  regions = {};
  if (size < CQ4P_HEADER_BYTES)
    return formatError(path, "header", "at least 84 bytes",
                       str(size) + " bytes");
  uint32_t magic = readU32(bytes + CQ4P_OFFSET_MAGIC);
  if (magic != CQ4P_MAGIC)
    return formatError(path, "magic", "0x54434143 (\"CACT\")", hex(magic));

  uint32_t alignment = readU32(bytes + CQ4P_OFFSET_ALIGNMENT);
  if (!isPowerOfTwo(alignment) || alignment > CQ4P_MAX_READER_ALIGNMENT)
    return formatError(path, "alignment", "a power of two in [1, 4096]",
                       str(alignment));

  uint32_t precision = readU32(bytes + CQ4P_OFFSET_PRECISION);
  bool cq4 = precision == CQ4P_PRECISION_CQ4;
  if (!cq4 && precision != CQ4P_PRECISION_FP16 &&
      precision != CQ4P_PRECISION_FP32)
    return formatError(path, "precision", "1 (FP16), 2 (FP32) or 6 (CQ4)",
                       str(precision));

  uint32_t flags = readU32(bytes + CQ4P_OFFSET_FLAGS);
  uint32_t allowed =
      cq4 ? (CQ4P_FLAG_ORTHOGONAL_ROTATION | CQ4P_FLAG_INTERLEAVED_4ROW |
             CQ4P_FLAG_EXTENDED_SHAPE | CQ4P_FLAG_PACKED_PANELS)
          : CQ4P_FLAG_EXTENDED_SHAPE;
  if (flags & ~allowed)
    return formatError(path, "flags",
                       "no bits outside " + hex(allowed) + " for precision " +
                           str(precision),
                       hex(flags));
  if ((flags & CQ4P_FLAG_PACKED_PANELS) && (flags & CQ4P_FLAG_INTERLEAVED_4ROW))
    return formatError(path, "flags",
                       "PACKED_PANELS and INTERLEAVED_4ROW not both set",
                       hex(flags));

  bool extended = flags & CQ4P_FLAG_EXTENDED_SHAPE;
  uint64_t headerBytes =
      extended ? CQ4P_EXTENDED_HEADER_BYTES : CQ4P_HEADER_BYTES;
  if (size < headerBytes)
    return formatError(path, "header",
                       "at least 116 bytes (extended shape)",
                       str(size) + " bytes");

  uint32_t ndim = readU32(bytes + CQ4P_OFFSET_NDIM);
  uint32_t maxDims = extended ? 8 : 4;
  if (cq4 ? ndim != 2 : (ndim < 1 || ndim > maxDims))
    return formatError(path, "ndim", cq4 ? "2" : "1.." + str(maxDims),
                       str(ndim));

  uint64_t dims[8] = {};
  for (int i = 0; i < 4; ++i)
    dims[i] = readU64(bytes + CQ4P_OFFSET_DIMS + 8 * i);
  if (extended)
    for (int i = 0; i < 4; ++i)
      dims[4 + i] = readU64(bytes + CQ4P_OFFSET_EXTENDED_DIMS + 8 * i);
  for (uint32_t i = 0; i < 8; ++i) {
    std::string name = "dims[" + str(i) + "]";
    if (i < ndim && dims[i] == 0)
      return formatError(path, "dims", name + " > 0", "0");
    if (i >= ndim && dims[i] != 0)
      return formatError(path, "dims", name + " = 0 (unused)", str(dims[i]));
  }

  cq4p_layout layout = CQ4P_LAYOUT_DENSE;
  bool orthogonal = flags & CQ4P_FLAG_ORTHOGONAL_ROTATION;
  uint64_t n = dims[0], k = dims[1];
  uint32_t groupSize = readU32(bytes + CQ4P_OFFSET_GROUP_SIZE);
  uint32_t numGroups = readU32(bytes + CQ4P_OFFSET_NUM_GROUPS);
  if (cq4) {
    layout = (flags & CQ4P_FLAG_PACKED_PANELS) ? CQ4P_LAYOUT_PANELS
             : (flags & CQ4P_FLAG_INTERLEAVED_4ROW)
                 ? CQ4P_LAYOUT_INTERLEAVED_4ROW
                 : CQ4P_LAYOUT_ROW_MAJOR;
    constexpr uint64_t kMaxDim = uint64_t(1) << 32;
    if (n >= kMaxDim)
      return formatError(path, "dims", "N < 2^32", str(n));
    if (k >= kMaxDim)
      return formatError(path, "dims", "K < 2^32", str(k));
    if (layout == CQ4P_LAYOUT_INTERLEAVED_4ROW && n % 4 != 0)
      return formatError(path, "dims",
                         "N a multiple of 4 (INTERLEAVED_4ROW)", str(n));
    uint64_t originalN = readU64(bytes + CQ4P_OFFSET_ORIGINAL_N);
    if (originalN != n)
      return formatError(path, "original_n", str(n) + " (N)", str(originalN));
    if (Status status = checkGroupSize(path, layout, orthogonal, k, groupSize);
        !status)
      return status;
    if (uint64_t(numGroups) * groupSize != k)
      return formatError(path, "num_groups",
                         "num_groups * group_size (" + str(groupSize) +
                             ") = K (" + str(k) + ")",
                         str(numGroups));
  }

  // The sizes the layout needs.
  ScalesLayout scales;
  CheckedSize dataBytes;
  if (cq4) {
    scales = cq4ScalesLayout(layout, orthogonal, n, k, groupSize, numGroups);
    uint64_t rows = layout == CQ4P_LAYOUT_PANELS
                        ? cq4p_num_super_blocks(n) * CQ4P_PANEL_CHANNELS
                        : n;
    dataBytes.addProduct(rows, k);
    dataBytes.value /= 2;
  } else {
    dataBytes.value = precision == CQ4P_PRECISION_FP16 ? 2 : 4;
    for (uint32_t i = 0; i < ndim; ++i)
      dataBytes.overflowed |=
          __builtin_mul_overflow(dataBytes.value, dims[i], &dataBytes.value);
  }

  uint64_t storedScales = readU64(bytes + CQ4P_OFFSET_SCALES_BYTES);
  uint64_t storedData = readU64(bytes + CQ4P_OFFSET_DATA_BYTES);
  if (scales.end.overflowed)
    return formatError(path, "scales_bytes", kTooLarge, str(storedScales));
  if (storedScales != scales.end.value)
    return formatError(path, "scales_bytes", str(scales.end.value),
                       str(storedScales));
  if (dataBytes.overflowed)
    return formatError(path, "data_bytes", kTooLarge, str(storedData));
  if (storedData != dataBytes.value)
    return formatError(path, "data_bytes", str(dataBytes.value),
                       str(storedData));

  CheckedSize end;
  end.add(headerBytes).alignUp(alignment);
  uint64_t scalesOffset = end.value;
  end.add(storedScales).alignUp(alignment);
  uint64_t dataOffset = end.value;
  end.add(storedData);
  if (end.overflowed)
    return formatError(path, "file size", kTooLarge, str(size) + " bytes");
  if (end.value != size)
    return formatError(path, "file size", str(end.value) + " bytes",
                       str(size) + " bytes");

  info.flags = flags;
  info.alignment = alignment;
  info.precision = precision;
  info.ndim = ndim;
  std::memcpy(info.dims, dims, sizeof(dims));
  info.group_size = groupSize;
  info.num_groups = numGroups;
  info.layout = layout;
  info.orthogonal = orthogonal;
  info.header_bytes = headerBytes;
  info.scales_offset = scalesOffset;
  info.scales_bytes = storedScales;
  info.data_offset = dataOffset;
  info.data_bytes = storedData;
  info.file_bytes = size;

  for (int r = 0; r < CQ4P_REGION_COUNT; ++r) {
    if (scales.size[r] == 0)
      continue;
    regions.offset[r] = scalesOffset + scales.offset[r];
    regions.size[r] = scales.size[r];
  }
  regions.offset[CQ4P_REGION_DATA] = dataOffset;
  regions.size[CQ4P_REGION_DATA] = storedData;

  if (cq4)
    if (Status status = checkContent(path, bytes, info, regions); !status) {
      info = {};
      regions = {};
      return status;
    }
  return Status::ok();
}

namespace {

std::string floatText(float value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.9g", double(value));
  return buffer;
}

float readF32(const uint8_t *p) {
  float value;
  std::memcpy(&value, p, 4);
  return value;
}

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

/// Every fp16 of a region finite.
Status checkFiniteHalves(const std::string &path, const char *field,
                         const uint8_t *p, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i)
    if (!cq4p_half_is_finite(readU16(p + 2 * i)))
      return formatError(path, field, "finite values",
                         hex(readU16(p + 2 * i)) + " at element " + str(i));
  return Status::ok();
}

/// docs/FORMAT.md section 1's padding rule: every byte outside the header and the regions
/// is zero.
Status checkPadding(const std::string &path, const uint8_t *bytes,
                    const cq4p_tensor_info &info, const RegionTable &regions) {
  std::vector<std::pair<uint64_t, uint64_t>> used = {{0, info.header_bytes}};
  for (int r = 0; r < CQ4P_REGION_COUNT; ++r)
    if (regions.size[r] != 0)
      used.emplace_back(regions.offset[r], regions.offset[r] + regions.size[r]);
  std::sort(used.begin(), used.end());
  uint64_t at = 0;
  auto zero = [&](uint64_t begin, uint64_t end) -> Status {
    for (uint64_t i = begin; i < end; ++i)
      if (bytes[i] != 0)
        return formatError(path, "padding", "zero bytes",
                           hex(bytes[i]) + " at offset " + str(i));
    return Status::ok();
  };
  for (const auto &[begin, end] : used) {
    if (begin > at)
      if (Status status = zero(at, begin); !status)
        return status;
    at = std::max(at, end);
  }
  return zero(at, info.file_bytes);
}

Status verifyPanels(const std::string &path, const uint8_t *bytes,
                    const cq4p_tensor_info &info, const RegionTable &regions) {
  const uint8_t *codebook = bytes + regions.offset[CQ4P_REGION_CODEBOOK];
  uint16_t levels[CQ4P_CODEBOOK_LEVELS];
  std::memcpy(levels, codebook, sizeof(levels));
  int8_t cbI8[CQ4P_CODEBOOK_LEVELS];
  float cbScale = 0;
  char error[256];
  int code = cq4p_codebook_int8(levels, cbI8, &cbScale, error, sizeof(error));
  if (code != CQ4P_OK)
    return Status(static_cast<cq4p_code>(code), path + ": " + error);

  uint64_t n = info.dims[0], k = info.dims[1], numGroups = info.num_groups;
  uint64_t superBlocks = cq4p_num_super_blocks(n);
  const uint8_t *norms = bytes + regions.offset[CQ4P_REGION_NORMS];
  const uint8_t *folded = bytes + regions.offset[CQ4P_REGION_NORM_PANELS];
  for (uint64_t sb = 0; sb < superBlocks; ++sb)
    for (uint64_t g = 0; g < numGroups; ++g)
      for (uint64_t c = 0; c < CQ4P_PANEL_CHANNELS; ++c) {
        uint64_t row = sb * CQ4P_PANEL_CHANNELS + c;
        float found = readF32(folded + 4 * ((sb * numGroups + g) * CQ4P_PANEL_CHANNELS + c));
        float expected =
            row < n ? cq4p_half_to_float(readU16(norms + 2 * (row * numGroups + g))) * cbScale
                    : 0.0f;
        if (floatBits(found) != floatBits(expected))
          return formatError(
              path, "norm_panels",
              (row < n ? "fp32(norm) * cb_scale = " : "0.0 past N: ") +
                  floatText(expected),
              floatText(found) + " at super-block " + str(sb) + ", group " +
                  str(g) + ", channel " + str(c) + " (row " + str(row) + ")");
      }

  // Canonical indices: an index whose int8 level a lower index also has
  // never appears. Channels past N hold index 0.
  bool nonCanonical[CQ4P_CODEBOOK_LEVELS] = {};
  for (int i = 0; i < CQ4P_CODEBOOK_LEVELS; ++i)
    for (int j = 0; j < i; ++j)
      if (cbI8[j] == cbI8[i])
        nonCanonical[i] = true;
  // Row by row, as Python's reader reports the first defect (io/reader.py).
  const uint8_t *panels = bytes + regions.offset[CQ4P_REGION_DATA];
  uint64_t kgBlocks = k / CQ4P_KG_BLOCK_K;
  auto index = [&](uint64_t row, uint64_t col) {
    uint64_t c = row % CQ4P_PANEL_CHANNELS, nibble = c * CQ4P_KG_BLOCK_K + col % CQ4P_KG_BLOCK_K;
    uint8_t byte = panels[((row / CQ4P_PANEL_CHANNELS) * kgBlocks + col / CQ4P_KG_BLOCK_K) *
                              CQ4P_KG_BLOCK_BYTES +
                          nibble / 2];
    return unsigned(byte >> (4 * (nibble % 2))) & 0xF;
  };
  for (uint64_t row = n; row < superBlocks * CQ4P_PANEL_CHANNELS; ++row)
    for (uint64_t col = 0; col < k; ++col)
      if (unsigned found = index(row, col); found != 0)
        return formatError(path, "data", "index 0 in channels past N",
                           "index " + str(found) + " at row " + str(row) +
                               ", column " + str(col));
  bool anyNonCanonical = false;
  for (bool flag : nonCanonical)
    anyNonCanonical |= flag;
  for (uint64_t row = 0; anyNonCanonical && row < n; ++row)
    for (uint64_t col = 0; col < k; ++col)
      if (unsigned found = index(row, col); nonCanonical[found])
        return formatError(path, "data",
                           "canonical indices (the lowest index of each int8 "
                           "level)",
                           "index " + str(found) + " (int8 level " +
                               std::to_string(cbI8[found]) + ") at row " +
                               str(row) + ", column " + str(col));
  return Status::ok();
}

} // namespace

Status verifyTensorContent(const std::string &path, const uint8_t *bytes,
                           const cq4p_tensor_info &info,
                           const RegionTable &regions) {
  if (Status status = checkPadding(path, bytes, info, regions); !status)
    return status;
  auto region = [&](cq4p_region r) { return bytes + regions.offset[r]; };
  if (info.precision == CQ4P_PRECISION_FP16)
    return checkFiniteHalves(path, "data", region(CQ4P_REGION_DATA),
                             regions.size[CQ4P_REGION_DATA] / 2);
  if (info.precision == CQ4P_PRECISION_FP32) {
    for (uint64_t i = 0; i < regions.size[CQ4P_REGION_DATA] / 4; ++i) {
      float value = readF32(region(CQ4P_REGION_DATA) + 4 * i);
      if (!std::isfinite(value))
        return formatError(path, "data", "finite values",
                           floatText(value) + " at element " + str(i));
    }
    return Status::ok();
  }
  const std::pair<cq4p_region, const char *> halves[] = {
      {CQ4P_REGION_INPUT_SCALE, "input_scale"},
      {CQ4P_REGION_INPUT_SCALE_RECIP, "input_scale_recip"},
      {CQ4P_REGION_NORMS, "norms"},
      {CQ4P_REGION_ROTATION, "rotation"},
      {CQ4P_REGION_ROTATION_T, "rotation_t"}};
  for (const auto &[r, field] : halves)
    if (Status status = checkFiniteHalves(path, field, region(r), regions.size[r] / 2);
        !status)
      return status;
  if (regions.size[CQ4P_REGION_ROTATION_T] != 0) {
    uint64_t k = info.dims[1];
    const uint8_t *rotation = region(CQ4P_REGION_ROTATION);
    const uint8_t *transposed = region(CQ4P_REGION_ROTATION_T);
    for (uint64_t j = 0; j < k; ++j)
      for (uint64_t i = 0; i < k; ++i)
        if (readU16(transposed + 2 * (j * k + i)) != readU16(rotation + 2 * (i * k + j)))
          return formatError(path, "rotation_t", "the transpose of rotation",
                             "rotation_t[" + str(j) + "][" + str(i) + "] = " +
                                 hex(readU16(transposed + 2 * (j * k + i))) +
                                 ", rotation[" + str(i) + "][" + str(j) +
                                 "] = " + hex(readU16(rotation + 2 * (i * k + j))));
  }
  if (info.layout == CQ4P_LAYOUT_PANELS)
    return verifyPanels(path, bytes, info, regions);
  return Status::ok();
}

Status TensorFile::verify() const {
  static const uint8_t kEmpty[1] = {0};
  Status status = verifyTensorContent(path_, base_ ? base_ : kEmpty, info_, regions_);
  // A pass over zeros the handler mapped is no verdict on the file.
  if (truncatedWhileMapped())
    return checkMapping();
  return status;
}

/// Maps `size` bytes of `fd` read-only. A file of at least 2 MiB is placed at
/// a 2 MiB-aligned address (file offset 0 then meets the PMD boundary the
/// kernel needs) and advised MADV_HUGEPAGE (LargePages.h), still the page
/// cache's own pages, never a copy: where the file system keeps large folios
/// (ext4 and xfs on Linux 6.16 and later, tmpfs with huge=) the panels are
/// then read through 2 MiB TLB entries instead of 512 4 KiB ones, which a
/// decode step, reading every weight once, feels in full. Pages already
/// cached as small folios (a file written in small pieces) stay small until
/// the cache drops them; a file read cold from disk under the advice comes in
/// as large folios.
static void *mapTensorBytes(int fd, uint64_t size) {
  return mapForLargePages(size, PROT_READ, MAP_PRIVATE, fd);
}

Status TensorFile::sha256(std::string &hex) const {
  Sha256 hash;
  if (size_ > 0)
    hash.update(base_, size_t(size_));
  hex = hash.hexDigest();
  // A hash over zeros the handler mapped is no digest of the file.
  if (truncatedWhileMapped())
    return checkMapping();
  return Status::ok();
}

void TensorFile::releasePages() const {
  // The mapping is private and never written, so dropping its pages loses
  // nothing: they are the page cache's (or the truncation handler's zeros,
  // which come back as zeros).
  if (base_ != nullptr)
    (void)::madvise(const_cast<uint8_t *>(base_), size_, MADV_DONTNEED);
}

Status TensorFile::open(const std::string &path,
                        std::unique_ptr<TensorFile> &out) {
  return openAt(AT_FDCWD, path, path, /*noFollow=*/false, out);
}

Status TensorFile::openAt(int directoryFd, const std::string &name,
                          const std::string &path, bool noFollow,
                          std::unique_ptr<TensorFile> &out) {
  out.reset();
  int fd = -1;
  uint64_t size = 0;
  struct stat identity;
  if (Status status = openRegularFile(directoryFd, name, path, noFollow, fd,
                                      size, &identity);
      !status)
    return status;
  std::unique_ptr<TensorFile> file(new TensorFile());
  file->path_ = path;
  file->noFollow_ = noFollow;
  file->device_ = uint64_t(identity.st_dev);
  file->inode_ = uint64_t(identity.st_ino);
  if (size > 0) {
    void *mapping = mapTensorBytes(fd, size);
    if (mapping == MAP_FAILED) {
      int error = errno;
      ::close(fd);
      return Status(CQ4P_ERROR_IO, path + ": cannot map " + str(size) +
                                       " bytes: " + std::strerror(error));
    }
    file->base_ = static_cast<const uint8_t *>(mapping);
    file->size_ = size;
    // Before the first read: validation itself may meet a truncation.
    file->guardSlot_ = guardMapping(mapping, size);
    if (file->guardSlot_ < 0) {
      ::close(fd);
      return Status(CQ4P_ERROR_IO,
                    path + ": cannot guard the mapping against truncation: "
                           "expected at most " +
                        str(kMaxGuardedMappings) +
                        " tensor files mapped at once in this process, or a "
                        "SIGBUS handler the runtime could install");
    }
  }
  ::close(fd); // the mapping keeps the file's pages

  static const uint8_t kEmpty[1] = {0};
  if (Status status = validateTensorBytes(path, file->base_ ? file->base_ : kEmpty,
                                          size, file->info_, file->regions_);
      !status)
    return file->truncatedWhileMapped() ? file->checkMapping() : status;
  if (file->truncatedWhileMapped())
    return file->checkMapping();
  out = std::move(file);
  return Status::ok();
}

bool TensorFile::truncatedWhileMapped() const {
  return mappingFaulted(guardSlot_);
}

Status TensorFile::checkMapping() const {
  // The file as its path names it now; another file there (a replacement
  // renamed into place) is not the one mapped, whose pages stay intact.
  struct stat now;
  bool same = ::fstatat(AT_FDCWD, path_.c_str(), &now,
                        noFollow_ ? AT_SYMLINK_NOFOLLOW : 0) == 0 &&
              uint64_t(now.st_dev) == device_ && uint64_t(now.st_ino) == inode_;
  uint64_t current = same ? uint64_t(now.st_size) : 0;
  bool faulted = truncatedWhileMapped();
  if (!faulted && (!same || current == size_))
    return Status::ok(); // allocates nothing: Model::generate calls this
  std::string message =
      path_ + (faulted || current < size_ ? " was truncated while mapped: "
                                          : " changed size while mapped: ") +
      "mapped " + str(size_) + " bytes, " +
      (same ? "the file now has " + str(current) + " bytes"
            : std::string("fewer now (its path names another file or none)"));
  if (faulted)
    message += " (a read past its end found no page)";
  return Status(CQ4P_ERROR_IO,
                message + "; a bundle's files must not change while it is open");
}

TensorFile::~TensorFile() {
  // No handler may be writing over the mapping when it goes.
  unguardMapping(guardSlot_);
  if (base_ != nullptr)
    ::munmap(const_cast<uint8_t *>(base_), size_);
}

ByteSpan TensorFile::region(cq4p_region region) const {
  if (region < 0 || region >= CQ4P_REGION_COUNT || regions_.size[region] == 0)
    return {};
  return {base_ + regions_.offset[region], regions_.size[region]};
}

} // namespace cq4p::runtime
