//===- LoweringHelpers.h - small builders the kernel lowerings share -*- C++ -*-===//

#ifndef CQ4P_LIB_CONVERSION_LOWERINGHELPERS_H
#define CQ4P_LIB_CONVERSION_LOWERINGHELPERS_H

#include "cq4p/Codegen/EmitBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::cq4p {

inline Value cIndex(OpBuilder &b, Location loc, int64_t value) {
  return arith::ConstantIndexOp::create(b, loc, value);
}

inline Value splat(OpBuilder &b, Location loc, VectorType type,
                   Attribute value) {
  return arith::ConstantOp::create(b, loc, type,
                                   DenseElementsAttr::get(type, value));
}

/// A stack buffer in the function's entry block: a static frame slot, not
/// a stack allocation per loop iteration.
inline Value entryAlloca(OpBuilder &b, Operation *op, MemRefType type) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(
      &op->getParentOfType<func::FuncOp>().getBody().front());
  return memref::AllocaOp::create(b, op->getLoc(), type);
}

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_LOWERINGHELPERS_H
