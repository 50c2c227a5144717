//===- LoweringHelpers.h - small builders the kernel lowerings share -*- C++ -*-===//

#ifndef CQ4P_LIB_CONVERSION_LOWERINGHELPERS_H
#define CQ4P_LIB_CONVERSION_LOWERINGHELPERS_H

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

/// p times 2^k, where k was rounded by adding 1.5 * 2^23 into `t` (so k
/// sits in t's low bits): t's bits shifted left by 23 added to p's bits,
/// i.e. k added to p's exponent field. expNonPositive and NEON attention's
/// base-2 exponential share it.
inline Value timesPowerOfTwo(OpBuilder &b, Location loc, Value p, Value t) {
  auto type = cast<VectorType>(p.getType());
  auto ints = type.clone(b.getI32Type());
  Value shifted = arith::ShLIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, ints, t),
      vector::BroadcastOp::create(
          b, loc, ints, arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(23))));
  return arith::BitcastOp::create(
      b, loc, type,
      arith::AddIOp::create(b, loc, arith::BitcastOp::create(b, loc, ints, p), shifted));
}

/// exp(x) lane by lane for x <= 0 (a softmax's arguments; where a lane's x
/// may be larger the caller discards the result), within 2e-7 relative, on
/// fp32 vectors fixed or scalable: x clamped below at -87 (exp(-87) is
/// 1.6e-38, nothing a sum can see), x = k ln 2 + r with k an integer and
/// |r| <= ln 2 / 2 (ln 2 in two parts, Cody and Waite, so that k ln 2's
/// first part is exact), exp(r) as 1 + r (c1 + ... + c5 r^4), a degree-5
/// fit of least maximum relative error on that interval (1.0e-7 in exact
/// arithmetic, 1.7e-7 evaluated in fp32 over [-87, 0]; the degree-6 Taylor
/// polynomial it replaces reached 2.3e-7 and took one FMA more and, with
/// FMLA's accumulator a constant, one MOV more), times 2^k by adding k to
/// its exponent field. k is rounded by adding 1.5 * 2^23, which leaves it
/// in the sum's low bits, so that the sum's bits shifted left by 23 are k's
/// exponent increment. 12 instructions where math.exp's polynomial, which
/// handles every x, takes 24. NEON's attention and SME2's prefill attention
/// leaf share it.
inline Value expNonPositive(OpBuilder &b, Location loc, Value x) {
  auto type = cast<VectorType>(x.getType());
  auto lanes = [&](float value) -> Value {
    return vector::BroadcastOp::create(
        b, loc, type, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value)));
  };
  auto fma = [&](Value p, Value q, Value r) -> Value {
    return math::FmaOp::create(b, loc, p, q, r);
  };
  const float magic = 12582912.0f; // 1.5 * 2^23
  x = arith::MaximumFOp::create(b, loc, x, lanes(-87.0f));
  Value t = fma(x, lanes(1.44269504088896341f), lanes(magic));
  Value k = arith::SubFOp::create(b, loc, t, lanes(magic));
  Value r = fma(k, lanes(-0.693359375f), x);
  r = fma(k, lanes(2.12194440e-4f), r);
  Value p = fma(r, lanes(0.00831786636f), lanes(0.041898042f));
  for (float c : {0.166671827f, 0.499991477f, 0.999999881f, 1.0f})
    p = fma(p, r, lanes(c));
  return timesPowerOfTwo(b, loc, p, t);
}

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_LOWERINGHELPERS_H
