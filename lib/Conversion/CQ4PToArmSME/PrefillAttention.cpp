//===- PrefillAttention.cpp - SME2 prefill attention's softmax ------------===//
//
// SME2 prefill attention (several query rows, an fp32 KV cache, head dims
// of whole 64s; CQ4PToArmSME.cpp lowers it) runs per query head and tile of
// 16 query rows one streaming leaf, `<kernel>_sme_prefill_tile`:
//
//   St[j][r] = c q_r . k_j for the key tiles the rows see FMOPAs into ZA0.S
//   the softmax of St's columns, in place                 this file
//   outTile[r][d] = sum_j St[j][r] v[j][d]                FMOPAs, 4 tiles
//   out[i0 + r][d] = outTile[r][d] / sum_j St[j][r]       this file
//
// with c = scale log2(e), multiplied into the queries as they are
// transposed (once per head), so that the scores come out in base 2:
// exp(scale q.k - m) = 2^(c q.k - m').
//
// A row of St holds key j's scores for the tile's 16 query rows, one
// 512-bit vector, so the softmax is lane-wise vector work with no
// reductions. Its keys [keyBegin, keyEnd) split in three ranges:
//
//   [keyBegin, clean)     keys some row's sliding window has left (window > 0)
//   [clean, cleanEnd)     keys every row sees: no mask
//   [cleanEnd, keyEnd)    keys past the tile's first row (the causal mask)
//
// The masked ranges hold at most 15 (causal) and 16 + 15 (window) keys;
// the others pay no mask, and go four rows of St per LD1W x4 / ST1W x4.
// Two passes: the largest score per row (lane-wise FMAX; for the whole key
// tiles of [clean, cleanEnd) folded as the scores leave ZA), then p = 2^(s
// - m) as one FSUB and a base-2 exponential with FSCALE
// (StreamingBuilder::exp2Lanes, 10 instructions), stored over s and summed;
// a masked key's p is 0 (selected after the exponential, so that its
// argument never matters). Everything runs in streaming mode, between the
// leaf's outer products: no mode switch and no 4-register NEON form of each
// 16-lane step.
//
// The sums run in key order, as the vector code's, but the queries are
// rounded once more (times c) and the exponential is another polynomial
// (within 2e-7 relative): the results are within the model tolerance of
// NEON's (docs/FORMAT.md section 5), not bit-identical, as for the rest of
// SME2 attention.
//
//===----------------------------------------------------------------------===//

#include "PrefillAttention.h"
#include "KernelLowering/LoweringHelpers.h"
#include "Addresses.h"

#include "cq4p/Codegen/EmitBuilder.h"

#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kRowBytes = 64; // a 512-bit vector: one row of St

/// SME2's prefill softmax emitter: the streaming leaves' builder with a
/// loop that folds one value.
struct Lanes : sme::StreamingBuilder {
  Lanes(OpBuilder &b, Location loc) : StreamingBuilder(b, loc) {}

  Value splatIndex(Value i) {
    return vector::BroadcastOp::create(
        b, loc, words, arith::IndexCastOp::create(b, loc, b.getI32Type(), i));
  }

  /// for j in [begin, end) step `step`: state = body(j, state)
  Value fold(Value begin, Value end, Value init, function_ref<Value(Value, Value)> body,
             int64_t step = 1) {
    return forLoop(begin, end, step, init,
                   [&](Value j, ValueRange state) {
                     return SmallVector<Value>{body(j, state[0])};
                   })
        .getResult(0);
  }
};

} // namespace

PrefillKeys mlir::cq4p::prefillKeys(OpBuilder &b, Location loc, int64_t window,
                                    Value keyBegin, Value keyEnd, Value p0) {
  auto index = [&](int64_t v) -> Value { return arith::ConstantIndexOp::create(b, loc, v); };
  // Every row sees keys [clean, cleanEnd): j <= p0 and j >= p0 + 16 - window.
  Value cleanEnd = arith::MaxUIOp::create(
      b, loc, keyBegin,
      arith::MinUIOp::create(b, loc, keyEnd, arith::AddIOp::create(b, loc, p0, index(1))));
  Value clean = keyBegin;
  if (window > 0) {
    // max(0, p0 + 16 - window) without going below zero in unsigned math.
    Value cWindow = index(window);
    Value left = arith::SubIOp::create(
        b, loc,
        arith::MaxUIOp::create(b, loc, arith::AddIOp::create(b, loc, p0, index(16)),
                               cWindow),
        cWindow);
    clean = arith::MinUIOp::create(b, loc, arith::MaxUIOp::create(b, loc, keyBegin, left),
                                   cleanEnd);
  }
  // The whole tiles of [clean, cleanEnd): from clean rounded up to a tile
  // (at most cleanEnd) to cleanEnd rounded down (at least that).
  Value c16 = index(16);
  Value fusedBegin = arith::MinUIOp::create(
      b, loc, arith::MulIOp::create(b, loc, arith::CeilDivUIOp::create(b, loc, clean, c16), c16),
      cleanEnd);
  Value fusedEnd = arith::MaxUIOp::create(
      b, loc, fusedBegin,
      arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, cleanEnd, c16), c16));
  return {clean, cleanEnd, fusedBegin, fusedEnd};
}

void mlir::cq4p::emitPrefillSoftmax(OpBuilder &b, Location loc, int64_t window, Value st,
                                    Value keyBegin, Value keyEnd, Value p0,
                                    const PrefillKeys &keys, Value fusedMax,
                                    Value inverses) {
  Lanes s(b, loc);
  Value stBase = sme::alignedBase(b, loc, st);
  Value rowBytes = s.index(kRowBytes);
  auto row = [&](Value j) { return s.at(stBase, arith::MulIOp::create(b, loc, j, rowBytes)); };
  Value minusInf = s.splat(s.f32(-std::numeric_limits<float>::infinity()));
  Value zeros = s.splat(s.f32(0.0f));

  // Lane r is the query at p0 + r: it sees key j when j <= p0 + r and, with
  // a window, j > p0 + r - window.
  Value positions = arith::AddIOp::create(
      b, loc, s.splatIndex(p0),
      arith::IndexCastOp::create(
          b, loc, s.words,
          vector::StepOp::create(b, loc, VectorType::get({4}, b.getIndexType(), {true}))));
  Value windowEnds;
  if (window > 0)
    windowEnds = arith::SubIOp::create(
        b, loc, positions,
        vector::BroadcastOp::create(b, loc, s.words,
                                    arith::ConstantOp::create(
                                        b, loc, b.getI32IntegerAttr(int32_t(window)))));
  auto visible = [&](Value j) -> Value {
    Value key = s.splatIndex(j);
    Value seen = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, key, positions);
    if (window > 0)
      seen = arith::AndIOp::create(
          b, loc, seen,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, key, windowEnds));
    return seen;
  };

  Value clean = keys.clean, cleanEnd = keys.cleanEnd;

  // Pass 1: the largest visible score per row. The whole tiles of the keys
  // every row sees came with the scores (fusedMax); the keys around them
  // go one at a time.
  auto maskedMax = [&](Value j, Value m) -> Value {
    return arith::MaximumFOp::create(
        b, loc, m, arith::SelectOp::create(b, loc, visible(j), s.load(row(j)), minusInf));
  };
  Value m = fusedMax;
  if (window > 0)
    m = s.fold(keyBegin, clean, m, maskedMax);
  s.makeCounter();
  Value cleanKeys = arith::SubIOp::create(b, loc, cleanEnd, clean);
  Value quadEnd = arith::SubIOp::create(
      b, loc, cleanEnd, arith::RemUIOp::create(b, loc, cleanKeys, s.index(4)));
  auto cleanMax = [&](Value j, Value m) -> Value {
    return arith::MaximumFOp::create(b, loc, m, s.load(row(j)));
  };
  m = s.fold(clean, keys.fusedBegin, m, cleanMax);
  m = s.fold(keys.fusedEnd, cleanEnd, m, cleanMax);
  m = s.fold(cleanEnd, keyEnd, m, maskedMax);

  // Pass 2: p = 2^(s - m) in place, and its sum per row.
  auto exponential = [&](Value x) -> Value { return s.exp2Lanes(s.subF(x, m)); };
  auto weight = [&](Value address) -> Value { return exponential(s.load(address)); };
  auto maskedSum = [&](Value j, Value l) -> Value {
    Value address = row(j);
    Value p = arith::SelectOp::create(b, loc, visible(j), weight(address), zeros);
    s.store(p, address);
    return arith::AddFOp::create(b, loc, l, p);
  };
  Value l = zeros;
  if (window > 0)
    l = s.fold(keyBegin, clean, l, maskedSum);
  l = s.fold(
      clean, quadEnd, l,
      [&](Value j, Value l) -> Value {
        Value address = row(j);
        SmallVector<Value> p;
        for (Value x : s.loadQuad(address))
          p.push_back(exponential(x));
        s.storeQuad(p, address);
        for (Value x : p)
          l = arith::AddFOp::create(b, loc, l, x);
        return l;
      },
      4);
  l = s.fold(quadEnd, cleanEnd, l, [&](Value j, Value l) -> Value {
    Value address = row(j);
    Value p = weight(address);
    s.store(p, address);
    return arith::AddFOp::create(b, loc, l, p);
  });
  l = s.fold(cleanEnd, keyEnd, l, maskedSum);
  s.store(arith::DivFOp::create(b, loc, s.splat(s.f32(1.0f)), l), inverses);
}

void mlir::cq4p::emitPrefillNormalize(OpBuilder &b, Location loc, int64_t dim,
                                      Value outTile, Value inverses, Value out, Value i0,
                                      Value colBase, Value present) {
  Lanes s(b, loc);
  int64_t width = cast<MemRefType>(out.getType()).getDimSize(1);
  Value outBase = sme::alignedBase(b, loc, out);
  auto loop = scf::ForOp::create(b, loc, s.index(0), present, s.index(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value r = loop.getInductionVar();
  Value inverse = s.splat(LLVM::LoadOp::create(
      b, loc, b.getF32Type(),
      s.at(inverses, arith::MulIOp::create(b, loc, r, s.index(4))), 4));
  Value source = s.at(outTile, arith::MulIOp::create(b, loc, r, s.index(dim * 4)));
  Value first = arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(b, loc, arith::AddIOp::create(b, loc, i0, r), s.index(width)),
      colBase);
  Value target = s.at(outBase, arith::MulIOp::create(b, loc, first, s.index(4)));
  for (int64_t d = 0; d < dim; d += 16) {
    Value offset = s.index(d * 4);
    s.store(arith::MulFOp::create(b, loc, s.load(s.at(source, offset)), inverse),
            s.at(target, offset));
  }
}
