//===- WeightView.cpp - zero-copy views of a panel file for the kernels ---===//

#include "cq4p/runtime/WeightView.h"

#include <cstring>

#include <cstdint>
#include <vector>

namespace cq4p::runtime {
namespace {

std::string str(uint64_t value) { return std::to_string(value); }

const char *layoutName(uint32_t layout) {
  switch (layout) {
  case CQ4P_LAYOUT_ROW_MAJOR:
    return "row-major (legacy CQ4)";
  case CQ4P_LAYOUT_INTERLEAVED_4ROW:
    return "interleaved 4-row (legacy CQ4)";
  case CQ4P_LAYOUT_PANELS:
    return "packed panels";
  case CQ4P_LAYOUT_DENSE:
    return "dense (not CQ)";
  default:
    return "unknown";
  }
}

struct RegionNeed {
  cq4p_region region;
  const char *field;
  uint64_t bytes;     // 0: too large to compute (never for a validated file)
  uint64_t alignment; // of the element type the kernels read
};

uint64_t product(uint64_t a, uint64_t b, uint64_t c = 1, uint64_t d = 1) {
  uint64_t result;
  if (__builtin_mul_overflow(a, b, &result) ||
      __builtin_mul_overflow(result, c, &result) ||
      __builtin_mul_overflow(result, d, &result))
    return 0;
  return result;
}

} // namespace

RegionSpans regionSpans(const TensorFile &file) {
  RegionSpans spans;
  for (int r = 0; r < CQ4P_REGION_COUNT; ++r)
    spans[r] = file.region(static_cast<cq4p_region>(r));
  return spans;
}

Status WeightView::bind(const TensorFile &file) {
  return bind(file.path(), file.info(), regionSpans(file));
}

Status WeightView::bind(const std::string &path, const cq4p_tensor_info &info,
                        const RegionSpans &regions) {
  view_ = {};
  if (info.precision != CQ4P_PRECISION_CQ4)
    return formatError(path, "precision", "6 (CQ4) for a compiled kernel",
                       str(info.precision));
  if (info.layout != CQ4P_LAYOUT_PANELS)
    return Status(CQ4P_ERROR_UNSUPPORTED,
                  path + ": layout: expected packed panels (flag 1<<5) for a "
                         "compiled kernel, found " +
                      layoutName(info.layout));

  uint64_t n = info.dims[0], k = info.dims[1];
  uint64_t groupSize = info.group_size, numGroups = info.num_groups;
  uint64_t superBlocks = cq4p_num_super_blocks(n);
  std::vector<RegionNeed> needs = {
      {CQ4P_REGION_DATA, "panels", product(superBlocks, CQ4P_PANEL_CHANNELS, k) / 2, 1},
      {CQ4P_REGION_CODEBOOK, "codebook", CQ4P_CODEBOOK_LEVELS * 2, 2},
      {CQ4P_REGION_INPUT_SCALE_RECIP, "input_scale_recip", product(k, 2), 2},
      {CQ4P_REGION_NORMS, "norms", product(n, numGroups, 2), 2},
      {CQ4P_REGION_NORM_PANELS, "norm_panels",
       product(superBlocks, numGroups, CQ4P_PANEL_CHANNELS, 4), 4},
  };
  if (info.orthogonal) {
    needs.push_back({CQ4P_REGION_ROTATION, "rotation", product(k, k, 2), 2});
    needs.push_back({CQ4P_REGION_ROTATION_T, "rotation_t", product(k, k, 2), 2});
  } else {
    needs.push_back({CQ4P_REGION_LEFT_SIGNS, "left_signs", groupSize, 1});
    needs.push_back({CQ4P_REGION_RIGHT_SIGNS, "right_signs", groupSize, 1});
    needs.push_back({CQ4P_REGION_PERMUTATION, "permutation", product(groupSize, 4), 4});
  }
  for (const RegionNeed &need : needs) {
    const ByteSpan &span = regions[need.region];
    if (need.bytes == 0 || span.data == nullptr || span.size != need.bytes)
      return formatError(path, need.field, str(need.bytes) + " bytes",
                         str(span.size) + " bytes");
    // Kernels load these as typed elements: a misaligned fp32 or u32 load
    // is undefined behaviour in C and may fault on some cores.
    uint64_t misalignment = reinterpret_cast<uintptr_t>(span.data) % need.alignment;
    if (misalignment != 0)
      return formatError(path, need.field,
                         "an address aligned to " + str(need.alignment) +
                             " bytes (its element type)",
                         "one " + str(misalignment) + " byte(s) past that");
  }

  char error[256];
  const auto *codebook =
      reinterpret_cast<const uint16_t *>(regions[CQ4P_REGION_CODEBOOK].data);
  int code = cq4p_codebook_int8(codebook, codebookInt8_, &codebookScale_,
                                error, sizeof(error));
  if (code != CQ4P_OK)
    return Status(static_cast<cq4p_code>(code), path + ": " + error);

  auto as = [&](cq4p_region region) { return regions[region].data; };
  view_.panels = as(CQ4P_REGION_DATA);
  view_.norm_panels = reinterpret_cast<const float *>(as(CQ4P_REGION_NORM_PANELS));
  view_.cb_i8 = codebookInt8_;
  view_.codebook = codebook;
  view_.input_scale_recip =
      reinterpret_cast<const uint16_t *>(as(CQ4P_REGION_INPUT_SCALE_RECIP));
  view_.norms = reinterpret_cast<const uint16_t *>(as(CQ4P_REGION_NORMS));
  if (info.orthogonal) {
    view_.rotation = reinterpret_cast<const uint16_t *>(as(CQ4P_REGION_ROTATION));
    view_.rotation_t = reinterpret_cast<const uint16_t *>(as(CQ4P_REGION_ROTATION_T));
  } else {
    view_.left_signs = reinterpret_cast<const int8_t *>(as(CQ4P_REGION_LEFT_SIGNS));
    view_.right_signs = reinterpret_cast<const int8_t *>(as(CQ4P_REGION_RIGHT_SIGNS));
    // The permutation drives addresses (z[j] = w[perm[j]]): the kernels read
    // the view's own copy, checked after copying, so a file rewritten in
    // place after validation changes no address a kernel computes.
    if (groupSize > CQ4P_PANEL_MAX_GROUP_SIZE)
      return formatError(path, "group_size",
                         "at most " + str(CQ4P_PANEL_MAX_GROUP_SIZE) +
                             " for a Hadamard panel file",
                         str(groupSize));
    std::memcpy(permutation_, as(CQ4P_REGION_PERMUTATION), groupSize * 4);
    for (uint64_t j = 0; j < groupSize; ++j)
      if (permutation_[j] >= groupSize)
        return formatError(path, "permutation",
                           "values below " + str(groupSize),
                           str(permutation_[j]) + " at " + str(j));
    view_.permutation = permutation_;
  }
  return Status::ok();
}

} // namespace cq4p::runtime
