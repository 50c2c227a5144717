//===- KernelLowering.cpp - cq4p kernel ops to loops and vectors ----------===//
//
// The lowering of the kernel-level ops, shared by every backend; where a
// target has instructions of its own the patterns ask its KernelTargetInfo
// (the codebook lookup and the 4-way int8 dot of `cq4p.panel_dot`, or a
// loop of its own: NEON's GEMV, x86's on 256- and 512-bit vectors).
//
// cq4p.panel_dot: the pair-zip loop. A 128-byte kg-block holds 4 K values
// of 64 channels, channel c in bytes 2c (k0 low, k1 high) and 2c+1 (k2, k3).
// Zipping the bytes of kg-blocks t and t+1 as 16-bit elements puts one
// channel's bytes of both blocks in each 32-bit lane:
//
//   lane c = [k0|k1, k2|k3, k0'|k1', k2'|k3']
//
// so `and 0xF` gives the lane (k0, k2, k0', k2') and `shr 4` the lane
// (k1, k3, k1', k3'). Looked up in the int8 codebook, each is one operand of
// a 4-way dot whose other operand is the matching activations: the even and
// the odd bytes of the pair's 8 activations, taken once per 32 activations
// and broadcast by lane. Per 32 weights: half a zip, an and, a shift, two
// lookups, two dots. A GEMV keeps all 64 channels in 16 accumulators (on
// NEON with LD2 / four-register LD1 loads: CQ4PToNeon/NeonTargetInfo.cpp);
// a GEMM tile passes over 8 channels at a time so that each unpacked weight
// vector feeds every row of the tile.
//
// cq4p.rescale lowers to plain scf loops over vector ops of the target's
// float width, the same fp32 operations per lane on every target.
// cq4p.quantize_activations is straight-line vector code per group
// (ActivationTransform.cpp) with the contract's fp32 operations in the
// contract's order, so every backend gets the same int8 activations.
// cq4p.rotate_quantize_activations and cq4p.decode_embedding are fp16
// matrix products over tiles of rows, vectorized across outputs: each reads
// the one of rotation and rotation_t whose rows run along the outputs, so
// every output still sums in index order as a chain of fused multiply-adds
// (llvm.fma: the same bits at every vector width and on every target)
// without a transpose.
//
//===----------------------------------------------------------------------===//

#include "LoweringHelpers.h"
#include "PairZip.h"

#include "cq4p/Codegen/ModelKernels.h"
#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/format.h"

#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::cq4p;

KernelTargetInfo::~KernelTargetInfo() = default;

Value KernelTargetInfo::lookup(OpBuilder &b, Location loc, Value table,
                               Value index) const {
  // A select per level: slow, but portable to any target.
  auto i8x16 = VectorType::get({16}, b.getI8Type());
  Value result = splat(b, loc, i8x16, b.getI8IntegerAttr(0));
  for (int64_t level = 0; level < CQ4P_CODEBOOK_LEVELS; ++level) {
    Value levelIndex = splat(b, loc, i8x16, b.getI8IntegerAttr(level));
    Value hit = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                      index, levelIndex);
    Value levelValue = shuffle(b, loc, table, table,
                               SmallVector<int64_t>(16, level));
    result = arith::SelectOp::create(b, loc, hit, levelValue, result);
  }
  return result;
}

Value KernelTargetInfo::dot(OpBuilder &b, Location loc, Value acc, Value lhs,
                            Value rhs) const {
  auto i32x16 = VectorType::get({16}, b.getI32Type());
  Value l = arith::ExtSIOp::create(b, loc, i32x16, lhs);
  Value r = arith::ExtSIOp::create(b, loc, i32x16, rhs);
  Value products = arith::MulIOp::create(b, loc, l, r);
  Value sum = acc;
  for (int64_t j = 0; j < 4; ++j)
    sum = arith::AddIOp::create(
        b, loc, sum,
        shuffle(b, loc, products, products, {j, 4 + j, 8 + j, 12 + j}));
  return sum;
}

RotationBlocking KernelTargetInfo::rotationBlocking() const {
  return {4, 4, 8, 4, 16, false};
}

void DotEmitter::unpackPair(Value table, Value lowMask, Value four, Value a,
                            Value bb,
                            function_ref<void(int64_t, Value, Value)> use) {
  auto i8x16 = VectorType::get({16}, b.getI8Type());
  auto i16x8 = VectorType::get({8}, b.getI16Type());
  Value a16 = bitcast(b, loc, a, i16x8), b16 = bitcast(b, loc, bb, i16x8);
  Value zipped[2] = {
      bitcast(b, loc, shuffle(b, loc, a16, b16, {0, 8, 1, 9, 2, 10, 3, 11}), i8x16),
      bitcast(b, loc, shuffle(b, loc, a16, b16, {4, 12, 5, 13, 6, 14, 7, 15}), i8x16)};
  for (int64_t half = 0; half < 2; ++half) {
    Value low = arith::AndIOp::create(b, loc, zipped[half], lowMask);
    Value high = arith::ShRUIOp::create(b, loc, zipped[half], four);
    use(half, target.lookup(b, loc, table, low),
        target.lookup(b, loc, table, high));
  }
}

scf::ForOp mlir::cq4p::forKSteps(
    OpBuilder &b, Location loc, int64_t groupSize, ValueRange inits,
    function_ref<SmallVector<Value>(OpBuilder &, Value, SmallVector<Value>)> body) {
  auto loop = scf::ForOp::create(b, loc, cIndex(b, loc, 0),
                                 cIndex(b, loc, groupSize / 32), cIndex(b, loc, 1),
                                 inits);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  SmallVector<Value> carried(loop.getRegionIterArgs().begin(),
                             loop.getRegionIterArgs().end());
  scf::YieldOp::create(b, loc, body(b, loop.getInductionVar(), std::move(carried)));
  return loop;
}

namespace {

struct PanelDotLowering : public OpRewritePattern<PanelDotOp> {
  PanelDotLowering(MLIRContext *ctx, const KernelTargetInfo &target)
      : OpRewritePattern(ctx), target(target) {}

  LogicalResult matchAndRewrite(PanelDotOp op,
                                PatternRewriter &rewriter) const override {
    if (std::optional<LogicalResult> lowered = target.lowerPanelDot(op, rewriter))
      return *lowered;
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    auto panelsType = cast<MemRefType>(op.getPanels().getType());
    int64_t kgPerGroup = panelsType.getDimSize(2);
    int64_t groupSize = kgPerGroup * CQ4P_KG_BLOCK_K;
    if (groupSize % 32 != 0)
      return rewriter.notifyMatchFailure(
          op, "panel groups must be a multiple of 32 K values");
    int64_t tileRows = cast<MemRefType>(op.getPartials().getType()).getDimSize(0);
    // A one-row tile keeps all 64 channels in registers; a taller tile
    // passes over 8 channels at a time (2 accumulators per row).
    int64_t passChannels = tileRows == 1 ? CQ4P_PANEL_CHANNELS : 8;
    int64_t passes = CQ4P_PANEL_CHANNELS / passChannels;
    int64_t slices = passChannels / 8; // 16-byte slices per kg-block
    int64_t accsPerRow = passChannels / 4;

    auto i8x16 = VectorType::get({16}, b.getI8Type());
    auto i32x4 = VectorType::get({4}, b.getI32Type());
    DotEmitter emit(target, b, loc);
    Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
    Value table = vector::LoadOp::create(b, loc, i8x16, op.getCbI8(), c0);
    Value lowMask = splat(b, loc, i8x16, b.getI8IntegerAttr(0x0F));
    Value four = splat(b, loc, i8x16, b.getI8IntegerAttr(4));
    Value zeroAcc = splat(b, loc, i32x4, b.getI32IntegerAttr(0));
    Value sb = op.getSuperBlock(), g = op.getGroup(), row = op.getRow();
    Value groupBase =
        arith::MulIOp::create(b, loc, g, cIndex(b, loc, groupSize));

    if (op.getPairedActivations()) {
      emitPairedPasses(b, loc, op, emit, table, lowMask, four, zeroAcc,
                       groupBase, tileRows, groupSize);
      rewriter.eraseOp(op);
      return success();
    }
    if (tileRows == 1 &&
        target.emitOneRowPanelDot(
            b, loc, op, emit,
            PairZipValues{table, lowMask, four, zeroAcc, groupBase, groupSize})) {
      rewriter.eraseOp(op);
      return success();
    }

    auto emitPass = [&](OpBuilder &b, Value pass) {
      SmallVector<Value> inits(tileRows * accsPerRow, zeroAcc);
      auto kLoop = forKSteps(b, loc, groupSize, inits,
                             [&](OpBuilder &b, Value it, SmallVector<Value> accs) {
        // The tile's 32 activations of this step: evens and odds.
        Value kBase = arith::AddIOp::create(
            b, loc, groupBase,
            arith::MulIOp::create(b, loc, it, cIndex(b, loc, 32)));
        Value kNext = arith::AddIOp::create(b, loc, kBase, cIndex(b, loc, 16));
        SmallVector<Value> evens, odds;
        SmallVector<int64_t> evenMask, oddMask;
        for (int64_t i = 0; i < 16; ++i) {
          evenMask.push_back(2 * i);
          oddMask.push_back(2 * i + 1);
        }
        for (int64_t r = 0; r < tileRows; ++r) {
          Value actRow = arith::AddIOp::create(b, loc, row, cIndex(b, loc, r));
          Value lo = vector::LoadOp::create(b, loc, i8x16, op.getAct(),
                                            ValueRange{actRow, kBase});
          Value hi = vector::LoadOp::create(b, loc, i8x16, op.getAct(),
                                            ValueRange{actRow, kNext});
          evens.push_back(bitcast(b, loc, shuffle(b, loc, lo, hi, evenMask), i32x4));
          odds.push_back(bitcast(b, loc, shuffle(b, loc, lo, hi, oddMask), i32x4));
        }
        Value kgBase = arith::MulIOp::create(b, loc, it, cIndex(b, loc, 8));
        for (int64_t p = 0; p < 4; ++p) {
          SmallVector<Value> evenLane, oddLane;
          for (int64_t r = 0; r < tileRows; ++r) {
            evenLane.push_back(bitcast(
                b, loc, shuffle(b, loc, evens[r], evens[r], {p, p, p, p}), i8x16));
            oddLane.push_back(bitcast(
                b, loc, shuffle(b, loc, odds[r], odds[r], {p, p, p, p}), i8x16));
          }
          Value kgA = arith::AddIOp::create(b, loc, kgBase, cIndex(b, loc, 2 * p));
          Value kgB = arith::AddIOp::create(b, loc, kgA, c1);
          // Slices are loaded two at a time, adjacent in the instruction
          // stream, so that each pair becomes one LDP q without help from a
          // scheduler.
          auto loadSlice = [&](Value kg, int64_t t) {
            Value byte = arith::AddIOp::create(
                b, loc,
                arith::MulIOp::create(b, loc, pass, cIndex(b, loc, 16 * slices)),
                cIndex(b, loc, 16 * t));
            return Value(vector::LoadOp::create(b, loc, i8x16, op.getPanels(),
                                                ValueRange{sb, g, kg, byte}));
          };
          SmallVector<Value> aSlices(slices), bSlices(slices);
          for (int64_t s = 0; s < slices; ++s) {
            if (s % 2 == 0) {
              for (int64_t t = s; t < std::min(s + 2, slices); ++t)
                aSlices[t] = loadSlice(kgA, t);
              for (int64_t t = s; t < std::min(s + 2, slices); ++t)
                bSlices[t] = loadSlice(kgB, t);
            }
            emit.unpackPair(table, lowMask, four, aSlices[s], bSlices[s],
                            [&](int64_t half, Value wLow, Value wHigh) {
              for (int64_t r = 0; r < tileRows; ++r) {
                Value &acc = accs[r * accsPerRow + 2 * s + half];
                acc = emit.dot(acc, wLow, evenLane[r]);
                acc = emit.dot(acc, wHigh, oddLane[r]);
              }
            });
          }
        }
        return accs;
      });
      // The pass's partials.
      Value channelBase =
          arith::MulIOp::create(b, loc, pass, cIndex(b, loc, passChannels));
      for (int64_t r = 0; r < tileRows; ++r)
        for (int64_t q = 0; q < accsPerRow; ++q) {
          Value channel =
              arith::AddIOp::create(b, loc, channelBase, cIndex(b, loc, 4 * q));
          vector::StoreOp::create(b, loc, kLoop.getResult(r * accsPerRow + q),
                                  op.getPartials(),
                                  ValueRange{cIndex(b, loc, r), channel});
        }
    };

    if (passes == 1) {
      emitPass(b, c0);
    } else {
      auto passLoop =
          scf::ForOp::create(b, loc, c0, cIndex(b, loc, passes), c1);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(passLoop.getBody());
      emitPass(b, passLoop.getInductionVar());
    }
    rewriter.eraseOp(op);
    return success();
  }

  /// The pair loop over a packed tile (paired_activations): 8 channels per
  /// pass, every row of the tile on each unpacked weight vector. Per two
  /// pairs of kg-blocks the 8 weight vectors are unpacked first; then each
  /// row loads its 16 packed bytes [evens, odds] x 2 pairs once and feeds
  /// them by lane to 8 SDOTs, so a row's activations live for one load and
  /// the tile's accumulators (2 per row) and the weights fit the registers
  /// whatever its rows.
  void emitPairedPasses(OpBuilder &b, Location loc, PanelDotOp op,
                        DotEmitter &emit, Value table, Value lowMask,
                        Value four, Value zeroAcc, Value groupBase,
                        int64_t tileRows, int64_t groupSize) const {
    auto i8x16 = VectorType::get({16}, b.getI8Type());
    auto i32x4 = VectorType::get({4}, b.getI32Type());
    Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
    Value sb = op.getSuperBlock(), g = op.getGroup();
    auto passLoop = scf::ForOp::create(
        b, loc, c0, cIndex(b, loc, CQ4P_PANEL_CHANNELS / 8), c1);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(passLoop.getBody());
    Value pass = passLoop.getInductionVar();
    Value byte = arith::MulIOp::create(b, loc, pass, cIndex(b, loc, 16));
    SmallVector<Value> inits(2 * tileRows, zeroAcc);
    auto kLoop = forKSteps(b, loc, groupSize, inits,
                           [&](OpBuilder &b, Value it, SmallVector<Value> accs) {
      Value kBase = arith::AddIOp::create(
          b, loc, groupBase,
          arith::MulIOp::create(b, loc, it, cIndex(b, loc, 32)));
      Value kgBase = arith::MulIOp::create(b, loc, it, cIndex(b, loc, 8));
      for (int64_t p = 0; p < 4; p += 2) {
        // weights[q][half] = {low, high} of pairs p and p + 1.
        Value weights[2][2][2];
        for (int64_t q = 0; q < 2; ++q) {
          Value kgA =
              arith::AddIOp::create(b, loc, kgBase, cIndex(b, loc, 2 * (p + q)));
          Value kgB = arith::AddIOp::create(b, loc, kgA, c1);
          Value a = vector::LoadOp::create(b, loc, i8x16, op.getPanels(),
                                           ValueRange{sb, g, kgA, byte});
          Value bb = vector::LoadOp::create(b, loc, i8x16, op.getPanels(),
                                            ValueRange{sb, g, kgB, byte});
          emit.unpackPair(table, lowMask, four, a, bb,
                          [&](int64_t half, Value wLow, Value wHigh) {
            weights[q][half][0] = wLow;
            weights[q][half][1] = wHigh;
          });
        }
        Value k = arith::AddIOp::create(b, loc, kBase, cIndex(b, loc, 8 * p));
        for (int64_t r = 0; r < tileRows; ++r) {
          Value lanes = bitcast(
              b, loc,
              vector::LoadOp::create(b, loc, i8x16, op.getAct(),
                                     ValueRange{cIndex(b, loc, r), k}),
              i32x4);
          for (int64_t q = 0; q < 2; ++q)
            for (int64_t half = 0; half < 2; ++half)
              for (int64_t nibble = 0; nibble < 2; ++nibble) {
                int64_t lane = 2 * q + nibble;
                Value broadcast = bitcast(
                    b, loc, shuffle(b, loc, lanes, lanes, {lane, lane, lane, lane}),
                    i8x16);
                Value &acc = accs[2 * r + half];
                acc = emit.dot(acc, weights[q][half][nibble], broadcast);
              }
        }
      }
      return accs;
    });
    Value channelBase = arith::MulIOp::create(b, loc, pass, cIndex(b, loc, 8));
    for (int64_t r = 0; r < tileRows; ++r)
      for (int64_t half = 0; half < 2; ++half)
        vector::StoreOp::create(
            b, loc, kLoop.getResult(2 * r + half), op.getPartials(),
            ValueRange{cIndex(b, loc, r),
                       arith::AddIOp::create(b, loc, channelBase,
                                             cIndex(b, loc, 4 * half))});
  }

  const KernelTargetInfo &target;
};

struct RescaleLowering : public OpRewritePattern<RescaleOp> {
  RescaleLowering(MLIRContext *ctx, int64_t lanes)
      : OpRewritePattern(ctx), lanes(lanes) {}

  LogicalResult matchAndRewrite(RescaleOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    int64_t tileRows = cast<MemRefType>(op.getPartials().getType()).getDimSize(0);
    auto i32v = VectorType::get({lanes}, b.getI32Type());
    auto f32v = VectorType::get({lanes}, b.getF32Type());
    Value sb = op.getSuperBlock(), g = op.getGroup();
    for (int64_t r = 0; r < tileRows; ++r) {
      Value rIndex = cIndex(b, loc, r);
      Value actRow = arith::AddIOp::create(b, loc, op.getRow(), rIndex);
      Value scale = memref::LoadOp::create(b, loc, op.getActScales(),
                                           ValueRange{actRow, g});
      Value scales = vector::BroadcastOp::create(b, loc, f32v, scale);
      for (int64_t c = 0; c < CQ4P_PANEL_CHANNELS; c += lanes) {
        Value channel = cIndex(b, loc, c);
        Value partial = vector::LoadOp::create(b, loc, i32v, op.getPartials(),
                                               ValueRange{rIndex, channel});
        Value norm = vector::LoadOp::create(b, loc, f32v, op.getNormPanels(),
                                            ValueRange{sb, g, channel});
        Value acc = vector::LoadOp::create(b, loc, f32v, op.getAccum(),
                                           ValueRange{rIndex, channel});
        // float(P) * act_scale * norm, in that order, then the sum over g.
        Value term = arith::MulFOp::create(
            b, loc,
            arith::MulFOp::create(
                b, loc, arith::SIToFPOp::create(b, loc, f32v, partial), scales),
            norm);
        vector::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, acc, term),
                                op.getAccum(), ValueRange{rIndex, channel});
      }
    }
    rewriter.eraseOp(op);
    return success();
  }

  int64_t lanes;
};

/// Builds `for i in [begin, end) step 1 { body(i) }`.
void forRange(OpBuilder &b, Location loc, Value begin, Value end,
              function_ref<void(OpBuilder &, Value)> body) {
  auto loop = scf::ForOp::create(b, loc, begin, end, cIndex(b, loc, 1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  body(b, loop.getInductionVar());
}

Value loadAsF32(OpBuilder &b, Location loc, Value memref, ValueRange indices) {
  Value value = memref::LoadOp::create(b, loc, memref, indices);
  Type type = value.getType();
  if (type.isF32())
    return value;
  if (isa<FloatType>(type))
    return arith::ExtFOp::create(b, loc, b.getF32Type(), value);
  return arith::SIToFPOp::create(b, loc, b.getF32Type(), value);
}

/// The quantization of one group (docs/FORMAT.md section 5, step 2): row `slot`
/// of `values` ([slots][K] fp32) holds z at the group's positions; writes
/// the scale and the int8 activations of (row, group).
void quantizeGroup(OpBuilder &b, Location loc, Value values, Value slot,
                   int64_t groupSize, Value act, Value actScales, Value row,
                   Value group) {
  Value c0 = cIndex(b, loc, 0), cGs = cIndex(b, loc, groupSize);
  Value kBase = arith::MulIOp::create(b, loc, group, cGs);
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
  auto maxLoop = scf::ForOp::create(b, loc, c0, cGs, cIndex(b, loc, 1),
                                    ValueRange{zero});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(maxLoop.getBody());
    Value v = memref::LoadOp::create(
        b, loc, values,
        ValueRange{slot,
                   arith::AddIOp::create(b, loc, kBase, maxLoop.getInductionVar())});
    Value magnitude = math::AbsFOp::create(b, loc, v);
    scf::YieldOp::create(
        b, loc,
        ValueRange{arith::MaximumFOp::create(
            b, loc, maxLoop.getRegionIterArgs()[0], magnitude)});
  }
  Value scale = arith::DivFOp::create(
      b, loc, maxLoop.getResult(0),
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(127.0f)));
  scale = arith::MaximumFOp::create(
      b, loc, scale, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-10f)));
  memref::StoreOp::create(b, loc, scale, actScales, ValueRange{row, group});
  Value lowest = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(-128.0f));
  Value highest = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(127.0f));
  forRange(b, loc, c0, cGs, [&](OpBuilder &b, Value j) {
    Value k = arith::AddIOp::create(b, loc, kBase, j);
    Value z = memref::LoadOp::create(b, loc, values, ValueRange{slot, k});
    Value q = math::RoundEvenOp::create(b, loc,
                                        arith::DivFOp::create(b, loc, z, scale));
    q = arith::MinimumFOp::create(b, loc,
                                  arith::MaximumFOp::create(b, loc, q, lowest),
                                  highest);
    Value byte = arith::FPToSIOp::create(b, loc, b.getI8Type(), q);
    memref::StoreOp::create(b, loc, byte, act, ValueRange{row, k});
  });
}

Value rowsOf(OpBuilder &b, Location loc, Value memref) {
  auto type = cast<MemRefType>(memref.getType());
  if (!type.isDynamicDim(0))
    return cIndex(b, loc, type.getDimSize(0));
  return memref::DimOp::create(b, loc, memref, 0);
}

/// A row's values per vector load with RotationBlocking::laneBroadcast.
constexpr int64_t kRowValueLanes = 4;

/// The stack the fp32 row buffers of one rotation op may take: the kernels
/// run on the runtime's threads and the caller's, which the C API asks for
/// 1 MiB of stack.
constexpr int64_t kRotationStackBytes = int64_t(1) << 18;

/// The largest count of `lanes`-wide vectors, at most `wanted`, that
/// divides `width` outputs.
int64_t vectorsDividing(int64_t width, int64_t lanes, int64_t wanted) {
  int64_t vectors = wanted;
  while (vectors > 1 && width % (vectors * lanes) != 0)
    vectors /= 2;
  return vectors;
}

/// Rows of a chunk: as many fp32 rows of length k as `buffers` stack
/// buffers hold in kRotationStackBytes (each chunk reads the rotation from
/// memory once), whole tiles when there is room for one, at least one row.
int64_t chunkRowsFor(RotationBlocking blocking, int64_t k, int64_t buffers) {
  int64_t rows = kRotationStackBytes / (buffers * k * 4);
  if (rows >= blocking.tileRows)
    return rows / blocking.tileRows * blocking.tileRows;
  return std::max<int64_t>(1, rows);
}

/// Adds to sums[sumsFirst + first + r][j + i] (r < tileRows, i < vectors *
/// lanes) the terms matrix[c][j + i] * rowValues[first + r][c] for c in
/// [c0, c0 + span), one c after the other as fused multiply-adds, the sums
/// held in registers meanwhile: each sum takes a scalar loop's fma chain,
/// so every blocking, vector width and target gives the same bits. The
/// tile's vectors of a rotation row are one wide fp16 load and one
/// conversion, shared by the tile's rows.
void addSpan(OpBuilder &b, Location loc, Value matrix, Value rowValues,
             Value sums, Value sumsFirst, Value first, int64_t tileRows, Value j,
             int64_t vectors, Value c0, int64_t span,
             const RotationBlocking &blocking) {
  int64_t width = vectors * blocking.lanes;
  auto f16v = VectorType::get({width}, b.getF16Type());
  auto f32v = VectorType::get({width}, b.getF32Type());
  auto valuesType = VectorType::get({kRowValueLanes}, b.getF32Type());
  SmallVector<Value> rowIndex, sumsRow, inits;
  for (int64_t r = 0; r < tileRows; ++r) {
    rowIndex.push_back(arith::AddIOp::create(b, loc, first, cIndex(b, loc, r)));
    sumsRow.push_back(arith::AddIOp::create(b, loc, sumsFirst, rowIndex[r]));
  }
  for (int64_t r = 0; r < tileRows; ++r)
    inits.push_back(
        vector::LoadOp::create(b, loc, f32v, sums, ValueRange{sumsRow[r], j}));
  // A one-row tile prefetches the next span's rows (clamped to the last
  // row: the memref's bounds, though a prefetch never faults).
  constexpr int64_t kHalvesPerLine = 32; // fp16 values per 64-byte line
  bool prefetchNext = blocking.prefetchNextSpan && tileRows == 1;
  Value lastMatrixRow;
  if (prefetchNext)
    lastMatrixRow = arith::SubIOp::create(b, loc, rowsOf(b, loc, matrix),
                                          cIndex(b, loc, 1));
  // Eight values of c per iteration (four when the span is not a multiple
  // of eight): less loop overhead, the same order.
  int64_t unroll = span % 8 == 0 ? 8 : kRowValueLanes;
  auto loop = scf::ForOp::create(b, loc, c0,
                                 arith::AddIOp::create(b, loc, c0, cIndex(b, loc, span)),
                                 cIndex(b, loc, unroll), inits);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> accs(loop.getRegionIterArgs().begin(),
                            loop.getRegionIterArgs().end());
    Value cFirst = loop.getInductionVar();
    SmallVector<Value> rowVectorsLoaded(tileRows);
    for (int64_t u = 0; u < unroll; ++u) {
      Value c = arith::AddIOp::create(b, loc, cFirst, cIndex(b, loc, u));
      if (blocking.laneBroadcast && u % kRowValueLanes == 0)
        for (int64_t r = 0; r < tileRows; ++r)
          rowVectorsLoaded[r] = vector::LoadOp::create(
              b, loc, valuesType, rowValues, ValueRange{rowIndex[r], c});
      if (prefetchNext) {
        Value ahead = arith::MinUIOp::create(
            b, loc, arith::AddIOp::create(b, loc, c, cIndex(b, loc, span)),
            lastMatrixRow);
        for (int64_t line = 0; line < width; line += kHalvesPerLine)
          memref::PrefetchOp::create(
              b, loc, matrix,
              ValueRange{ahead, arith::AddIOp::create(b, loc, j, cIndex(b, loc, line))},
              /*isWrite=*/false, /*localityHint=*/3, /*isDataCache=*/true);
      }
      Value column = arith::ExtFOp::create(
          b, loc, f32v,
          Value(vector::LoadOp::create(b, loc, f16v, matrix, ValueRange{c, j})));
      for (int64_t r = 0; r < tileRows; ++r) {
        Value scalar =
            blocking.laneBroadcast
                ? Value(vector::ExtractOp::create(b, loc, rowVectorsLoaded[r],
                                                  u % kRowValueLanes))
                : Value(memref::LoadOp::create(b, loc, rowValues,
                                               ValueRange{rowIndex[r], c}));
        Value value = vector::BroadcastOp::create(b, loc, f32v, scalar);
        accs[r] = math::FmaOp::create(b, loc, column, value, accs[r]);
      }
    }
    scf::YieldOp::create(b, loc, accs);
  }
  for (int64_t r = 0; r < tileRows; ++r)
    vector::StoreOp::create(b, loc, loop.getResult(r), sums,
                            ValueRange{sumsRow[r], j});
}

/// Row tiles over [0, rows): as many tiles of `tileRows` as fit, then at
/// most one of each half size down to one row (7 rows past the last 8-row
/// tile are tiles of 4, 2 and 1, not 7 single rows, which would each
/// convert every rotation vector for one row); body(row, tile size).
void forRowTiles(OpBuilder &b, Location loc, Value rows, int64_t tileRows,
                 function_ref<void(OpBuilder &, Value, int64_t)> body) {
  Value begin = cIndex(b, loc, 0);
  for (int64_t size = tileRows; size >= 1; size /= 2) {
    Value cSize = cIndex(b, loc, size);
    Value left = arith::SubIOp::create(b, loc, rows, begin);
    Value end = arith::AddIOp::create(
        b, loc, begin,
        size == 1 ? left
                  : Value(arith::SubIOp::create(
                        b, loc, left, arith::RemUIOp::create(b, loc, left, cSize))));
    auto loop = scf::ForOp::create(b, loc, begin, end, cSize);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    body(b, loop.getInductionVar(), size);
    begin = end;
  }
}

/// Chunks of at most `chunkRows` rows over [0, rows): body(first row, count).
void forChunks(OpBuilder &b, Location loc, Value rows, int64_t chunkRows,
               function_ref<void(OpBuilder &, Value, Value)> body) {
  Value cChunk = cIndex(b, loc, chunkRows);
  auto loop = scf::ForOp::create(b, loc, cIndex(b, loc, 0), rows, cChunk);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value first = loop.getInductionVar();
  Value count = arith::MinUIOp::create(
      b, loc, cChunk, arith::SubIOp::create(b, loc, rows, first));
  body(b, first, count);
}

/// sums[sumsFirst + r][j] = sum_{c < k} matrix[c][j] * rowValues[r][c] for
/// the rows r < count and the outputs j in [jBegin, jEnd) (a multiple of
/// `granule` apart), each accumulated in index order from 0.0 as a scalar
/// loop would: the same bits at every blocking. The matrix is read along
/// its rows, spanRows of them at a time: the span's first row tile streams
/// them from memory in long runs (spanRows sequential streams, a few
/// pages), the other tiles find them in cache, and the sums wait in `sums`
/// (cached too) from one span to the next.
///
/// With `smeLeaf` (SME2: the op's kRotationLeafAttrName), the streaming leaf
/// convert-cq4p-to-arm-sme built computes the same sums, the same bits;
/// its row values may then be fp16 (the embedding's codebook levels, or the
/// lm_head's rounded activations with kRotationLeafF16AttrName).
void rotateRows(OpBuilder &b, Location loc, Value matrix, Value rowValues,
                Value sums, Value sumsFirst, Value count, Value jBegin,
                Value jEnd, int64_t granule, int64_t k,
                RotationBlocking blocking, FlatSymbolRefAttr smeLeaf) {
  if (smeLeaf) {
    auto asRows = [&](Value rows) -> Value {
      auto rowsType = MemRefType::get(
          {ShapedType::kDynamic, k}, cast<MemRefType>(rows.getType()).getElementType());
      if (rows.getType() == rowsType)
        return rows;
      return memref::CastOp::create(b, loc, rowsType, rows);
    };
    func::CallOp::create(b, loc, smeLeaf, TypeRange{},
                         ValueRange{matrix, asRows(rowValues), asRows(sums), sumsFirst,
                                    count, jBegin, jEnd});
    return;
  }
  int64_t lanes = blocking.lanes;
  auto f32v = VectorType::get({lanes}, b.getF32Type());
  Value c0 = cIndex(b, loc, 0), cLanes = cIndex(b, loc, lanes);
  Value zeros = splat(b, loc, f32v, b.getF32FloatAttr(0.0f));
  forRange(b, loc, c0, count, [&](OpBuilder &b, Value r) {
    Value row = arith::AddIOp::create(b, loc, sumsFirst, r);
    auto loop = scf::ForOp::create(b, loc, jBegin, jEnd, cLanes);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    vector::StoreOp::create(b, loc, zeros, sums,
                            ValueRange{row, loop.getInductionVar()});
  });
  int64_t span = std::min(blocking.spanRows, k);
  auto spans = scf::ForOp::create(b, loc, c0, cIndex(b, loc, k),
                                  cIndex(b, loc, span));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(spans.getBody());
  Value spanBegin = spans.getInductionVar();
  forRowTiles(b, loc, count, blocking.tileRows,
              [&](OpBuilder &b, Value first, int64_t tile) {
    int64_t vectors = vectorsDividing(granule, lanes, blocking.vectorsFor(tile));
    auto blocks = scf::ForOp::create(b, loc, jBegin, jEnd,
                                     cIndex(b, loc, vectors * lanes));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(blocks.getBody());
    addSpan(b, loc, matrix, rowValues, sums, sumsFirst, first, tile,
            blocks.getInductionVar(), vectors, spanBegin, span, blocking);
  });
}

/// For SME2's FMLAL rotation (kRotationLeafF16AttrName): each of the `count`
/// rows of `values` ([?][k] fp32) times a power of two that brings its
/// largest magnitude to [2^14, 2^15), rounded to fp16 (to nearest even)
/// into `halves`, and the power's inverse into `unscale`. fp16's relative
/// precision is the same over its normal range, so the scaling only keeps
/// the row clear of overflow (65504) and of the subnormals whatever its
/// magnitude; being a power of two, it and its inverse are exact.
void roundRowsToHalves(OpBuilder &b, Location loc, Value values, Value halves,
                       Value unscale, Value count, int64_t k, int64_t lanes) {
  auto f32v = VectorType::get({lanes}, b.getF32Type());
  auto f16v = VectorType::get({lanes}, b.getF16Type());
  Type i32 = b.getI32Type();
  Value c0 = cIndex(b, loc, 0), cLanes = cIndex(b, loc, lanes);
  auto i32Constant = [&](int64_t v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  };
  forRange(b, loc, c0, count, [&](OpBuilder &b, Value r) {
    Value zeros = splat(b, loc, f32v, b.getF32FloatAttr(0.0f));
    auto maxLoop = scf::ForOp::create(b, loc, c0, cIndex(b, loc, k), cLanes,
                                      ValueRange{zeros});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(maxLoop.getBody());
      Value v = vector::LoadOp::create(b, loc, f32v, values,
                                       ValueRange{r, maxLoop.getInductionVar()});
      scf::YieldOp::create(
          b, loc,
          ValueRange{arith::MaximumFOp::create(b, loc, maxLoop.getRegionIterArgs()[0],
                                               math::AbsFOp::create(b, loc, v))});
    }
    Value largest = vector::ReductionOp::create(
        b, loc, vector::CombiningKind::MAXIMUMF, maxLoop.getResult(0));
    // The largest magnitude's biased exponent e, clamped to [15, 254]: the
    // scale 2^(141 - e) (biased 268 - e) and its inverse (biased e - 14)
    // are then normal fp32 numbers, and a row of zeros (e = 0) gets a
    // harmless scale.
    Value exponent = arith::ShRUIOp::create(
        b, loc, arith::BitcastOp::create(b, loc, i32, largest), i32Constant(23));
    exponent = arith::MinUIOp::create(
        b, loc, arith::MaxUIOp::create(b, loc, exponent, i32Constant(15)), i32Constant(254));
    auto powerOfTwo = [&](Value biased) -> Value {
      return arith::BitcastOp::create(
          b, loc, b.getF32Type(), arith::ShLIOp::create(b, loc, biased, i32Constant(23)));
    };
    Value scale = powerOfTwo(arith::SubIOp::create(b, loc, i32Constant(268), exponent));
    memref::StoreOp::create(
        b, loc, powerOfTwo(arith::SubIOp::create(b, loc, exponent, i32Constant(14))),
        unscale, ValueRange{r});
    Value scales = vector::BroadcastOp::create(b, loc, f32v, scale);
    auto loop = scf::ForOp::create(b, loc, c0, cIndex(b, loc, k), cLanes);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value c = loop.getInductionVar();
    Value v = vector::LoadOp::create(b, loc, f32v, values, ValueRange{r, c});
    vector::StoreOp::create(
        b, loc,
        arith::TruncFOp::create(b, loc, f16v, arith::MulFOp::create(b, loc, v, scales)),
        halves, ValueRange{r, c});
  });
}

/// The orthogonal lm_head's transform as a matrix product: for a chunk of
/// rows, a = x * isr, then the basis outputs of the task's groups,
/// basis[j] = sum_k a[k] * rotation[k][j] (the file's rotation_t[j][k]:
/// the runtime checks that one is the other's transpose bit for bit), read
/// along the rotation's rows, then each group's quantization.
struct RotateQuantizeActivationsLowering
    : public OpRewritePattern<RotateQuantizeActivationsOp> {
  RotateQuantizeActivationsLowering(MLIRContext *ctx, RotationBlocking blocking)
      : OpRewritePattern(ctx), blocking(blocking) {}

  LogicalResult matchAndRewrite(RotateQuantizeActivationsOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    int64_t gs = op.getGroupSize();
    int64_t k = cast<MemRefType>(op.getX().getType()).getDimSize(1);
    int64_t lanes = blocking.lanes;
    if (k % lanes != 0 || gs % lanes != 0 || k % std::min(blocking.spanRows, k) != 0)
      return rewriter.notifyMatchFailure(op, "K and the group size must be "
                                             "multiples of the vector lanes "
                                             "and K of the span");
    auto f16v = VectorType::get({lanes}, b.getF16Type());
    auto f32v = VectorType::get({lanes}, b.getF32Type());
    Value c0 = cIndex(b, loc, 0), cGs = cIndex(b, loc, gs);
    auto smeLeaf = op->getAttrOfType<FlatSymbolRefAttr>(kRotationLeafAttrName);
    bool halfValues = smeLeaf && op->hasAttr(kRotationLeafF16AttrName);
    // The fp16 rows take half a buffer more.
    int64_t chunk = chunkRowsFor(blocking, k, /*buffers=*/halfValues ? 3 : 2);
    auto buffer = MemRefType::get({chunk, k}, b.getF32Type());
    Value scaled = entryAlloca(b, op, buffer);
    Value basis = entryAlloca(b, op, buffer);
    Value halves, unscale;
    if (halfValues) {
      halves = entryAlloca(b, op, MemRefType::get({chunk, k}, b.getF16Type()));
      unscale = entryAlloca(b, op, MemRefType::get({chunk}, b.getF32Type()));
    }
    Value jBegin = arith::MulIOp::create(b, loc, op.getGroupBegin(), cGs);
    Value jEnd = arith::MulIOp::create(b, loc, op.getGroupEnd(), cGs);
    forChunks(b, loc, rowsOf(b, loc, op.getX()), chunk,
              [&](OpBuilder &b, Value first, Value count) {
      // a = x * isr
      forRange(b, loc, c0, count, [&](OpBuilder &b, Value r) {
        Value actRow = arith::AddIOp::create(b, loc, first, r);
        auto loop = scf::ForOp::create(b, loc, c0, cIndex(b, loc, k),
                                       cIndex(b, loc, lanes));
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value kk = loop.getInductionVar();
        Value x = vector::LoadOp::create(b, loc, f32v, op.getX(),
                                         ValueRange{actRow, kk});
        Value isr = arith::ExtFOp::create(
            b, loc, f32v,
            Value(vector::LoadOp::create(b, loc, f16v, op.getInputScaleRecip(), kk)));
        vector::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, x, isr),
                                scaled, ValueRange{r, kk});
      });
      if (halfValues)
        roundRowsToHalves(b, loc, scaled, halves, unscale, count, k, lanes);
      rotateRows(b, loc, op.getRotation(), halfValues ? halves : scaled, basis, c0,
                 count, jBegin, jEnd, gs, k, blocking, smeLeaf);
      // The scaled rows' sums back to a's scale (exact: a power of two).
      if (halfValues)
        forRange(b, loc, c0, count, [&](OpBuilder &b, Value r) {
          Value inverse = vector::BroadcastOp::create(
              b, loc, f32v, memref::LoadOp::create(b, loc, unscale, ValueRange{r}));
          auto loop = scf::ForOp::create(b, loc, jBegin, jEnd, cIndex(b, loc, lanes));
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(loop.getBody());
          Value j = loop.getInductionVar();
          Value sums = vector::LoadOp::create(b, loc, f32v, basis, ValueRange{r, j});
          vector::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, sums, inverse),
                                  basis, ValueRange{r, j});
        });
      forRange(b, loc, op.getGroupBegin(), op.getGroupEnd(),
               [&](OpBuilder &b, Value g) {
        forRange(b, loc, c0, count, [&](OpBuilder &b, Value r) {
          quantizeGroup(b, loc, basis, r, gs, op.getAct(), op.getActScales(),
                        arith::AddIOp::create(b, loc, first, r), g);
        });
      });
    });
    rewriter.eraseOp(op);
    return success();
  }

  RotationBlocking blocking;
};

/// Embedding rows decoded a chunk at a time: each row's codebook levels
/// v[c] = cb[idx(row, c)], then one matrix product with the rotation,
/// s[j] = sum_c rotation_t[c][j] * v[c] (the file's rotation[j][c]) read
/// along rotation_t's rows, so the K x K rotation is read once per chunk,
/// then out[j] = (s[j] * norm[row]) * isr[j]. The products of two fp16
/// values are exact in fp32, so each sum's fused multiply-adds round as
/// SME2's FMLAL (fp16 x fp16 into fp32) does: every target the same bits.
/// The row's norm is its first group's (an orthogonal file repeats it over
/// its virtual groups; the runtime checks that). The sums wait in the
/// output rows themselves, so the stack holds only the decoded rows (fp16
/// for the SME2 leaf's FMLAL, fp32 for the vector code). With SME2's
/// outer-product leaf (kEmbeddingLeafAttrName), chunks of the strategy's
/// embedding_rows: one of at least embedding_min_rows rows is the leaf's whole (it
/// decodes from the panels; the stack holds its [K][32] bytes of transposed
/// indices), a shorter one is decoded here for the FMLAL leaf.
struct DecodeEmbeddingLowering : public OpRewritePattern<DecodeEmbeddingOp> {
  DecodeEmbeddingLowering(MLIRContext *ctx, RotationBlocking blocking)
      : OpRewritePattern(ctx), blocking(blocking) {}

  LogicalResult matchAndRewrite(DecodeEmbeddingOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    auto panelsType = cast<MemRefType>(op.getPanels().getType());
    int64_t kgPerGroup = panelsType.getDimSize(2);
    int64_t gs = kgPerGroup * CQ4P_KG_BLOCK_K;
    int64_t k = panelsType.getDimSize(1) * gs;
    int64_t lanes = blocking.lanes;
    if (k % lanes != 0 || k % std::min(blocking.spanRows, k) != 0)
      return rewriter.notifyMatchFailure(
          op, "K must be a multiple of the vector lanes and of the span");
    auto f16v = VectorType::get({lanes}, b.getF16Type());
    auto f32v = VectorType::get({lanes}, b.getF32Type());
    Value c0 = cIndex(b, loc, 0), cK = cIndex(b, loc, k);
    Value c4 = cIndex(b, loc, 4), c64 = cIndex(b, loc, CQ4P_PANEL_CHANNELS);
    int64_t chunk = chunkRowsFor(blocking, k, /*buffers=*/1);
    auto smeLeaf = op->getAttrOfType<FlatSymbolRefAttr>(kRotationLeafAttrName);
    auto mopaLeaf = op->getAttrOfType<FlatSymbolRefAttr>(kEmbeddingLeafAttrName);
    // With the outer-product leaf, chunks of the strategy's embedding_rows;
    // the rotation leaf's fp16 rows then only ever hold a chunk of fewer
    // than embedding_min_rows (the last).
    int64_t decodedRows = chunk, leafMinRows = 0;
    Value nibbles;
    if (mopaLeaf) {
      // The dialect's verifier makes the leaf come with this strategy.
      StrategyAttr strategy = getStrategy(op);
      chunk = strategy.getEmbeddingRows();
      leafMinRows = strategy.getEmbeddingMinRows();
      decodedRows = leafMinRows - 1;
      nibbles = entryAlloca(b, op, MemRefType::get({k, 32}, b.getI8Type()));
    }
    Type levelType = smeLeaf ? Type(b.getF16Type()) : Type(b.getF32Type());
    Value decoded = entryAlloca(b, op, MemRefType::get({decodedRows, k}, levelType));
    forChunks(b, loc, rowsOf(b, loc, op.getIds()), chunk,
              [&](OpBuilder &b, Value first, Value count) {
      // Fewer rows: decoded to fp16 levels here, then the FMLAL leaf.
      auto decodeAndRotate = [&](OpBuilder &b) {
        forRange(b, loc, c0, count, [&](OpBuilder &b, Value r) {
          Value i = arith::AddIOp::create(b, loc, first, r);
          Value id = memref::LoadOp::create(b, loc, op.getIds(), i);
          Value row = arith::IndexCastOp::create(b, loc, b.getIndexType(), id);
          Value sb = arith::DivUIOp::create(b, loc, row, c64);
          Value channel = arith::RemUIOp::create(b, loc, row, c64);
          // v[c] = cb[idx(row, c)]: the row's two bytes of each kg-block
          // hold its 4 K values, low nibble first.
          forRange(b, loc, c0, cIndex(b, loc, k / gs), [&](OpBuilder &b, Value g) {
            Value groupBase = arith::MulIOp::create(b, loc, g, cIndex(b, loc, gs));
            forRange(b, loc, c0, cIndex(b, loc, kgPerGroup), [&](OpBuilder &b, Value kg) {
              Value base = arith::AddIOp::create(
                  b, loc, groupBase, arith::MulIOp::create(b, loc, kg, c4));
              for (int64_t half = 0; half < 2; ++half) {
                Value byteIndex = arith::AddIOp::create(
                    b, loc, arith::MulIOp::create(b, loc, channel, cIndex(b, loc, 2)),
                    cIndex(b, loc, half));
                Value byte = memref::LoadOp::create(b, loc, op.getPanels(),
                                                    ValueRange{sb, g, kg, byteIndex});
                for (int64_t nibble = 0; nibble < 2; ++nibble) {
                  Value index =
                      nibble == 0
                          ? Value(arith::AndIOp::create(
                                b, loc, byte,
                                arith::ConstantOp::create(b, loc,
                                                          b.getI8IntegerAttr(0x0F))))
                          : Value(arith::ShRUIOp::create(
                                b, loc, byte,
                                arith::ConstantOp::create(b, loc,
                                                          b.getI8IntegerAttr(4))));
                  Value levelIndex =
                      arith::IndexCastUIOp::create(b, loc, b.getIndexType(), index);
                  Value level =
                      smeLeaf ? Value(memref::LoadOp::create(b, loc, op.getCodebook(),
                                                             levelIndex))
                              : loadAsF32(b, loc, op.getCodebook(), levelIndex);
                  memref::StoreOp::create(
                      b, loc, level, decoded,
                      ValueRange{r, arith::AddIOp::create(
                                        b, loc, base,
                                        cIndex(b, loc, 2 * half + nibble))});
                }
              }
            });
          });
        });
        rotateRows(b, loc, op.getRotationT(), decoded, op.getOut(), first, count,
                   c0, cK, k, k, blocking, smeLeaf);
      };
      if (mopaLeaf) {
        auto many = scf::IfOp::create(
            b, loc,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, count,
                                  cIndex(b, loc, leafMinRows)),
            /*withElseRegion=*/true);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(many.thenBlock());
          func::CallOp::create(b, loc, mopaLeaf, TypeRange{},
                               ValueRange{op.getRotationT(), op.getPanels(),
                                          op.getCodebook(), op.getIds(), nibbles,
                                          op.getOut(), first, count});
          b.setInsertionPointToStart(many.elseBlock());
          decodeAndRotate(b);
        }
      } else {
        decodeAndRotate(b);
      }
      // out[j] = ((sum_c R[j][c] * v[c]) * norm[row]) * isr[j]
      forRange(b, loc, c0, count, [&](OpBuilder &b, Value r) {
        Value i = arith::AddIOp::create(b, loc, first, r);
        Value row = arith::IndexCastOp::create(
            b, loc, b.getIndexType(),
            Value(memref::LoadOp::create(b, loc, op.getIds(), i)));
        Value norm = vector::BroadcastOp::create(
            b, loc, f32v, loadAsF32(b, loc, op.getNorms(), ValueRange{row, c0}));
        auto loop = scf::ForOp::create(b, loc, c0, cK, cIndex(b, loc, lanes));
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value j = loop.getInductionVar();
        Value isr = arith::ExtFOp::create(
            b, loc, f32v,
            Value(vector::LoadOp::create(b, loc, f16v, op.getInputScaleRecip(), j)));
        Value sum = vector::LoadOp::create(b, loc, f32v, op.getOut(), ValueRange{i, j});
        Value scaled = arith::MulFOp::create(b, loc, sum, norm);
        vector::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, scaled, isr),
                                op.getOut(), ValueRange{i, j});
      });
    });
    rewriter.eraseOp(op);
    return success();
  }

  RotationBlocking blocking;
};

/// cq4p.attention on every target but SME2's streaming leaves: the
/// target's own code where it has some (NEON's 4-lane code,
/// CQ4PToNeon/NeonAttention.cpp), else the 16-lane vector code
/// (ModelKernels.cpp) for head dims that fill whole vectors; for
/// other head dims (single tensors only), per query head and token, fp32
/// scores (4-wide dot products), a max-subtracted softmax, then the values
/// weighted by it. The runtime's threads split the heads.
struct AttentionLowering : public OpRewritePattern<AttentionOp> {
  AttentionLowering(MLIRContext *ctx, const KernelTargetInfo &target)
      : OpRewritePattern(ctx), target(target) {}

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    OpBuilder &b = rewriter;
    int64_t dim = op.getHeadDim(), window = op.getWindow();
    int64_t group = op.getNumHeads() / op.getNumKvHeads();
    if (target.emitAttention(b, op)) {
      rewriter.eraseOp(op);
      return success();
    }
    if (dim % 16 == 0) {
      emitVectorAttention(b, loc, op.getQ(), op.getK(), op.getV(), op.getOut(),
                          op.getPosition(), op.getHeadBegin(), op.getHeadEnd(),
                          op.getNumHeads(), op.getNumKvHeads(), dim, window,
                          op.getScale().convertToFloat(), target.floatLanes());
      rewriter.eraseOp(op);
      return success();
    }
    if (op.getPosition() ||
        !cast<MemRefType>(op.getK().getType()).getElementType().isF32() ||
        !cast<MemRefType>(op.getV().getType()).getElementType().isF32())
      return rewriter.notifyMatchFailure(
          op, "a head dim that is not a multiple of 16 needs fp32 keys and values "
              "of the queries' own rows");
    if (dim % 4 != 0)
      return rewriter.notifyMatchFailure(op, "head dim must be a multiple of 4");
    auto f32x4 = VectorType::get({4}, b.getF32Type());
    Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1), c4 = cIndex(b, loc, 4);
    Value cDim = cIndex(b, loc, dim);
    Value seq = rowsOf(b, loc, op.getQ());
    Value scores = memref::AllocaOp::create(
        b, loc, MemRefType::get({ShapedType::kDynamic}, b.getF32Type()),
        ValueRange{seq});
    Value accum = memref::AllocaOp::create(
        b, loc, MemRefType::get({dim}, b.getF32Type()));
    Value scale = arith::ConstantOp::create(b, loc, op.getScaleAttr());
    Value minusInf = arith::ConstantOp::create(
        b, loc, b.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
    Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
    Value zeros = splat(b, loc, f32x4, b.getF32FloatAttr(0.0f));

    forRange(b, loc, op.getHeadBegin(), op.getHeadEnd(), [&](OpBuilder &b, Value h) {
      Value kvHead = arith::DivUIOp::create(b, loc, h, cIndex(b, loc, group));
      Value qBase = arith::MulIOp::create(b, loc, h, cDim);
      Value kBase = arith::MulIOp::create(b, loc, kvHead, cDim);
      forRange(b, loc, c0, seq, [&](OpBuilder &b, Value i) {
        Value first = c0;
        if (window > 0) {
          // max(0, i + 1 - window)
          Value next = arith::AddIOp::create(b, loc, i, c1);
          Value cWindow = cIndex(b, loc, window);
          Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt,
                                               next, cWindow);
          first = arith::SelectOp::create(
              b, loc, inside, arith::SubIOp::create(b, loc, next, cWindow), c0);
        }
        Value last = arith::AddIOp::create(b, loc, i, c1);
        // Scores and their maximum.
        auto scoreLoop = scf::ForOp::create(b, loc, first, last, c1,
                                            ValueRange{minusInf});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(scoreLoop.getBody());
          Value j = scoreLoop.getInductionVar();
          auto dot = scf::ForOp::create(b, loc, c0, cDim, c4, ValueRange{zeros});
          {
            OpBuilder::InsertionGuard dotGuard(b);
            b.setInsertionPointToStart(dot.getBody());
            Value d = dot.getInductionVar();
            Value qv = vector::LoadOp::create(
                b, loc, f32x4, op.getQ(),
                ValueRange{i, arith::AddIOp::create(b, loc, qBase, d)});
            Value kv = vector::LoadOp::create(
                b, loc, f32x4, op.getK(),
                ValueRange{j, arith::AddIOp::create(b, loc, kBase, d)});
            scf::YieldOp::create(
                b, loc,
                ValueRange{arith::AddFOp::create(b, loc, dot.getRegionIterArgs()[0],
                                                 arith::MulFOp::create(b, loc, qv, kv))});
          }
          Value sum = vector::ReductionOp::create(
              b, loc, vector::CombiningKind::ADD, dot.getResult(0));
          Value score = arith::MulFOp::create(b, loc, sum, scale);
          memref::StoreOp::create(b, loc, score, scores, j);
          scf::YieldOp::create(
              b, loc,
              ValueRange{arith::MaximumFOp::create(
                  b, loc, scoreLoop.getRegionIterArgs()[0], score)});
        }
        Value maximum = scoreLoop.getResult(0);
        // exp(score - max) and their sum.
        auto expLoop = scf::ForOp::create(b, loc, first, last, c1, ValueRange{zero});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(expLoop.getBody());
          Value j = expLoop.getInductionVar();
          Value e = math::ExpOp::create(
              b, loc,
              arith::SubFOp::create(b, loc,
                                    memref::LoadOp::create(b, loc, scores, j),
                                    maximum));
          memref::StoreOp::create(b, loc, e, scores, j);
          scf::YieldOp::create(
              b, loc,
              ValueRange{arith::AddFOp::create(b, loc, expLoop.getRegionIterArgs()[0], e)});
        }
        Value inverse = arith::DivFOp::create(
            b, loc, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f)),
            expLoop.getResult(0));
        // out[i, h] = sum_j p_j v[j, kv head] / sum
        forRange(b, loc, c0, cDim, [&](OpBuilder &b, Value d) {
          memref::StoreOp::create(b, loc, zero, accum, d);
        });
        forRange(b, loc, first, last, [&](OpBuilder &b, Value j) {
          Value p = vector::BroadcastOp::create(
              b, loc, f32x4, memref::LoadOp::create(b, loc, scores, j));
          auto valueLoop = scf::ForOp::create(b, loc, c0, cDim, c4);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(valueLoop.getBody());
          Value d = valueLoop.getInductionVar();
          Value vv = vector::LoadOp::create(
              b, loc, f32x4, op.getV(),
              ValueRange{j, arith::AddIOp::create(b, loc, kBase, d)});
          Value acc = vector::LoadOp::create(b, loc, f32x4, accum, d);
          vector::StoreOp::create(
              b, loc,
              arith::AddFOp::create(b, loc, acc, arith::MulFOp::create(b, loc, p, vv)),
              accum, d);
        });
        Value inverses = vector::BroadcastOp::create(b, loc, f32x4, inverse);
        auto outLoop = scf::ForOp::create(b, loc, c0, cDim, c4);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(outLoop.getBody());
        Value d = outLoop.getInductionVar();
        Value acc = vector::LoadOp::create(b, loc, f32x4, accum, d);
        vector::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, acc, inverses),
                                op.getOut(),
                                ValueRange{i, arith::AddIOp::create(b, loc, qBase, d)});
      });
    });
    rewriter.eraseOp(op);
    return success();
  }

  const KernelTargetInfo &target;
};

} // namespace

void mlir::cq4p::populateCQ4PKernelLoweringPatterns(
    RewritePatternSet &patterns, const KernelTargetInfo &target) {
  MLIRContext *ctx = patterns.getContext();
  patterns.add<PanelDotLowering>(ctx, target);
  patterns.add<RotateQuantizeActivationsLowering, DecodeEmbeddingLowering>(
      ctx, target.rotationBlocking());
  target.populateQuantizePatterns(patterns);
  patterns.add<RescaleLowering>(ctx, target.floatLanes());
  patterns.add<AttentionLowering>(ctx, target);
  // The vector attention lowering's exp as a polynomial: vector code
  // instead of a libm call per lane, and the same bits on every target (a
  // gated transform's activation is activateLanes', no math.exp or
  // math.tanh).
  populateMathPolynomialApproximationPatterns(patterns, [](StringRef name) {
    return name == "exp" || name == "math.exp" || name == "tanh" ||
           name == "math.tanh";
  });
}

LogicalResult mlir::cq4p::lowerCQ4PKernels(func::FuncOp func,
                                           const KernelTargetInfo &target) {
  RewritePatternSet patterns(func.getContext());
  populateCQ4PKernelLoweringPatterns(patterns, target);
  // The lowering creates no kernel op, so one walk over the function
  // suffices; refuse to leave a kernel op behind.
  if (failed(applyPatternsGreedily(func, std::move(patterns))))
    return failure();
  WalkResult left = func.walk([](Operation *op) {
    if (isa<PanelDotOp, RescaleOp, QuantizeActivationsOp,
            RotateQuantizeActivationsOp, DecodeEmbeddingOp,
            PackActivationTileOp, PanelPartialsOp, AttentionOp>(op)) {
      op->emitError() << "could not lower " << op->getName();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(left.wasInterrupted());
}
