//===- ModelKernels.cpp - the non-matmul kernels of a model ---------------===//
//
// RMSNorm, rotary embedding, attention over the KV cache, gated activation,
// residual add and scale, written once as scf + vector code over buffers
// and lowered by the same upstream passes for every target (so NEON and
// SME2 libraries run the same instructions here and agree bit for bit).
// Rows are independent, so the steps split them across threads; the
// attention splits its heads. The attention kernel is one cq4p.attention
// over the KV cache, which each target lowers (SME2 prefill as FMOPA
// tiles, AArch64 in 4-lane NEON code: NeonAttention.cpp); its 16-lane
// vector lowering, emitVectorAttention (the host's), lives here.
//
// Vectors are 16 fp32 lanes (one zmm, four q registers). Sums are kept in
// 16 lanes and folded by halves (16 -> 8 -> 4 -> 2 -> 1), an order that
// does not depend on the target. The one exception is a prompt's
// attention, whose lanes are query units at the target's width (each
// lane's arithmetic the same chain at every width).
//
//===----------------------------------------------------------------------===//

#include "cq4p/Codegen/ModelKernels.h"
#include "cq4p/Codegen/EmitBuilder.h"

#include "cq4p/format.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/bit.h"

#include <cmath>
#include <limits>
#include <tuple>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kDynamic = ShapedType::kDynamic;

std::string floatTag(float value) {
  return std::to_string(llvm::bit_cast<uint32_t>(value));
}

/// The host's emitter: EmitBuilder over 16-lane fp32 vectors, with their
/// loads and stores of any float element type and folds across lanes.
struct Emitter : EmitBuilder {
  Emitter(OpBuilder &b, Location loc)
      : EmitBuilder(b, loc, VectorType::get({kLanes}, b.getF32Type())) {}

  Type f32Type() { return b.getF32Type(); }
  VectorType vec() { return floats; }
  Value load(Value memref, ValueRange indices) {
    auto type = cast<MemRefType>(memref.getType());
    Value v = vector::LoadOp::create(
        b, loc, VectorType::get({kLanes}, type.getElementType()), memref,
        indices);
    if (!type.getElementType().isF32())
      v = arith::ExtFOp::create(b, loc, vec(), v);
    return v;
  }
  void store(Value v, Value memref, ValueRange indices) {
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    if (element != cast<VectorType>(v.getType()).getElementType())
      v = arith::TruncFOp::create(
          b, loc, cast<VectorType>(v.getType()).clone(element), v);
    vector::StoreOp::create(b, loc, v, memref, indices);
  }

  /// A 16-lane vector folded by halves with `combine` to one value.
  Value fold(Value v, function_ref<Value(Value, Value)> combine) {
    for (int64_t width = kLanes / 2; width >= 1; width /= 2) {
      Value low = vector::ExtractStridedSliceOp::create(
          b, loc, v, ArrayRef<int64_t>{0}, ArrayRef<int64_t>{width},
          ArrayRef<int64_t>{1});
      Value high = vector::ExtractStridedSliceOp::create(
          b, loc, v, ArrayRef<int64_t>{width}, ArrayRef<int64_t>{width},
          ArrayRef<int64_t>{1});
      v = combine(low, high);
    }
    return vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{0});
  }
  Value sumOfLanes(Value v) {
    return fold(v, [&](Value x, Value y) { return addF(x, y); });
  }
  Value maxOfLanes(Value v) {
    return fold(v, [&](Value x, Value y) { return maxF(x, y); });
  }
};

MemRefType rowsType(MLIRContext *ctx, int64_t width) {
  return MemRefType::get({kDynamic, width}, Float32Type::get(ctx));
}

/// body(r, c) for rows [0, rows) and, 16 at a time, the channels of the
/// super-blocks [sbBegin, sbEnd) below n: a matmul dispatch's epilogue over
/// the outputs its range wrote, while they are in cache.
void forRangeChannels(Emitter &e, Value sbBegin, Value sbEnd, int64_t n,
                      Value rows,
                      function_ref<void(Emitter &, Value, Value)> body) {
  Value channels = e.index(CQ4P_PANEL_CHANNELS);
  Value begin = arith::MulIOp::create(e.b, e.loc, sbBegin, channels);
  Value end = arith::MinSIOp::create(
      e.b, e.loc, arith::MulIOp::create(e.b, e.loc, sbEnd, channels), e.index(n));
  e.forEach(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
    Emitter e1{b1, l1};
    e1.forEach(begin, end, kLanes, [&](OpBuilder &b2, Location l2, Value c) {
      Emitter e2{b2, l2};
      body(e2, r, c);
    });
  });
}

} // namespace

FlatSymbolRefAttr mlir::cq4p::createRmsNormKernel(KernelBuilder &kernels,
                                                  int64_t width,
                                                  Type weightElement,
                                                  int64_t d, float epsilon,
                                                  bool unitOffset) {
  MLIRContext *ctx = kernels.getContext();
  KernelSpec spec;
  bool weighted = bool(weightElement);
  spec.name = "cq4p_rms_norm_" + std::to_string(width) + "_d" +
              std::to_string(d) +
              (!weighted ? "_plain" : weightElement.isF16() ? "_f16" : "_f32") +
              (unitOffset ? "_unit" : "") + "_e" + floatTag(epsilon);
  spec.kind = KernelKind::rms_norm;
  spec.n = width;
  spec.k = d;
  spec.params = {{"x", rowsType(ctx, width)}};
  if (weighted)
    spec.params.push_back({"w", MemRefType::get({d}, weightElement)});
  spec.params.push_back({"out", rowsType(ctx, width)});
  spec.params.push_back({"rows", IndexType::get(ctx)});
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Value x = args[0], w = weighted ? args[1] : Value(),
          out = args[weighted ? 2 : 1], rows = args[weighted ? 3 : 2];
    Emitter e{b, loc};
    e.forEach(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.forEach(e1.index(0), e1.index(width), d,
              [&](OpBuilder &b2, Location l2, Value base) {
                Emitter e2{b2, l2};
                auto sumLoop = scf::ForOp::create(
                    b2, l2, e2.index(0), e2.index(d), e2.index(kLanes),
                    ValueRange{e2.splatF32(0.0f)},
                    [&](OpBuilder &b3, Location l3, Value i, ValueRange acc) {
                      Emitter e3{b3, l3};
                      Value v = e3.load(x, {r, e3.addI(base, i)});
                      scf::YieldOp::create(
                          b3, l3, ValueRange{e3.addF(acc[0], e3.mulF(v, v))});
                    });
                Value mean = e2.divF(e2.sumOfLanes(sumLoop.getResult(0)),
                                    e2.f32(float(d)));
                Value root =
                    math::SqrtOp::create(b2, l2, e2.addF(mean, e2.f32(epsilon)));
                Value inv = e2.splat(e2.divF(e2.f32(1.0f), root));
                e2.forEach(e2.index(0), e2.index(d), kLanes,
                        [&](OpBuilder &b3, Location l3, Value i) {
                          Emitter e3{b3, l3};
                          Value col = e3.addI(base, i);
                          Value v = e3.mulF(e3.load(x, {r, col}), inv);
                          if (weighted) {
                            Value scale = e3.load(w, {i});
                            if (unitOffset)
                              scale = e3.addF(e3.splatF32(1.0f), scale);
                            v = e3.mulF(v, scale);
                          }
                          e3.store(v, out, {r, col});
                        });
              });
    });
  });
}

FlatSymbolRefAttr mlir::cq4p::createRopeKernel(KernelBuilder &kernels,
                                               int64_t width, int64_t d,
                                               ArrayRef<float> freqs,
                                               Type outElement) {
  MLIRContext *ctx = kernels.getContext();
  KernelSpec spec;
  // Named after the frequencies' bits (FNV-1a).
  uint64_t hash = 0xcbf29ce484222325ull;
  for (float f : freqs)
    for (int shift = 0; shift < 32; shift += 8)
      hash = (hash ^ ((llvm::bit_cast<uint32_t>(f) >> shift) & 0xff)) *
             0x100000001b3ull;
  spec.name = "cq4p_rope_" + std::to_string(width) + "_d" + std::to_string(d) +
              "_f" + llvm::utohexstr(hash, /*LowerCase=*/true) +
              (outElement.isF16() ? "_f16" : "");
  spec.kind = KernelKind::rope;
  spec.n = width;
  spec.k = d;
  Type index = IndexType::get(ctx);
  spec.params = {{"x", rowsType(ctx, width)},
                 {"out", MemRefType::get({kDynamic, width}, outElement)},
                 {"rows", index},
                 {"position", index}};
  int64_t half = d / 2;
  SmallVector<float> invFreq(freqs);
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Value x = args[0], out = args[1], rows = args[2], position = args[3];
    Emitter e{b, loc};
    auto halfType = VectorType::get({half}, e.f32Type());
    Value freqs = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(halfType, ArrayRef<float>(invFreq)));
    e.forEach(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      Value p = arith::IndexCastOp::create(b1, l1, b1.getI64Type(),
                                           e1.addI(position, r));
      Value pf = arith::SIToFPOp::create(b1, l1, e1.f32Type(), p);
      Value angles = e1.mulF(vector::BroadcastOp::create(b1, l1, halfType, pf),
                            freqs);
      auto [sin, cos] = sinCosLanes(b1, l1, angles);
      SmallVector<Value> cosParts, sinParts;
      for (int64_t i = 0; i < half; i += kLanes) {
        int64_t n = std::min(kLanes, half - i);
        auto part = [&](Value v) {
          return vector::ExtractStridedSliceOp::create(
              b1, l1, v, ArrayRef<int64_t>{i}, ArrayRef<int64_t>{n},
              ArrayRef<int64_t>{1});
        };
        cosParts.push_back(part(cos));
        sinParts.push_back(part(sin));
      }
      e1.forEach(e1.index(0), e1.index(width), d,
              [&](OpBuilder &b2, Location l2, Value head) {
                Emitter e2{b2, l2};
                for (auto [j, c] : llvm::enumerate(cosParts)) {
                  int64_t lanes = cast<VectorType>(c.getType()).getNumElements();
                  auto partType = VectorType::get({lanes}, e2.f32Type());
                  Value lo = e2.addI(head, e2.index(int64_t(j) * kLanes));
                  Value hi = e2.addI(lo, e2.index(half));
                  Value x1 = vector::LoadOp::create(b2, l2, partType, x,
                                                    ValueRange{r, lo});
                  Value x2 = vector::LoadOp::create(b2, l2, partType, x,
                                                    ValueRange{r, hi});
                  Value s = sinParts[j];
                  e2.store(e2.subF(e2.mulF(x1, c), e2.mulF(x2, s)), out, {r, lo});
                  e2.store(e2.addF(e2.mulF(x2, c), e2.mulF(x1, s)), out, {r, hi});
                }
              });
    });
  });
}

/// (inputs..., out, rows): out = compute(inputs) element by element over
/// rows of `width`, 16 lanes at a time; inputs fp32, `out` of `outElement`.
static FlatSymbolRefAttr
createElementwiseKernel(KernelBuilder &kernels, std::string name, KernelKind kind,
                        int64_t width, ArrayRef<const char *> inputs,
                        Type outElement,
                        function_ref<Value(Emitter &, ArrayRef<Value>)> compute) {
  MLIRContext *ctx = kernels.getContext();
  KernelSpec spec;
  spec.name = std::move(name);
  spec.kind = kind;
  spec.n = width;
  for (const char *input : inputs)
    spec.params.push_back({input, rowsType(ctx, width)});
  spec.params.push_back({"out", MemRefType::get({kDynamic, width}, outElement)});
  spec.params.push_back({"rows", IndexType::get(ctx)});
  size_t count = inputs.size();
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Emitter e{b, loc};
    e.forEach(e.index(0), args[count + 1], 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.forEach(e1.index(0), e1.index(width), kLanes,
              [&](OpBuilder &b2, Location l2, Value i) {
                Emitter e2{b2, l2};
                SmallVector<Value> loaded;
                for (size_t k = 0; k < count; ++k)
                  loaded.push_back(e2.load(args[k], {r, i}));
                e2.store(compute(e2, loaded), args[count], {r, i});
              });
    });
  });
}

FlatSymbolRefAttr mlir::cq4p::createGluKernel(KernelBuilder &kernels,
                                              int64_t width,
                                              Activation activation) {
  bool silu = activation == Activation::silu;
  return createElementwiseKernel(
      kernels,
      "cq4p_glu_" + stringifyActivation(activation).str() + "_" +
          std::to_string(width),
      KernelKind::glu, width, {"gate", "up"}, Float32Type::get(kernels.getContext()),
      [&](Emitter &e, ArrayRef<Value> v) {
        return e.mulF(e.activate(v[0], silu), v[1]);
      });
}

FlatSymbolRefAttr mlir::cq4p::createAddKernel(KernelBuilder &kernels,
                                              int64_t width) {
  return createElementwiseKernel(
      kernels, "cq4p_add_" + std::to_string(width), KernelKind::add, width, {"a", "b"},
      Float32Type::get(kernels.getContext()),
      [](Emitter &e, ArrayRef<Value> v) { return e.addF(v[0], v[1]); });
}

FlatSymbolRefAttr mlir::cq4p::createScaleKernel(KernelBuilder &kernels,
                                                int64_t width, float factor) {
  return createElementwiseKernel(
      kernels, "cq4p_scale_" + std::to_string(width) + "_f" + floatTag(factor),
      KernelKind::scale, width, {"x"}, Float32Type::get(kernels.getContext()),
      [&](Emitter &e, ArrayRef<Value> v) { return e.mulF(v[0], e.splatF32(factor)); });
}

namespace {

/// Per KV head whose group of `group` query heads meets [headBegin,
/// headEnd), from headBegin / group to ceil(headEnd / group):
/// body(kv, from, to), [from, to) its group's heads inside the range.
void forEachKvGroup(Emitter &e, Value headBegin, Value headEnd, int64_t group,
                    function_ref<void(Emitter &, Value, Value, Value)> body) {
  Value groupSize = e.index(group);
  Value kvFirst = arith::DivUIOp::create(e.b, e.loc, headBegin, groupSize);
  Value kvEnd = arith::CeilDivUIOp::create(e.b, e.loc, headEnd, groupSize);
  e.forEach(kvFirst, kvEnd, 1, [&](OpBuilder &b1, Location l1, Value kv) {
    Emitter e1{b1, l1};
    Value groupFirst = e1.mulI(kv, groupSize);
    Value from = arith::MaxSIOp::create(b1, l1, headBegin, groupFirst);
    Value to = arith::MinSIOp::create(b1, l1, headEnd, e1.addI(groupFirst, groupSize));
    body(e1, kv, from, to);
  });
}

/// The rows of a prompt (more than one) of cq4p.attention, as code whose
/// vector lanes are query units: a block of `vectors` x `lanes` units is
/// the heads of [h0, h0 + count) (all of one KV head's group inside the
/// range, at most `lanes` of them) for the rows [r0, r0 + vectors * lanes /
/// count), unit u being row r0 + u / count and head h0 + u % count, in lane
/// u % lanes of vector u / lanes (lanes past the block's units, and rows
/// past the last, repeat the last: they compute its values again and store
/// them to the same place). A block walks the keys it sees in tiles of
/// kTile, every unit's online softmax step at once:
///   scores: S_k = sum_c Q[c] * K[t + k][c], Q[c] the units' head dim c
///           (gathered once per block into a [d][vectors * lanes] buffer),
///           K[..][c] one broadcast scalar for the block's vectors: a GEMM
///           whose product tile is kTile x vectors vectors, with no
///           horizontal sums;
///   softmax: per lane, the running max and sum and the correction, the
///           tile's max and sum taken across its kTile vectors (lane-wise
///           operations in a fixed tree);
///   values: O[c] = O[c] * correction + sum_k P_k * V[t + k][c], O the
///           units' [d][vectors * lanes] accumulators on the stack, V[..][c]
///           again one broadcast for the block's vectors.
/// With 32 registers a block holds two vectors of units: each broadcast key
/// or value element then feeds two fused multiply-adds. An FMA whose other
/// factor is a broadcast load runs at about 60% of the FMA's peak on AMD's
/// Zen 5 (one load an FMA), two FMAs a load near it.
/// Tiles start at multiples of kTile, so every unit visits the same tiles
/// whatever block, vector, thread or prompt chunk it falls in, and each
/// lane's arithmetic is the same chain at every vector width: the prompt's
/// outputs do not depend on the host level, the threads or the chunking.
/// A tile every unit sees whole reads fp32 keys and values straight from
/// the cache; any other (its lanes masked to each unit's keys, its rows
/// past the block's last key clamped in bounds) or an fp16 cache's is
/// first copied to fp32 stack buffers.
///
/// Its steps: the call's constants and buffers (the constructor), then per
/// block of units its setup (beginBlock), per tile its staging, scores,
/// softmax and values (walk), and the block's outputs (storeOutputs).
class PromptAttention {
public:
  PromptAttention(Emitter &e, Value q, Value keys, Value values, Value out, Value rows,
                  Value position, int64_t heads, int64_t kvHeads, int64_t d,
                  int64_t window, float scale, int64_t lanes)
      : keys(keys), values(values), rows(rows), position(position), heads(heads),
        group(heads / kvHeads), d(d), window(window), scale(scale), lanes(lanes),
        // Register blocking (it changes the instructions, not the bits):
        // vectors of units per block, keys per pass of the score loop and
        // head dims per step of both dot loops. With 32 vector registers,
        // two vectors of units and 8 keys a pass (16 sums beside the two
        // vectors of queries); with 16, one vector and 8 keys beside 4
        // query vectors.
        vectors(lanes >= 16 ? 2 : 1), pass(8), step(lanes >= 16 ? 8 : 4),
        floats(VectorType::get({lanes}, e.b.getF32Type())),
        ints(VectorType::get({lanes}, e.b.getI32Type())),
        halfCache(!cast<MemRefType>(keys.getType()).getElementType().isF32()) {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    Type f32 = b.getF32Type();
    SmallVector<ReassociationIndices> both{{0, 1}};
    flatQ = memref::CollapseShapeOp::create(b, loc, q, both);
    flatOut = memref::CollapseShapeOp::create(b, loc, out, both);
    // Per call: the block's queries and accumulators, one head dim a row
    // of its vectors, and a tile's keys and values in fp32.
    queries = memref::AllocaOp::create(b, loc, MemRefType::get({d, vectors * lanes}, f32));
    acc = memref::AllocaOp::create(b, loc, MemRefType::get({d, vectors * lanes}, f32));
    keyStage = memref::AllocaOp::create(b, loc, MemRefType::get({kTile, d}, f32));
    valueStage = memref::AllocaOp::create(b, loc, MemRefType::get({kTile, d}, f32));
    SmallVector<int32_t> laneNumbers;
    for (int32_t i = 0; i < lanes; ++i)
      laneNumbers.push_back(i);
    laneIds = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(ints, ArrayRef<int32_t>(laneNumbers)));
    allLanes = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(VectorType::get({lanes}, b.getI1Type()), true));
  }

  /// KV heads [headBegin / group, ceil(headEnd / group)); each takes the
  /// heads of its group inside [headBegin, headEnd), at most `lanes` at a
  /// time, in blocks of rows.
  void emit(Emitter &e, Value headBegin, Value headEnd) {
    forEachKvGroup(e, headBegin, headEnd, group, [&](Emitter &e1, Value kv, Value from,
                                                     Value to) {
      e1.forEach(from, to, lanes, [&](OpBuilder &b2, Location l2, Value h0) {
        Emitter e2{b2, l2};
        Value count = arith::MinSIOp::create(b2, l2, arith::SubIOp::create(b2, l2, to, h0),
                                             e2.index(lanes));
        Value rowsPer = arith::DivUIOp::create(b2, l2, e2.index(vectors * lanes), count);
        scf::ForOp::create(b2, l2, e2.index(0), rows, rowsPer, ValueRange{},
                           [&](OpBuilder &b3, Location l3, Value r0, ValueRange) {
                             Emitter e3{b3, l3};
                             Block block = beginBlock(e3, kv, h0, count, rowsPer, r0);
                             storeOutputs(e3, block, walk(e3, block));
                             scf::YieldOp::create(b3, l3);
                           });
      });
    });
  }

private:
  static constexpr int64_t kTile = 16;

  /// A block's units, per vector: their flat offsets into q and out and
  /// their keys' bounds; and the tiles the block walks.
  struct Block {
    SmallVector<Value> offsets, endV, firstV;
    Value kvBase, zeros;
    Value tilesFirst, tilesEnd;
    /// Tiles inside [firstOfLast, endOfFirst) every unit sees whole.
    Value firstOfLast, endOfFirst;
  };
  /// A tile's softmax step, for one vector of units.
  struct Weights {
    Value maxNew, sumNew, correction;
    SmallVector<Value> weights;
  };

  Value splatF(Emitter &en, Value scalar) {
    return vector::BroadcastOp::create(en.b, en.loc, floats, scalar);
  }
  Value splatI(Emitter &en, Value index) {
    return vector::BroadcastOp::create(
        en.b, en.loc, ints, arith::IndexCastOp::create(en.b, en.loc, en.b.getI32Type(), index));
  }
  Value loadF(Emitter &en, Value memref, ValueRange at) {
    return vector::LoadOp::create(en.b, en.loc, floats, memref, at);
  }
  /// Column of vector v in the [d][vectors * lanes] buffers.
  Value column(Emitter &en, int64_t v) { return en.index(v * lanes); }
  /// values[0] combined pairwise to one, in a fixed tree.
  static Value tree(SmallVector<Value> values, function_ref<Value(Value, Value)> combine) {
    while (values.size() > 1) {
      SmallVector<Value> next;
      for (size_t i = 0; i + 1 < values.size(); i += 2)
        next.push_back(combine(values[i], values[i + 1]));
      if (values.size() % 2)
        next.push_back(values.back());
      values = next;
    }
    return values.front();
  }

  /// Block setup, KV head kv, heads [h0, h0 + count), rows from r0: the
  /// units' offsets and key bounds; their queries gathered, their
  /// accumulators zeroed.
  Block beginBlock(Emitter &e3, Value kv, Value h0, Value count, Value rowsPer, Value r0) {
    OpBuilder &b3 = e3.b;
    Location l3 = e3.loc;
    Block block;
    Value units = e3.mulI(rowsPer, count);
    Value lastRow = arith::MinUIOp::create(
        b3, l3, arith::SubIOp::create(b3, l3, e3.addI(r0, rowsPer), e3.index(1)),
        arith::SubIOp::create(b3, l3, rows, e3.index(1)));
    Value lastUnit = splatI(e3, arith::SubIOp::create(b3, l3, units, e3.index(1)));
    Value countV = splatI(e3, count);
    for (int64_t v = 0; v < vectors; ++v) {
      Value unit = arith::MinUIOp::create(
          b3, l3, arith::AddIOp::create(b3, l3, laneIds, splatI(e3, e3.index(v * lanes))),
          lastUnit);
      Value rowV = arith::AddIOp::create(b3, l3, splatI(e3, r0),
                                         arith::DivUIOp::create(b3, l3, unit, countV));
      rowV = arith::MinUIOp::create(b3, l3, rowV, splatI(e3, lastRow));
      Value headV = arith::AddIOp::create(b3, l3, splatI(e3, h0),
                                          arith::RemUIOp::create(b3, l3, unit, countV));
      block.offsets.push_back(arith::AddIOp::create(
          b3, l3, arith::MulIOp::create(b3, l3, rowV, splatI(e3, e3.index(heads * d))),
          arith::MulIOp::create(b3, l3, headV, splatI(e3, e3.index(d)))));
      Value endV = arith::AddIOp::create(
          b3, l3, arith::AddIOp::create(b3, l3, splatI(e3, position), rowV),
          splatI(e3, e3.index(1)));
      block.endV.push_back(endV);
      if (window > 0)
        block.firstV.push_back(arith::MaxSIOp::create(
            b3, l3, arith::SubIOp::create(b3, l3, endV, splatI(e3, e3.index(window))),
            splatI(e3, e3.index(0))));
    }
    Value firstOfFirst, endOfLast;
    std::tie(firstOfFirst, block.endOfFirst) = e3.keysUpTo(e3.addI(position, r0), window);
    std::tie(block.firstOfLast, endOfLast) = e3.keysUpTo(e3.addI(position, lastRow), window);
    block.tilesFirst = e3.mulI(
        arith::DivUIOp::create(b3, l3, firstOfFirst, e3.index(kTile)), e3.index(kTile));
    block.tilesEnd = endOfLast;
    block.kvBase = e3.mulI(kv, e3.index(d));
    block.zeros = splatF(e3, e3.f32(0.0f));
    e3.forEach(e3.index(0), e3.index(d), 1, [&](OpBuilder &b4, Location l4, Value c) {
      Emitter e4{b4, l4};
      for (int64_t v = 0; v < vectors; ++v) {
        Value at = arith::AddIOp::create(b4, l4, block.offsets[v], splatI(e4, c));
        Value qc = vector::GatherOp::create(b4, l4, floats, flatQ, ValueRange{e4.index(0)},
                                            at, allLanes, block.zeros);
        vector::StoreOp::create(b4, l4, qc, queries, ValueRange{c, column(e4, v)});
        vector::StoreOp::create(b4, l4, block.zeros, acc, ValueRange{c, column(e4, v)});
      }
    });
    return block;
  }

  /// The walk over the block's tiles; its result is the units' sums, a
  /// vector each.
  SmallVector<Value> walk(Emitter &e3, const Block &block) {
    OpBuilder &b3 = e3.b;
    Location l3 = e3.loc;
    // The state: each vector's running max, then each's running sum.
    SmallVector<Value> init(vectors, splatF(e3, e3.f32(lowest)));
    init.append(vectors, block.zeros);
    SmallVector<Type> stateTypes(2 * vectors, floats);
    auto walk = scf::ForOp::create(
        b3, l3, block.tilesFirst, block.tilesEnd, e3.index(kTile), init,
        [&](OpBuilder &b4, Location l4, Value t, ValueRange state) {
          Emitter e4{b4, l4};
          Value whole = arith::AndIOp::create(
              b4, l4,
              arith::CmpIOp::create(b4, l4, arith::CmpIPredicate::sge, t, block.firstOfLast),
              arith::CmpIOp::create(b4, l4, arith::CmpIPredicate::sle,
                                    e4.addI(t, e4.index(kTile)), block.endOfFirst));
          auto branch = scf::IfOp::create(b4, l4, stateTypes, whole,
                                          /*withElseRegion=*/true);
          for (bool masked : {false, true}) {
            OpBuilder::InsertionGuard guard(b4);
            b4.setInsertionPointToStart(masked ? branch.elseBlock() : branch.thenBlock());
            SmallVector<Value> next = tile(e4, block, t, masked, state);
            scf::YieldOp::create(b4, l4, next);
          }
          scf::YieldOp::create(b4, l4, branch.getResults());
        });
    return SmallVector<Value>(walk.getResults().begin() + vectors, walk.getResults().end());
  }

  /// The tile [t, t + kTile) from the state (the vectors' maxes, then
  /// their sums) to the next.
  SmallVector<Value> tile(Emitter &e4, const Block &block, Value t, bool masked,
                          ValueRange state) {
    bool staged = masked || halfCache;
    if (staged)
      stageTile(e4, block, t, masked);
    SmallVector<SmallVector<Value>> scores = scoreTile(e4, block, t, staged);
    SmallVector<Weights> w;
    for (int64_t v = 0; v < vectors; ++v)
      w.push_back(softmaxTile(e4, block, v, t, masked, scores[v], state[v],
                              state[vectors + v]));
    accumulateValues(e4, block, t, staged, w);
    SmallVector<Value> next;
    for (const Weights &weights : w)
      next.push_back(weights.maxNew);
    for (const Weights &weights : w)
      next.push_back(weights.sumNew);
    return next;
  }

  /// The tile's key and value rows copied to fp32 stack buffers (rows
  /// past the block's last key clamped to t, in bounds, when `masked`).
  void stageTile(Emitter &e4, const Block &block, Value t, bool masked) {
    for (int64_t k = 0; k < kTile; ++k) {
      Value row = e4.addI(t, e4.index(k));
      if (masked)
        row = arith::SelectOp::create(
            e4.b, e4.loc,
            arith::CmpIOp::create(e4.b, e4.loc, arith::CmpIPredicate::slt, row,
                                  block.tilesEnd),
            row, t);
      for (int64_t c = 0; c < d; c += kLanes) {
        e4.store(e4.load(keys, {row, e4.addI(block.kvBase, e4.index(c))}), keyStage,
                 {e4.index(k), e4.index(c)});
        e4.store(e4.load(values, {row, e4.addI(block.kvBase, e4.index(c))}), valueStage,
                 {e4.index(k), e4.index(c)});
      }
    }
  }

  /// Element c of key or value row k of the tile, broadcast.
  Value element(Emitter &en, const Block &block, Value t, bool staged, Value cache,
                Value stage, int64_t k, Value c) {
    Value x = staged ? memref::LoadOp::create(en.b, en.loc, stage,
                                              ValueRange{en.index(k), c})
                     : memref::LoadOp::create(
                           en.b, en.loc, cache,
                           ValueRange{en.addI(t, en.index(k)), en.addI(block.kvBase, c)});
    return splatF(en, x);
  }

  /// Scores, per vector of units: the kTile dot products of its queries
  /// with the tile's keys, `pass` keys per loop over the head dim, each
  /// key element broadcast once for every vector.
  SmallVector<SmallVector<Value>> scoreTile(Emitter &e4, const Block &block, Value t,
                                            bool staged) {
    SmallVector<SmallVector<Value>> scores(vectors);
    for (int64_t k0 = 0; k0 < kTile; k0 += pass) {
      SmallVector<Value> init(vectors * pass, block.zeros);
      auto sums = scf::ForOp::create(
          e4.b, e4.loc, e4.index(0), e4.index(d), e4.index(step), init,
          [&](OpBuilder &b5, Location l5, Value c0, ValueRange s) {
            Emitter e5{b5, l5};
            SmallVector<Value> next(s.begin(), s.end());
            for (int64_t p = 0; p < step; ++p) {
              Value c = e5.addI(c0, e5.index(p));
              SmallVector<Value> qc;
              for (int64_t v = 0; v < vectors; ++v)
                qc.push_back(loadF(e5, queries, {c, column(e5, v)}));
              for (int64_t k = 0; k < pass; ++k) {
                Value key = element(e5, block, t, staged, keys, keyStage, k0 + k, c);
                for (int64_t v = 0; v < vectors; ++v)
                  next[v * pass + k] =
                      math::FmaOp::create(b5, l5, qc[v], key, next[v * pass + k]);
              }
            }
            scf::YieldOp::create(b5, l5, next);
          });
      for (int64_t v = 0; v < vectors; ++v)
        for (int64_t k = 0; k < pass; ++k)
          scores[v].push_back(sums.getResult(v * pass + k));
    }
    return scores;
  }

  /// Softmax of vector v of units: the scores scaled (and masked to each
  /// unit's keys when `masked`), the new running max, the correction of
  /// what came before, the tile's weights and the new running sum.
  Weights softmaxTile(Emitter &e4, const Block &block, int64_t v, Value t, bool masked,
                      SmallVector<Value> scores, Value maxOld, Value sumOld) {
    OpBuilder &b4 = e4.b;
    Location l4 = e4.loc;
    Weights w;
    Value scaleV = splatF(e4, e4.f32(scale));
    Value lowestV = splatF(e4, e4.f32(lowest));
    SmallVector<Value> valid;
    for (int64_t k = 0; k < kTile; ++k) {
      scores[k] = e4.mulF(scores[k], scaleV);
      if (!masked)
        continue;
      Value key = splatI(e4, e4.addI(t, e4.index(k)));
      Value ok = arith::CmpIOp::create(b4, l4, arith::CmpIPredicate::slt, key, block.endV[v]);
      if (!block.firstV.empty())
        ok = arith::AndIOp::create(
            b4, l4, ok,
            arith::CmpIOp::create(b4, l4, arith::CmpIPredicate::sge, key, block.firstV[v]));
      valid.push_back(ok);
      scores[k] = arith::SelectOp::create(b4, l4, ok, scores[k], lowestV);
    }
    w.maxNew = arith::MaximumFOp::create(
        b4, l4, maxOld, tree(scores, [&](Value x, Value y) -> Value {
          return arith::MaximumFOp::create(b4, l4, x, y);
        }));
    // The arguments are differences from the new max, never positive:
    // expNonPositive. exp(-inf) is taken as 0 explicitly (the polynomial
    // clamps its argument at -87), as is a masked key's weight.
    Value isFirst =
        arith::CmpFOp::create(b4, l4, arith::CmpFPredicate::OEQ, maxOld, lowestV);
    w.correction = arith::SelectOp::create(b4, l4, isFirst, block.zeros,
                                           e4.expNonPositive(e4.subF(maxOld, w.maxNew)));
    for (int64_t k = 0; k < kTile; ++k) {
      Value weight = e4.expNonPositive(e4.subF(scores[k], w.maxNew));
      if (masked)
        weight = arith::SelectOp::create(b4, l4, valid[k], weight, block.zeros);
      w.weights.push_back(weight);
    }
    w.sumNew = e4.addF(e4.mulF(sumOld, w.correction),
                       tree(w.weights, [&](Value x, Value y) { return e4.addF(x, y); }));
    return w;
  }

  /// Values: the accumulators times the correction plus the tile's
  /// weighted value rows, `step` head dims at a time, each value element
  /// broadcast once for every vector.
  void accumulateValues(Emitter &e4, const Block &block, Value t, bool staged,
                        ArrayRef<Weights> w) {
    e4.forEach(e4.index(0), e4.index(d), step, [&](OpBuilder &b5, Location l5, Value c0) {
      Emitter e5{b5, l5};
      SmallVector<Value> at;
      for (int64_t p = 0; p < step; ++p)
        at.push_back(e5.addI(c0, e5.index(p)));
      SmallVector<Value> o; // [v * step + p]
      for (int64_t v = 0; v < vectors; ++v)
        for (int64_t p = 0; p < step; ++p)
          o.push_back(
              e5.mulF(loadF(e5, acc, {at[p], column(e5, v)}), w[v].correction));
      for (int64_t k = 0; k < kTile; ++k)
        for (int64_t p = 0; p < step; ++p) {
          Value value = element(e5, block, t, staged, values, valueStage, k, at[p]);
          for (int64_t v = 0; v < vectors; ++v)
            o[v * step + p] =
                math::FmaOp::create(b5, l5, w[v].weights[k], value, o[v * step + p]);
        }
      for (int64_t v = 0; v < vectors; ++v)
        for (int64_t p = 0; p < step; ++p)
          vector::StoreOp::create(b5, l5, o[v * step + p], acc,
                                  ValueRange{at[p], column(e5, v)});
    });
  }

  /// The block's outputs: the accumulators over the sums, scattered to
  /// the units' rows and heads.
  void storeOutputs(Emitter &e3, const Block &block, ArrayRef<Value> sums) {
    SmallVector<Value> inverse;
    for (Value sum : sums)
      inverse.push_back(e3.divF(splatF(e3, e3.f32(1.0f)), sum));
    e3.forEach(e3.index(0), e3.index(d), 1, [&](OpBuilder &b4, Location l4, Value c) {
      Emitter e4{b4, l4};
      for (int64_t v = 0; v < vectors; ++v) {
        Value at = arith::AddIOp::create(b4, l4, block.offsets[v], splatI(e4, c));
        Value o = e4.mulF(loadF(e4, acc, {c, column(e4, v)}), inverse[v]);
        vector::ScatterOp::create(b4, l4, Type(), flatOut, ValueRange{e4.index(0)}, at,
                                  allLanes, o);
      }
    });
  }

  static constexpr float lowest = -std::numeric_limits<float>::infinity();

  Value keys, values, rows, position;
  int64_t heads, group, d, window;
  float scale;
  int64_t lanes, vectors, pass, step;
  VectorType floats, ints;
  bool halfCache;
  // Per call.
  Value flatQ, flatOut, queries, acc, keyStage, valueStage, laneIds, allLanes;
};

/// The rows of a prompt of cq4p.attention (PromptAttention).
void emitPromptAttention(OpBuilder &b, Location loc, Value q, Value keys,
                         Value values, Value out, Value rows, Value position,
                         Value headBegin,
                         Value headEnd, int64_t heads, int64_t kvHeads, int64_t d,
                         int64_t window, float scale, int64_t lanes) {
  Emitter e{b, loc};
  PromptAttention(e, q, keys, values, out, rows, position, heads, kvHeads, d, window,
                  scale, lanes)
      .emit(e, headBegin, headEnd);
}

/// One row of cq4p.attention (a decode step; a prompt's rows are
/// PromptAttention's) on the host, in named steps. Keys are visited in
/// tiles of kLanes: their scores fill one vector, so the softmax's
/// exponentials and its running max and sum are vector ops and the online
/// rescale happens once per tile (a flash-attention decode).
///
/// The query heads that share a KV head (GQA) walk the cache together, one
/// tile at a time: the tile's key and value rows come from memory once and
/// from L1 for the group's other heads. With 32 vector registers a step
/// takes two heads of a group (their queries, dots and fold trees fit),
/// each key and value slice loaded once for both; a head's step alone is a
/// chain of latencies (dots, fold, softmax, then 16 dependent FMAs per
/// accumulator), which two independent chains overlap. With 16 registers a
/// step is one head's.
///
/// The cache's rows are position-major ([position][KV head][dim]), so a
/// KV head's slice of a tile is 16 strided pieces that the hardware's
/// prefetchers do not follow: each step prefetches its share of the next
/// tile's rows of its KV head into L2 (the group's steps take the 16 rows
/// in turns). On a 1-thread decode at 4,096 positions of a model whose
/// step is almost all attention (AMD EPYC, Zen 5) the pairs alone gained
/// 3%, the prefetches with them 11% (1 thread) and 15% (2 threads); with
/// the cache in the core's caches (every tile read from the first) the pairs cut
/// the attention's time by a third.
///
/// A tile's 16 scores are 16 dot products of a query head with key rows,
/// each a 16-lane vector of partial sums (fused multiply-adds over the head
/// dim, as the values' weighted sum is: every target fuses them, so every
/// target gets the same bits). They are folded by a transpose-and-add tree
/// (16 vectors -> 8 -> 4 -> 2 -> 1) whose every lane adds the same two
/// partials as the per-row fold by halves: lane i of the result is row i's
/// sum in the fold's order, for 15 two-vector shuffles and adds instead of
/// 16 four-step folds.
///
/// The steps: the constructor makes the call's flat caches and constants;
/// emit opens the row's stack buffers (resetHeads), walks the whole tiles
/// and then the masked last one (tile, each head's step headTile: foldDots
/// of its keys, softmaxStep, the values), then storeOutputs.
class DecodeRow {
public:
  DecodeRow(Emitter &e, Value q, Value keys, Value values, Value out, Value position,
            Value headBegin, Value headEnd, int64_t heads, int64_t kvHeads, int64_t d,
            int64_t window, float scale, int64_t vectorLanes)
      : position(position), q(q), keys(keys), values(values), out(out),
        headBegin(headBegin), headEnd(headEnd), heads(heads), d(d), window(window),
        scale(scale), chunks(d / kLanes), group(heads / kvHeads), kvWidth(kvHeads * d),
        // Two heads of a group a step where the registers hold both (32
        // of them: a pair's queries, dots and fold trees take about 24).
        pairHeads(vectorLanes >= kLanes && heads / kvHeads >= 2) {
    // The caches as flat arrays (their rows are contiguous).
    SmallVector<ReassociationIndices> both{{0, 1}};
    flatKeys = memref::CollapseShapeOp::create(e.b, e.loc, keys, both);
    flatValues = memref::CollapseShapeOp::create(e.b, e.loc, values, both);
    rows = memref::DimOp::create(e.b, e.loc, q, 0);
    if (!this->position)
      this->position = e.index(0);
    laneType = VectorType::get({kLanes}, e.b.getI32Type());
    SmallVector<int32_t> laneNumbers;
    for (int32_t i = 0; i < kLanes; ++i)
      laneNumbers.push_back(i);
    lanes = arith::ConstantOp::create(
        e.b, e.loc, DenseElementsAttr::get(laneType, ArrayRef<int32_t>(laneNumbers)));
  }

  /// Tiles outermost, and per tile every head of the range in turn, their
  /// states in stack buffers between tiles; a whole tile addresses its keys
  /// and values by one flat index plus constants (per key row indices, as
  /// the rows loop below keeps, took a register or a stack slot each). The
  /// cache is read in position order, a tile's rows (every KV head's slice
  /// of 16 positions) one after the other, and a group's later heads find
  /// them in L1. On a 1-thread decode of bench/model's hidden-2048 model at
  /// about 1,100 positions this took attention from 26% of the step to 20%
  /// (perf samples, AMD EPYC).
  void emit(OpBuilder &b1, Location l1) {
    Emitter e1{b1, l1};
    r = e1.index(0);
    std::tie(first, end) = e1.keysUpTo(position, window);
    lastKeyRow = arith::SubIOp::create(b1, l1, memref::DimOp::create(b1, l1, keys, 0),
                                       e1.index(1));
    resetHeads(e1);
    Value whole = wholeTilesEnd(e1, first, end);
    e1.forEach(first, whole, kLanes, [&](OpBuilder &b2, Location l2, Value t) {
      tile(b2, l2, t, /*masked=*/false);
    });
    auto tail = scf::IfOp::create(
        b1, l1, arith::CmpIOp::create(b1, l1, arith::CmpIPredicate::slt, whole, end),
        /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b1);
      b1.setInsertionPoint(tail.thenBlock()->getTerminator());
      tile(b1, l1, whole, /*masked=*/true);
    }
    storeOutputs(e1);
  }

  /// The row's query count (1 for a decode step) and position.
  Value rows, position;

private:
  /// The range's heads' running max, sum and accumulators in stack
  /// buffers, at -inf, 0 and 0.
  void resetHeads(Emitter &e1) {
    Type f32 = e1.b.getF32Type();
    maxBuf = memref::AllocaOp::create(e1.b, e1.loc, MemRefType::get({heads}, f32));
    sumBuf = memref::AllocaOp::create(e1.b, e1.loc, MemRefType::get({heads}, f32));
    accBuf = memref::AllocaOp::create(e1.b, e1.loc, MemRefType::get({heads, d}, f32));
    groupSize = e1.index(group);
    e1.forEach(headBegin, headEnd, 1, [&](OpBuilder &b2, Location l2, Value h) {
      Emitter e2{b2, l2};
      memref::StoreOp::create(b2, l2, e2.f32(lowest), maxBuf, h);
      memref::StoreOp::create(b2, l2, e2.f32(0.0f), sumBuf, h);
      for (int64_t c = 0; c < chunks; ++c)
        e2.store(e2.splatF32(0.0f), accBuf, {h, e2.index(c * kLanes)});
    });
  }

  /// The range's heads over the tile of keys [t, t + 16); masked: the tile
  /// may pass `end`.
  void tile(OpBuilder &b2, Location l2, Value t, bool masked) {
    Emitter e2{b2, l2};
    Value valid;
    SmallVector<Value> keyRows;
    if (masked)
      valid = maskedTile(e2, t, end, keyRows);
    // Heads `hs` (of one KV head) over the tile, from their states in the
    // stack buffers to their next.
    auto step = [&](Emitter &e3, ArrayRef<Value> hs) {
      OpBuilder &b3 = e3.b;
      Location l3 = e3.loc;
      Value kvBase = e3.mulI(arith::DivUIOp::create(b3, l3, hs[0], groupSize), e3.index(d));
      SmallVector<SmallVector<Value>> qv(hs.size()), states(hs.size());
      for (size_t j = 0; j < hs.size(); ++j) {
        Value qBase = e3.mulI(hs[j], e3.index(d));
        states[j] = {memref::LoadOp::create(b3, l3, maxBuf, hs[j]),
                     memref::LoadOp::create(b3, l3, sumBuf, hs[j])};
        for (int64_t c = 0; c < chunks; ++c) {
          qv[j].push_back(e3.load(q, {r, e3.addI(qBase, e3.index(c * kLanes))}));
          states[j].push_back(e3.load(accBuf, {hs[j], e3.index(c * kLanes)}));
        }
      }
      Value tileBase;
      if (!masked) {
        tileBase = e3.addI(e3.mulI(t, e3.index(kvWidth)), kvBase);
        prefetchShare(e3, t, hs[0], kvBase);
      }
      SmallVector<SmallVector<Value>> next =
          headsTile(e3, keyRows, valid, kvBase, qv, states, tileBase);
      for (size_t j = 0; j < hs.size(); ++j) {
        memref::StoreOp::create(b3, l3, next[j][0], maxBuf, hs[j]);
        memref::StoreOp::create(b3, l3, next[j][1], sumBuf, hs[j]);
        for (int64_t c = 0; c < chunks; ++c)
          e3.store(next[j][2 + c], accBuf, {hs[j], e3.index(c * kLanes)});
      }
    };
    if (!pairHeads) {
      e2.forEach(headBegin, headEnd, 1, [&](OpBuilder &b3, Location l3, Value h) {
        Emitter e3{b3, l3};
        step(e3, {h});
      });
      return;
    }
    // Per KV head, its group's heads inside the range in pairs, then the
    // last one if their count is odd.
    forEachKvGroup(e2, headBegin, headEnd, group, [&](Emitter &e3, Value, Value from,
                                                      Value to) {
      OpBuilder &b3 = e3.b;
      Location l3 = e3.loc;
      Value count = arith::SubIOp::create(b3, l3, to, from);
      Value pairsEnd = e3.addI(
          from, e3.mulI(arith::DivUIOp::create(b3, l3, count, e3.index(2)), e3.index(2)));
      e3.forEach(from, pairsEnd, 2, [&](OpBuilder &b4, Location l4, Value h) {
        Emitter e4{b4, l4};
        step(e4, {h, e4.addI(h, e4.index(1))});
      });
      auto odd = scf::IfOp::create(
          b3, l3, arith::CmpIOp::create(b3, l3, arith::CmpIPredicate::ult, pairsEnd, to),
          /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b3);
      b3.setInsertionPoint(odd.thenBlock()->getTerminator());
      step(e3, {pairsEnd});
    });
  }

  /// This step's share of the next tile's key and value rows (of its KV
  /// head) prefetched: the group's steps take its 16 rows in turns, step
  /// j of the group (its first head h, two heads a step with pairHeads) the
  /// rows from j * ceil(16 / steps), clamped to the cache's last row. An
  /// odd group's last head, a step of its own after the pairs, is step
  /// (group - 1) / 2 and takes the last share.
  void prefetchShare(Emitter &e3, Value t, Value h, Value kvBase) {
    OpBuilder &b = e3.b;
    Location l = e3.loc;
    int64_t perStep = pairHeads ? 2 : 1;
    int64_t steps = (group + perStep - 1) / perStep;
    int64_t rowsPer = (kLanes + steps - 1) / steps;
    Value j = arith::DivUIOp::create(b, l, arith::RemUIOp::create(b, l, h, groupSize),
                                     e3.index(perStep));
    Value first = e3.addI(e3.addI(t, e3.index(kLanes * kPrefetchTiles)),
                          e3.mulI(j, e3.index(rowsPer)));
    auto element = cast<MemRefType>(keys.getType()).getElementType();
    int64_t perLine = 64 / (element.getIntOrFloatBitWidth() / 8);
    for (int64_t i = 0; i < rowsPer; ++i) {
      Value row = arith::MinUIOp::create(b, l, e3.addI(first, e3.index(i)), lastKeyRow);
      Value rowBase = e3.addI(e3.mulI(row, e3.index(kvWidth)), kvBase);
      for (int64_t c = 0; c < d; c += perLine) {
        Value at = e3.addI(rowBase, e3.index(c));
        for (Value flat : {flatKeys, flatValues})
          memref::PrefetchOp::create(b, l, flat, ValueRange{at}, /*isWrite=*/false,
                                     kPrefetchLocality, /*isDataCache=*/true);
      }
    }
  }

  /// The step over a tile of 16 keys (rows keyRows, lanes `valid` or all
  /// when null) of one or two query heads of a KV head (their queries qv,
  /// their states: running max, sum, accumulators), to their next states.
  /// Each key and value slice is loaded once for both heads, and each
  /// head's operations are the one-head step's in its order (the same
  /// bits); the two heads' independent chains give the core work to
  /// overlap (a head's step alone is a chain of latencies: dots, fold,
  /// softmax, then 16 dependent FMAs per accumulator).
  SmallVector<SmallVector<Value>> headsTile(Emitter &e3, ArrayRef<Value> keyRows,
                                            Value valid, Value kvBase,
                                            ArrayRef<SmallVector<Value>> qv,
                                            ArrayRef<SmallVector<Value>> head,
                                            Value tileBase) {
    size_t n = qv.size();
    // Element c * 16 of key i's slice in `cache`: with tileBase (a whole
    // tile), one flat index plus a constant, which the target folds into
    // the load's displacement.
    auto slice = [&](Value cache, Value flat, int64_t i, int64_t c) {
      if (tileBase)
        return e3.load(flat, {e3.addI(tileBase, e3.index(i * kvWidth + c * kLanes))});
      return e3.load(cache, {keyRows[i], e3.addI(kvBase, e3.index(c * kLanes))});
    };
    SmallVector<Value> folded = foldDots(e3, n, [&](int64_t i) {
      SmallVector<Value> keyChunks, dots;
      for (int64_t c = 0; c < chunks; ++c)
        keyChunks.push_back(slice(keys, flatKeys, i, c));
      for (size_t j = 0; j < n; ++j) {
        Value dot = e3.mulF(qv[j][0], keyChunks[0]);
        for (int64_t c = 1; c < chunks; ++c)
          dot = e3.fma(qv[j][c], keyChunks[c], dot);
        dots.push_back(dot);
      }
      return dots;
    });
    SmallVector<SoftmaxStep> steps;
    SmallVector<SmallVector<Value>> acc(n);
    for (size_t j = 0; j < n; ++j) {
      steps.push_back(softmaxStep(e3, folded[j], valid, head[j][0], head[j][1]));
      Value corrV = e3.splat(steps[j].correction);
      for (int64_t c = 0; c < chunks; ++c)
        acc[j].push_back(e3.mulF(head[j][2 + c], corrV));
    }
    for (int64_t i = 0; i < kLanes; ++i) {
      SmallVector<Value> w;
      for (size_t j = 0; j < n; ++j)
        w.push_back(e3.splat(vector::ExtractOp::create(e3.b, e3.loc, steps[j].weights,
                                                       ArrayRef<int64_t>{i})));
      for (int64_t c = 0; c < chunks; ++c) {
        Value value = slice(values, flatValues, i, c);
        for (size_t j = 0; j < n; ++j)
          acc[j][c] = e3.fma(w[j], value, acc[j][c]);
      }
    }
    SmallVector<SmallVector<Value>> next;
    for (size_t j = 0; j < n; ++j) {
      next.push_back({steps[j].max, steps[j].sum});
      next.back().append(acc[j]);
    }
    return next;
  }

  /// Lane (k, p) of fold(x, y): partial p of key k, x's keys first, from
  /// input vectors of `keysIn` keys with 16 / keysIn partials each.
  Value foldPair(Emitter &en, Value x, Value y, int64_t keysIn) {
    int64_t partsIn = kLanes / keysIn, partsOut = partsIn / 2;
    SmallVector<int64_t> low, high;
    for (int64_t source = 0; source < 2; ++source)
      for (int64_t k = 0; k < keysIn; ++k)
        for (int64_t part = 0; part < partsOut; ++part) {
          low.push_back(source * kLanes + k * partsIn + part);
          high.push_back(source * kLanes + k * partsIn + partsOut + part);
        }
    return en.addF(vector::ShuffleOp::create(en.b, en.loc, x, y, low),
                   vector::ShuffleOp::create(en.b, en.loc, x, y, high));
  }

  /// Per head j < n, the 16 dot-product vectors of a tile's keys
  /// (dotsOf(i)[j]: key i's 16 partial sums) folded into one vector of
  /// their sums, lane i key i's: each folds into the tree as soon as it has
  /// a partner of the same size (a binary counter), so at most
  /// log2(16) + 1 of them are live at once per head.
  SmallVector<Value> foldDots(Emitter &en, size_t n,
                              function_ref<SmallVector<Value>(int64_t)> dotsOf) {
    SmallVector<SmallVector<std::pair<Value, int64_t>>> pending(n);
    for (int64_t i = 0; i < kLanes; ++i) {
      SmallVector<Value> dots = dotsOf(i);
      for (size_t j = 0; j < n; ++j) {
        Value dot = dots[j];
        int64_t keysIn = 1;
        while (!pending[j].empty() && pending[j].back().second == keysIn) {
          dot = foldPair(en, pending[j].back().first, dot, keysIn);
          pending[j].pop_back();
          keysIn *= 2;
        }
        pending[j].push_back({dot, keysIn});
      }
    }
    SmallVector<Value> folded;
    for (size_t j = 0; j < n; ++j)
      folded.push_back(pending[j].front().first);
    return folded;
  }

  /// The online softmax's step over a tile: from the folded dots (lanes
  /// `valid`, or all when null), the running max and sum, to the new max
  /// and sum, the correction of what came before and the tile's weights.
  struct SoftmaxStep {
    Value max, sum, correction, weights;
  };
  SoftmaxStep softmaxStep(Emitter &en, Value dots, Value valid, Value maxOld,
                          Value sumOld) {
    Value scores = en.mulF(dots, en.splatF32(scale));
    if (valid)
      scores = en.select(valid, scores, en.splatF32(lowest));
    Value maxNew = en.maxF(maxOld, en.maxOfLanes(scores));
    // Differences from the new max, never positive: expNonPositive.
    // exp(-inf) is taken as 0 explicitly: the polynomial clamps its
    // argument at -87.
    Value isFirst = arith::CmpFOp::create(en.b, en.loc, arith::CmpFPredicate::OEQ, maxOld,
                                          en.f32(lowest));
    Value correction = en.select(isFirst, en.f32(0.0f), en.expNonPositive(en.subF(maxOld, maxNew)));
    Value weights = en.expNonPositive(en.subF(scores, en.splat(maxNew)));
    if (valid)
      weights = en.select(valid, weights, en.splatF32(0.0f));
    return {maxNew, en.addF(en.mulF(sumOld, correction), en.sumOfLanes(weights)),
            correction, weights};
  }

  /// Tile [t, t + 16) of a walk over keys before `end` that may pass it:
  /// its key rows (those past `end` clamped to t, in bounds) in keyRows, and
  /// the mask of its lanes before `end`.
  Value maskedTile(Emitter &en, Value t, Value end, SmallVectorImpl<Value> &keyRows) {
    Value remaining = arith::IndexCastOp::create(
        en.b, en.loc, en.b.getI32Type(), arith::SubIOp::create(en.b, en.loc, end, t));
    Value valid = arith::CmpIOp::create(
        en.b, en.loc, arith::CmpIPredicate::slt, lanes,
        vector::BroadcastOp::create(en.b, en.loc, laneType, remaining));
    for (int64_t i = 0; i < kLanes; ++i) {
      Value j = en.addI(t, en.index(i));
      Value inside = arith::CmpIOp::create(en.b, en.loc, arith::CmpIPredicate::slt, j, end);
      keyRows.push_back(en.select(inside, j, t));
    }
    return valid;
  }

  /// The end of the whole tiles of keys [first, end).
  Value wholeTilesEnd(Emitter &en, Value first, Value end) {
    Value tiles = arith::DivUIOp::create(
        en.b, en.loc, arith::SubIOp::create(en.b, en.loc, end, first), en.index(kLanes));
    return en.addI(first, en.mulI(tiles, en.index(kLanes)));
  }

  /// out[r, h] = acc[h] / sum[h] for every head of the range.
  void storeOutputs(Emitter &e1) {
    e1.forEach(headBegin, headEnd, 1, [&](OpBuilder &b2, Location l2, Value h) {
      Emitter e2{b2, l2};
      Value inv = e2.splat(e2.divF(e2.f32(1.0f), memref::LoadOp::create(b2, l2, sumBuf, h)));
      Value qBase = e2.mulI(h, e2.index(d));
      for (int64_t c = 0; c < chunks; ++c)
        e2.store(e2.mulF(e2.load(accBuf, {h, e2.index(c * kLanes)}), inv), out,
                 {r, e2.addI(qBase, e2.index(c * kLanes))});
    });
  }

  static constexpr float lowest = -std::numeric_limits<float>::infinity();
  /// How far ahead the steps prefetch (tiles), and into which cache: L2
  /// (locality 2). On a 1-thread decode at 4,096 positions (AMD EPYC, an
  /// attention-bound model) a tile ahead into L2 measured best; two tiles
  /// ahead, or into L1, no better.
  static constexpr int64_t kPrefetchTiles = 1;
  static constexpr int32_t kPrefetchLocality = 2;

  Value q, keys, values, out, headBegin, headEnd;
  int64_t heads, d, window;
  float scale;
  int64_t chunks, group, kvWidth;
  bool pairHeads;
  // Per call.
  Value flatKeys, flatValues, lanes;
  VectorType laneType;
  // Per row.
  Value r, first, end, maxBuf, sumBuf, accBuf, groupSize;
  /// The cache's last row, where the prefetches of the next tile stop.
  Value lastKeyRow;
};

} // namespace

void mlir::cq4p::emitVectorAttention(OpBuilder &b, Location loc, Value q,
                                      Value keys, Value values, Value out,
                                      Value position, Value headBegin,
                                      Value headEnd, int64_t heads,
                                      int64_t kvHeads, int64_t d,
                                      int64_t window, float scale,
                                      int64_t vectorLanes) {
  Emitter e{b, loc};
  DecodeRow row(e, q, keys, values, out, position, headBegin, headEnd, heads, kvHeads, d,
                window, scale, vectorLanes);
  Value oneRowStep =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, row.rows, e.index(1));
  auto byRows = scf::IfOp::create(b, loc, oneRowStep, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard rowsGuard(b);
  b.setInsertionPoint(byRows.thenBlock()->getTerminator());
  row.emit(b, loc);
  b.setInsertionPoint(byRows.elseBlock()->getTerminator());
  emitPromptAttention(b, loc, q, keys, values, out, row.rows, row.position, headBegin,
                      headEnd, heads, kvHeads, d, window, scale, vectorLanes);
}

FlatSymbolRefAttr mlir::cq4p::createCachedAttentionKernel(
    KernelBuilder &kernels, int64_t heads, int64_t kvHeads, int64_t d,
    int64_t window, float scale, Type cacheElement) {
  MLIRContext *ctx = kernels.getContext();
  KernelSpec spec;
  spec.name = "cq4p_cached_attention_h" + std::to_string(heads) + "_kv" +
              std::to_string(kvHeads) + "_d" + std::to_string(d) + "_w" +
              std::to_string(window) + "_s" + floatTag(scale) +
              (cacheElement.isF16() ? "_f16" : "");
  spec.kind = KernelKind::cached_attention;
  spec.n = heads;
  spec.k = d;
  spec.groupSize = kvHeads;
  spec.window = window;
  Type index = IndexType::get(ctx);
  int64_t kvWidth = kvHeads * d;
  spec.params = {{"q", rowsType(ctx, heads * d)},
                 {"keys", MemRefType::get({kDynamic, kvWidth}, cacheElement), "context"},
                 {"values", MemRefType::get({kDynamic, kvWidth}, cacheElement), "context"},
                 {"out", rowsType(ctx, heads * d)},
                 {"rows", index},
                 {"position", index},
                 {"context", index},
                 {"head_begin", index},
                 {"head_end", index}};
  // The one attention op (q's and out's dim 0 are `rows`); each target
  // lowers it its own way.
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    AttentionOp::create(b, loc, args[0], args[1], args[2], args[3], args[7],
                        args[8], args[5], b.getI64IntegerAttr(heads),
                        b.getI64IntegerAttr(kvHeads), b.getI64IntegerAttr(d),
                        b.getI64IntegerAttr(window), b.getF32FloatAttr(scale));
  });
}

FlatSymbolRefAttr mlir::cq4p::createColumnsKernel(KernelBuilder &kernels,
                                                  int64_t inWidth,
                                                  int64_t outWidth,
                                                  int64_t offset) {
  MLIRContext *ctx = kernels.getContext();
  KernelSpec spec;
  spec.name = "cq4p_columns_" + std::to_string(inWidth) + "_o" +
              std::to_string(offset) + "_w" + std::to_string(outWidth);
  spec.kind = KernelKind::columns;
  spec.n = outWidth;
  spec.k = inWidth;
  spec.params = {{"x", rowsType(ctx, inWidth)},
                 {"out", rowsType(ctx, outWidth)},
                 {"rows", IndexType::get(ctx)}};
  // Columns [0, copied) come from x, the rest are zeros; both multiples of
  // 16 (the planner checks the widths and the offset).
  int64_t copied = std::min(outWidth, inWidth - offset);
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Value x = args[0], out = args[1], rows = args[2];
    Emitter e{b, loc};
    e.forEach(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.forEach(e1.index(0), e1.index(copied), kLanes,
              [&](OpBuilder &b2, Location l2, Value j) {
                Emitter e2{b2, l2};
                e2.store(e2.load(x, {r, e2.addI(j, e2.index(offset))}), out, {r, j});
              });
      if (copied < outWidth)
        e1.forEach(e1.index(copied), e1.index(outWidth), kLanes,
                [&](OpBuilder &b2, Location l2, Value j) {
                  Emitter e2{b2, l2};
                  e2.store(e2.splatF32(0.0f), out, {r, j});
                });
    });
  });
}

FlatSymbolRefAttr mlir::cq4p::createScaleByKernel(KernelBuilder &kernels,
                                                  int64_t width,
                                                  Type scalarElement) {
  MLIRContext *ctx = kernels.getContext();
  KernelSpec spec;
  spec.name = "cq4p_scale_by_" + std::to_string(width) +
              (scalarElement.isF16() ? "_f16" : "_f32");
  spec.kind = KernelKind::scale_by;
  spec.n = width;
  spec.params = {{"x", rowsType(ctx, width)},
                 {"s", MemRefType::get({1}, scalarElement)},
                 {"out", rowsType(ctx, width)},
                 {"rows", IndexType::get(ctx)}};
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Value x = args[0], s = args[1], out = args[2], rows = args[3];
    Emitter e{b, loc};
    Value factor = memref::LoadOp::create(b, loc, s, ValueRange{e.index(0)});
    if (!scalarElement.isF32())
      factor = arith::ExtFOp::create(b, loc, e.f32Type(), factor);
    Value splat = e.splat(factor);
    e.forEach(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.forEach(e1.index(0), e1.index(width), kLanes,
              [&](OpBuilder &b2, Location l2, Value i) {
                Emitter e2{b2, l2};
                e2.store(e2.mulF(e2.load(x, {r, i}), splat), out, {r, i});
              });
    });
  });
}

FlatSymbolRefAttr mlir::cq4p::createSoftcapKernel(KernelBuilder &kernels,
                                                  int64_t width, float cap) {
  return createElementwiseKernel(
      kernels, "cq4p_softcap_" + std::to_string(width) + "_c" + floatTag(cap),
      KernelKind::softcap, width, {"x"}, Float32Type::get(kernels.getContext()),
      [&](Emitter &e, ArrayRef<Value> v) {
        Value inner = e.divF(v[0], e.splatF32(cap));
        return e.mulF(e.splatF32(cap), math::TanhOp::create(e.b, e.loc, inner));
      });
}

FlatSymbolRefAttr mlir::cq4p::createShortConvKernel(KernelBuilder &kernels,
                                                    int64_t h, int64_t l,
                                                    Type weightElement) {
  MLIRContext *ctx = kernels.getContext();
  KernelSpec spec;
  spec.name = "cq4p_short_conv_" + std::to_string(h) + "_l" + std::to_string(l) +
              (weightElement.isF16() ? "_f16" : "_f32");
  spec.kind = KernelKind::short_conv;
  spec.n = h;
  spec.k = l;
  Type index = IndexType::get(ctx);
  spec.params = {{"x", rowsType(ctx, 3 * h)},
                 {"w", MemRefType::get({h * l}, weightElement)},
                 {"state", MemRefType::get({std::max<int64_t>(l - 1, 1), h},
                                           Float32Type::get(ctx))},
                 {"out", rowsType(ctx, h)},
                 {"rows", index},
                 {"position", index},
                 {"begin", index},
                 {"end", index}};
  // Work items are 16 channels each; a thread runs every row of its
  // channels in order, carrying the last l - 1 rows of B x in registers.
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Value x = args[0], w = args[1], state = args[2], out = args[3];
    Value rows = args[4], position = args[5], begin = args[6], end = args[7];
    Emitter e{b, loc};
    Value atStart = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          position, e.index(0));
    e.forEach(begin, end, 1, [&](OpBuilder &b1, Location l1, Value item) {
      Emitter e1{b1, l1};
      Value c = e1.mulI(item, e1.index(kLanes));
      // The kernel's taps for these 16 channels: w[c * l + j].
      SmallVector<Value> taps;
      for (int64_t j = 0; j < l; ++j) {
        Value tap = e1.splatF32(0.0f);
        for (int64_t lane = 0; lane < kLanes; ++lane) {
          Value at = e1.addI(e1.mulI(e1.addI(c, e1.index(lane)), e1.index(l)),
                             e1.index(j));
          Value v = memref::LoadOp::create(b1, l1, w, ValueRange{at});
          if (!weightElement.isF32())
            v = arith::ExtFOp::create(b1, l1, e1.f32Type(), v);
          tap = vector::InsertOp::create(b1, l1, v, tap, ArrayRef<int64_t>{lane});
        }
        taps.push_back(tap);
      }
      SmallVector<Value> history;
      for (int64_t j = 0; j + 1 < l; ++j)
        history.push_back(arith::SelectOp::create(
            b1, l1, atStart, e1.splatF32(0.0f), e1.load(state, {e1.index(j), c})));
      auto rowLoop = scf::ForOp::create(
          b1, l1, e1.index(0), rows, e1.index(1), history,
          [&](OpBuilder &b2, Location l2, Value r, ValueRange carried) {
            Emitter e2{b2, l2};
            Value bv = e2.load(x, {r, c});
            Value cv = e2.load(x, {r, e2.addI(c, e2.index(h))});
            Value xv = e2.load(x, {r, e2.addI(c, e2.index(2 * h))});
            Value bx = e2.mulF(bv, xv);
            // y = sum_j taps[j] * Bx[t - (l - 1) + j], in j order.
            Value y;
            for (int64_t j = 0; j < l; ++j) {
              Value term = e2.mulF(taps[j], j + 1 < l ? carried[j] : bx);
              y = j == 0 ? term : e2.addF(y, term);
            }
            e2.store(e2.mulF(cv, y), out, {r, c});
            SmallVector<Value> next(carried.begin() + std::min<int64_t>(1, carried.size()),
                                    carried.end());
            if (l > 1)
              next.push_back(bx);
            scf::YieldOp::create(b2, l2, next);
          });
      for (int64_t j = 0; j + 1 < l; ++j)
        e1.store(rowLoop.getResult(j), state, {e1.index(j), c});
    });
  });
}

namespace {

/// A panel matmul over a dispatch range's super-blocks followed by an
/// epilogue over just those channels while they are in cache: `extra` is
/// the epilogue's operand (the parameter before y), `epilogue(e, extra, y,
/// r, c)` the value stored to y[r][c].
FlatSymbolRefAttr createEpilogueMatmulKernel(
    KernelBuilder &kernels, WeightType w, bool single, StringRef kind,
    StringRef suffix, KernelKind kernelKind, KernelParam extra,
    function_ref<Value(Emitter &, Value, Value, Value, Value)> epilogue) {
  MLIRContext *ctx = kernels.getContext();
  int64_t n = w.getN(), k = w.getK(), ng = w.getNumGroups();
  int64_t rows = single ? 1 : kDynamic;
  KernelSpec spec;
  spec.name = (single ? "cq4p_gemv_" : "cq4p_gemm_") + kind.str() + "_" +
              std::to_string(n) + "x" + std::to_string(k) + "_gs" +
              std::to_string(w.getGroupSize()) + suffix.str();
  spec.kind = kernelKind;
  spec.describeWeight(w);
  Type f32 = Float32Type::get(ctx), i8 = IntegerType::get(ctx, 8);
  Type index = IndexType::get(ctx);
  spec.params = {
      {"weight.panels", panelsType(w)},
      {"weight.norm_panels",
       MemRefType::get({w.getNumSuperBlocks(), ng, CQ4P_PANEL_CHANNELS}, f32)},
      {"weight.cb_i8", MemRefType::get({CQ4P_CODEBOOK_LEVELS}, i8)},
      {"act", MemRefType::get({rows, k}, i8)},
      {"act_scales", MemRefType::get({rows, ng}, f32)},
      extra,
      {"y", MemRefType::get({rows, n}, f32)},
      {"rows", index},
      {"sb_begin", index},
      {"sb_end", index}};
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Value operand = args[5], y = args[6], rowCount = args[7],
          sbBegin = args[8], sbEnd = args[9];
    PanelMatmulOp::create(b, loc, args[0], args[1], args[2], args[3], args[4],
                          y, sbBegin, sbEnd);
    Emitter e{b, loc};
    forRangeChannels(e, sbBegin, sbEnd, n, single ? e.index(1) : rowCount,
                     [&](Emitter &e2, Value r, Value c) {
                       e2.store(epilogue(e2, operand, y, r, c), y, {r, c});
                     });
  });
}

} // namespace

FlatSymbolRefAttr mlir::cq4p::createBiasedMatmulKernel(KernelBuilder &kernels,
                                                       WeightType w,
                                                       Type biasElement,
                                                       bool single) {
  // The matmul, then the bias of the range's channels.
  return createEpilogueMatmulKernel(
      kernels, w, single, "bias", biasElement.isF16() ? "_f16" : "_f32",
      KernelKind::matmul_bias, {"bias", MemRefType::get({w.getN()}, biasElement)},
      [](Emitter &e, Value bias, Value y, Value r, Value c) {
        return e.addF(e.load(y, {r, c}), e.load(bias, {c}));
      });
}

FlatSymbolRefAttr mlir::cq4p::createResidualMatmulKernel(KernelBuilder &kernels,
                                                         WeightType w,
                                                         bool single) {
  // The matmul, then the residual added to the range's channels: the
  // separate add's pass over both rows and its dispatch are gone. The sum
  // is the add kernel's (one fp32 addition, commutative), so the logits
  // keep their bits.
  return createEpilogueMatmulKernel(
      kernels, w, single, "residual", "", KernelKind::matmul_residual,
      {"residual", MemRefType::get({single ? 1 : kDynamic, w.getN()},
                                   Float32Type::get(kernels.getContext()))},
      [](Emitter &e, Value residual, Value y, Value r, Value c) {
        return e.addF(e.load(residual, {r, c}), e.load(y, {r, c}));
      });
}

FlatSymbolRefAttr mlir::cq4p::createConvertKernel(KernelBuilder &kernels,
                                                  int64_t width,
                                                  Type outElement) {
  return createElementwiseKernel(
      kernels,
      "cq4p_convert_" + std::to_string(width) + (outElement.isF16() ? "_f16" : "_f32"),
      KernelKind::convert, width, {"x"}, outElement,
      [](Emitter &, ArrayRef<Value> v) { return v[0]; });
}

FlatSymbolRefAttr mlir::cq4p::createFusedMlpKernel(KernelBuilder &kernels,
                                                   WeightType w,
                                                   Activation activation,
                                                   bool single) {
  MLIRContext *ctx = kernels.getContext();
  int64_t n = w.getN(), k = w.getK(), ng = w.getNumGroups();
  int64_t rows = single ? 1 : kDynamic;
  KernelSpec spec;
  spec.name = std::string(single ? "cq4p_mlp_gemv_" : "cq4p_mlp_gemm_") +
              std::to_string(n) + "x" + std::to_string(k) + "_gs" +
              std::to_string(w.getGroupSize()) + "_" +
              stringifyActivation(activation).str();
  spec.kind = KernelKind::dense_mlp;
  spec.describeWeight(w);
  Type f32 = Float32Type::get(ctx), i8 = IntegerType::get(ctx, 8);
  Type index = IndexType::get(ctx);
  auto normPanels = MemRefType::get(
      {w.getNumSuperBlocks(), ng, CQ4P_PANEL_CHANNELS}, f32);
  auto cb = MemRefType::get({CQ4P_CODEBOOK_LEVELS}, i8);
  auto outType = MemRefType::get({rows, n}, f32);
  spec.params = {{"gate.panels", panelsType(w)},
                 {"gate.norm_panels", normPanels},
                 {"gate.cb_i8", cb},
                 {"up.panels", panelsType(w)},
                 {"up.norm_panels", normPanels},
                 {"up.cb_i8", cb},
                 {"act", MemRefType::get({rows, k}, i8)},
                 {"act_scales", MemRefType::get({rows, ng}, f32)},
                 {"g", outType},
                 {"u", outType},
                 {"out", outType},
                 {"rows", index},
                 {"sb_begin", index},
                 {"sb_end", index}};
  bool silu = activation == Activation::silu;
  // Both matmuls over the range's super-blocks, then the gating of just
  // those channels while they are in cache: one dispatch instead of three.
  return kernels.getOrCreate(spec, [&](OpBuilder &b, Location loc,
                                       ValueRange args) {
    Value act = args[6], scales = args[7], g = args[8], u = args[9],
          out = args[10], rowCount = args[11], sbBegin = args[12],
          sbEnd = args[13];
    PanelMatmulOp::create(b, loc, args[0], args[1], args[2], act, scales, g,
                          sbBegin, sbEnd);
    PanelMatmulOp::create(b, loc, args[3], args[4], args[5], act, scales, u,
                          sbBegin, sbEnd);
    Emitter e{b, loc};
    forRangeChannels(e, sbBegin, sbEnd, n, single ? e.index(1) : rowCount,
                     [&](Emitter &e2, Value r, Value c) {
                       Value gv = e2.load(g, {r, c});
                       e2.store(e2.mulF(e2.activate(gv, silu), e2.load(u, {r, c})),
                                out, {r, c});
                     });
  });
}
