//===- WeightView.h - a tensor file as the kernels see it -------*- C++ -*-===//
//
// A cq4p_weight_view (kernel_abi.h) points straight into a tensor file's
// mapping: nothing is copied but the 16-byte int8 codebook, which is derived
// once from the stored fp16 codebook (docs/FORMAT.md sections 4 and 6), and the
// Hadamard permutation (at most 1 KiB), the one stored value that drives an
// address, copied and range-checked so that a file changed in place after
// validation cannot send a kernel out of bounds. Both live in the
// WeightView, so the view's pointers stay valid as long as the WeightView
// does (it is neither copyable nor movable for that reason).
//
// Kernels read typed data through the view (fp32 norm panels, fp16 scales
// and rotations, u32 permutation), so every typed region must sit at an
// address aligned for its element type; that and the packed-panel layout
// are checked before the view exists.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_WEIGHTVIEW_H
#define CQ4P_RUNTIME_WEIGHTVIEW_H

#include "cq4p/kernel_abi.h"
#include "cq4p/runtime/Status.h"
#include "cq4p/runtime/TensorFile.h"

#include <array>
#include <cstdint>
#include <string>

namespace cq4p::runtime {

/// Every region of one tensor file, indexed by cq4p_region.
using RegionSpans = std::array<ByteSpan, CQ4P_REGION_COUNT>;

/// The regions of a mapped file.
RegionSpans regionSpans(const TensorFile &file);

class WeightView {
public:
  WeightView() = default;
  WeightView(const WeightView &) = delete;
  WeightView &operator=(const WeightView &) = delete;

  /// Builds the view of a CQ4 packed-panel file.
  Status bind(const TensorFile &file);
  /// The same from a validated header and its regions (validateTensorBytes
  /// over bytes held anywhere); `path` only names the file in messages.
  Status bind(const std::string &path, const cq4p_tensor_info &info,
              const RegionSpans &regions);

  const cq4p_weight_view &view() const { return view_; }
  /// cb_scale of docs/FORMAT.md section 4 (1.0 for a pre-scaled file).
  float codebookScale() const { return codebookScale_; }

private:
  cq4p_weight_view view_ = {};
  int8_t codebookInt8_[CQ4P_CODEBOOK_LEVELS] = {};
  uint32_t permutation_[CQ4P_PANEL_MAX_GROUP_SIZE] = {};
  float codebookScale_ = 0.0f;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_WEIGHTVIEW_H
