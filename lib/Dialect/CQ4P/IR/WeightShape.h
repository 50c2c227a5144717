//===- WeightShape.h - the NxK shape syntax of CQ4 weights ------*- C++ -*-===//
//
// Private to the dialect's IR library: the `NxK` shape that a
// !cq4p.weight type and a #cq4p.model_plan CQ4 binding both write.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_DIALECT_CQ4P_IR_WEIGHTSHAPE_H
#define CQ4P_LIB_DIALECT_CQ4P_IR_WEIGHTSHAPE_H

#include "mlir/IR/OpImplementation.h"

namespace mlir::cq4p::detail {

/// Parses `NxK` with static sizes, as in a tensor type's shape.
ParseResult parseWeightShape(AsmParser &parser, int64_t &n, int64_t &k);

} // namespace mlir::cq4p::detail

#endif // CQ4P_LIB_DIALECT_CQ4P_IR_WEIGHTSHAPE_H
