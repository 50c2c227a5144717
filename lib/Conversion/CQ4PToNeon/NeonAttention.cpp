//===- NeonAttention.cpp - cq4p.attention in 128-bit NEON steps -----------===//
//
// cq4p.attention on AArch64 NEON (and on SME2 wherever its streaming leaves
// do not take it: an fp16 cache, or a one-row call whose GQA group does not
// divide 16), per query row and GQA group, in 4-lane fp32 vectors (one q
// register each) sized for the 32 NEON registers. The 16-lane vector code
// (ModelKernels.cpp, the host's) holds a head's query, its 16 accumulators
// and a tile's score fold tree at once, which do not fit (its NEON
// disassembly held 3,131 stack loads and stores). Here each pass keeps only
// one part live.
//
// Per query row r (position p, keys [first, p] with first the sliding
// window's start) and KV head, the group's G query heads walk the keys in
// blocks of up to 256 with an online softmax between blocks:
//
//   first   the group's query rows times scale log2(e) into a stack copy
//           (G x D): every score below is in base 2 (scale > 0, so maxes
//           commute with the scaling)
//   Q K^T   per pair of heads (or one head if G is odd), four keys at a time:
//           per 16 dims, the two heads' query slices (8 registers) and each
//           key's slice (4 registers, loaded once for both heads) into 8
//           accumulators acc[h][k] += q[h] * key[k], lane-wise FMLAs; then
//           per head 3 FADDPs fold the 4 accumulators into the 4 keys'
//           scores (lane k = key k), stored to a stack buffer by quad, then
//           head (S[j / 4][h][j % 4]: a quad's weights of 4 heads side by
//           side for P V), and max'ed into a running 4-lane max
//   softmax per head: m' = max(m, the block's max), c = 2^(m - m'),
//           S[j][h] = 2^(S[j][h] - m') in place, 4 keys of up to 4 heads
//           per step (one FADD of -m' and an 8-instruction 2^x / C each,
//           C the polynomial's leading coefficient, which the weights and
//           their sum share; the heads share the loop), l = l c + sum
//   P V     per up to 4 heads and 16 dims: the heads' 16 accumulators
//           (a stack buffer of G x D, times c), per key its value slice (4
//           registers, loaded once for the heads) and per head one FMLA by
//           element (the key's weight, a lane of S[h][j..j+3]) per register
//   out[h] = acc[h] / l[h]
//
// So per (query head, key) and 64 dims: 16 FMLAs for Q K^T and 16 for P V,
// key and value loads shared by 2 and up to 4 heads, the query reloaded
// once per 4 keys, 3/4 of a FADDP, and about 4.5 instructions of softmax
// (bench/attention-results.md has the counts).
// With an fp16 cache each loaded slice is widened once (FCVTL, FCVTL2) for
// every head that uses it. With an fp32 one a whole quad loads each
// 16-value slice (of the query, a key or a value) by one LD1 {v0-v3}
// through a pointer that the load itself steps (post-index: 64 bytes along
// a row, a cache row from key to key in P V; a quad's last slice steps a key
// row's pointer to its row in the next quad and a query's back to its
// start), so no load costs an address add and none is single.
//
// Keys come in quads: a block's whole quads in a loop, then its last,
// partial quad (if any) with key rows past the end clamped to the block's
// first (in bounds), their scores -inf and their weights 0. 2^x is taken
// for x <= 0 (clamped below at -125.5, 2^-125.5 = exp(-87) = 1.6e-38: a
// masked key adds nothing the sums can see).
//
// The sums run in another order than the 16-lane code's (4-lane partials
// folded pairwise), the scores are of a rounded scaled query, and
// 2^(s - m) is one rounding and another polynomial: the results are within the model tolerance of the host's, not
// bit-identical. NEON and SME2 run this same code (the same Armv8.2-A
// instructions), so their logits stay equal bit for bit where both use it.
//
//===----------------------------------------------------------------------===//

#include "NeonAttention.h"
#include "KernelLowering/LoweringHelpers.h"

#include "cq4p/Codegen/EmitBuilder.h"

#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <utility>
#include <limits>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

// Keys per softmax block: as many as a 16 KB stack buffer of the group's
// scores holds (1,024 for a group of 4), at least 256. Each block costs the
// group's corrections and P V's accumulators loaded, rescaled and stored
// again (about 400 instructions for 4 heads of 64), so at a 1k context
// 256-key blocks cost about 10 instructions per cached key and layer more
// than 1,024-key ones (bench/attention-results.md).
constexpr int64_t kScoreBufferFloats = 4096;
constexpr int64_t kMinBlockKeys = 256;
int64_t blockKeysFor(int64_t group) {
  return std::max(kMinBlockKeys, kScoreBufferFloats / group / 4 * 4);
}
constexpr int64_t kSlice = 16;      // dims per step: 4 fp32 registers
constexpr float kLowest = -std::numeric_limits<float>::infinity();

/// NEON's emitter: EmitBuilder over 4-lane fp32 vectors, with the
/// attention's own loads, folds and exponentials.
struct Neon : EmitBuilder {
  Neon(OpBuilder &b, Location loc)
      : EmitBuilder(b, loc, VectorType::get({4}, b.getF32Type())) {}

  VectorType vec() { return floats; }

  /// Lane k of v in every lane (FMLA by element when it feeds an FMA).
  Value lane(Value v, int64_t k) {
    return vector::ShuffleOp::create(b, loc, v, v, ArrayRef<int64_t>{k, k, k, k});
  }
  /// [x0 + x1, x2 + x3, y0 + y1, y2 + y3]: one FADDP.
  Value pairwise(Value x, Value y) {
    return addF(vector::ShuffleOp::create(b, loc, x, y, ArrayRef<int64_t>{0, 2, 4, 6}),
               vector::ShuffleOp::create(b, loc, x, y, ArrayRef<int64_t>{1, 3, 5, 7}));
  }
  Value sum(Value v) {
    Value halves = pairwise(v, v);
    return vector::ExtractOp::create(b, loc, pairwise(halves, halves),
                                     ArrayRef<int64_t>{0});
  }
  Value maxOf(Value v) {
    return vector::ReductionOp::create(b, loc, vector::CombiningKind::MAXIMUMF, v);
  }

  Value load(Value memref, ValueRange indices) {
    return vector::LoadOp::create(b, loc, vec(), memref, indices);
  }
  void store(Value v, Value memref, ValueRange indices) {
    vector::StoreOp::create(b, loc, v, memref, indices);
  }
  /// The address of cache[row][column], as an LLVM pointer that LLVM
  /// cannot see through (cq4p_intr.opaque). A quad's four key or value rows
  /// lie a cache row apart (kvHeads x D elements, beyond LDP's 1 KiB reach
  /// at 8 KV heads of 64 fp32): left visible, the four rows' loads share one
  /// base and rows 1-3 take single-register LDRs at large offsets; each row
  /// its own base loads two registers per LDP.
  Value rowPointer(Value cache, Value row, Value column) {
    auto type = cast<MemRefType>(cache.getType());
    int64_t bytes = type.getElementType().getIntOrFloatBitWidth() / 8;
    auto metadata = memref::ExtractStridedMetadataOp::create(b, loc, cache);
    Value element = addI(metadata.getOffset(),
                         addI(mulI(row, metadata.getStrides()[0]), column));
    Value address = addI(memref::ExtractAlignedPointerAsIndexOp::create(b, loc, cache),
                         mulI(element, index(bytes)));
    Value pointer = LLVM::IntToPtrOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext()),
        Value(arith::IndexCastUIOp::create(b, loc, b.getI64Type(), address)));
    return cq4p_intr::OpaqueOp::create(b, loc, pointer.getType(), pointer);
  }
  /// The byte count `bytes` as an i64 LLVM cannot fold into its uses
  /// (cq4p_intr.opaque), so a load's pointer step stays its post-index.
  Value step(Value bytes) {
    Value count = bytes.getType().isIndex()
                      ? Value(arith::IndexCastOp::create(b, loc, b.getI64Type(), bytes))
                      : bytes;
    return cq4p_intr::OpaqueOp::create(b, loc, count.getType(), count);
  }
  Value step(int64_t bytes) {
    return step(Value(LLVM::ConstantOp::create(b, loc, b.getI64Type(),
                                               b.getI64IntegerAttr(bytes))));
  }
  /// `pointer` + `bytes` (an i64).
  Value opaque(Value v) { return cq4p_intr::OpaqueOp::create(b, loc, v.getType(), v); }
  Value advance(Value pointer, Value bytes) {
    return LLVM::GEPOp::create(b, loc, pointer.getType(), b.getI8Type(), pointer,
                               ValueRange{bytes});
  }
  /// The 16 fp32 values at `pointer` in 4 registers: one LD1 {v0-v3}, which
  /// takes no offset but a post-index (the caller's advance of `pointer`).
  SmallVector<Value> loadSixteen(Value pointer) {
    auto i8x16 = VectorType::get({16}, b.getI8Type());
    auto structType = LLVM::LLVMStructType::getLiteral(b.getContext(),
                                                       SmallVector<Type>(4, i8x16));
    Value loaded = cq4p_intr::NeonLd1x4Op::create(b, loc, structType, pointer);
    SmallVector<Value> slice;
    for (int64_t i = 0; i < 4; ++i)
      slice.push_back(vector::BitCastOp::create(
          b, loc, vec(), LLVM::ExtractValueOp::create(b, loc, loaded, i)));
    return slice;
  }
  /// The vector of `type` at `pointer` + `elements` (of the cache's type).
  Value loadAt(VectorType type, Value pointer, Value elements) {
    Value at = LLVM::GEPOp::create(
        b, loc, pointer.getType(), type.getElementType(), pointer,
        ArrayRef<LLVM::GEPArg>{
            Value(arith::IndexCastOp::create(b, loc, b.getI64Type(), elements))});
    return LLVM::LoadOp::create(b, loc, type, at, /*alignment=*/4);
  }
  /// 16 values of a cache row from `column` as 4 fp32 vectors (an fp16
  /// row: two 8-lane loads, each widened by FCVTL and FCVTL2): `row` a
  /// rowPointer, or with `cache` a row index.
  SmallVector<Value> loadSlice(Type element, Value row, Value column,
                               Value cache = {}) {
    auto loadVector = [&](VectorType type, Value at) -> Value {
      if (cache)
        return vector::LoadOp::create(b, loc, type, cache, ValueRange{row, at});
      return loadAt(type, row, at);
    };
    SmallVector<Value> slice;
    if (element.isF32()) {
      for (int64_t i = 0; i < kSlice; i += 4)
        slice.push_back(loadVector(vec(), addI(column, index(i))));
      return slice;
    }
    auto halves = VectorType::get({8}, element);
    for (int64_t i = 0; i < kSlice; i += 8) {
      Value eight = loadVector(halves, addI(column, index(i)));
      for (int64_t part = 0; part < 8; part += 4) {
        Value four = vector::ExtractStridedSliceOp::create(
            b, loc, eight, ArrayRef<int64_t>{part}, ArrayRef<int64_t>{4},
            ArrayRef<int64_t>{1});
        slice.push_back(arith::ExtFOp::create(b, loc, vec(), four));
      }
    }
    return slice;
  }

  /// x <= 0 clamped at -125.5 (2^-125.5 = exp(-87)) and split as k + r,
  /// |r| <= 1/2: t = x + 1.5 * 2^23, whose rounding leaves k in its low
  /// mantissa bits (timesPowerOfTwo's operand), and r = x - (t - 1.5 * 2^23),
  /// exact. Both exponentials below start so.
  std::pair<Value, Value> splitExponent(Value x) {
    const float magic = 12582912.0f; // 1.5 * 2^23
    x = maxF(x, splatF32(-125.5f));
    Value t = addF(x, splatF32(magic));
    Value r = subF(x, subF(t, splatF32(magic)));
    return {t, r};
  }

  /// 2^x lane by lane for x <= 0: expNonPositive (Codegen/EmitBuilder.h) in
  /// base 2, where x = k + r needs no Cody and Waite split (k + magic's
  /// rounding leaves x - k exact) and the polynomial's coefficients are
  /// expNonPositive's times (ln 2)^i (2^r = e^(r ln 2), the same fit:
  /// 1.8e-7 relative in fp32 over [-125.5, 0]). x is clamped at -125.5
  /// (2^-125.5 = exp(-87)). 10 instructions after the argument.
  Value exp2NonPositive(Value x) {
    auto [t, r] = splitExponent(x);
    return timesPowerOfTwo(b, loc, exp2Fraction(r), t);
  }

  /// 2^x / C lane by lane for x <= 0, C = 0.00133088103 (the leading
  /// coefficient of exp2NonPositive's polynomial), for the softmax's
  /// weights: a weight and the sum it joins carry the same 1 / C, so P V's
  /// quotient does not see it (the corrections 2^(m - m') that rescale
  /// earlier blocks are exp2NonPositive's, without it). The polynomial is
  /// taken as the product of its factors with the leading coefficient left
  /// out, (r^2 + a1 r + b1)(r^2 + a2 r + b2)(r - rho): r^2 once, each
  /// quadratic an FADD and an FMLA whose accumulator is that FADD's fresh
  /// result, the linear factor an FADD, two FMULs. 8 instructions where
  /// Horner's 5 FMLAs need 5 copies of a constant into FMLA's destructive
  /// accumulator besides (10). The factors are the roots of
  /// exp2NonPositive's polynomial, their fp32 roundings searched by ulps
  /// for the least spread of p(r) / 2^r over |r| <= 1/2: 3.2e-7 relative
  /// in fp32 (Horner's: 1.8e-7).
  Value exp2TimesLeadingInverse(Value x) {
    auto [t, r] = splitExponent(x);
    Value r2 = mulF(r, r);
    Value q1 = fma(r, splatF32(-0.688519001f), addF(r2, splatF32(20.3728600f)));
    Value q2 = fma(r, splatF32(4.78848839f), addF(r2, splatF32(11.6453857f)));
    Value p = mulF(mulF(q1, q2), addF(r, splatF32(3.16705132f)));
    return timesPowerOfTwo(b, loc, p, t);
  }

  using Body = function_ref<SmallVector<Value>(Neon &, Value, ValueRange)>;
  /// for (i = lb; i < ub; i += step) state = body(i, state)
  SmallVector<Value> loop(Value lb, Value ub, int64_t step, ValueRange inits, Body body) {
    return forLoopAs<Neon>(lb, ub, step, inits, body);
  }
  /// cond ? then() : state
  SmallVector<Value> when(Value cond, ValueRange state,
                          function_ref<SmallVector<Value>(Neon &)> then) {
    auto ifOp = scf::IfOp::create(
        b, loc, cond,
        [&](OpBuilder &nb, Location nl) {
          Neon n{nb, nl};
          scf::YieldOp::create(nb, nl, then(n));
        },
        [&](OpBuilder &nb, Location nl) { scf::YieldOp::create(nb, nl, state); });
    return SmallVector<Value>(ifOp.getResults());
  }
};

/// The heads of one call: q, the cache, the output and the stack buffers.
struct Operands {
  Value q, keys, values, out, scores, accums;
  /// The group's query rows times scale log2(e) (G x D): scores in base 2.
  Value queries;
  int64_t d;
  float scale;
  int64_t blockKeys; // blockKeysFor(group)
};

/// Query heads [h0, h0 + count) of KV head `kv` (count: the group, or 1)
/// over keys [first, end) of query row r, in named steps: the queries
/// scaled, the pointers set up, then per block of keys Q K^T (scoreBlock),
/// the softmax (softmaxBlock) and P V (accumulateValues), and the outputs.
class Heads {
public:
  Heads(const Operands &x, Value r, Value first, Value end, Value kv, Value h0,
        int64_t count)
      : x(x), r(r), first(first), end(end), kv(kv), h0(h0), count(count), d(x.d),
        element(cast<MemRefType>(x.keys.getType()).getElementType()),
        // An fp32 cache's whole quads load each key or value slice with one
        // LD1 {v0-v3} through pointers that step by post-index: the query
        // rows and each key row by 64 bytes per slice, a value row by a
        // cache row per key.
        chained(element.isF32()),
        // Heads per softmax and P V step, and per Q K^T step.
        set(count % 4 == 0 ? 4 : count % 2 == 0 ? 2 : 1), pair(count % 2 == 0 ? 2 : 1) {}

  void emit(Neon &e) {
    scaleQueries(e);
    setUpPointers(e);
    e.loop(e.index(0), e.index(count * d), 4, {}, [&](Neon &n, Value i, ValueRange) {
      n.store(zero(n), x.accums, {i});
      return SmallVector<Value>{};
    });
    SmallVector<Value> init;
    for (int64_t g = 0; g < count; ++g)
      init.append({e.f32(kLowest), e.f32(0.0f)});
    SmallVector<Value> state =
        e.loop(first, end, x.blockKeys, init, [&](Neon &n, Value b0, ValueRange st) {
          Block block = beginBlock(n, b0);
          SmallVector<Value> blockMax = scoreBlock(n, block);
          SmallVector<Value> corrections;
          SmallVector<Value> next = softmaxBlock(n, block, st, blockMax, corrections);
          accumulateValues(n, block, corrections);
          return next;
        });
    storeOutputs(e, state);
  }

private:
  /// A block of keys [b0, b0 + keysIn): `whole` of them in whole quads,
  /// then a partial quad of `tail` (when hasTail); `padded` rounds keysIn
  /// up to quads.
  struct Block {
    Value b0, keysIn, whole, tail, hasTail, padded;
  };

  static Value zero(Neon &n) { return n.splatF32(0.0f); }

  /// The queries times scale log2(e), once per row and group: every score
  /// is then in base 2 and its exponential's argument one subtraction.
  void scaleQueries(Neon &e) {
    kvBase = e.mulI(kv, e.index(d));
    for (int64_t g = 0; g < count; ++g)
      qBase.push_back(e.mulI(e.addI(h0, e.index(g)), e.index(d)));
    Value toBase2 = e.splatF32(x.scale * 1.44269504088896341f);
    for (int64_t g = 0; g < count; ++g)
      e.loop(e.index(0), e.index(d), 4, {}, [&](Neon &n, Value c, ValueRange) {
        n.store(n.mulF(n.load(x.q, {r, n.addI(qBase[g], c)}), toBase2), x.queries,
                {n.index(g), c});
        return SmallVector<Value>{};
      });
  }

  /// The pointer steps of the chained path, and the scaled queries' row
  /// pointers.
  void setUpPointers(Neon &e) {
    if (chained) {
      auto rowBytes = [&](Value cache) {
        auto metadata = memref::ExtractStridedMetadataOp::create(e.b, e.loc, cache);
        return e.mulI(metadata.getStrides()[0], e.index(4));
      };
      sliceBytes = e.step(4 * kSlice);
      keyRowBytes = e.step(rowBytes(x.keys));
      // A quad's last slice steps each key row pointer to its row in the
      // next quad and each query pointer back to the head's start: no adds.
      keyWrap = e.step(
          e.addI(e.mulI(rowBytes(x.keys), e.index(4)), e.index(-4 * (d - kSlice))));
      queryWrap = e.step(-4 * (d - kSlice));
      valueRowBytes = e.step(rowBytes(x.values));
    }
    // The scaled queries through pointers on every path: with constant
    // indices LLVM would promote the copy to 4 x D / 4 live registers.
    for (int64_t g = 0; g < count; ++g)
      queryRows.push_back(e.rowPointer(x.queries, e.index(g), e.index(0)));
  }

  Block beginBlock(Neon &n, Value b0) {
    Block block;
    block.b0 = b0;
    block.keysIn = arith::MinSIOp::create(
        n.b, n.loc, arith::SubIOp::create(n.b, n.loc, end, b0), n.index(x.blockKeys));
    block.whole = arith::AndIOp::create(n.b, n.loc, block.keysIn, n.index(-4));
    block.tail = arith::SubIOp::create(n.b, n.loc, block.keysIn, block.whole);
    block.hasTail = arith::CmpIOp::create(n.b, n.loc, arith::CmpIPredicate::ne, block.tail,
                                          n.index(0));
    block.padded = arith::AndIOp::create(n.b, n.loc, n.addI(block.keysIn, n.index(3)),
                                         n.index(-4));
    return block;
  }

  /// Lanes of the partial quad past the block's end.
  Value inTail(Neon &m, const Block &block) {
    SmallVector<int32_t> numbers = {0, 1, 2, 3};
    auto ivec = VectorType::get({4}, m.b.getI32Type());
    Value laneNumbers = arith::ConstantOp::create(
        m.b, m.loc, DenseElementsAttr::get(ivec, ArrayRef<int32_t>(numbers)));
    Value tailKeys = arith::IndexCastOp::create(m.b, m.loc, m.b.getI32Type(), block.tail);
    return m.lessThanI(laneNumbers, vector::BroadcastOp::create(m.b, m.loc, ivec, tailKeys));
  }
  /// Key j + k of the block (a clamped quad's rows past the end: its first).
  Value keyRow(Neon &m, const Block &block, Value j, int64_t k, bool clamped) {
    Value at = m.addI(j, m.index(k));
    if (clamped)
      at = m.select(m.lessThanI(at, block.keysIn), at, j);
    return m.addI(block.b0, at);
  }
  /// Scores by quad, then head: S[j / 4][g][j % 4], so that the softmax
  /// and P V find the heads' 4 scores of a quad side by side (LDPs, one
  /// pointer step).
  Value scoreAt(Neon &m, int64_t g, Value j) {
    return m.addI(m.mulI(j, m.index(count)), m.index(4 * g));
  }

  /// acc[h][k] += q[h] * key[k] over 16 dims from c, the heads g0 + h of a
  /// pair and the quad's key rows `rows` (the first slice starts the sums
  /// with a product: no zeroed registers).
  SmallVector<Value> scoreSlice(Neon &s, int64_t g0, ArrayRef<Value> rows, Value c,
                                ValueRange carried) {
    SmallVector<Value> acc(carried);
    SmallVector<SmallVector<Value>> query(pair);
    for (int64_t h = 0; h < pair; ++h)
      for (int64_t i = 0; i < kSlice; i += 4)
        query[h].push_back(s.loadAt(s.vec(), queryRows[g0 + h], s.addI(c, s.index(i))));
    for (int64_t k = 0; k < 4; ++k) {
      SmallVector<Value> key = s.loadSlice(element, rows[k], c);
      for (int64_t h = 0; h < pair; ++h)
        for (int64_t i = 0; i < 4; ++i) {
          Value &sum = acc[4 * h + k];
          sum = sum ? s.fma(query[h][i], key[i], sum) : s.mulF(query[h][i], key[i]);
        }
    }
    return acc;
  }

  /// The same from pointers: the accumulators, then the 4 key rows' and
  /// the heads' query pointers, each stepped past its slice (the last
  /// slice: to the next quad).
  SmallVector<Value> chainedScoreSlice(Neon &s, ValueRange carried, bool last) {
    SmallVector<Value> acc(carried.take_front(4 * pair));
    SmallVector<Value> at(carried.drop_front(4 * pair));
    SmallVector<SmallVector<Value>> query;
    for (int64_t h = 0; h < pair; ++h) {
      query.push_back(s.loadSixteen(at[4 + h]));
      at[4 + h] = s.advance(at[4 + h], last ? queryWrap : sliceBytes);
    }
    for (int64_t k = 0; k < 4; ++k) {
      SmallVector<Value> key = s.loadSixteen(at[k]);
      at[k] = s.advance(at[k], last ? keyWrap : sliceBytes);
      for (int64_t h = 0; h < pair; ++h)
        for (int64_t i = 0; i < 4; ++i) {
          Value &sum = acc[4 * h + k];
          sum = sum ? s.fma(query[h][i], key[i], sum) : s.mulF(query[h][i], key[i]);
        }
    }
    acc.append(at);
    return acc;
  }

  /// One quad of keys from j for heads g0 + h of a pair: their scores
  /// stored and max'ed into `maxes`. `pointers`: on the chained path the
  /// quad's 4 key rows and the heads' queries (returned after the maxes,
  /// stepped to the next quad).
  SmallVector<Value> scoreQuad(Neon &m, const Block &block, int64_t g0, Value j,
                               bool clamped, ValueRange maxes, ValueRange pointers) {
    SmallVector<Value> rows;
    if (pointers.empty())
      for (int64_t k = 0; k < 4; ++k)
        rows.push_back(m.rowPointer(x.keys, keyRow(m, block, j, k, clamped), kvBase));
    SmallVector<Value> accs, stepped;
    if (!pointers.empty()) {
      SmallVector<Value> state(4 * pair);
      state.append(pointers.begin(), pointers.end());
      state = chainedScoreSlice(m, state, d == kSlice);
      if (d > 2 * kSlice)
        state = m.loop(m.index(kSlice), m.index(d - kSlice), kSlice, state,
                       [&](Neon &s, Value, ValueRange carried) {
                         SmallVector<Value> next = chainedScoreSlice(s, carried, false);
                         for (int64_t i = 4 * pair; i < static_cast<int64_t>(next.size()); ++i)
                           next[i] = s.opaque(next[i]);
                         return next;
                       });
      if (d > kSlice)
        state = chainedScoreSlice(m, state, true);
      accs.assign(state.begin(), state.begin() + 4 * pair);
      for (int64_t i = 4 * pair; i < static_cast<int64_t>(state.size()); ++i)
        stepped.push_back(m.opaque(state[i]));
    } else {
      accs = scoreSlice(m, g0, rows, m.index(0), SmallVector<Value>(4 * pair));
      accs = m.loop(m.index(kSlice), m.index(d), kSlice, accs,
                    [&](Neon &s, Value c, ValueRange carried) {
                      return scoreSlice(s, g0, rows, c, carried);
                    });
    }
    SmallVector<Value> next;
    for (int64_t h = 0; h < pair; ++h) {
      Value scores = m.pairwise(m.pairwise(accs[4 * h], accs[4 * h + 1]),
                                m.pairwise(accs[4 * h + 2], accs[4 * h + 3]));
      if (clamped)
        scores = m.select(inTail(m, block), scores, m.splatF32(kLowest));
      m.store(scores, x.scores, {scoreAt(m, g0 + h, j)});
      next.push_back(m.maxF(maxes[h], scores));
    }
    next.append(stepped);
    return next;
  }

  /// Q K^T over the block, a pair of heads (or one) at a time: the scores
  /// stored, each head's max returned.
  SmallVector<Value> scoreBlock(Neon &n, const Block &block) {
    SmallVector<Value> blockMax(count);
    for (int64_t g0 = 0; g0 < count; g0 += pair) {
      auto quad = [&](Neon &m, Value j, bool clamped, ValueRange maxes, ValueRange pointers) {
        return scoreQuad(m, block, g0, j, clamped, maxes, pointers);
      };
      SmallVector<Value> maxes(pair, n.splatF32(kLowest));
      if (chained) {
        auto step = [&](Neon &m, Value j, ValueRange st) {
          return quad(m, j, false, st.take_front(pair), st.drop_front(pair));
        };
        // Two quads per step (half the loop's own steps), then an odd one.
        Value pairs = arith::AndIOp::create(n.b, n.loc, block.keysIn, n.index(-8));
        SmallVector<Value> state(maxes);
        state.push_back(n.rowPointer(x.keys, block.b0, kvBase));
        for (int64_t k = 1; k < 4; ++k)
          state.push_back(n.advance(state.back(), keyRowBytes));
        for (int64_t h = 0; h < pair; ++h)
          state.push_back(queryRows[g0 + h]);
        state = n.loop(n.index(0), pairs, 8, state, [&](Neon &m, Value j, ValueRange st) {
          SmallVector<Value> first = step(m, j, st);
          return step(m, m.addI(j, m.index(4)), first);
        });
        Value odd =
            arith::CmpIOp::create(n.b, n.loc, arith::CmpIPredicate::ne, pairs, block.whole);
        state = n.when(odd, state, [&](Neon &m) { return step(m, pairs, state); });
        maxes.assign(state.begin(), state.begin() + pair);
      } else {
        maxes = n.loop(n.index(0), block.whole, 4, maxes, [&](Neon &m, Value j, ValueRange st) {
          return quad(m, j, false, st, ValueRange());
        });
      }
      maxes = n.when(block.hasTail, maxes, [&](Neon &m) {
        return quad(m, block.whole, true, maxes, ValueRange());
      });
      for (int64_t h = 0; h < pair; ++h)
        blockMax[g0 + h] = n.maxOf(maxes[h]);
    }
    return blockMax;
  }

  /// The softmax: weights in place of the scores, the running max and sum
  /// (the next state, from `st`) and each head's correction; up to 4 heads
  /// per step share the loop (and the polynomial's constants).
  SmallVector<Value> softmaxBlock(Neon &n, const Block &block, ValueRange st,
                                  ArrayRef<Value> blockMax, SmallVector<Value> &corrections) {
    SmallVector<Value> maxNews, shifts, sums;
    for (int64_t g = 0; g < count; ++g) {
      Value maxOld = st[2 * g];
      Value maxNew = n.maxF(maxOld, blockMax[g]);
      Value shift = n.splat(arith::NegFOp::create(n.b, n.loc, maxNew));
      corrections.push_back(vector::ExtractOp::create(
          n.b, n.loc, n.exp2NonPositive(n.addF(n.splat(maxOld), shift)),
          ArrayRef<int64_t>{0}));
      maxNews.push_back(maxNew);
      shifts.push_back(shift);
    }
    for (int64_t g0 = 0; g0 < count; g0 += set) {
      SmallVector<Value> partial(set, zero(n));
      partial = n.loop(n.index(0), block.padded, 4, partial,
                       [&](Neon &m, Value j, ValueRange acc) {
                         SmallVector<Value> next;
                         for (int64_t h = 0; h < set; ++h) {
                           Value at = scoreAt(m, g0 + h, j);
                           Value p = m.exp2TimesLeadingInverse(
                               m.addF(m.load(x.scores, {at}), shifts[g0 + h]));
                           m.store(p, x.scores, {at});
                           next.push_back(m.addF(acc[h], p));
                         }
                         return next;
                       });
      sums.append(partial);
    }
    SmallVector<Value> next;
    for (int64_t g = 0; g < count; ++g)
      next.append({maxNews[g], n.addF(n.mulF(st[2 * g + 1], corrections[g]), n.sum(sums[g]))});
    return next;
  }

  /// One quad of keys from j into the accumulators of heads g0 + h of a
  /// set, 16 dims from c. `carried`: the accumulators, then on the chained
  /// path key j's value row pointer.
  SmallVector<Value> valueQuad(Neon &m, const Block &block, int64_t g0, Value c, Value j,
                               bool clamped, ValueRange carried) {
    bool fromPointer = chained && !clamped;
    SmallVector<Value> sums(carried.take_front(4 * set));
    Value row = fromPointer ? carried.back() : Value();
    SmallVector<Value> weights;
    for (int64_t h = 0; h < set; ++h) {
      Value w = m.load(x.scores, {scoreAt(m, g0 + h, j)});
      weights.push_back(clamped ? m.select(inTail(m, block), w, zero(m)) : w);
    }
    for (int64_t k = 0; k < 4; ++k) {
      // By row index: the weights' lanes keep the loads apart, so separate
      // row pointers would pair none of them and cost adds.
      SmallVector<Value> value;
      if (fromPointer) {
        value = m.loadSixteen(row);
        row = m.advance(row, valueRowBytes);
      } else {
        value = m.loadSlice(element, keyRow(m, block, j, k, clamped), m.addI(kvBase, c),
                            x.values);
      }
      for (int64_t h = 0; h < set; ++h) {
        Value w = m.lane(weights[h], k);
        for (int64_t i = 0; i < 4; ++i)
          sums[4 * h + i] = m.fma(value[i], w, sums[4 * h + i]);
      }
    }
    if (fromPointer)
      sums.push_back(m.opaque(row));
    return sums;
  }

  /// P V over the block, up to 4 heads at a time, 16 dims at a time: the
  /// accumulators times the corrections plus the weighted value rows.
  void accumulateValues(Neon &n, const Block &block, ArrayRef<Value> corrections) {
    for (int64_t g0 = 0; g0 < count; g0 += set) {
      n.loop(n.index(0), n.index(d), kSlice, {}, [&](Neon &s, Value c, ValueRange) {
        auto accAt = [&](Neon &m, int64_t h, int64_t i) {
          return m.addI(m.index((g0 + h) * d + i), c);
        };
        SmallVector<Value> acc;
        for (int64_t h = 0; h < set; ++h) {
          Value correction = s.splat(corrections[g0 + h]);
          for (int64_t i = 0; i < kSlice; i += 4)
            acc.push_back(s.mulF(s.load(x.accums, {accAt(s, h, i)}), correction));
        }
        auto quad = [&](Neon &m, Value j, bool clamped, ValueRange carried) {
          return valueQuad(m, block, g0, c, j, clamped, carried);
        };
        if (chained) {
          // Two quads per step (half the loop's own steps), then an odd one.
          Value pairs = arith::AndIOp::create(s.b, s.loc, block.keysIn, s.index(-8));
          SmallVector<Value> state(acc);
          state.push_back(s.rowPointer(x.values, block.b0, s.addI(kvBase, c)));
          state = s.loop(s.index(0), pairs, 8, state, [&](Neon &m, Value j, ValueRange carried) {
            SmallVector<Value> first = quad(m, j, false, carried);
            return quad(m, m.addI(j, m.index(4)), false, first);
          });
          Value odd =
              arith::CmpIOp::create(s.b, s.loc, arith::CmpIPredicate::ne, pairs, block.whole);
          state = s.when(odd, state, [&](Neon &m) { return quad(m, pairs, false, state); });
          acc.assign(state.begin(), state.begin() + 4 * set);
        } else {
          acc = s.loop(s.index(0), block.whole, 4, acc,
                       [&](Neon &m, Value j, ValueRange carried) {
                         return quad(m, j, false, carried);
                       });
        }
        acc = s.when(block.hasTail, acc,
                     [&](Neon &m) { return quad(m, block.whole, true, acc); });
        for (int64_t h = 0; h < set; ++h)
          for (int64_t i = 0; i < 4; ++i)
            s.store(acc[4 * h + i], x.accums, {accAt(s, h, 4 * i)});
        return SmallVector<Value>{};
      });
    }
  }

  /// out[h] = acc[h] / l[h], l from the walk's final state.
  void storeOutputs(Neon &e, ArrayRef<Value> state) {
    for (int64_t g = 0; g < count; ++g) {
      Value inverse = e.splat(arith::DivFOp::create(e.b, e.loc, e.f32(1.0f), state[2 * g + 1]));
      e.loop(e.index(0), e.index(d), 4, {}, [&](Neon &n, Value c, ValueRange) {
        Value v = n.load(x.accums, {n.addI(n.index(g * d), c)});
        n.store(n.mulF(v, inverse), x.out, {r, n.addI(qBase[g], c)});
        return SmallVector<Value>{};
      });
    }
  }

  const Operands &x;
  Value r, first, end, kv, h0;
  int64_t count, d;
  Type element;
  bool chained;
  int64_t set, pair;
  Value kvBase;
  SmallVector<Value> qBase, queryRows;
  Value sliceBytes, keyRowBytes, valueRowBytes, keyWrap, queryWrap;
};

void emitHeads(Neon &e, const Operands &x, Value r, Value first, Value end, Value kv,
               Value h0, int64_t count) {
  Heads(x, r, first, end, kv, h0, count).emit(e);
}

} // namespace

bool mlir::cq4p::hasNeonAttention(AttentionOp op) {
  return op.getHeadDim() % kSlice == 0 && op.getScale().convertToFloat() > 0.0f;
}

void mlir::cq4p::emitNeonAttention(OpBuilder &b, AttentionOp op) {
  Location loc = op.getLoc();
  int64_t d = op.getHeadDim(), window = op.getWindow();
  int64_t group = op.getNumHeads() / op.getNumKvHeads();
  auto f32 = b.getF32Type();
  Operands x{op.getQ(),
             op.getK(),
             op.getV(),
             op.getOut(),
             entryAlloca(b, op, MemRefType::get({group * blockKeysFor(group)}, f32)),
             entryAlloca(b, op, MemRefType::get({group * d}, f32)),
             entryAlloca(b, op, MemRefType::get({group, d}, f32)),
             d,
             op.getScale().convertToFloat(),
             blockKeysFor(group)};
  Neon e{b, loc};
  Value position = op.getPosition() ? op.getPosition() : e.index(0);
  Value rows = memref::DimOp::create(b, loc, x.q, 0);
  Value headBegin = op.getHeadBegin(), headEnd = op.getHeadEnd();
  e.loop(e.index(0), rows, 1, {}, [&](Neon &n, Value r, ValueRange) {
    Value first, end;
    std::tie(first, end) = n.keysUpTo(n.addI(position, r), window);
    if (group == 1) {
      n.loop(headBegin, headEnd, 1, {}, [&](Neon &m, Value h, ValueRange) {
        emitHeads(m, x, r, first, end, h, h, 1);
        return SmallVector<Value>{};
      });
      return SmallVector<Value>{};
    }
    // KV heads [headBegin / group, ceil(headEnd / group)); a group cut by
    // the head range takes its heads one at a time.
    Value groupSize = n.index(group);
    Value kvFirst = arith::DivUIOp::create(n.b, n.loc, headBegin, groupSize);
    Value kvEnd = arith::CeilDivUIOp::create(n.b, n.loc, headEnd, groupSize);
    n.loop(kvFirst, kvEnd, 1, {}, [&](Neon &m, Value kv, ValueRange) {
      Value groupFirst = m.mulI(kv, groupSize);
      Value from = arith::MaxSIOp::create(m.b, m.loc, headBegin, groupFirst);
      Value to = arith::MinSIOp::create(m.b, m.loc, headEnd, m.addI(groupFirst, groupSize));
      Value whole = arith::CmpIOp::create(m.b, m.loc, arith::CmpIPredicate::eq,
                                          arith::SubIOp::create(m.b, m.loc, to, from),
                                          groupSize);
      scf::IfOp::create(
          m.b, m.loc, whole,
          [&](OpBuilder &tb, Location tl) {
            Neon t{tb, tl};
            emitHeads(t, x, r, first, end, kv, from, group);
            scf::YieldOp::create(tb, tl);
          },
          [&](OpBuilder &fb, Location fl) {
            Neon f{fb, fl};
            f.loop(from, to, 1, {}, [&](Neon &o, Value h, ValueRange) {
              emitHeads(o, x, r, first, end, kv, h, 1);
              return SmallVector<Value>{};
            });
            scf::YieldOp::create(fb, fl);
          });
      return SmallVector<Value>{};
    });
    return SmallVector<Value>{};
  });
}
