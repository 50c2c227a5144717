//===- EmitBuilder.h - the one builder of the kernel emitters ----*- C++ -*-===//
//
// Every kernel emitter (the host's model kernels and attention, NEON's
// attention, SME2's leaves) builds its IR through EmitBuilder: an OpBuilder
// at a location whose helpers are named by the type they work on, so that a
// helper means the same in every file:
//
//   constants     index(v), i32(v), f32(v); splat(scalar) and splatF32(v)
//                 into the emitter's fp32 vector type `floats`
//   integers      addI, subI, mulI, minSI, maxSI, lessThanI, toI32 (index
//                 or signless integer operands, scalar or vector)
//   floats        addF, subF, mulF, divF, maxF (arith.maximumf), fma (one
//                 rounding), expNonPositive (a softmax's exp, x <= 0),
//                 activate (silu or gelu_tanh, cq4p.glu's formula),
//                 sinCos (a rotary embedding's angles)
//   either        select
//   attention     keysUpTo (the causal and sliding-window key range of a
//                 query position)
//   loops         forEach (the body builds at its own builder, as scf's body
//                 builders do), forLoop (the body builds with this builder,
//                 its insertion point moved into the loop and restored), and
//                 forLoopAs<Emitter> (the body gets an emitter of the
//                 caller's kind at the loop's body)
//
// A target's emitter derives from it and adds only what is the target's own
// (SME2's ZA tiles and multi-vector loads, NEON's LD1 x4 pointer chains, the
// host's 16-lane folds); its `floats` is its fp32 vector: vector<16xf32> on
// the host, vector<4xf32> on NEON, vector<[4]xf32> in SME2's streaming
// leaves.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_CODEGEN_EMITBUILDER_H
#define CQ4P_CODEGEN_EMITBUILDER_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

#include <limits>
#include <utility>

namespace mlir::cq4p {

/// `value` of `type`'s element type, broadcast where `type` is a vector.
inline Value constantLike(OpBuilder &b, Location loc, Type type, TypedAttr value) {
  Value scalar = arith::ConstantOp::create(b, loc, value);
  if (isa<VectorType>(type))
    return vector::BroadcastOp::create(b, loc, type, scalar);
  return scalar;
}

/// p times 2^k, where k was rounded by adding 1.5 * 2^23 into `t` (so k
/// sits in t's low bits): t's bits shifted left by 23 added to p's bits,
/// i.e. k added to p's exponent field. expNonPositive and NEON attention's
/// base-2 exponential share it.
inline Value timesPowerOfTwo(OpBuilder &b, Location loc, Value p, Value t) {
  Type type = p.getType();
  Type ints = b.getI32Type();
  if (auto vector = dyn_cast<VectorType>(type))
    ints = vector.clone(ints);
  Value shifted =
      arith::ShLIOp::create(b, loc, arith::BitcastOp::create(b, loc, ints, t),
                            constantLike(b, loc, ints, b.getI32IntegerAttr(23)));
  return arith::BitcastOp::create(
      b, loc, type,
      arith::AddIOp::create(b, loc, arith::BitcastOp::create(b, loc, ints, p), shifted));
}

/// exp(x) lane by lane for x <= 0 (a softmax's arguments; where a lane's x
/// may be larger the caller discards the result), within 2e-7 relative, on
/// fp32 vectors fixed or scalable or a scalar fp32: x clamped below at -87
/// (exp(-87) is 1.6e-38, nothing a sum can see), x = k ln 2 + r with k an
/// integer and |r| <= ln 2 / 2 (ln 2 in two parts, Cody and Waite, so that
/// k ln 2's first part is exact), exp(r) as 1 + r (c1 + ... + c5 r^4), a degree-5
/// fit of least maximum relative error on that interval (1.0e-7 in exact
/// arithmetic, 1.7e-7 evaluated in fp32 over [-87, 0]; the degree-6 Taylor
/// polynomial it replaces reached 2.3e-7 and took one FMA more and, with
/// FMLA's accumulator a constant, one MOV more), times 2^k by adding k to
/// its exponent field. k is rounded by adding 1.5 * 2^23, which leaves it
/// in the sum's low bits, so that the sum's bits shifted left by 23 are k's
/// exponent increment. 12 instructions where math.exp's polynomial, which
/// handles every x, takes 24. Every softmax shares it (the host's prompt
/// attention and decode row, NEON's attention, SME2's leaves), and the
/// gating's sigmoid (activateLanes).
inline Value expNonPositive(OpBuilder &b, Location loc, Value x) {
  Type type = x.getType();
  auto lanes = [&](float value) -> Value {
    return constantLike(b, loc, type, b.getF32FloatAttr(value));
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

/// (sin x, cos x) lane by lane on fp32 vectors, fixed or scalable, within
/// 1e-7 absolute for |x| up to 2^17 (a rotary embedding's angles, position
/// times frequency): x = k pi/2 + r with k the nearest integer (rounded by
/// adding 1.5 * 2^23, k's low bits in the sum's) and pi/2 in three parts
/// (Cody and Waite: the first fused multiply-add is exact), sin r and cos r
/// on |r| <= pi/4 by Cephes' polynomials of degree 7 and 8 in r, and k's
/// quadrant picks and signs them: sin x = (sin r, cos r, -sin r, -cos r)
/// for k mod 4 = 0 .. 3, cos x the same shifted by one. 26 vector
/// operations for both (15 on floats, 11 on their bits), where math.sin and
/// math.cos are a libm call per lane each.
inline std::pair<Value, Value> sinCosLanes(OpBuilder &b, Location loc, Value x) {
  auto type = cast<VectorType>(x.getType());
  auto ints = type.clone(b.getI32Type());
  auto lanes = [&](float value) -> Value {
    return constantLike(b, loc, type, b.getF32FloatAttr(value));
  };
  auto words = [&](int32_t value) -> Value {
    return constantLike(b, loc, ints, b.getI32IntegerAttr(value));
  };
  auto fma = [&](Value p, Value q, Value r) -> Value {
    return math::FmaOp::create(b, loc, p, q, r);
  };
  auto mul = [&](Value p, Value q) -> Value { return arith::MulFOp::create(b, loc, p, q); };
  const float magic = 12582912.0f; // 1.5 * 2^23
  Value t = fma(x, lanes(0.636619772367581343f), lanes(magic));
  Value k = arith::SubFOp::create(b, loc, t, lanes(magic));
  Value r = fma(k, lanes(-1.57079637050628662f), x);
  r = fma(k, lanes(4.37113882867379e-08f), r);
  r = fma(k, lanes(1.71512451000588e-15f), r);
  Value z = mul(r, r);
  Value ps = fma(z, lanes(-1.9515295891e-4f), lanes(8.3321608736e-3f));
  ps = fma(ps, z, lanes(-1.6666654611e-1f));
  Value sinR = fma(mul(r, z), ps, r);
  Value pc = fma(z, lanes(2.443315711809948e-5f), lanes(-1.388731625493765e-3f));
  pc = fma(pc, z, lanes(4.166664568298827e-2f));
  Value cosR = fma(mul(z, z), pc, fma(z, lanes(-0.5f), lanes(1.0f)));
  // k's low bits: odd k swaps sin and cos; bit 1 of k (of k + 1) is sin's
  // (cos's) sign.
  Value quadrant = arith::BitcastOp::create(b, loc, ints, t);
  Value odd = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ne,
      arith::AndIOp::create(b, loc, quadrant, words(1)), words(0));
  auto signOf = [&](Value q) -> Value {
    return arith::AndIOp::create(b, loc, arith::ShLIOp::create(b, loc, q, words(30)),
                                 words(std::numeric_limits<int32_t>::min()));
  };
  auto signed_ = [&](Value v, Value sign) -> Value {
    return arith::BitcastOp::create(
        b, loc, type,
        arith::XOrIOp::create(b, loc, arith::BitcastOp::create(b, loc, ints, v), sign));
  };
  Value sinX = signed_(arith::SelectOp::create(b, loc, odd, cosR, sinR), signOf(quadrant));
  Value cosX = signed_(arith::SelectOp::create(b, loc, odd, sinR, cosR),
                       signOf(arith::AddIOp::create(b, loc, quadrant, words(1))));
  return {sinX, cosX};
}

/// act(x) lane by lane on fp32 vectors, fixed or scalable, in cq4p.glu's
/// order: silu(x) = x sigmoid(x), or gelu_tanh(x) = 0.5 x (1 + tanh(u)) with
/// u = sqrt(2/pi) (x + 0.044715 x^3), which is x sigmoid(2u) exactly
/// (1 + tanh(u) = 2 / (1 + exp(-2u))). x sigmoid(z) is formed from one
/// exponential of a non-positive argument, e = exp(-|z|) <= 1
/// (expNonPositive, 12 instructions), as (z < 0 ? x e : x) / (1 + e):
/// neither branch can overflow, and no lane needs math.exp's general
/// polynomial (24 instructions) or math.tanh's. The host's model kernels and
/// every target's gated activation transform build it here, so their bits
/// agree.
inline Value activateLanes(OpBuilder &b, Location loc, Value x, bool silu) {
  auto type = cast<VectorType>(x.getType());
  auto constant = [&](float value) -> Value {
    return arith::ConstantOp::create(b, loc, type,
                                     DenseElementsAttr::get(type, b.getF32FloatAttr(value)));
  };
  auto mul = [&](Value p, Value q) -> Value { return arith::MulFOp::create(b, loc, p, q); };
  auto add = [&](Value p, Value q) -> Value { return arith::AddFOp::create(b, loc, p, q); };
  Value z = x;
  if (!silu) {
    // 2u = 2 sqrt(2/pi) (x + 0.044715 x^3).
    Value cube = mul(mul(x, x), x);
    z = mul(constant(1.5957691216057308f), add(x, mul(constant(0.044715f), cube)));
  }
  Value e = expNonPositive(
      b, loc, arith::NegFOp::create(b, loc, math::AbsFOp::create(b, loc, z)));
  Value negative = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, z, constant(0.0f));
  Value numerator = arith::SelectOp::create(b, loc, negative, mul(x, e), x);
  return arith::DivFOp::create(b, loc, numerator, add(constant(1.0f), e));
}

class EmitBuilder {
public:
  EmitBuilder(OpBuilder &b, Location loc, VectorType floats = {})
      : b(b), loc(loc), floats(floats) {}

  OpBuilder &b;
  Location loc;
  /// The emitter's fp32 vector type (null where it has none).
  VectorType floats;

  //===--------------------------------------------------------------------===//
  // Constants.
  //===--------------------------------------------------------------------===//

  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value i32(int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  }
  Value f32(float v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  /// `scalar` in every lane of `floats`.
  Value splat(Value scalar) {
    return vector::BroadcastOp::create(b, loc, floats, scalar);
  }
  /// The fp32 constant `v` in every lane of `floats`.
  Value splatF32(float v) { return splat(f32(v)); }

  //===--------------------------------------------------------------------===//
  // Index and integer arithmetic.
  //===--------------------------------------------------------------------===//

  Value addI(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value subI(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
  Value mulI(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value minSI(Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y); }
  Value maxSI(Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y); }
  /// x < y, signed.
  Value lessThanI(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, y);
  }
  /// An index as an i32.
  Value toI32(Value indexValue) {
    return arith::IndexCastOp::create(b, loc, b.getI32Type(), indexValue);
  }

  //===--------------------------------------------------------------------===//
  // Float arithmetic (scalars or vectors).
  //===--------------------------------------------------------------------===//

  Value addF(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value subF(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mulF(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value divF(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  /// arith.maximumf: NaN if either is.
  Value maxF(Value x, Value y) { return arith::MaximumFOp::create(b, loc, x, y); }
  /// x * y + z, one rounding.
  Value fma(Value x, Value y, Value z) { return math::FmaOp::create(b, loc, x, y, z); }
  /// exp(x) for x <= 0 (a softmax's differences from its running max).
  Value expNonPositive(Value x) { return cq4p::expNonPositive(b, loc, x); }
  /// 2^r lane by lane for |r| <= 1/2: expNonPositive's degree-5 fit with its
  /// coefficients times (ln 2)^i (2^r = e^(r ln 2)), by Horner; 1.8e-7
  /// relative in fp32. The base-2 exponentials (NEON attention's
  /// exp2NonPositive, SME2's exp2Lanes) scale it by 2^k each their own way.
  Value exp2Fraction(Value r) {
    Value p = fma(r, splatF32(0.00133088103f), splatF32(0.00967153907f));
    for (float c : {0.0555058271f, 0.240222424f, 0.693147063f, 1.0f})
      p = fma(p, r, splatF32(c));
    return p;
  }
  /// silu(x) or gelu_tanh(x) lane by lane (activateLanes).
  Value activate(Value x, bool silu) { return activateLanes(b, loc, x, silu); }
  /// (sin x, cos x) lane by lane (sinCosLanes).
  std::pair<Value, Value> sinCos(Value x) { return sinCosLanes(b, loc, x); }

  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y);
  }

  //===--------------------------------------------------------------------===//
  // Attention.
  //===--------------------------------------------------------------------===//

  /// The keys query position p attends to, [first, end): end = p + 1 (the
  /// causal rule), first 0 or, with a sliding window (window > 0), the keys
  /// j > p - window, first = max(0, p + 1 - window). Every target's decode
  /// attention and the host's prompt rows take their range from here.
  std::pair<Value, Value> keysUpTo(Value p, int64_t window) {
    Value end = addI(p, index(1));
    Value first = index(0);
    if (window > 0)
      first = maxSI(subI(end, index(window)), index(0));
    return {first, end};
  }

  //===--------------------------------------------------------------------===//
  // Loops.
  //===--------------------------------------------------------------------===//

  /// for (i = lb; i < ub; i += step) body(i), the body building at the
  /// loop body's own builder.
  void forEach(Value lb, Value ub, int64_t step,
               function_ref<void(OpBuilder &, Location, Value)> body) {
    scf::ForOp::create(b, loc, lb, ub, index(step), ValueRange{},
                       [&](OpBuilder &nb, Location nl, Value i, ValueRange) {
                         body(nb, nl, i);
                         scf::YieldOp::create(nb, nl);
                       });
  }

  /// for (i = lb; i < ub; i += step) carried = body(i, carried), the body
  /// building with this builder (its insertion point moved into the loop
  /// for the body, then restored).
  scf::ForOp forLoop(Value lb, Value ub, int64_t step, ValueRange init,
                     function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    return scf::ForOp::create(
        b, loc, lb, ub, index(step), init,
        [&](OpBuilder &inner, Location, Value i, ValueRange carried) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(inner.getInsertionBlock(), inner.getInsertionPoint());
          SmallVector<Value> next = body(i, carried);
          scf::YieldOp::create(b, loc, next);
        });
  }

  /// for (i = lb; i < ub; i += step) carried = body(inner, i, carried),
  /// `inner` an emitter of kind `Self` (made from an OpBuilder and a
  /// location) at the loop's body.
  template <typename Self>
  SmallVector<Value>
  forLoopAs(Value lb, Value ub, int64_t step, ValueRange init,
            function_ref<SmallVector<Value>(Self &, Value, ValueRange)> body) {
    auto forOp = scf::ForOp::create(
        b, loc, lb, ub, index(step), init,
        [&](OpBuilder &nb, Location nl, Value i, ValueRange carried) {
          Self inner(nb, nl);
          scf::YieldOp::create(nb, nl, body(inner, i, carried));
        });
    return SmallVector<Value>(forOp.getResults());
  }
};

} // namespace mlir::cq4p

#endif // CQ4P_CODEGEN_EMITBUILDER_H
