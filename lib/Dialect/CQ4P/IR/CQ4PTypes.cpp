//===- CQ4PTypes.cpp - cq4p types -----------------------------------------===//
//
// The weight type's syntax (`!cq4p.weight<NxK, gs = G, rotation, layout>`)
// and its verifier, which holds the format's rules for what a CQ4 file of
// each rotation family and layout may contain (docs/FORMAT.md sections 1-3).
//
//===----------------------------------------------------------------------===//

#include "WeightShape.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/format.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

using namespace mlir;
using namespace mlir::cq4p;

ParseResult mlir::cq4p::detail::parseWeightShape(AsmParser &parser,
                                                int64_t &n, int64_t &k) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t, 2> dims;
  if (parser.parseDimensionList(dims, /*allowDynamic=*/false,
                                /*withTrailingX=*/false))
    return failure();
  if (dims.size() != 2)
    return parser.emitError(loc)
           << "expected a weight shape NxK with 2 dimensions, got "
           << dims.size();
  n = dims[0];
  k = dims[1];
  return success();
}

using mlir::cq4p::detail::parseWeightShape;

static void printWeightShape(AsmPrinter &printer, int64_t n, int64_t k) {
  printer << n << 'x' << k;
}

#define GET_TYPEDEF_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4PTypes.cpp.inc"

void CQ4PDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "cq4p/Dialect/CQ4P/IR/CQ4PTypes.cpp.inc"
      >();
}

// Kernels index channels and K with 32-bit arithmetic; the format's largest
// tensors (vocabularies of a few hundred thousand) are far below this.
static constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();

LogicalResult WeightType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t n, int64_t k, int64_t groupSize,
                                 Rotation rotation, Layout layout) {
  if (n <= 0 || n > kMaxDim)
    return emitError() << "expected N (" << n << ") to be in [1, " << kMaxDim
                       << "]";
  if (k <= 0 || k > kMaxDim)
    return emitError() << "expected K (" << k << ") to be in [1, " << kMaxDim
                       << "]";
  if (groupSize <= 0)
    return emitError() << "expected the group size (" << groupSize
                       << ") to be positive";
  if (k % groupSize != 0)
    return emitError() << "expected K (" << k
                       << ") to be a multiple of the group size (" << groupSize
                       << ")";
  if (rotation == Rotation::hadamard && !llvm::isPowerOf2_64(groupSize))
    return emitError() << "expected the group size (" << groupSize
                       << ") of a hadamard weight to be a power of two";

  if (layout == Layout::panels) {
    if (rotation == Rotation::hadamard &&
        (groupSize % CQ4P_PANEL_GROUP_MULTIPLE != 0 ||
         groupSize > CQ4P_PANEL_MAX_GROUP_SIZE))
      return emitError() << "expected the group size (" << groupSize
                         << ") of a hadamard panel weight to be a multiple of "
                         << CQ4P_PANEL_GROUP_MULTIPLE << " and at most "
                         << CQ4P_PANEL_MAX_GROUP_SIZE;
    if (rotation == Rotation::orthogonal &&
        groupSize != CQ4P_ORTHOGONAL_VIRTUAL_GROUP)
      return emitError() << "expected the group size (" << groupSize
                         << ") of an orthogonal panel weight to be its "
                            "virtual group of "
                         << CQ4P_ORTHOGONAL_VIRTUAL_GROUP;
  } else if (rotation == Rotation::orthogonal && groupSize != k) {
    return emitError() << "expected the group size (" << groupSize
                       << ") of a legacy orthogonal weight to span the row (K = "
                       << k << ")";
  }
  return success();
}

int64_t WeightType::getNumSuperBlocks() const {
  return static_cast<int64_t>(cq4p_num_super_blocks(getN()));
}

int64_t WeightType::getPanelDataBytes() const {
  return static_cast<int64_t>(cq4p_panel_data_bytes(getN(), getK()));
}
