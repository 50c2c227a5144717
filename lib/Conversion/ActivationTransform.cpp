//===- ActivationTransform.cpp - cq4p.quantize_activations in vectors -----===//
//
// The Hadamard activation transform and int8 quantization (FORMAT.md
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
//===----------------------------------------------------------------------===//

#include "ActivationTransform.h"
#include "LoweringHelpers.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kLanes = 4;
constexpr int64_t kChunk = 16; ///< bytes of one quantized output vector

Value lanes(OpBuilder &b, Location loc, Value vector, ArrayRef<int64_t> mask) {
  return vector::ShuffleOp::create(b, loc, vector, vector, mask);
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

/// One butterfly stage between pieces `distance` apart: the sum into the
/// lower piece, the difference (lower - upper) into the upper one.
void butterflies(OpBuilder &b, Location loc, MutableArrayRef<Value> w,
                 size_t distance) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (i & distance)
      continue;
    Value u = w[i], v = w[i + distance];
    w[i] = arith::AddFOp::create(b, loc, u, v);
    w[i + distance] = arith::SubFOp::create(b, loc, u, v);
  }
}

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
        SmallVector<Value> x = loadDeinterleaved(
            b, loc, op.getX(), ValueRange{row, at(kBase, blk * kChunk)});
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
    Value scale = arith::DivFOp::create(
        b, loc, maxAbs,
        arith::ConstantOp::create(b, loc, b.getF32FloatAttr(127.0f)));
    scale = arith::MaximumFOp::create(
        b, loc, scale,
        arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-10f)));
    memref::StoreOp::create(b, loc, scale, op.getActScales(),
                            ValueRange{row, g});

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
      int64_t width = cast<VectorType>(lhs.getType()).getNumElements();
      SmallVector<int64_t> mask;
      for (int64_t i = 0; i < 2 * width; ++i)
        mask.push_back(i);
      return Value(vector::ShuffleOp::create(b, loc, lhs, rhs, mask));
    };
    auto vec = [&](int64_t n, Type element) { return VectorType::get({n}, element); };
    Type i8 = b.getI8Type(), i16 = b.getI16Type(), i32 = b.getI32Type();
    if (target == DotTarget::Neon) {
      // FCVTNS rounds half to even, SQXTN saturates: one instruction per
      // piece and three narrowing instructions per 16 bytes.
      auto intrinsic = [&](StringRef name, Type type, Value operand) {
        return LLVM::CallIntrinsicOp::create(b, loc, type, b.getStringAttr(name),
                                             ValueRange{operand})
            .getResult(0);
      };
      SmallVector<Value> halves;
      for (Value piece : q)
        halves.push_back(intrinsic("llvm.aarch64.neon.sqxtn.v4i16", vec(4, i16),
                                   intrinsic("llvm.aarch64.neon.fcvtns.v4i32.v4f32",
                                             vec(4, i32), piece)));
      Value lo = intrinsic("llvm.aarch64.neon.sqxtn.v8i8", vec(8, i8),
                           concat(halves[0], halves[1]));
      Value hi = intrinsic("llvm.aarch64.neon.sqxtn.v8i8", vec(8, i8),
                           concat(halves[2], halves[3]));
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
        concat(concat(ints[0], ints[1]), concat(ints[2], ints[3])));
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
      auto intrinsic = [&](StringRef name, ValueRange operands) {
        return LLVM::CallIntrinsicOp::create(b, loc, i8x16,
                                             b.getStringAttr(name), operands)
            .getResult(0);
      };
      switch (target) {
      case DotTarget::Neon: {
        int64_t tables = std::max<int64_t>(1, gs / 64);
        for (int64_t o = 0; o < chunks; ++o) {
          Value out;
          for (int64_t t = 0; t < tables; ++t) {
            Value idx = indices[o * tables + t];
            if (gs == 32) {
              out = intrinsic("llvm.aarch64.neon.tbl2.v16i8",
                              {natural[0], natural[1], idx});
              continue;
            }
            ArrayRef<Value> table = natural.slice(4 * t, 4);
            SmallVector<Value> operands;
            if (out)
              operands.push_back(out);
            llvm::append_range(operands, table);
            operands.push_back(idx);
            out = intrinsic(out ? "llvm.aarch64.neon.tbx4.v16i8"
                                : "llvm.aarch64.neon.tbl4.v16i8",
                            operands);
          }
          storeChunk(out, o);
        }
        return;
      }
      case DotTarget::X86Ssse3:
      case DotTarget::X86Avx2:
      case DotTarget::X86AvxVnni:
      case DotTarget::X86Avx512Vnni:
        for (int64_t o = 0; o < chunks; ++o) {
          Value out;
          for (int64_t t = 0; t < chunks; ++t) {
            Value part = intrinsic("llvm.x86.ssse3.pshuf.b.128",
                                   {natural[t], indices[o * chunks + t]});
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
  };

  DotTarget target;
};

} // namespace

void mlir::cq4p::populateActivationTransformPatterns(RewritePatternSet &patterns,
                                                      DotTarget target) {
  patterns.add<QuantizeActivationsVectorLowering>(patterns.getContext(),
                                                   target);
}
