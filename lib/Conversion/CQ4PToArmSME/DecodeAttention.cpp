//===- DecodeAttention.cpp - SME2 decode attention in streaming mode ------===//
//
// A decode step's cq4p.attention (one query row, an fp32 KV cache, head dims
// of whole 64s, a GQA group of G query heads with 16 % G == 0) as one
// streaming leaf, `<kernel>_sme_decode`, at a 512-bit vector length (16 fp32
// lanes, four 16x16 fp32 tiles).
//
// The G heads of a group share their keys, so the outer products take the
// group's heads together. A vector in the "(k, h) layout" has lane G k + h
// for head h of the group and key class k < K = 16 / G. Per KV head:
//
//   Qr[d][G k + h] = scale log2(e) q[g h, d]  once: the group's rows loaded
//                                             K times into ZA0.S, read back
//                                             by columns (LD1W, MOVA x4)
//   per block of up to 16 tiles of 16 keys (from the window's first key):
//     per tile (keys j0 .. j0 + 15; the whole tiles in a loop, the last
//     one, if partial, after it with its rows past the end masked):
//       per three 16-dim blocks: the 16 key rows into ZA0.S, ZA2.S and
//         ZA3.S (LD1W), their columns out (MOVA x4: Kt[d] = keys j0.. in
//         lanes), S += Kt[d] (x) Qr[d] (FMOPA into ZA1.S,
//         S[i][G k + h] = score(j0 + i, h) for every k)
//       P_r[G k + h] = S[K r + k][G k + h], r < G: per row one MOVA merged
//         into lanes G k .. G k + G - 1 (16 per tile); keys past the end
//         are -inf
//     the block's max per head: a lane-wise max of its P_r, then of the
//       lanes with the same h (rotations by G, 2G, ...); corr = 2^(m - m')
//     P_r = 2^(P_r - m') (0 for -inf), l += P_r lane-wise
//     per 64 dims: ZA <- 0; per key K r + k: ZA_t[G k + h][.] += P_r (x)
//       v[key, 16t..16t+15], t < 4, rows G k .. G k + G - 1 only (FMOPA with
//       a row predicate); acc = acc * corr + ZA (per row G k + h)
//   out[g h] = sum_k acc[G k + h] / sum_k l[G k + h]
//
// The outer products fill only G of a tile's 16 rows or columns, but each
// is 256 lanes: per cached key and KV head, one FMOPA per 16 dims for
// Q K^T and one per 16 dims for P V, and no transposes of the queries or
// the scores per key (bench/attention-results.md has the counts). Scores and their exponentials live in a stack buffer of one
// block (a decode step allocates nothing on the heap); the per-row sums of
// P V in ZA are folded into fp32 accumulators once per block, so the
// online rescale costs one multiply per accumulator and block, not per
// tile.
//
// The sums run in another order than the vector code's: like SME2's
// prefill attention, the results are within the model tolerance of NEON's
// (docs/FORMAT.md section 5), not bit-identical.
//
//===----------------------------------------------------------------------===//

#include "DecodeAttention.h"
#include "KernelLowering/LoweringHelpers.h"
#include "Addresses.h"

#include "cq4p/Codegen/EmitBuilder.h"

#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ArmSME/IR/ArmSME.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <limits>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kLanes = 16;        // fp32 lanes of a streaming vector
constexpr int64_t kTileKeys = 16;     // keys per tile: a tile's rows
constexpr int64_t kBlockTiles = 16;   // tiles per softmax block
constexpr int64_t kZaVectors = 64;    // ZA array vectors (four fp32 tiles)
constexpr int64_t kVectorBytes = 64;

/// SME2's decode leaf emitter: EmitBuilder over 16-lane fp32 vectors
/// (vector<[4]xf32> at vscale 4), with ZA tiles, masks and multi-vector
/// loads.
struct Streaming : sme::StreamingBuilder {
  Streaming(OpBuilder &b, Location loc) : StreamingBuilder(b, loc) {
    ptr = LLVM::LLVMPointerType::get(b.getContext());
    pred = VectorType::get({4}, b.getI1Type(), {true});
  }

  using StreamingBuilder::at;
  /// address + bytes (a constant).
  Value at(Value address, int64_t bytes) {
    if (bytes == 0)
      return address;
    return LLVM::GEPOp::create(b, loc, ptr, b.getI8Type(), address,
                               ArrayRef<LLVM::GEPArg>{int32_t(bytes)});
  }

  Value allTrue() {
    return arith::ConstantOp::create(b, loc, DenseElementsAttr::get(pred, true));
  }
  /// Lanes [from, to).
  Value lanes(int64_t from, int64_t to) {
    Value upTo = vector::CreateMaskOp::create(b, loc, pred, ValueRange{index(to)});
    if (from == 0)
      return upTo;
    Value below = vector::CreateMaskOp::create(b, loc, pred, ValueRange{index(from)});
    return arith::XOrIOp::create(b, loc, upTo, below);
  }
  /// The first `count` lanes (an index value).
  Value firstLanes(Value count) {
    return vector::CreateMaskOp::create(b, loc, pred, ValueRange{count});
  }

  Value isMinusInf(Value x, Value minusInf) {
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, x, minusInf);
  }

  /// ZA tiles named by the eight 64-bit tiles they cover.
  void zeroTile32(int64_t tile) {
    arm_sme::aarch64_sme_zero::create(b, loc, uint32_t((1u << tile) | (1u << (tile + 4))));
  }
  void zeroZa() { arm_sme::aarch64_sme_zero::create(b, loc, uint32_t(0xff)); }
  /// Row `slice` of za<tile>.s <- 16 words at address (LD1W), zeros where
  /// `predicate` is off.
  void loadRow(int64_t tile, int64_t slice, Value predicate, Value address) {
    arm_sme::aarch64_sme_ld1w_horiz::create(b, loc, predicate, address, uint32_t(tile),
                                            sliceIndex(slice));
  }
  /// Row `slice` of za<tile>.s, in the lanes of `predicate`; `merged`'s
  /// lanes elsewhere (MOVA).
  Value readRow(Value merged, Value predicate, int64_t tile, int64_t slice) {
    return arm_sme::aarch64_sme_read_horiz::create(b, loc, floats, merged, predicate,
                                                   uint32_t(tile), sliceIndex(slice));
  }
  /// Columns slice .. slice + 3 of za<tile>.s (multi-vector MOVA).
  SmallVector<Value> readColumns4(int64_t tile, int64_t slice) {
    Value columns4 = cq4p_intr::SmeReadVerVg4Op::create(b, loc, quad(words), uint32_t(tile),
                                                        sliceIndex(slice));
    SmallVector<Value> columns;
    for (int64_t i = 0; i < 4; ++i)
      columns.push_back(arith::BitcastOp::create(
          b, loc, floats, LLVM::ExtractValueOp::create(b, loc, columns4, i)));
    return columns;
  }
  /// za<tile>.s += lhs (x) rhs in the rows of `rows` (FMOPA).
  void outerProduct(int64_t tile, Value rows, Value columns, Value lhs, Value rhs) {
    arm_sme::aarch64_sme_mopa::create(b, loc, uint32_t(tile), rows, columns, lhs, rhs);
  }
  /// ZA array vector `vector` to address (STR).
  void storeZaVector(int64_t vector, Value address) {
    arm_sme::aarch64_sme_str::create(b, loc, i32(vector), address, i32(0));
  }

  /// if (condition) then() else otherwise(), both yielding `types`.
  scf::IfOp branch(Value condition, TypeRange types,
                   function_ref<SmallVector<Value>()> then,
                   function_ref<SmallVector<Value>()> otherwise) {
    auto ifOp = scf::IfOp::create(b, loc, types, condition, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    for (auto [block, body] : {std::pair{ifOp.thenBlock(), then},
                               std::pair{ifOp.elseBlock(), otherwise}}) {
      // Without results the builder has added the (empty) yield already.
      if (!block->empty()) {
        b.setInsertionPoint(block->getTerminator());
        body();
        continue;
      }
      b.setInsertionPointToEnd(block);
      scf::YieldOp::create(b, loc, body());
    }
    return ifOp;
  }

  /// ZA slice `slice` as an instruction's index register (W12-W15) plus
  /// its immediate offset: one of four opaque bases 0, 4, 8, 12 (made by
  /// makeSliceBases) plus slice % 4, which instruction selection takes as
  /// the register and the offset. With plain constants LLVM moved each
  /// slice number into an index register before every ZA access (about 80
  /// MOVs per tile of keys).
  Value sliceIndex(int64_t slice) {
    assert(sliceBases[0] && "makeSliceBases runs first, in the entry block");
    Value base = sliceBases[slice / 4];
    if (slice % 4 == 0)
      return base;
    return arith::AddIOp::create(b, loc, base, i32(slice % 4));
  }
  /// The slice bases, made in the entry block.
  void makeSliceBases() {
    for (int64_t i = 0; i < 4; ++i)
      sliceBases[i] = cq4p_intr::OpaqueOp::create(b, loc, b.getI32Type(), i32(4 * i));
  }

  Type ptr;
  VectorType pred;
  Value sliceBases[4];
};

struct DecodeShape {
  int64_t heads, kvHeads, dim, window;
  float scale;
};

/// The leaf's body in named steps: per call its buffers and constants
/// (the constructor), per KV head the group's scaled queries
/// (loadQueries), then per block of tiles Q K^T (scoreTile), the softmax
/// and P V (valueTile) (block), and the heads' outputs (storeOutputs).
class DecodeLeaf {
public:
  /// `args` are the op's operands in its order.
  DecodeLeaf(OpBuilder &b, Location loc, const DecodeShape &shape, ValueRange args)
      : b(b), loc(loc), s(b, loc), headBegin(args[5]), headEnd(args[6]),
        group(shape.heads / shape.kvHeads), classes(kLanes / group), dim(shape.dim),
        kvWidth(shape.kvHeads * dim), blocks16(dim / 16), blocks64(dim / 64) {
    Value q = args[0], keys = args[1], values = args[2], out = args[3], position = args[4];
    auto buffer = [&](int64_t floats) {
      auto type = MemRefType::get({floats}, b.getF32Type());
      return s.base(memref::AllocaOp::create(b, loc, type, ValueRange{},
                                             b.getI64IntegerAttr(64)));
    };
    qrep = buffer(dim * kLanes);
    scores = buffer(kBlockTiles * group * kLanes);
    part = buffer(kZaVectors * kLanes);
    acc = buffer(blocks64 * kZaVectors * kLanes);
    rotation = buffer(2 * kLanes);
    sums = buffer(kLanes);
    qBase = s.base(q);
    keysBase = s.base(keys);
    valuesBase = s.base(values);
    outBase = s.base(out);

    s.makeCounter();
    s.makeSliceBases();
    all = s.allTrue();
    for (int64_t k = 0; k < classes; ++k)
      classLanes.push_back(s.lanes(group * k, group * (k + 1)));
    minusInf = s.splat(s.f32(lowest));
    zeros = s.splat(s.f32(0.0f));
    // The scores in base 2 (the queries times scale log2(e)): the softmax's
    // exponentials are 2^(x - m) (exp2Lanes).
    scaleV = s.splat(s.f32(float(double(shape.scale) * sme::kLog2E)));
    // The key offset within its tile of lane G k + h of P_r: K r + k.
    laneKeys = arith::DivUIOp::create(
        b, loc,
        arith::IndexCastOp::create(
            b, loc, s.words,
            vector::StepOp::create(b, loc, VectorType::get({4}, b.getIndexType(), {true}))),
        vector::BroadcastOp::create(b, loc, s.words, s.i32(group)));

    c0 = s.index(0);
    c16 = s.index(kTileKeys);
    std::tie(first, end) = s.keysUpTo(position, shape.window);
    keyCount = arith::SubIOp::create(b, loc, end, first);
    tiles = arith::CeilDivUIOp::create(b, loc, keyCount, c16);
    blocks = arith::CeilDivUIOp::create(b, loc, tiles, s.index(kBlockTiles));
    groupSize = s.index(group);
    kvFirst = arith::DivUIOp::create(b, loc, headBegin, groupSize);
    kvEnd = arith::CeilDivUIOp::create(b, loc, headEnd, groupSize);
  }

  void emit() {
    s.forLoop(kvFirst, kvEnd, 1, {}, [&](Value kv, ValueRange) -> SmallVector<Value> {
      KvHead head = loadQueries(kv);
      auto blockLoop = s.forLoop(c0, blocks, 1, {minusInf, zeros},
                                 [&](Value blk, ValueRange state) {
                                   return block(head, blk, state);
                                 });
      storeOutputs(head, blockLoop.getResult(1));
      return {};
    });
  }

private:
  /// A KV head's group: its cache columns and the end of the whole tiles.
  struct KvHead {
    Value kv, groupKeys, groupValues, wholeTiles;
  };

  /// Lane l of the result: op over the lanes l, l + G, l + 2G, ... (mod 16).
  Value foldClasses(Value v, function_ref<Value(Value, Value)> op) {
    for (int64_t step = group; step < kLanes; step *= 2) {
      s.store(v, rotation);
      s.store(v, s.at(rotation, kVectorBytes));
      v = op(v, s.load(s.at(rotation, 4 * step)));
    }
    return v;
  }

  Value tileStart(Value t) { return s.addI(first, s.mulI(t, c16)); }

  /// Qr: row G k + h of ZA0.S is head h's 16 dims, its columns Qr[d],
  /// scaled into `qrep`; the accumulators zeroed.
  KvHead loadQueries(Value kv) {
    KvHead head;
    head.kv = kv;
    Value kvColumnBytes = s.mulI(kv, s.index(dim * 4));
    Value groupRows = s.at(qBase, s.mulI(kv, s.index(group * dim * 4)));
    for (int64_t blk = 0; blk < blocks16; ++blk) {
      for (int64_t row = 0; row < kLanes; ++row)
        s.loadRow(0, row, all, s.at(groupRows, ((row % group) * dim + 16 * blk) * 4));
      for (int64_t quad = 0; quad < 4; ++quad) {
        SmallVector<Value> columns = s.readColumns4(0, 4 * quad);
        for (int64_t i = 0; i < 4; ++i)
          s.store(s.mulF(columns[i], scaleV),
                  s.at(qrep, (16 * blk + 4 * quad + i) * kVectorBytes));
      }
    }
    for (int64_t v = 0; v < blocks64 * kZaVectors; ++v)
      s.store(zeros, s.at(acc, v * kVectorBytes));
    head.groupKeys = s.at(keysBase, kvColumnBytes);
    head.groupValues = s.at(valuesBase, kvColumnBytes);
    head.wholeTiles = arith::DivUIOp::create(b, loc, keyCount, c16);
    return head;
  }

  /// Q K^T of the tile at key j0 with `valid` keys (16 when `partial` is
  /// false): its G vectors P_r into `scores` at `slot`; returns their
  /// lane-wise max with `runningMax`.
  Value scoreTile(const KvHead &head, Value j0, Value valid, bool partial, Value slot,
                  Value runningMax) {
    s.zeroTile32(1);
    SmallVector<Value> rowMasks(kTileKeys, all);
    if (partial)
      for (int64_t i = 0; i < kTileKeys; ++i) {
        Value present =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, s.index(i), valid);
        rowMasks[i] = s.firstLanes(s.select(present, c16, c0));
      }
    // Up to three 16-dim blocks at a time, in ZA0.S, ZA2.S and ZA3.S
    // (ZA1.S holds the scores). LD1W into ZA takes a register offset only:
    // each key row's address is the last one's plus a row, passed through
    // cq4p_intr.opaque so that LLVM keeps that one add per row rather than
    // 16 rows' constant offsets, which it spilled and reloaded for every
    // load; the pass's blocks are 0, 16 and 32 words from the row.
    Value rows = s.at(head.groupKeys, s.mulI(j0, s.index(kvWidth * 4)));
    const int64_t transposeTiles[] = {0, 2, 3};
    for (int64_t pass = 0; pass < blocks16; pass += 3) {
      int64_t count = std::min<int64_t>(3, blocks16 - pass);
      Value row = s.at(rows, 64 * pass);
      for (int64_t i = 0; i < kTileKeys; ++i) {
        if (i > 0)
          row = cq4p_intr::OpaqueOp::create(b, loc, row.getType(), s.at(row, kvWidth * 4));
        for (int64_t u = 0; u < count; ++u)
          s.loadRow(transposeTiles[u], i, rowMasks[i], s.at(row, 64 * u));
      }
      for (int64_t u = 0; u < count; ++u)
        for (int64_t quad = 0; quad < 4; ++quad) {
          SmallVector<Value> kt = s.readColumns4(transposeTiles[u], 4 * quad);
          SmallVector<Value> qr =
              s.loadQuad(s.at(qrep, (16 * (pass + u) + 4 * quad) * kVectorBytes));
          for (int64_t i = 0; i < 4; ++i)
            s.outerProduct(1, all, all, kt[i], qr[i]);
        }
    }
    Value slotBase = s.at(scores, s.mulI(slot, s.index(group * kVectorBytes)));
    for (int64_t r = 0; r < group; ++r) {
      Value p = zeros;
      for (int64_t k = 0; k < classes; ++k)
        p = s.readRow(p, classLanes[k], 1, r * classes + k);
      if (partial) {
        Value keyOffsets = arith::AddIOp::create(
            b, loc, laneKeys, vector::BroadcastOp::create(b, loc, s.words, s.i32(r * classes)));
        Value inside = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::slt, keyOffsets,
            vector::BroadcastOp::create(
                b, loc, s.words, arith::IndexCastOp::create(b, loc, b.getI32Type(), valid)));
        p = s.select(inside, p, minusInf);
      }
      s.store(p, s.at(slotBase, r * kVectorBytes));
      runningMax = s.maxF(runningMax, p);
    }
    return runningMax;
  }

  /// P V of the tile at key j0 for dims [64 c, 64 c + 64) into ZA.
  void valueTile(const KvHead &head, Value j0, Value valid, bool partial, Value slot,
                 int64_t c) {
    Value slotBase = s.at(scores, s.mulI(slot, s.index(group * kVectorBytes)));
    SmallVector<Value> p;
    for (int64_t r = 0; r < group; ++r)
      p.push_back(s.load(s.at(slotBase, r * kVectorBytes)));
    Value rows = s.at(head.groupValues, s.mulI(j0, s.index(kvWidth * 4)));
    Value last = arith::SubIOp::create(b, loc, valid, s.index(1));
    for (int64_t i = 0; i < kTileKeys; ++i) {
      // A key past the end has weight 0: its row is the tile's last.
      Value row = partial
                      ? s.at(rows, s.mulI(s.minSI(s.index(i), last), s.index(kvWidth * 4)))
                      : s.at(rows, i * kvWidth * 4);
      SmallVector<Value> v = s.loadQuad(s.at(row, 64 * c * 4));
      for (int64_t t = 0; t < 4; ++t)
        s.outerProduct(t, classLanes[i % classes], all, p[i / classes], v[t]);
    }
  }

  using TileBody = function_ref<SmallVector<Value>(Value, Value, bool, Value, ValueRange)>;
  /// The block's tiles [tb, te): the whole ones in a loop, then the last
  /// tile of the range if it is partial (two bodies, so that the whole
  /// tiles' code has no masks).
  SmallVector<Value> forEachTile(const KvHead &head, Value tb, Value te, ValueRange init,
                                 TileBody body) {
    Value wholeEnd = s.minSI(te, head.wholeTiles);
    auto whole = s.forLoop(tb, wholeEnd, 1, init,
                           [&](Value t, ValueRange state) -> SmallVector<Value> {
                             return body(tileStart(t), c16, false,
                                         arith::SubIOp::create(b, loc, t, tb), state);
                           });
    SmallVector<Value> results(whole.getResults());
    Value tail = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, wholeEnd, te);
    auto ifOp = s.branch(
        tail, ValueRange(results).getTypes(),
        [&] {
          Value j0 = tileStart(wholeEnd);
          Value valid = arith::SubIOp::create(b, loc, end, j0);
          return body(j0, valid, true, arith::SubIOp::create(b, loc, wholeEnd, tb), results);
        },
        [&] { return results; });
    return SmallVector<Value>(ifOp.getResults());
  }

  /// Block blk of kBlockTiles tiles from the state (running max, sum):
  /// its scores, the online softmax's step, its values into the
  /// accumulators.
  SmallVector<Value> block(const KvHead &head, Value blk, ValueRange state) {
    Value mOld = state[0], l = state[1];
    Value tb = s.mulI(blk, s.index(kBlockTiles));
    Value te = s.minSI(tiles, s.addI(tb, s.index(kBlockTiles)));
    Value blockMax = forEachTile(head, tb, te, {minusInf},
                                 [&](Value j0, Value valid, bool partial, Value slot,
                                     ValueRange st) -> SmallVector<Value> {
                                   return {scoreTile(head, j0, valid, partial, slot, st[0])};
                                 })[0];
    Value mNew =
        s.maxF(mOld, foldClasses(blockMax, [&](Value x, Value y) { return s.maxF(x, y); }));
    Value corr = s.select(s.isMinusInf(mOld, minusInf), zeros,
                          s.exp2Lanes(s.subF(mOld, mNew)));
    Value vectors = s.mulI(arith::SubIOp::create(b, loc, te, tb), groupSize);
    Value lNew = s.forLoop(c0, vectors, 1, {s.mulF(l, corr)},
                           [&](Value i, ValueRange st) -> SmallVector<Value> {
                             Value address = s.at(scores, s.mulI(i, s.index(kVectorBytes)));
                             Value x = s.load(address);
                             Value p = s.select(s.isMinusInf(x, minusInf), zeros,
                                                s.exp2Lanes(s.subF(x, mNew)));
                             s.store(p, address);
                             return {s.addF(st[0], p)};
                           })
                     .getResult(0);
    SmallVector<Value> rowCorr;
    for (int64_t r = 0; r < kLanes; ++r)
      rowCorr.push_back(s.splat(LLVM::ExtractElementOp::create(b, loc, corr, s.i32(r))));
    for (int64_t c = 0; c < blocks64; ++c) {
      s.zeroZa();
      forEachTile(head, tb, te, {},
                  [&](Value j0, Value valid, bool partial, Value slot,
                      ValueRange) -> SmallVector<Value> {
                    valueTile(head, j0, valid, partial, slot, c);
                    return {};
                  });
      // ZA array vector 4r + t: row r of tile t.
      for (int64_t v = 0; v < kZaVectors; ++v)
        s.storeZaVector(v, s.at(part, v * kVectorBytes));
      for (int64_t v = 0; v < kZaVectors; ++v) {
        Value address = s.at(acc, (c * kZaVectors + v) * kVectorBytes);
        s.store(math::FmaOp::create(b, loc, s.load(address), rowCorr[v / 4],
                                    s.load(s.at(part, v * kVectorBytes))),
                address);
      }
    }
    return {mNew, lNew};
  }

  /// Head h's sums are lanes h, h + G, ... of l and rows h, h + G, ... of
  /// the accumulators: out[h] = acc[h] / l[h] for the heads in range.
  void storeOutputs(const KvHead &kvHead, Value l) {
    s.store(l, sums);
    for (int64_t h = 0; h < group; ++h) {
      Value head = s.addI(s.mulI(kvHead.kv, groupSize), s.index(h));
      Value inRange = arith::AndIOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, head, headBegin),
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, head, headEnd));
      auto ifOp = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
      Value total;
      for (int64_t k = 0; k < classes; ++k) {
        Value lane = LLVM::LoadOp::create(b, loc, b.getF32Type(),
                                          s.at(sums, (group * k + h) * 4), 4);
        total = total ? Value(arith::AddFOp::create(b, loc, total, lane)) : lane;
      }
      Value inverse = s.splat(arith::DivFOp::create(b, loc, s.f32(1.0f), total));
      Value headOut = s.at(outBase, s.mulI(head, s.index(dim * 4)));
      for (int64_t c = 0; c < blocks64; ++c)
        for (int64_t t = 0; t < 4; ++t) {
          Value sum;
          for (int64_t k = 0; k < classes; ++k) {
            Value x =
                s.load(s.at(acc, (c * kZaVectors + 4 * (group * k + h) + t) * kVectorBytes));
            sum = sum ? s.addF(sum, x) : x;
          }
          s.store(s.mulF(sum, inverse), s.at(headOut, (64 * c + 16 * t) * 4));
        }
    }
  }

  static constexpr float lowest = -std::numeric_limits<float>::infinity();

  OpBuilder &b;
  Location loc;
  Streaming s;
  Value headBegin, headEnd;
  const int64_t group, classes, dim, kvWidth, blocks16, blocks64;
  // Per call.
  Value qrep, scores, part, acc, rotation, sums;
  Value qBase, keysBase, valuesBase, outBase;
  Value all, minusInf, zeros, scaleV, laneKeys;
  SmallVector<Value> classLanes;
  Value c0, c16, end, first, keyCount, tiles, blocks, groupSize, kvFirst, kvEnd;
};

void buildDecodeLeafBody(OpBuilder &b, Location loc, const DecodeShape &shape,
                         ValueRange args) {
  DecodeLeaf(b, loc, shape, args).emit();
}

} // namespace

bool mlir::cq4p::hasStreamingDecodeAttention(AttentionOp op) {
  auto isF32 = [](Value v) {
    return cast<MemRefType>(v.getType()).getElementType().isF32();
  };
  int64_t group = op.getNumHeads() / op.getNumKvHeads();
  return op.getHeadDim() % 64 == 0 && isF32(op.getK()) && isF32(op.getV()) &&
         kLanes % group == 0;
}

void mlir::cq4p::emitStreamingDecodeAttention(OpBuilder &b, ModuleOp module,
                                              SymbolTable &symbols, AttentionOp op) {
  Location loc = op.getLoc();
  std::string name =
      op->getParentOfType<func::FuncOp>().getSymName().str() + "_sme_decode";
  auto leaf = symbols.lookup<func::FuncOp>(name);
  if (!leaf) {
    OpBuilder top = OpBuilder::atBlockEnd(module.getBody());
    Type index = top.getIndexType();
    SmallVector<Type> types = {op.getQ().getType(), op.getK().getType(),
                               op.getV().getType(), op.getOut().getType(),
                               index, index, index};
    leaf = func::FuncOp::create(top, loc, name, top.getFunctionType(types, {}));
    leaf.setPrivate();
    leaf->setAttr("cq4p.sme_leaf", top.getUnitAttr());
    Block *entry = leaf.addEntryBlock();
    OpBuilder inner = OpBuilder::atBlockBegin(entry);
    DecodeShape shape{int64_t(op.getNumHeads()), int64_t(op.getNumKvHeads()),
                      int64_t(op.getHeadDim()), int64_t(op.getWindow()),
                      op.getScale().convertToFloat()};
    buildDecodeLeafBody(inner, loc, shape, entry->getArguments());
    func::ReturnOp::create(inner, loc);
    symbols.insert(leaf);
  }
  Value position = op.getPosition()
                       ? op.getPosition()
                       : Value(arith::ConstantIndexOp::create(b, loc, 0));
  func::CallOp::create(b, loc, leaf,
                       ValueRange{op.getQ(), op.getK(), op.getV(), op.getOut(), position,
                                  op.getHeadBegin(), op.getHeadEnd()});
}
