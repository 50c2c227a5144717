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
// are computed once per call (KernelTargetInfo::createGroupPermuter: NEON
// TBL/TBX over four chunks at a time, x86 PSHUFB per chunk, by default a
// byte gather from the stack). The rounding to bytes is the target's too
// (KernelTargetInfo::roundToBytes). x86 with AVX2 or wider takes a lowering
// of its own on 8 or 16 lanes (CQ4PToVector/HostQuantize.cpp). Groups are
// the outer loop, rows the inner one, so isr * left is formed once per group
// whatever M is.
//
// Gated (a dense MLP's down projection): the input x = act(gate) * up is
// formed lane by lane as the gate and up pieces are loaded, with cq4p.glu's
// operations in its order (activateLanes: g sigmoid(z), z = g for silu,
// 2u for gelu_tanh, from one exponential of -|z|, the model kernels'), so
// the bytes equal those of a glu row written out and quantized, without the
// row's store and reload.
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
constexpr int64_t kChunk = kQuantizedChunk;

Value lanes(OpBuilder &b, Location loc, Value vector, ArrayRef<int64_t> mask) {
  return vector::ShuffleOp::create(b, loc, vector, vector, mask);
}

/// act(g) * u lane by lane, cq4p.glu's formula in its order
/// (activateLanes).
Value gateLanes(OpBuilder &b, Location loc, Activation activation, Value g,
                Value u) {
  return arith::MulFOp::create(
      b, loc, activateLanes(b, loc, g, activation == Activation::silu), u);
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


/// The output permutation by a byte gather from the group's stack copy,
/// by the u32 indices: portable, one load and store per byte.
class GatherPermuter : public GroupPermuter {
public:
  GatherPermuter(OpBuilder &b, Location loc, Value permutation, int64_t gs)
      : b(b), loc(loc), permutation(permutation), gs(gs) {}

  void store(ArrayRef<Value> natural, Value act, Value row,
             Value kBase) override {
    int64_t chunks = gs / kChunk;
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
  OpBuilder &b;
  Location loc;
  Value permutation; ///< the u32 indices
  int64_t gs;
};

struct QuantizeActivationsVectorLowering
    : public OpRewritePattern<QuantizeActivationsOp> {
  QuantizeActivationsVectorLowering(MLIRContext *ctx,
                                    const KernelTargetInfo &target)
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
    std::unique_ptr<GroupPermuter> permuter =
        target.createGroupPermuter(b, loc, op.getPermutation(), permBytes, gs);

    QuantizeLoops loops(b, loc, op, gs);
    Value g = loops.g, kBase = loops.kBase;
    SmallVector<Value> isrLeft;
    for (int64_t blk = 0; blk < chunks; ++blk) {
      SmallVector<Value> isr = loadDeinterleaved(
          b, loc, op.getInputScaleRecip(), loops.at(blk * kChunk));
      for (int64_t a = 0; a < kLanes; ++a)
        isrLeft.push_back(
            arith::MulFOp::create(b, loc, isr[a], left[blk * kLanes + a]));
    }

    Value row = loops.beginRows();
    // Every butterfly sees the same two operands whatever order the
    // butterflies run in, so the stages are emitted block by block (the
    // stages inside 32 elements, 8 pieces live), then column by column (the
    // stages between blocks), to keep the live pieces within the registers.
    int64_t block = std::min<int64_t>(8, pieces);
    SmallVector<Value> w(pieces);
    for (int64_t first = 0; first < pieces; first += block) {
      MutableArrayRef<Value> part(w.data() + first, block);
      for (int64_t blk = first / kLanes; blk < (first + block) / kLanes; ++blk) {
        SmallVector<Value, 2> at16 = {row, loops.at(blk * kChunk)};
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
          b, loc, target.roundToBytes(b, loc, quotients), right[o]));
    }
    permuter->store(natural, op.getAct(), row, kBase);
    rewriter.eraseOp(op);
    return success();
  }

  const KernelTargetInfo &target;
};

} // namespace

GroupPermuter::~GroupPermuter() = default;

void TablePermuter::storeChunks(Value out, Value act, Value row, Value kBase,
                                int64_t o) {
  Value k = arith::AddIOp::create(b, loc, kBase, cIndex(b, loc, o * kQuantizedChunk));
  vector::StoreOp::create(b, loc, out, act, ValueRange{row, k});
}

QuantizeLoops::QuantizeLoops(OpBuilder &b, Location loc, QuantizeActivationsOp op,
                             int64_t gs)
    : b(b), loc(loc) {
  c0 = cIndex(b, loc, 0);
  c1 = cIndex(b, loc, 1);
  rows = memref::DimOp::create(b, loc, op.getX(), 0);
  auto groups = scf::ForOp::create(b, loc, op.getGroupBegin(), op.getGroupEnd(), c1);
  b.setInsertionPointToStart(groups.getBody());
  g = groups.getInductionVar();
  kBase = arith::MulIOp::create(b, loc, g, cIndex(b, loc, gs));
}

Value QuantizeLoops::at(int64_t offset) {
  return arith::AddIOp::create(b, loc, kBase, cIndex(b, loc, offset));
}

Value QuantizeLoops::beginRows() {
  auto rowLoop = scf::ForOp::create(b, loc, c0, rows, c1);
  b.setInsertionPointToStart(rowLoop.getBody());
  return rowLoop.getInductionVar();
}

Value KernelTargetInfo::roundToBytes(OpBuilder &b, Location loc,
                                     ArrayRef<Value> q) const {
  auto vec = [&](int64_t n, Type element) { return VectorType::get({n}, element); };
  Type i8 = b.getI8Type(), i32 = b.getI32Type();
  Value lowest = splat(b, loc, vec(4, i32), b.getI32IntegerAttr(-128));
  Value highest = splat(b, loc, vec(4, i32), b.getI32IntegerAttr(127));
  SmallVector<Value> ints;
  for (Value piece : q) {
    Value i = arith::FPToSIOp::create(b, loc, vec(4, i32),
                                      math::RoundEvenOp::create(b, loc, piece));
    ints.push_back(arith::MinSIOp::create(
        b, loc, arith::MaxSIOp::create(b, loc, i, lowest), highest));
  }
  return arith::TruncIOp::create(b, loc, vec(16, i8), concatVectors(b, loc, ints));
}

std::unique_ptr<GroupPermuter> KernelTargetInfo::createGroupPermuter(
    OpBuilder &b, Location loc, Value permutation, ArrayRef<Value> permBytes,
    int64_t gs) const {
  return std::make_unique<GatherPermuter>(b, loc, permutation, gs);
}

void KernelTargetInfo::populateQuantizePatterns(
    RewritePatternSet &patterns) const {
  populateActivationTransformPatterns(patterns, *this);
}

void mlir::cq4p::populateActivationTransformPatterns(
    RewritePatternSet &patterns, const KernelTargetInfo &target) {
  patterns.add<QuantizeActivationsVectorLowering>(patterns.getContext(), target);
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

Value mlir::cq4p::concatVectors(OpBuilder &b, Location loc,
                                ArrayRef<Value> parts) {
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

Value mlir::cq4p::storeGroupScale(OpBuilder &b, Location loc, Value maxAbs,
                                  Value actScales, Value row, Value g) {
  Value scale = arith::DivFOp::create(
      b, loc, maxAbs,
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(127.0f)));
  scale = arith::MaximumFOp::create(
      b, loc, scale,
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-10f)));
  memref::StoreOp::create(b, loc, scale, actScales, ValueRange{row, g});
  return scale;
}
