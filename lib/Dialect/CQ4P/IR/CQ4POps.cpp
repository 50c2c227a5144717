//===- CQ4POps.cpp - cq4p operations --------------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <string>

using namespace mlir;
using namespace mlir::cq4p;

#define GET_OP_CLASSES
#include "cq4p/Dialect/CQ4P/IR/CQ4POps.cpp.inc"

/// A dimension the way a tensor type writes it: a number or `?`.
static std::string formatDim(int64_t size) {
  return ShapedType::isDynamic(size) ? "?" : std::to_string(size);
}

LogicalResult LinearOp::verify() {
  RankedTensorType inputType = getInput().getType();
  RankedTensorType resultType = getResult().getType();
  WeightType weightType = getWeight().getType();

  if (inputType.getRank() != 2)
    return emitOpError() << "expected the input to have rank 2 ([M, K]), got "
                            "rank "
                         << inputType.getRank();
  if (resultType.getRank() != 2)
    return emitOpError() << "expected the result to have rank 2 ([M, N]), got "
                            "rank "
                         << resultType.getRank();

  int64_t m = inputType.getDimSize(0);
  int64_t k = inputType.getDimSize(1);
  int64_t resultM = resultType.getDimSize(0);
  int64_t n = resultType.getDimSize(1);
  if (k != weightType.getK())
    return emitOpError() << "expected the input's K (" << formatDim(k)
                         << ") to equal the weight's K (" << weightType.getK()
                         << ")";
  if (n != weightType.getN())
    return emitOpError() << "expected the result's N (" << formatDim(n)
                         << ") to equal the weight's N (" << weightType.getN()
                         << ")";
  if (resultM != m)
    return emitOpError() << "expected the result's M (" << formatDim(resultM)
                         << ") to equal the input's M (" << formatDim(m) << ")";
  return success();
}
