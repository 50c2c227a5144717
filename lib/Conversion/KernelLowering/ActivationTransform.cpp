//===- ActivationTransform.cpp - cq4p.quantize_activations in vectors -----===//
//
// The Hadamard activation transform and int8 quantization (docs/FORMAT.md
// section 5, steps 1-2) as straight-line vector code per group, the same
// fp32 operations in the same order as the contract, so every target
// produces the same bytes as the scalar definition:
//
//   w = x * (isr * left)              left is +-1: (x * isr) * left exactly
//   7 butterfly stages (gs = 128)     a + b into the lower index, a - b the upper
//   w = w * (1/sqrt(gs))
//   scale = max(max|w| / 127, 1e-10)  max|z| = max|w|: perm and signs
//   q = round_half_even(w / scale)    a division, as the contract says
//   q = q * right                     right is +-1 and |q| <= 127: exact
//   act[j] = q[perm[j]]               a byte table lookup
//
// A group lives in gs / 4 four-lane fp32 vectors ("pieces"). The first two
// butterfly stages pair elements 1 and 2 apart, inside a piece in natural
// order, so the group is loaded de-interleaved by 4 per 16 elements (one
// LD4 on AArch64): piece 4b + a holds elements 16b + 4m + a in lane m, and
// stages 1 and 2 pair whole pieces. One 4x4 transpose per 16 elements then
// gives natural order, where every later stage pairs whole pieces again:
//
//   before: piece 4b+a = {x[16b+a], x[16b+4+a], x[16b+8+a], x[16b+12+a]}
//   after:  piece 4b+m = {x[16b+4m], x[16b+4m+1], x[16b+4m+2], x[16b+4m+3]}
//
// The quantized group is 16-byte chunks in natural order; the output
// permutation is a table lookup whose indices depend only on perm, so they
// are computed once per call: NEON TBL/TBX over four chunks at a time, x86
// PSHUFB per chunk, generic code a byte gather from the stack. Groups are
// the outer loop, rows the inner one, so isr * left is formed once per group
// whatever M is.
//
// Gated (a dense MLP's down projection): the input x = act(gate) * up is
// formed lane by lane as the gate and up pieces are loaded, with cq4p.glu's
// operations in its order (silu: g / (1 + exp(-g)); the exp and tanh are the
// same polynomials as the model kernels'), so the bytes equal those of a
// glu row written out and quantized, without the row's store and reload.
//
//===----------------------------------------------------------------------===//

#include "ActivationTransform.h"
#include "LoweringHelpers.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kLanes = 4;
constexpr int64_t kChunk = 16; ///< bytes of one quantized output vector

Value lanes(OpBuilder &b, Location loc, Value vector, ArrayRef<int64_t> mask) {
  return vector::ShuffleOp::create(b, loc, vector, vector, mask);
}

/// The vectors of `parts` (a power of two of them, of one type), end to end.
Value concatVectors(OpBuilder &b, Location loc, ArrayRef<Value> parts) {
  SmallVector<Value> level(parts);
  while (level.size() > 1) {
    SmallVector<Value> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      int64_t width = cast<VectorType>(level[i].getType()).getNumElements();
      SmallVector<int64_t> mask;
      for (int64_t j = 0; j < 2 * width; ++j)
        mask.push_back(j);
      next.push_back(
          vector::ShuffleOp::create(b, loc, level[i], level[i + 1], mask));
    }
    level = std::move(next);
  }
  return level.front();
}

/// act(g) * u lane by lane, cq4p.glu's formula in its order: silu(g) =
/// g / (1 + exp(-g)), gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g +
/// 0.044715 g^3))).
Value gateLanes(OpBuilder &b, Location loc, Activation activation, Value g,
                Value u) {
  auto type = cast<VectorType>(g.getType());
  auto constant = [&](float value) {
    return splat(b, loc, type, b.getF32FloatAttr(value));
  };
  auto mul = [&](Value x, Value y) {
    return Value(arith::MulFOp::create(b, loc, x, y));
  };
  auto add = [&](Value x, Value y) {
    return Value(arith::AddFOp::create(b, loc, x, y));
  };
  Value activated;
  if (activation == Activation::silu) {
    activated = arith::DivFOp::create(
        b, loc, g,
        add(constant(1.0f),
            math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, g))));
  } else {
    Value cube = mul(mul(g, g), g);
    Value inner = mul(constant(0.7978845608028654f),
                      add(g, mul(constant(0.044715f), cube)));
    activated = mul(mul(constant(0.5f), g),
                    add(constant(1.0f), math::TanhOp::create(b, loc, inner)));
  }
  return mul(activated, u);
}

/// act_scales[row, g] = max(maxAbs / 127, 1e-10), the contract's group
/// scale; returns it.
Value storeGroupScale(OpBuilder &b, Location loc, Value maxAbs, Value actScales,
                      Value row, Value g) {
  Value scale = arith::DivFOp::create(
      b, loc, maxAbs,
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(127.0f)));
  scale = arith::MaximumFOp::create(
      b, loc, scale,
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-10f)));
  memref::StoreOp::create(b, loc, scale, actScales, ValueRange{row, g});
  return scale;
}

/// The 16 elements of `memref` at `index` (innermost dimension), as four
/// pieces of `elementType` widened to fp32, de-interleaved by 4: piece a
/// holds elements 4m + a in lane m.
SmallVector<Value> loadDeinterleaved(OpBuilder &b, Location loc, Value memref,
                                     ValueRange indices) {
  Type element = cast<MemRefType>(memref.getType()).getElementType();
  Value block = vector::LoadOp::create(
      b, loc, VectorType::get({kChunk}, element), memref, indices);
  auto f32x4 = VectorType::get({kLanes}, b.getF32Type());
  SmallVector<Value> pieces;
  for (int64_t a = 0; a < kLanes; ++a) {
    Value piece = lanes(b, loc, block, {a, a + 4, a + 8, a + 12});
    if (element.isF16())
      piece = arith::ExtFOp::create(b, loc, f32x4, piece);
    else if (element.isInteger(8))
      piece = arith::SIToFPOp::create(b, loc, f32x4, piece);
    pieces.push_back(piece);
  }
  return pieces;
}

/// Transposes each 4x4 block of pieces: de-interleaved order to natural.
void transposeBlocks(OpBuilder &b, Location loc, MutableArrayRef<Value> w) {
  auto shuffle = [&](Value lhs, Value rhs, ArrayRef<int64_t> mask) {
    return Value(vector::ShuffleOp::create(b, loc, lhs, rhs, mask));
  };
  for (size_t base = 0; base < w.size(); base += kLanes) {
    Value t0 = shuffle(w[base], w[base + 1], {0, 4, 2, 6});
    Value t1 = shuffle(w[base], w[base + 1], {1, 5, 3, 7});
    Value t2 = shuffle(w[base + 2], w[base + 3], {0, 4, 2, 6});
    Value t3 = shuffle(w[base + 2], w[base + 3], {1, 5, 3, 7});
    w[base] = shuffle(t0, t2, {0, 1, 4, 5});
    w[base + 1] = shuffle(t1, t3, {0, 1, 4, 5});
    w[base + 2] = shuffle(t0, t2, {2, 3, 6, 7});
    w[base + 3] = shuffle(t1, t3, {2, 3, 6, 7});
  }
}


/// The output permutation act[k0 + j] = natural[perm[j]] of one group,
/// with lookup indices computed once per call.
class Permuter {
public:
  Permuter(DotTarget target, OpBuilder &b, Location loc, Value permutation,
           ArrayRef<Value> permBytes, int64_t gs)
      : target(target), b(b), loc(loc), permutation(permutation), gs(gs) {
    auto i8x16 = VectorType::get({kChunk}, b.getI8Type());
    switch (target) {
    case DotTarget::Neon:
      // TBL/TBX over up to 64 bytes: table t answers perm - 64 t when it
      // is in [0, 64) and leaves the lane alone otherwise (the wrapped
      // byte is >= 64).
      for (Value p : permBytes)
        for (int64_t t = 0; t * 64 < gs; ++t)
          indices.push_back(arith::SubIOp::create(
              b, loc, p, splat(b, loc, i8x16, b.getI8IntegerAttr(64 * t))));
      break;
    case DotTarget::X86Ssse3:
    case DotTarget::X86Avx2:
    case DotTarget::X86AvxVnni:
    case DotTarget::X86Avx512Vnni: {
      // PSHUFB per 16-byte chunk t: perm - 16 t when in [0, 16), else
      // 0x80, which reads as zero; the chunks' lookups are or-ed.
      Value limit = splat(b, loc, i8x16, b.getI8IntegerAttr(kChunk));
      Value none = splat(b, loc, i8x16, b.getI8IntegerAttr(-128));
      for (Value p : permBytes)
        for (int64_t t = 0; t * kChunk < gs; ++t) {
          Value d = arith::SubIOp::create(
              b, loc, p, splat(b, loc, i8x16, b.getI8IntegerAttr(kChunk * t)));
          Value inside = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::ult, d, limit);
          indices.push_back(arith::SelectOp::create(b, loc, inside, d, none));
        }
      // With AVX2, two output chunks per 256-bit PSHUFB whose table holds
      // the source chunk in both lanes: the indices of chunks 2o and 2o + 1
      // side by side.
      if (target != DotTarget::X86Ssse3 && (gs / kChunk) % 2 == 0) {
        int64_t chunks = gs / kChunk;
        SmallVector<int64_t> sideBySide;
        for (int64_t i = 0; i < 2 * kChunk; ++i)
          sideBySide.push_back(i);
        for (int64_t o = 0; o < chunks; o += 2)
          for (int64_t t = 0; t < chunks; ++t)
            wideIndices.push_back(vector::ShuffleOp::create(
                b, loc, indices[o * chunks + t], indices[(o + 1) * chunks + t],
                sideBySide));
      }
      break;
    }
    case DotTarget::Generic:
      // A byte gather from the group's stack copy, by the u32 indices.
      break;
    }
  }

  void store(ArrayRef<Value> natural, Value act, Value row, Value kBase) {
    auto i8x16 = VectorType::get({kChunk}, b.getI8Type());
    int64_t chunks = gs / kChunk;
    auto storeChunk = [&](Value bytes, int64_t o) {
      Value k = arith::AddIOp::create(b, loc, kBase, cIndex(b, loc, o * kChunk));
      vector::StoreOp::create(b, loc, bytes, act, ValueRange{row, k});
    };
    switch (target) {
    case DotTarget::Neon: {
      int64_t tables = std::max<int64_t>(1, gs / 64);
      for (int64_t o = 0; o < chunks; ++o) {
        Value out;
        for (int64_t t = 0; t < tables; ++t) {
          Value idx = indices[o * tables + t];
          if (gs == 32) {
            out = cq4p_intr::NeonTbl2Op::create(b, loc, i8x16, natural[0],
                                                natural[1], idx);
            continue;
          }
          ArrayRef<Value> table = natural.slice(4 * t, 4);
          out = out ? Value(cq4p_intr::NeonTbx4Op::create(b, loc, i8x16, out,
                                                          table[0], table[1],
                                                          table[2], table[3], idx))
                    : Value(cq4p_intr::NeonTbl4Op::create(b, loc, i8x16, table[0],
                                                          table[1], table[2],
                                                          table[3], idx));
        }
        storeChunk(out, o);
      }
      return;
    }
    case DotTarget::X86Ssse3:
    case DotTarget::X86Avx2:
    case DotTarget::X86AvxVnni:
    case DotTarget::X86Avx512Vnni:
      if (!wideIndices.empty()) {
        auto i8x32 = VectorType::get({2 * kChunk}, b.getI8Type());
        SmallVector<int64_t> twice;
        for (int64_t i = 0; i < 2 * kChunk; ++i)
          twice.push_back(i % kChunk);
        SmallVector<Value> tables;
        for (Value chunk : natural)
          tables.push_back(vector::ShuffleOp::create(b, loc, chunk, chunk, twice));
        for (int64_t o = 0; o < chunks; o += 2) {
          Value out;
          for (int64_t t = 0; t < chunks; ++t) {
            Value part = cq4p_intr::X86Avx2PshufBOp::create(
                b, loc, i8x32, tables[t], wideIndices[(o / 2) * chunks + t]);
            out = out ? Value(arith::OrIOp::create(b, loc, out, part)) : part;
          }
          Value k = arith::AddIOp::create(b, loc, kBase, cIndex(b, loc, o * kChunk));
          vector::StoreOp::create(b, loc, out, act, ValueRange{row, k});
        }
        return;
      }
      for (int64_t o = 0; o < chunks; ++o) {
        Value out;
        for (int64_t t = 0; t < chunks; ++t) {
          Value part = cq4p_intr::X86Ssse3PshufB128Op::create(
              b, loc, i8x16, natural[t], indices[o * chunks + t]);
          out = out ? Value(arith::OrIOp::create(b, loc, out, part)) : part;
        }
        storeChunk(out, o);
      }
      return;
    case DotTarget::Generic:
      break;
    }
    Value copy = memref::AllocaOp::create(
        b, loc, MemRefType::get({gs}, b.getI8Type()));
    for (int64_t o = 0; o < chunks; ++o)
      vector::StoreOp::create(b, loc, natural[o], copy,
                              cIndex(b, loc, o * kChunk));
    auto loop = scf::ForOp::create(b, loc, cIndex(b, loc, 0),
                                   cIndex(b, loc, gs), cIndex(b, loc, 1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = loop.getInductionVar();
    Value source = arith::IndexCastUIOp::create(
        b, loc, b.getIndexType(),
        memref::LoadOp::create(b, loc, permutation, j));
    memref::StoreOp::create(b, loc,
                            memref::LoadOp::create(b, loc, copy, source), act,
                            ValueRange{row, arith::AddIOp::create(b, loc, kBase, j)});
  }

private:
  DotTarget target;
  OpBuilder &b;
  Location loc;
  Value permutation; ///< the u32 indices, for the generic gather
  int64_t gs;
  SmallVector<Value> indices;
  SmallVector<Value> wideIndices; ///< AVX2: two chunks' indices per vector
};

struct QuantizeActivationsVectorLowering
    : public OpRewritePattern<QuantizeActivationsOp> {
  QuantizeActivationsVectorLowering(MLIRContext *ctx, DotTarget target)
      : OpRewritePattern(ctx), target(target) {}

  LogicalResult matchAndRewrite(QuantizeActivationsOp op,
                                PatternRewriter &rewriter) const override {
    int64_t gs = op.getGroupSize();
    if (gs % kChunk != 0)
      return rewriter.notifyMatchFailure(op, "group size not a multiple of 16");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    int64_t pieces = gs / kLanes, chunks = gs / kChunk;
    auto f32x4 = VectorType::get({kLanes}, b.getF32Type());
    auto i8x16 = VectorType::get({kChunk}, b.getI8Type());
    auto i32x16 = VectorType::get({kChunk}, b.getI32Type());

    // Per call: the left signs (de-interleaved), 1/sqrt(gs) * right (natural
    // order) and the lookup indices of the output permutation.
    SmallVector<Value> left, right;
    for (int64_t blk = 0; blk < chunks; ++blk) {
      llvm::append_range(left, loadDeinterleaved(b, loc, op.getLeftSigns(),
                                                 cIndex(b, loc, blk * kChunk)));
      right.push_back(vector::LoadOp::create(b, loc, i8x16, op.getRightSigns(),
                                             cIndex(b, loc, blk * kChunk)));
    }
    Value invSqrt = splat(b, loc, f32x4,
                          b.getF32FloatAttr(float(1.0 / std::sqrt(double(gs)))));
    SmallVector<Value> permBytes;
    for (int64_t o = 0; o < chunks; ++o)
      permBytes.push_back(arith::TruncIOp::create(
          b, loc, i8x16,
          vector::LoadOp::create(b, loc, i32x16, op.getPermutation(),
                                 cIndex(b, loc, o * kChunk))));
    Permuter permuter(target, b, loc, op.getPermutation(), permBytes, gs);

    Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
    Value rows = memref::DimOp::create(b, loc, op.getX(), 0);
    auto groups = scf::ForOp::create(b, loc, op.getGroupBegin(),
                                     op.getGroupEnd(), c1);
    b.setInsertionPointToStart(groups.getBody());
    Value g = groups.getInductionVar();
    Value kBase = arith::MulIOp::create(b, loc, g, cIndex(b, loc, gs));
    auto at = [&](Value base, int64_t offset) {
      return Value(arith::AddIOp::create(b, loc, base, cIndex(b, loc, offset)));
    };
    SmallVector<Value> isrLeft;
    for (int64_t blk = 0; blk < chunks; ++blk) {
      SmallVector<Value> isr = loadDeinterleaved(
          b, loc, op.getInputScaleRecip(), at(kBase, blk * kChunk));
      for (int64_t a = 0; a < kLanes; ++a)
        isrLeft.push_back(
            arith::MulFOp::create(b, loc, isr[a], left[blk * kLanes + a]));
    }

    auto rowLoop = scf::ForOp::create(b, loc, c0, rows, c1);
    b.setInsertionPointToStart(rowLoop.getBody());
    Value row = rowLoop.getInductionVar();
    // Every butterfly sees the same two operands whatever order the
    // butterflies run in, so the stages are emitted block by block (the
    // stages inside 32 elements, 8 pieces live), then column by column (the
    // stages between blocks), to keep the live pieces within the registers.
    int64_t block = std::min<int64_t>(8, pieces);
    SmallVector<Value> w(pieces);
    for (int64_t first = 0; first < pieces; first += block) {
      MutableArrayRef<Value> part(w.data() + first, block);
      for (int64_t blk = first / kLanes; blk < (first + block) / kLanes; ++blk) {
        SmallVector<Value, 2> at16 = {row, at(kBase, blk * kChunk)};
        SmallVector<Value> x = loadDeinterleaved(b, loc, op.getX(), at16);
        if (Value up = op.getUp()) {
          SmallVector<Value> u = loadDeinterleaved(b, loc, up, at16);
          for (int64_t a = 0; a < kLanes; ++a)
            x[a] = gateLanes(b, loc, *op.getGating(), x[a], u[a]);
        }
        for (int64_t a = 0; a < kLanes; ++a)
          w[blk * kLanes + a] =
              arith::MulFOp::create(b, loc, x[a], isrLeft[blk * kLanes + a]);
      }
      // Stages h = 1, 2 between de-interleaved pieces, then natural order.
      butterflies(b, loc, part, 1);
      butterflies(b, loc, part, 2);
      transposeBlocks(b, loc, part);
      for (int64_t distance = 1; distance < block; distance *= 2)
        butterflies(b, loc, part, distance);
    }
    // The right signs wait until the bytes: negating w negates |w| not at
    // all and w / scale and its rounding exactly, and the rounded values
    // stay within [-127, 127] (below), so q * right equals the contract's
    // round(w * right / scale) with one byte multiply per 16 activations.
    // Each column's running max|w| is formed as its pieces are final, so
    // the magnitudes never all live at once.
    SmallVector<Value> magnitudes;
    for (int64_t column = 0; column < block; ++column) {
      SmallVector<Value> strided;
      for (int64_t p = column; p < pieces; p += block)
        strided.push_back(w[p]);
      for (size_t distance = 1; distance < strided.size(); distance *= 2)
        butterflies(b, loc, strided, distance);
      Value columnMax;
      for (size_t i = 0; i < strided.size(); ++i) {
        Value scaled = arith::MulFOp::create(b, loc, strided[i], invSqrt);
        w[column + i * block] = scaled;
        Value magnitude = math::AbsFOp::create(b, loc, scaled);
        columnMax = columnMax ? Value(arith::MaximumFOp::create(
                                    b, loc, columnMax, magnitude))
                              : magnitude;
      }
      magnitudes.push_back(columnMax);
    }
    while (magnitudes.size() > 1) {
      SmallVector<Value> halves;
      for (size_t i = 0; i < magnitudes.size(); i += 2)
        halves.push_back(arith::MaximumFOp::create(b, loc, magnitudes[i],
                                                   magnitudes[i + 1]));
      magnitudes = std::move(halves);
    }
    Value maxAbs = vector::ReductionOp::create(
        b, loc, vector::CombiningKind::MAXIMUMF, magnitudes.front());
    Value scale =
        storeGroupScale(b, loc, maxAbs, op.getActScales(), row, g);

    // |w / scale| <= 127 * (1 + 2^-23) for every finite w, so rounding
    // first and saturating the integer gives the contract's clamp.
    Value scales = vector::BroadcastOp::create(b, loc, f32x4, scale);
    SmallVector<Value> natural;
    for (int64_t o = 0; o < chunks; ++o) {
      SmallVector<Value> quotients;
      for (int64_t p = 4 * o; p < 4 * o + 4; ++p)
        quotients.push_back(arith::DivFOp::create(b, loc, w[p], scales));
      natural.push_back(arith::MulIOp::create(
          b, loc, roundToBytes(b, loc, quotients), right[o]));
    }
    permuter.store(natural, op.getAct(), row, kBase);
    rewriter.eraseOp(op);
    return success();
  }

  /// round_half_even of four pieces of quotients, saturated to 16 bytes.
  Value roundToBytes(OpBuilder &b, Location loc, ArrayRef<Value> q) const {
    auto concat = [&](Value lhs, Value rhs) {
      return concatVectors(b, loc, {lhs, rhs});
    };
    auto vec = [&](int64_t n, Type element) { return VectorType::get({n}, element); };
    Type i8 = b.getI8Type(), i16 = b.getI16Type(), i32 = b.getI32Type();
    if (target == DotTarget::Neon) {
      // FCVTNS rounds half to even, SQXTN saturates: one instruction per
      // piece and three narrowing instructions per 16 bytes.
      auto narrow = [&](Type type, Value operand) -> Value {
        return cq4p_intr::NeonSqxtnOp::create(b, loc, type, operand);
      };
      SmallVector<Value> halves;
      for (Value piece : q)
        halves.push_back(narrow(
            vec(4, i16), cq4p_intr::NeonFcvtnsOp::create(b, loc, vec(4, i32), piece)));
      Value lo = narrow(vec(8, i8), concat(halves[0], halves[1]));
      Value hi = narrow(vec(8, i8), concat(halves[2], halves[3]));
      return concat(lo, hi);
    }
    Value lowest = splat(b, loc, vec(4, i32), b.getI32IntegerAttr(-128));
    Value highest = splat(b, loc, vec(4, i32), b.getI32IntegerAttr(127));
    SmallVector<Value> ints;
    for (Value piece : q) {
      Value i = arith::FPToSIOp::create(b, loc, vec(4, i32),
                                        math::RoundEvenOp::create(b, loc, piece));
      ints.push_back(arith::MinSIOp::create(
          b, loc, arith::MaxSIOp::create(b, loc, i, lowest), highest));
    }
    return arith::TruncIOp::create(
        b, loc, vec(16, i8),
        concatVectors(b, loc, ints));
  }

  DotTarget target;
};

/// x86 with AVX2 (8 lanes) or AVX-512 (16 lanes): the same contract with a
/// group in natural order, `lanes` consecutive elements per vector.
///
///   - Butterfly stages whose partner is in the same vector (h < lanes) are
///     a lane swap t = v[i ^ h] and one FMA, r = fma(v, s, t) with s = +1 in
///     the lower lanes and -1 in the upper ones: b + a below, a - b above,
///     each rounded once from an exact product, so the same bits as the
///     contract's a + b and a - b. The later stages pair whole vectors.
///   - w / scale without a vector division: a multiply by the correctly
///     rounded reciprocal and one FMA step give the correctly rounded
///     quotient (see the code); it rounds half to even and saturates as on
///     every target (on AVX-512 with VCVTPS2DQ under an explicit
///     round-to-nearest-even, not MXCSR's mode).
///   - The right signs are a byte negate under a per-call mask (x86 has no
///     byte multiply); the values are +-1 (checked at open), so this is the
///     contract's multiply.
///   - The output permutation of a group of up to 128 bytes on AVX-512 is two
///     word permutes over the whole group (VPERMW / VPERMI2W: the word that
///     holds each output byte, one permute for the even outputs and one for
///     the odd) and one in-lane byte pick (PSHUFB) of each, blended: AVX-512BW
///     only, about 7 instructions per 64 bytes. Larger groups, and AVX2, or
///     PSHUFB lookups of each source chunk (Permuter), two output chunks per
///     256-bit lookup.
struct WideQuantizeLowering : public OpRewritePattern<QuantizeActivationsOp> {
  WideQuantizeLowering(MLIRContext *ctx, DotTarget target, int64_t lanes)
      : OpRewritePattern(ctx), target(target), lanes(lanes) {}

  LogicalResult matchAndRewrite(QuantizeActivationsOp op,
                                PatternRewriter &rewriter) const override {
    int64_t gs = op.getGroupSize();
    if (gs % kChunk != 0 || gs % lanes != 0)
      return rewriter.notifyMatchFailure(op, "group size not a multiple of 16");
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    Type f32 = b.getF32Type(), i8 = b.getI8Type(), i16 = b.getI16Type(),
         i32 = b.getI32Type();
    auto vec = [&](int64_t n, Type element) {
      return VectorType::get({n}, element);
    };
    auto f32v = vec(lanes, f32), i32v = vec(lanes, i32);
    int64_t vectors = gs / lanes;
    bool wordPermute = target == DotTarget::X86Avx512Vnni && gs <= 128;
    // Bytes per output block: what one permute writes.
    int64_t blockBytes = wordPermute ? std::min<int64_t>(gs, 64) : kChunk;
    int64_t blocks = gs / blockBytes;
    // A 64-byte block narrowed by VPACKSSDW + VPACKSSWB (3 instructions for
    // 64 bytes, against 4 two-uop VPMOVSDB and 3 inserts) holds the byte of
    // natural position 16 s + 4 l + e (vector s, 128-bit lane l, element e)
    // at 16 l + 4 s + e: the two bit fields swap, so the per-call right
    // signs and permutation indices are moved into that order, not the
    // bytes of every row.
    bool packed = wordPermute && blockBytes == 64;

    // Per call: left signs as fp32, the in-vector stages' +-1 multipliers,
    // 1/sqrt(gs), the right signs' negate masks, the permutation's indices.
    SmallVector<Value> left;
    for (int64_t v = 0; v < vectors; ++v)
      left.push_back(loadFloats(b, loc, op.getLeftSigns(),
                                cIndex(b, loc, v * lanes)));
    SmallVector<Value> stageSigns;
    for (int64_t h = 1; h < lanes; h *= 2) {
      SmallVector<float> signs;
      for (int64_t i = 0; i < lanes; ++i)
        signs.push_back(i & h ? -1.0f : 1.0f);
      stageSigns.push_back(arith::ConstantOp::create(
          b, loc, f32v, DenseElementsAttr::get(f32v, ArrayRef<float>(signs))));
    }
    Value invSqrt = splat(b, loc, f32v,
                          b.getF32FloatAttr(float(1.0 / std::sqrt(double(gs)))));
    Value zeroBytes = splat(b, loc, vec(blockBytes, i8), b.getI8IntegerAttr(0));
    SmallVector<Value> negate;
    for (int64_t o = 0; o < blocks; ++o) {
      Value right = vector::LoadOp::create(b, loc, vec(blockBytes, i8),
                                           op.getRightSigns(),
                                           cIndex(b, loc, o * blockBytes));
      if (packed) {
        SmallVector<int64_t> natural;
        for (int64_t p = 0; p < blockBytes; ++p)
          natural.push_back(16 * ((p >> 2) & 3) + 4 * ((p >> 4) & 3) + (p & 3));
        right = vector::ShuffleOp::create(b, loc, right, right, natural);
      }
      negate.push_back(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                             right, zeroBytes));
    }
    SmallVector<Value> evenWords, oddWords, picks, chunkPerm;
    if (wordPermute) {
      for (int64_t o = 0; o < blocks; ++o) {
        Value p = vector::LoadOp::create(b, loc, vec(blockBytes, i32),
                                         op.getPermutation(),
                                         cIndex(b, loc, o * blockBytes));
        if (packed) {
          // (n & ~63) | (n & 3) | ((n >> 4) & 3) << 2 | ((n >> 2) & 3) << 4
          auto constant = [&](int32_t value) {
            return splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(value));
          };
          auto field = [&](int32_t shift, int32_t to) {
            Value bits = arith::AndIOp::create(
                b, loc, arith::ShRUIOp::create(b, loc, p, constant(shift)),
                constant(3));
            return Value(arith::ShLIOp::create(b, loc, bits, constant(to)));
          };
          Value kept = arith::AndIOp::create(b, loc, p, constant(~60));
          p = arith::OrIOp::create(
              b, loc, kept,
              arith::OrIOp::create(b, loc, field(4, 2), field(2, 4)));
        }
        auto words = [&](int64_t parity) {
          SmallVector<int64_t> mask;
          for (int64_t j = parity; j < blockBytes; j += 2)
            mask.push_back(j);
          Value half = vector::ShuffleOp::create(b, loc, p, p, mask);
          Value word = arith::ShRUIOp::create(
              b, loc, half,
              splat(b, loc, vec(blockBytes / 2, i32), b.getI32IntegerAttr(1)));
          return Value(arith::TruncIOp::create(
              b, loc, vec(blockBytes / 2, i16), word));
        };
        evenWords.push_back(words(0));
        oddWords.push_back(words(1));
        // Byte j picks byte perm[j] & 1 of its word, which a word permute
        // left at the even position of j's 16-byte lane: PSHUFB index
        // (j mod 16 rounded down to even) + (perm[j] & 1).
        SmallVector<int8_t> base;
        for (int64_t j = 0; j < blockBytes; ++j)
          base.push_back(int8_t((j % kChunk) & ~int64_t(1)));
        auto bytesType = vec(blockBytes, i8);
        Value low = arith::TruncIOp::create(
            b, loc, bytesType,
            arith::AndIOp::create(
                b, loc, p,
                splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(1))));
        picks.push_back(arith::AddIOp::create(
            b, loc, low,
            arith::ConstantOp::create(
                b, loc, bytesType,
                DenseElementsAttr::get(bytesType, ArrayRef<int8_t>(base)))));
      }
    } else {
      auto i8x16 = vec(kChunk, i8), i32x16 = vec(kChunk, i32);
      for (int64_t o = 0; o < gs / kChunk; ++o)
        chunkPerm.push_back(arith::TruncIOp::create(
            b, loc, i8x16,
            vector::LoadOp::create(b, loc, i32x16, op.getPermutation(),
                                   cIndex(b, loc, o * kChunk))));
    }
    std::optional<Permuter> permuter;
    if (!wordPermute)
      permuter.emplace(target, b, loc, op.getPermutation(), chunkPerm, gs);

    Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
    Value rows = memref::DimOp::create(b, loc, op.getX(), 0);
    auto groups = scf::ForOp::create(b, loc, op.getGroupBegin(),
                                     op.getGroupEnd(), c1);
    b.setInsertionPointToStart(groups.getBody());
    Value g = groups.getInductionVar();
    Value kBase = arith::MulIOp::create(b, loc, g, cIndex(b, loc, gs));
    auto at = [&](Value base, int64_t offset) {
      return Value(arith::AddIOp::create(b, loc, base, cIndex(b, loc, offset)));
    };
    SmallVector<Value> isrLeft;
    for (int64_t v = 0; v < vectors; ++v)
      isrLeft.push_back(arith::MulFOp::create(
          b, loc,
          loadFloats(b, loc, op.getInputScaleRecip(), at(kBase, v * lanes)),
          left[v]));

    auto rowLoop = scf::ForOp::create(b, loc, c0, rows, c1);
    b.setInsertionPointToStart(rowLoop.getBody());
    Value row = rowLoop.getInductionVar();
    SmallVector<Value> w;
    for (int64_t v = 0; v < vectors; ++v) {
      Value x = loadFloats(b, loc, op.getX(), {row, at(kBase, v * lanes)});
      if (Value up = op.getUp())
        x = gateLanes(b, loc, *op.getGating(), x,
                      loadFloats(b, loc, up, {row, at(kBase, v * lanes)}));
      w.push_back(arith::MulFOp::create(b, loc, x, isrLeft[v]));
    }
    // The stages in the contract's order: h = 1, 2, ... inside vectors, then
    // between them.
    for (int64_t h = 1, stage = 0; h < std::min(lanes, gs); h *= 2, ++stage) {
      SmallVector<int64_t> swap;
      for (int64_t i = 0; i < lanes; ++i)
        swap.push_back(i ^ h);
      for (Value &v : w) {
        Value t = vector::ShuffleOp::create(b, loc, v, v, swap);
        v = math::FmaOp::create(b, loc, v, stageSigns[stage], t);
      }
    }
    butterflyStages(b, loc, w);
    // max|w| as an integer max of the magnitudes' bits: for floats without
    // a sign bit the order of the bits is the order of the values, and a
    // NaN is above every number, so a NaN still wins as with maximumf; one
    // instruction per vector where x86 needs six for maximumf's NaN rule.
    Value columnMax;
    Value magnitudeBits = splat(b, loc, i32v, b.getI32IntegerAttr(0x7fffffff));
    for (Value &v : w) {
      v = arith::MulFOp::create(b, loc, v, invSqrt);
      Value magnitude = arith::AndIOp::create(
          b, loc, vector::BitCastOp::create(b, loc, i32v, v), magnitudeBits);
      columnMax = columnMax ? Value(arith::MaxSIOp::create(b, loc, columnMax,
                                                           magnitude))
                            : Value(magnitude);
    }
    Value maxAbs = arith::BitcastOp::create(
        b, loc, f32,
        vector::ReductionOp::create(b, loc, vector::CombiningKind::MAXSI,
                                    columnMax));
    Value scale =
        storeGroupScale(b, loc, maxAbs, op.getActScales(), row, g);

    // |w / scale| <= 127 * (1 + 2^-23) for every finite w: rounding first
    // and saturating the integer gives the contract's clamp.
    //
    // The quotients RN(w / scale) without a vector division, which costs
    // several times a multiply on x86 and bounds this loop: with the
    // correctly rounded reciprocal y = RN(1 / scale), q = RN(w * y) is within
    // an ulp of w / scale, the residual w - scale * q is exact in one FMA,
    // and RN(q + residual * y) is the correctly rounded quotient (Markstein's
    // theorem; no underflow matters: a quotient small enough for that rounds
    // to 0 either way). An infinite scale (an infinite input) would make the
    // residual NaN where the division gives 0, and a NaN scale makes every
    // quotient NaN either way: such a group divides.
    auto toInts = [&](Value quotient) {
      if (target == DotTarget::X86Avx512Vnni) {
        // Every lane (mask all ones) to nearest even, exceptions
        // suppressed (VCVTPS2DQ's rounding control {rn-sae}: 8).
        Value zeros = splat(b, loc, i32v, b.getI32IntegerAttr(0));
        Value allLanes =
            LLVM::ConstantOp::create(b, loc, b.getI16Type(), b.getI16IntegerAttr(-1));
        return Value(cq4p_intr::X86Avx512MaskCvtps2dq512Op::create(
            b, loc, i32v, quotient, zeros, allLanes, /*rounding=*/8));
      }
      return Value(arith::FPToSIOp::create(
          b, loc, i32v, math::RoundEvenOp::create(b, loc, quotient)));
    };
    Value scales = vector::BroadcastOp::create(b, loc, f32v, scale);
    Value finite = arith::CmpFOp::create(
        b, loc, arith::CmpFPredicate::OLT, scale,
        arith::ConstantOp::create(
            b, loc, b.getF32FloatAttr(std::numeric_limits<float>::infinity())));
    SmallVector<Type> intTypes(w.size(), i32v);
    auto quotients = scf::IfOp::create(b, loc, intTypes, finite, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(quotients.thenBlock());
      Value reciprocals = vector::BroadcastOp::create(
          b, loc, f32v,
          arith::DivFOp::create(
              b, loc, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f)),
              scale));
      Value negativeScales = arith::NegFOp::create(b, loc, scales);
      SmallVector<Value> refined;
      for (Value v : w) {
        Value q = arith::MulFOp::create(b, loc, v, reciprocals);
        Value residual = math::FmaOp::create(b, loc, negativeScales, q, v);
        refined.push_back(
            toInts(math::FmaOp::create(b, loc, residual, reciprocals, q)));
      }
      scf::YieldOp::create(b, loc, refined);
      b.setInsertionPointToStart(quotients.elseBlock());
      SmallVector<Value> divided;
      for (Value v : w)
        divided.push_back(toInts(arith::DivFOp::create(b, loc, v, scales)));
      scf::YieldOp::create(b, loc, divided);
    }
    SmallVector<Value> ints(quotients.getResults().begin(),
                            quotients.getResults().end());
    int64_t perBlock = blockBytes / lanes;
    Value lowest = splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(-128));
    Value highest = splat(b, loc, vec(blockBytes, i32), b.getI32IntegerAttr(127));
    SmallVector<Value> natural;
    for (int64_t o = 0; o < blocks; ++o) {
      ArrayRef<Value> parts = ArrayRef<Value>(ints).slice(o * perBlock, perBlock);
      Value bytes;
      if (packed) {
        auto words = vec(32, i16);
        Value low =
            cq4p_intr::X86Avx512Packssdw512Op::create(b, loc, words, parts[0], parts[1]);
        Value high =
            cq4p_intr::X86Avx512Packssdw512Op::create(b, loc, words, parts[2], parts[3]);
        bytes = cq4p_intr::X86Avx512Packsswb512Op::create(b, loc, vec(64, i8), low, high);
      } else {
        Value block = concatVectors(b, loc, parts);
        block = arith::MinSIOp::create(
            b, loc, arith::MaxSIOp::create(b, loc, block, lowest), highest);
        bytes = arith::TruncIOp::create(b, loc, vec(blockBytes, i8), block);
      }
      natural.push_back(arith::SelectOp::create(
          b, loc, negate[o], arith::SubIOp::create(b, loc, zeroBytes, bytes),
          bytes));
    }
    if (permuter) {
      permuter->store(natural, op.getAct(), row, kBase);
    } else {
      storeWordPermuted(b, loc, natural, evenWords, oddWords, picks, op.getAct(),
                        row, kBase);
    }
    rewriter.eraseOp(op);
    return success();
  }

  /// `memref`'s `lanes` elements at `indices`, as fp32.
  Value loadFloats(OpBuilder &b, Location loc, Value memref,
                   ValueRange indices) const {
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    Value v = vector::LoadOp::create(b, loc, VectorType::get({lanes}, element),
                                     memref, indices);
    auto f32v = VectorType::get({lanes}, b.getF32Type());
    if (element.isF16())
      return arith::ExtFOp::create(b, loc, f32v, v);
    if (element.isInteger(8))
      return arith::SIToFPOp::create(b, loc, f32v, v);
    return v;
  }

  /// The butterfly stages between whole vectors, in increasing distance.
  static void butterflyStages(OpBuilder &b, Location loc,
                              MutableArrayRef<Value> w) {
    for (size_t distance = 1; distance < w.size(); distance *= 2)
      butterflies(b, loc, w, distance);
  }

  /// act[k0 + j] = natural[perm[j]] by word permutes over the whole group
  /// (one or two blocks of up to 64 bytes) and a byte pick.
  void storeWordPermuted(OpBuilder &b, Location loc, ArrayRef<Value> natural,
                         ArrayRef<Value> evenWords, ArrayRef<Value> oddWords,
                         ArrayRef<Value> picks, Value act, Value row,
                         Value kBase) const {
    int64_t bytes = cast<VectorType>(natural.front().getType()).getNumElements();
    auto wordsType = VectorType::get({bytes / 2}, b.getI16Type());
    auto bytesType = VectorType::get({bytes}, b.getI8Type());
    SmallVector<Value> tables;
    for (Value block : natural)
      tables.push_back(vector::BitCastOp::create(b, loc, wordsType, block));
    // Word permutation (VPERMW, or VPERMI2W across two tables) and per
    // 128-bit lane byte lookup (PSHUFB) at the register width.
    auto permute = [&](Value index) {
      Value words;
      if (tables.size() == 2)
        words = cq4p_intr::X86Avx512Vpermi2varHi512Op::create(
            b, loc, wordsType, tables[0], index, tables[1]);
      else if (bytes == 64)
        words = cq4p_intr::X86Avx512PermvarHi512Op::create(b, loc, wordsType,
                                                           tables[0], index);
      else if (bytes == 32)
        words = cq4p_intr::X86Avx512PermvarHi256Op::create(b, loc, wordsType,
                                                           tables[0], index);
      else
        words = cq4p_intr::X86Avx512PermvarHi128Op::create(b, loc, wordsType,
                                                           tables[0], index);
      return Value(vector::BitCastOp::create(b, loc, bytesType, words));
    };
    auto pshufb = [&](Value table, Value index) -> Value {
      if (bytes == 64)
        return cq4p_intr::X86Avx512PshufB512Op::create(b, loc, bytesType, table, index);
      if (bytes == 32)
        return cq4p_intr::X86Avx2PshufBOp::create(b, loc, bytesType, table, index);
      return cq4p_intr::X86Ssse3PshufB128Op::create(b, loc, bytesType, table, index);
    };
    SmallVector<bool> odd;
    for (int64_t j = 0; j < bytes; ++j)
      odd.push_back(j % 2);
    auto maskType = VectorType::get({bytes}, b.getI1Type());
    Value oddMask = arith::ConstantOp::create(
        b, loc, maskType, DenseElementsAttr::get(maskType, ArrayRef<bool>(odd)));
    for (size_t o = 0; o < natural.size(); ++o) {
      Value even = pshufb(permute(evenWords[o]), picks[o]);
      Value oddBytes = pshufb(permute(oddWords[o]), picks[o]);
      Value out = arith::SelectOp::create(b, loc, oddMask, oddBytes, even);
      vector::StoreOp::create(
          b, loc, out, act,
          ValueRange{row, arith::AddIOp::create(b, loc, kBase,
                                                cIndex(b, loc, o * bytes))});
    }
  }

  DotTarget target;
  int64_t lanes;
};

} // namespace

void mlir::cq4p::populateActivationTransformPatterns(RewritePatternSet &patterns,
                                                      DotTarget target) {
  switch (target) {
  case DotTarget::X86Avx2:
  case DotTarget::X86AvxVnni:
    patterns.add<WideQuantizeLowering>(patterns.getContext(), target, 8);
    return;
  case DotTarget::X86Avx512Vnni:
    patterns.add<WideQuantizeLowering>(patterns.getContext(), target, 16);
    return;
  case DotTarget::Neon:
  case DotTarget::X86Ssse3:
  case DotTarget::Generic:
    patterns.add<QuantizeActivationsVectorLowering>(patterns.getContext(),
                                                     target);
    return;
  }
}

void mlir::cq4p::butterflies(OpBuilder &b, Location loc, MutableArrayRef<Value> w,
                              size_t distance) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (i & distance)
      continue;
    Value u = w[i], v = w[i + distance];
    w[i] = arith::AddFOp::create(b, loc, u, v);
    w[i + distance] = arith::SubFOp::create(b, loc, u, v);
  }
}

Value mlir::cq4p::gatedInput(OpBuilder &b, Location loc, Activation activation,
                             Value g, Value u) {
  return gateLanes(b, loc, activation, g, u);
}
