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
// does not depend on the target.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Codegen/ModelKernels.h"

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

/// Small helpers over an OpBuilder at a location.
struct Emitter {
  OpBuilder &b;
  Location loc;

  Type f32() { return b.getF32Type(); }
  VectorType vec() { return VectorType::get({kLanes}, f32()); }
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value f32c(float v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value splat(Value scalar) {
    return vector::BroadcastOp::create(b, loc, vec(), scalar);
  }
  Value splatc(float v) { return splat(f32c(v)); }
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
  Value add(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value addi(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value muli(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }

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
  Value sum(Value v) {
    return fold(v, [&](Value x, Value y) { return add(x, y); });
  }
  Value max(Value v) {
    return fold(v, [&](Value x, Value y) -> Value {
      return arith::MaximumFOp::create(b, loc, x, y);
    });
  }

  /// silu(x) = x / (1 + exp(-x)), or gelu_tanh(x) = 0.5 x (1 + tanh(
  /// sqrt(2/pi) (x + 0.044715 x^3))).
  Value activate(Value x, bool silu) {
    if (silu)
      return div(x, add(splatc(1.0f),
                        math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x))));
    Value cube = mul(mul(x, x), x);
    Value inner = mul(splatc(0.7978845608028654f),
                      add(x, mul(splatc(0.044715f), cube)));
    return mul(mul(splatc(0.5f), x),
               add(splatc(1.0f), math::TanhOp::create(b, loc, inner)));
  }

  /// for (i = lb; i < ub; i += step) body(i)
  void loop(Value lb, Value ub, int64_t step,
            function_ref<void(OpBuilder &, Location, Value)> body) {
    scf::ForOp::create(b, loc, lb, ub, index(step), ValueRange{},
                       [&](OpBuilder &nb, Location nl, Value i, ValueRange) {
                         body(nb, nl, i);
                         scf::YieldOp::create(nb, nl);
                       });
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
  e.loop(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
    Emitter e1{b1, l1};
    e1.loop(begin, end, kLanes, [&](OpBuilder &b2, Location l2, Value c) {
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
    e.loop(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.loop(e1.index(0), e1.index(width), d,
              [&](OpBuilder &b2, Location l2, Value base) {
                Emitter e2{b2, l2};
                auto sumLoop = scf::ForOp::create(
                    b2, l2, e2.index(0), e2.index(d), e2.index(kLanes),
                    ValueRange{e2.splatc(0.0f)},
                    [&](OpBuilder &b3, Location l3, Value i, ValueRange acc) {
                      Emitter e3{b3, l3};
                      Value v = e3.load(x, {r, e3.addi(base, i)});
                      scf::YieldOp::create(
                          b3, l3, ValueRange{e3.add(acc[0], e3.mul(v, v))});
                    });
                Value mean = e2.div(e2.sum(sumLoop.getResult(0)),
                                    e2.f32c(float(d)));
                Value root =
                    math::SqrtOp::create(b2, l2, e2.add(mean, e2.f32c(epsilon)));
                Value inv = e2.splat(e2.div(e2.f32c(1.0f), root));
                e2.loop(e2.index(0), e2.index(d), kLanes,
                        [&](OpBuilder &b3, Location l3, Value i) {
                          Emitter e3{b3, l3};
                          Value col = e3.addi(base, i);
                          Value v = e3.mul(e3.load(x, {r, col}), inv);
                          if (weighted) {
                            Value scale = e3.load(w, {i});
                            if (unitOffset)
                              scale = e3.add(e3.splatc(1.0f), scale);
                            v = e3.mul(v, scale);
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
    auto halfType = VectorType::get({half}, e.f32());
    Value freqs = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(halfType, ArrayRef<float>(invFreq)));
    e.loop(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      Value p = arith::IndexCastOp::create(b1, l1, b1.getI64Type(),
                                           e1.addi(position, r));
      Value pf = arith::SIToFPOp::create(b1, l1, e1.f32(), p);
      Value angles = e1.mul(vector::BroadcastOp::create(b1, l1, halfType, pf),
                            freqs);
      Value cos = math::CosOp::create(b1, l1, angles);
      Value sin = math::SinOp::create(b1, l1, angles);
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
      e1.loop(e1.index(0), e1.index(width), d,
              [&](OpBuilder &b2, Location l2, Value head) {
                Emitter e2{b2, l2};
                for (auto [j, c] : llvm::enumerate(cosParts)) {
                  int64_t lanes = cast<VectorType>(c.getType()).getNumElements();
                  auto partType = VectorType::get({lanes}, e2.f32());
                  Value lo = e2.addi(head, e2.index(int64_t(j) * kLanes));
                  Value hi = e2.addi(lo, e2.index(half));
                  Value x1 = vector::LoadOp::create(b2, l2, partType, x,
                                                    ValueRange{r, lo});
                  Value x2 = vector::LoadOp::create(b2, l2, partType, x,
                                                    ValueRange{r, hi});
                  Value s = sinParts[j];
                  e2.store(e2.sub(e2.mul(x1, c), e2.mul(x2, s)), out, {r, lo});
                  e2.store(e2.add(e2.mul(x2, c), e2.mul(x1, s)), out, {r, hi});
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
    e.loop(e.index(0), args[count + 1], 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.loop(e1.index(0), e1.index(width), kLanes,
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
        return e.mul(e.activate(v[0], silu), v[1]);
      });
}

FlatSymbolRefAttr mlir::cq4p::createAddKernel(KernelBuilder &kernels,
                                              int64_t width) {
  return createElementwiseKernel(
      kernels, "cq4p_add_" + std::to_string(width), KernelKind::add, width, {"a", "b"},
      Float32Type::get(kernels.getContext()),
      [](Emitter &e, ArrayRef<Value> v) { return e.add(v[0], v[1]); });
}

FlatSymbolRefAttr mlir::cq4p::createScaleKernel(KernelBuilder &kernels,
                                                int64_t width, float factor) {
  return createElementwiseKernel(
      kernels, "cq4p_scale_" + std::to_string(width) + "_f" + floatTag(factor),
      KernelKind::scale, width, {"x"}, Float32Type::get(kernels.getContext()),
      [&](Emitter &e, ArrayRef<Value> v) { return e.mul(v[0], e.splatc(factor)); });
}

void mlir::cq4p::emitVectorAttention(OpBuilder &b, Location loc, Value q,
                                      Value keys, Value values, Value out,
                                      Value position, Value headBegin,
                                      Value headEnd, int64_t heads,
                                      int64_t kvHeads, int64_t d,
                                      int64_t window, float scale) {
  int64_t chunks = d / kLanes;
  int64_t group = heads / kvHeads;
  int64_t kvWidth = kvHeads * d;
  // The caches as flat arrays (their rows are contiguous).
  SmallVector<ReassociationIndices> both{{0, 1}};
  Value flatKeys = memref::CollapseShapeOp::create(b, loc, keys, both);
  Value flatValues = memref::CollapseShapeOp::create(b, loc, values, both);
  // Keys are visited in tiles of kLanes: their scores fill one vector, so
  // the softmax's exponentials and its running max and sum are vector ops
  // and the online rescale happens once per tile (a flash-attention decode).
  //
  // The query heads that share a KV head (GQA) walk the cache together, one
  // tile at a time: the tile's key and value rows come from memory once and
  // from L1 for the group's other heads (each head's own accumulators stay
  // in registers, so the loop body is one head's at a time). A range of
  // heads that cuts a group takes its partial groups one head at a time.
  //
  // A tile's 16 scores are 16 dot products of a query head with key rows,
  // each a 16-lane vector of partial sums (fused multiply-adds over the head
  // dim, as the values' weighted sum is: every target fuses them, so every
  // target gets the same bits). They are folded by a transpose-and-add tree
  // (16 vectors -> 8 -> 4 -> 2 -> 1) whose every lane adds the same two
  // partials as the per-row fold by halves: lane i of the result is row i's
  // sum in the fold's order, for 15 two-vector shuffles and adds instead of
  // 16 four-step folds.
  float lowest = -std::numeric_limits<float>::infinity();
  Value rows = memref::DimOp::create(b, loc, q, 0);
  Emitter e{b, loc};
  if (!position)
    position = e.index(0);
  auto laneType = VectorType::get({kLanes}, b.getI32Type());
  SmallVector<int32_t> laneNumbers;
  for (int32_t i = 0; i < kLanes; ++i)
    laneNumbers.push_back(i);
  Value lanes = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(laneType, ArrayRef<int32_t>(laneNumbers)));

  // Lane (k, p) of fold(x, y): partial p of key k, x's keys first, from
  // input vectors of `keysIn` keys with 16 / keysIn partials each.
  auto foldPair = [&](Emitter &en, Value x, Value y, int64_t keysIn) {
    int64_t partsIn = kLanes / keysIn, partsOut = partsIn / 2;
    SmallVector<int64_t> low, high;
    for (int64_t source = 0; source < 2; ++source)
      for (int64_t k = 0; k < keysIn; ++k)
        for (int64_t part = 0; part < partsOut; ++part) {
          low.push_back(source * kLanes + k * partsIn + part);
          high.push_back(source * kLanes + k * partsIn + partsOut + part);
        }
    return en.add(vector::ShuffleOp::create(en.b, en.loc, x, y, low),
                  vector::ShuffleOp::create(en.b, en.loc, x, y, high));
  };

  // Key row t + i of a tile, or t (in bounds) when that passes `end`.
  auto tileRow = [&](Emitter &en, Value t, Value i, Value end) -> Value {
    Value j = en.addi(t, i);
    Value inside = arith::CmpIOp::create(en.b, en.loc, arith::CmpIPredicate::slt, j, end);
    return arith::SelectOp::create(en.b, en.loc, inside, j, t);
  };
  // The 16 key rows of tile [t, t + 16), each clamped by tileRow.
  auto tileRows = [&](Emitter &en, Value t, Value end, SmallVectorImpl<Value> &keyRows) {
    for (int64_t i = 0; i < kLanes; ++i)
      keyRows.push_back(tileRow(en, t, en.index(i), end));
  };
  // Tile [t, t + 16) of a walk over keys before `end` that may pass it:
  // its key rows (clamped to the tile's first past `end`, in bounds) in
  // keyRows, and the mask of its lanes before `end`.
  auto maskedTile = [&](Emitter &en, Value t, Value end,
                        SmallVectorImpl<Value> &keyRows) -> Value {
    Value remaining = arith::IndexCastOp::create(
        en.b, en.loc, en.b.getI32Type(), arith::SubIOp::create(en.b, en.loc, end, t));
    Value valid = arith::CmpIOp::create(
        en.b, en.loc, arith::CmpIPredicate::slt, lanes,
        vector::BroadcastOp::create(en.b, en.loc, laneType, remaining));
    tileRows(en, t, end, keyRows);
    return valid;
  };
  // The end of the whole tiles of keys [first, end).
  auto wholeTilesEnd = [&](Emitter &en, Value first, Value end) -> Value {
    Value tiles = arith::DivUIOp::create(
        en.b, en.loc, arith::SubIOp::create(en.b, en.loc, end, first), en.index(kLanes));
    return en.addi(first, en.muli(tiles, en.index(kLanes)));
  };

  // The 16 dot-product vectors of a tile's keys (dotOf(i): key i's 16
  // partial sums) folded into one vector of their sums, lane i key i's:
  // each folds into the tree as soon as it has a partner of the same size
  // (a binary counter), so at most log2(16) + 1 of them are live at once.
  auto foldDots = [&](Emitter &en, function_ref<Value(int64_t)> dotOf) -> Value {
    SmallVector<std::pair<Value, int64_t>> pending;
    for (int64_t i = 0; i < kLanes; ++i) {
      Value dot = dotOf(i);
      int64_t keysIn = 1;
      while (!pending.empty() && pending.back().second == keysIn) {
        dot = foldPair(en, pending.back().first, dot, keysIn);
        pending.pop_back();
        keysIn *= 2;
      }
      pending.push_back({dot, keysIn});
    }
    return pending.front().first;
  };
  // The online softmax's step over a tile: from the folded dots (lanes
  // `valid`, or all when null), the running max and sum, to the new max
  // and sum, the correction of what came before and the tile's weights.
  struct SoftmaxStep {
    Value max, sum, correction, weights;
  };
  auto softmaxStep = [&](Emitter &en, Value dots, Value valid, Value maxOld,
                         Value sumOld) -> SoftmaxStep {
    Value scores = en.mul(dots, en.splatc(scale));
    if (valid)
      scores = arith::SelectOp::create(en.b, en.loc, valid, scores, en.splatc(lowest));
    Value maxNew = arith::MaximumFOp::create(en.b, en.loc, maxOld, en.max(scores));
    // exp(-inf) is taken as 0 explicitly: the polynomial exp is only meant
    // for finite arguments.
    Value isFirst = arith::CmpFOp::create(en.b, en.loc, arith::CmpFPredicate::OEQ, maxOld,
                                          en.f32c(lowest));
    Value correction = arith::SelectOp::create(
        en.b, en.loc, isFirst, en.f32c(0.0f),
        math::ExpOp::create(en.b, en.loc, en.sub(maxOld, maxNew)));
    Value weights = math::ExpOp::create(en.b, en.loc, en.sub(scores, en.splat(maxNew)));
    if (valid)
      weights = arith::SelectOp::create(en.b, en.loc, valid, weights, en.splatc(0.0f));
    return {maxNew, en.add(en.mul(sumOld, correction), en.sum(weights)), correction, weights};
  };

  // One query head's step over a tile of 16 keys (rows keyRows, lanes
  // `valid` or all when null) from its state (running max, sum,
  // accumulators) to its next.
  auto headTile = [&](OpBuilder &b3, Location l3, ArrayRef<Value> keyRows,
                      Value valid, Value kvBase, ArrayRef<Value> qv,
                      ValueRange head, Value tileBase = {}) -> SmallVector<Value> {
    Emitter e3{b3, l3};
    // Element c * 16 of key i's slice in `cache`: with tileBase (a whole
    // tile), one flat index plus a constant, which the target folds into
    // the load's displacement.
    auto slice = [&](Value cache, Value flat, int64_t i, int64_t c) {
      if (tileBase)
        return e3.load(flat, {e3.addi(tileBase, e3.index(i * kvWidth + c * kLanes))});
      return e3.load(cache, {keyRows[i], e3.addi(kvBase, e3.index(c * kLanes))});
    };
    Value folded = foldDots(e3, [&](int64_t i) {
      auto keyChunk = [&](int64_t c) { return slice(keys, flatKeys, i, c); };
      Value dot = e3.mul(qv[0], keyChunk(0));
      for (int64_t c = 1; c < chunks; ++c)
        dot = math::FmaOp::create(b3, l3, qv[c], keyChunk(c), dot);
      return dot;
    });
    SoftmaxStep step = softmaxStep(e3, folded, valid, head[0], head[1]);
    Value correction = step.correction, weights = step.weights;
    SmallVector<Value> next{step.max, step.sum};
    Value corrV = e3.splat(correction);
    SmallVector<Value> acc;
    for (int64_t c = 0; c < chunks; ++c)
      acc.push_back(e3.mul(head[2 + c], corrV));
    for (int64_t i = 0; i < kLanes; ++i) {
      Value w = e3.splat(vector::ExtractOp::create(b3, l3, weights, ArrayRef<int64_t>{i}));
      for (int64_t c = 0; c < chunks; ++c)
        acc[c] = math::FmaOp::create(b3, l3, w, slice(values, flatValues, i, c), acc[c]);
    }
    next.append(acc);
    return next;
  };

  // The keys query position p attends to: [first, end), end = p + 1, first
  // 0 or, with a window, max(0, p + 1 - window) (keys j > p - window).
  auto keysOf = [&](Emitter &en, Value p) -> std::pair<Value, Value> {
    Value end = en.addi(p, en.index(1));
    Value first = en.index(0);
    if (window > 0)
      first = arith::MaxSIOp::create(
          en.b, en.loc, arith::SubIOp::create(en.b, en.loc, end, en.index(window)),
          en.index(0));
    return {first, end};
  };

  // A prompt's rows go in blocks, which share each tile of keys and values
  // read from the cache: a walk per row had read a layer's whole cache once
  // per row and KV head (8 MiB a row at 1,024 positions of Qwen3-1.7B's,
  // from L3). A block's units are its rows times the heads it visits, at
  // most kMaxUnits (their dot products live in registers): a whole group's
  // heads in blocks of rowBlock rows (one row when the group alone has
  // more), a head of a group the range cuts (or of a group of one) in
  // blocks of kMaxUnits rows.
  constexpr int64_t kMaxUnits = 8;
  const int64_t rowBlock = std::max<int64_t>(1, kMaxUnits / group);
  int64_t maxUnits = std::max(rowBlock * group, kMaxUnits);
  // The units' states in stack buffers made once per call (emitHeads runs
  // inside the rows loop, where an alloca would grow the stack every
  // block): running max, sum and accumulators, and per tile the units' 16
  // dot-product vectors, weights and corrections.
  Value rowMax, rowSum, rowAcc, rowDots, rowWeights, rowCorrection;
  auto makeRowBuffers = [&](OpBuilder &b1, Location l1) {
    Type f32 = b1.getF32Type();
    rowMax = memref::AllocaOp::create(b1, l1, MemRefType::get({maxUnits}, f32));
    rowSum = memref::AllocaOp::create(b1, l1, MemRefType::get({maxUnits}, f32));
    rowCorrection = memref::AllocaOp::create(b1, l1, MemRefType::get({maxUnits}, f32));
    rowAcc = memref::AllocaOp::create(b1, l1, MemRefType::get({maxUnits, d}, f32));
    rowDots = memref::AllocaOp::create(
        b1, l1, MemRefType::get({maxUnits * kLanes, kLanes}, f32));
    rowWeights = memref::AllocaOp::create(b1, l1, MemRefType::get({maxUnits, kLanes}, f32));
  };

  // The rows [r0, r0 + block) (those past the last row repeat it and
  // store nothing) and heads [h0, h0 + count) of KV head `kv`: count is
  // `group` (a whole group, block rowBlock) or 1 (block kMaxUnits). Unit u
  // is row u / count and head u % count. The tiles of 16 keys start at the
  // block's first row's first key and run to its last row's end; a tile
  // every unit sees whole takes flat addresses and no masks, any other
  // masks each unit's lanes to its row's keys (a tile outside a row's keys
  // weighs nothing for it: its scores are -inf and its weights 0). A tile runs in three phases over
  // the units, so that its keys and then its values are each read from
  // memory once and stay in L1 while every unit uses them:
  //   1. scores: per key row, every unit's dot product, each key chunk
  //      loaded once for all of them; the dots go to the stack;
  //   2. per unit: the dots folded into one vector of 16 scores (the
  //      per-row walk's tree), the online softmax's new max, correction,
  //      weights and sum;
  //   3. per chunk of the head dim: every unit's accumulator rescaled,
  //      then the weighted sum of the tile's value rows, each value chunk
  //      loaded once for all of the units.
  // A block's first row sees the tiles a walk of its own would (the ones
  // past its end weigh nothing for it); the others' tiles start where its
  // do, which can move their softmax's rounding (prefill in chunks and one
  // token at a time agree within the models' tolerance).
  auto emitHeads = [&](OpBuilder &b2, Location l2, Value r0, Value kv, Value h0,
                       int64_t count, int64_t block) {
    Emitter e2{b2, l2};
    int64_t units = block * count;
    Value kvBase = e2.muli(kv, e2.index(d));
    Value lastRow = arith::SubIOp::create(b2, l2, rows, e2.index(1));
    SmallVector<Value> rowOfUnit, firstOf, endOf, qBase;
    for (int64_t k = 0; k < block; ++k) {
      Value row = arith::MinUIOp::create(b2, l2, e2.addi(r0, e2.index(k)), lastRow);
      Value first, end;
      std::tie(first, end) = keysOf(e2, e2.addi(position, row));
      rowOfUnit.push_back(row);
      firstOf.push_back(first);
      endOf.push_back(end);
    }
    for (int64_t u = 0; u < units; ++u)
      qBase.push_back(e2.muli(e2.addi(h0, e2.index(u % count)), e2.index(d)));
    for (int64_t u = 0; u < units; ++u) {
      Value ui = e2.index(u);
      memref::StoreOp::create(b2, l2, e2.f32c(lowest), rowMax, ui);
      memref::StoreOp::create(b2, l2, e2.f32c(0.0f), rowSum, ui);
      for (int64_t c = 0; c < chunks; ++c)
        e2.store(e2.splatc(0.0f), rowAcc, {ui, e2.index(c * kLanes)});
    }
    Value tilesFirst = firstOf.front(), tilesEnd = endOf.back();
    // Every unit sees [firstOf.back(), endOf.front()) whole.
    Value wholeFirst = firstOf.back(), wholeEnd = endOf.front();
    // One tile [t, t + 16): `masked` when some unit may not see all of it.
    auto tile = [&](OpBuilder &b3, Location l3, Value t, bool masked) {
      Emitter e3{b3, l3};
      Value tileBase;
      SmallVector<Value> keyRows, valid;
      if (masked) {
        // Rows past the block's keys are clamped to t (in bounds; their
        // lanes are masked for every unit).
        tileRows(e3, t, tilesEnd, keyRows);
        Value tI32 = arith::IndexCastOp::create(b3, l3, b3.getI32Type(), t);
        Value keyNumbers = arith::AddIOp::create(
            b3, l3, lanes, vector::BroadcastOp::create(b3, l3, laneType, tI32));
        for (int64_t k = 0; k < block; ++k) {
          auto bound = [&](Value v) {
            return vector::BroadcastOp::create(
                b3, l3, laneType,
                arith::IndexCastOp::create(b3, l3, b3.getI32Type(), v));
          };
          Value atOrAfterFirst = arith::CmpIOp::create(
              b3, l3, arith::CmpIPredicate::sge, keyNumbers, bound(firstOf[k]));
          Value beforeEnd = arith::CmpIOp::create(
              b3, l3, arith::CmpIPredicate::slt, keyNumbers, bound(endOf[k]));
          valid.push_back(arith::AndIOp::create(b3, l3, atOrAfterFirst, beforeEnd));
        }
      } else {
        tileBase = e3.addi(e3.muli(t, e3.index(kvWidth)), kvBase);
      }
      // Chunk c of key or value row i of the tile.
      auto chunkOf = [&](Emitter &en, Value cache, Value flat, Value i, Value row,
                         Value c) {
        if (!masked)
          return en.load(flat, {en.addi(en.addi(tileBase, en.muli(i, en.index(kvWidth))), c)});
        return en.load(cache, {row, en.addi(kvBase, c)});
      };
      auto rowOf = [&](Emitter &en, Value i) -> Value {
        return masked ? tileRow(en, t, i, tilesEnd) : Value();
      };
      // 1. Scores.
      e3.loop(e3.index(0), e3.index(kLanes), 1, [&](OpBuilder &b4, Location l4, Value i) {
        Emitter e4{b4, l4};
        Value row = rowOf(e4, i);
        SmallVector<Value> dots(units);
        for (int64_t c = 0; c < chunks; ++c) {
          Value key = chunkOf(e4, keys, flatKeys, i, row, e4.index(c * kLanes));
          for (int64_t u = 0; u < units; ++u) {
            Value qc = e4.load(q, {rowOfUnit[u / count],
                                   e4.addi(qBase[u], e4.index(c * kLanes))});
            dots[u] = c == 0 ? e4.mul(qc, key)
                             : math::FmaOp::create(b4, l4, qc, key, dots[u]).getResult();
          }
        }
        for (int64_t u = 0; u < units; ++u)
          e4.store(dots[u], rowDots, {e4.addi(e4.index(u * kLanes), i), e4.index(0)});
      });
      // 2. Softmax, unit by unit (a row's units in a loop of their own, so
      // that its mask is a value there).
      for (int64_t k = 0; k < block; ++k) {
        Value rowValid = masked ? valid[k] : Value();
        e3.loop(e3.index(k * count), e3.index((k + 1) * count), 1,
                [&](OpBuilder &b4, Location l4, Value u) {
          Emitter e4{b4, l4};
          Value dotBase = e4.muli(u, e4.index(kLanes));
          Value folded = foldDots(e4, [&](int64_t i) {
            return e4.load(rowDots, {e4.addi(dotBase, e4.index(i)), e4.index(0)});
          });
          SoftmaxStep step =
              softmaxStep(e4, folded, rowValid, memref::LoadOp::create(b4, l4, rowMax, u),
                          memref::LoadOp::create(b4, l4, rowSum, u));
          memref::StoreOp::create(b4, l4, step.max, rowMax, u);
          memref::StoreOp::create(b4, l4, step.sum, rowSum, u);
          memref::StoreOp::create(b4, l4, step.correction, rowCorrection, u);
          Value weights = step.weights;
          e4.store(weights, rowWeights, {u, e4.index(0)});
        });
      }
      // 3. Values.
      e3.loop(e3.index(0), e3.index(d), kLanes, [&](OpBuilder &b4, Location l4, Value c) {
        Emitter e4{b4, l4};
        SmallVector<Value> acc;
        for (int64_t u = 0; u < units; ++u) {
          Value ui = e4.index(u);
          acc.push_back(e4.mul(e4.load(rowAcc, {ui, c}),
                               e4.splat(memref::LoadOp::create(b4, l4, rowCorrection, ui))));
        }
        for (int64_t i = 0; i < kLanes; ++i) {
          Value ii = e4.index(i);
          Value value = chunkOf(e4, values, flatValues, ii, masked ? keyRows[i] : Value(), c);
          for (int64_t u = 0; u < units; ++u) {
            Value w = e4.splat(memref::LoadOp::create(b4, l4, rowWeights,
                                                      ValueRange{e4.index(u), ii}));
            acc[u] = math::FmaOp::create(b4, l4, w, value, acc[u]);
          }
        }
        for (int64_t u = 0; u < units; ++u)
          e4.store(acc[u], rowAcc, {e4.index(u), c});
      });
    };
    e2.loop(tilesFirst, tilesEnd, kLanes, [&](OpBuilder &b3, Location l3, Value t) {
      Emitter e3{b3, l3};
      Value whole = arith::AndIOp::create(
          b3, l3,
          arith::CmpIOp::create(b3, l3, arith::CmpIPredicate::sge, t, wholeFirst),
          arith::CmpIOp::create(b3, l3, arith::CmpIPredicate::sle,
                                e3.addi(t, e3.index(kLanes)), wholeEnd));
      auto branch = scf::IfOp::create(b3, l3, whole, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard guard(b3);
      b3.setInsertionPoint(branch.thenBlock()->getTerminator());
      tile(b3, l3, t, /*masked=*/false);
      b3.setInsertionPoint(branch.elseBlock()->getTerminator());
      tile(b3, l3, t, /*masked=*/true);
    });
    // The block's rows that exist.
    for (int64_t k = 0; k < block; ++k) {
      auto store = [&](OpBuilder &b3, Location l3) {
        Emitter e3{b3, l3};
        for (int64_t g = 0; g < count; ++g) {
          Value ui = e3.index(k * count + g);
          Value inv = e3.splat(e3.div(e3.f32c(1.0f), memref::LoadOp::create(b3, l3, rowSum, ui)));
          for (int64_t c = 0; c < chunks; ++c)
            e3.store(e3.mul(e3.load(rowAcc, {ui, e3.index(c * kLanes)}), inv), out,
                     {rowOfUnit[k], e3.addi(qBase[k * count + g], e3.index(c * kLanes))});
        }
      };
      if (k == 0) {
        store(b2, l2);
        continue;
      }
      auto exists = scf::IfOp::create(
          b2, l2, arith::CmpIOp::create(b2, l2, arith::CmpIPredicate::ult,
                                        e2.addi(r0, e2.index(k)), rows),
          /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b2);
      b2.setInsertionPoint(exists.thenBlock()->getTerminator());
      store(b2, l2);
    }
  };

  // One row (a decode step): tiles outermost, and per tile every head of
  // the range in turn, their states in stack buffers between tiles; a
  // whole tile addresses its keys and values by one flat index plus
  // constants (per key row indices, as the rows loop below keeps, took a
  // register or a stack slot each). The cache is read in position order, a
  // tile's rows (every KV head's slice of 16 positions) one after the
  // other, and a group's later heads find them in L1. On a 1-thread decode
  // of bench/model's hidden-2048 model at about 1,100 positions this took
  // attention from 26% of the step to 20% (perf samples, AMD EPYC).
  auto oneRow = [&](OpBuilder &b1, Location l1) {
    Emitter e1{b1, l1};
    Value r = e1.index(0);
    Value first, end;
    std::tie(first, end) = keysOf(e1, position);
    Type f32 = b1.getF32Type();
    Value maxBuf = memref::AllocaOp::create(b1, l1, MemRefType::get({heads}, f32));
    Value sumBuf = memref::AllocaOp::create(b1, l1, MemRefType::get({heads}, f32));
    Value accBuf = memref::AllocaOp::create(b1, l1, MemRefType::get({heads, d}, f32));
    Value groupSize = e1.index(group);
    e1.loop(headBegin, headEnd, 1, [&](OpBuilder &b2, Location l2, Value h) {
      Emitter e2{b2, l2};
      memref::StoreOp::create(b2, l2, e2.f32c(lowest), maxBuf, h);
      memref::StoreOp::create(b2, l2, e2.f32c(0.0f), sumBuf, h);
      for (int64_t c = 0; c < chunks; ++c)
        e2.store(e2.splatc(0.0f), accBuf, {h, e2.index(c * kLanes)});
    });
    // The range's heads over the tile of keys [t, t + 16); masked: the
    // tile may pass `end`.
    auto tileAll = [&](OpBuilder &b2, Location l2, Value t, bool masked) {
      Emitter e2{b2, l2};
      Value valid;
      SmallVector<Value> keyRows;
      if (masked)
        valid = maskedTile(e2, t, end, keyRows);
      e2.loop(headBegin, headEnd, 1, [&](OpBuilder &b3, Location l3, Value h) {
        Emitter e3{b3, l3};
        Value kvBase = e3.muli(arith::DivUIOp::create(b3, l3, h, groupSize), e3.index(d));
        Value qBase = e3.muli(h, e3.index(d));
        SmallVector<Value> qv, state{memref::LoadOp::create(b3, l3, maxBuf, h),
                                     memref::LoadOp::create(b3, l3, sumBuf, h)};
        for (int64_t c = 0; c < chunks; ++c) {
          qv.push_back(e3.load(q, {r, e3.addi(qBase, e3.index(c * kLanes))}));
          state.push_back(e3.load(accBuf, {h, e3.index(c * kLanes)}));
        }
        Value tileBase;
        if (!masked)
          tileBase = e3.addi(e3.muli(t, e3.index(kvWidth)), kvBase);
        SmallVector<Value> next =
            headTile(b3, l3, keyRows, valid, kvBase, qv, state, tileBase);
        memref::StoreOp::create(b3, l3, next[0], maxBuf, h);
        memref::StoreOp::create(b3, l3, next[1], sumBuf, h);
        for (int64_t c = 0; c < chunks; ++c)
          e3.store(next[2 + c], accBuf, {h, e3.index(c * kLanes)});
      });
    };
    Value whole = wholeTilesEnd(e1, first, end);
    e1.loop(first, whole, kLanes, [&](OpBuilder &b2, Location l2, Value t) {
      tileAll(b2, l2, t, /*masked=*/false);
    });
    auto tail = scf::IfOp::create(
        b1, l1, arith::CmpIOp::create(b1, l1, arith::CmpIPredicate::slt, whole, end),
        /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b1);
      b1.setInsertionPoint(tail.thenBlock()->getTerminator());
      tileAll(b1, l1, whole, /*masked=*/true);
    }
    e1.loop(headBegin, headEnd, 1, [&](OpBuilder &b2, Location l2, Value h) {
      Emitter e2{b2, l2};
      Value inv = e2.splat(e2.div(e2.f32c(1.0f), memref::LoadOp::create(b2, l2, sumBuf, h)));
      Value qBase = e2.muli(h, e2.index(d));
      for (int64_t c = 0; c < chunks; ++c)
        e2.store(e2.mul(e2.load(accBuf, {h, e2.index(c * kLanes)}), inv), out,
                 {r, e2.addi(qBase, e2.index(c * kLanes))});
    });
  };

  Value oneRowStep =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rows, e.index(1));
  auto byRows = scf::IfOp::create(b, loc, oneRowStep, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard rowsGuard(b);
  b.setInsertionPoint(byRows.thenBlock()->getTerminator());
  oneRow(b, loc);
  b.setInsertionPoint(byRows.elseBlock()->getTerminator());
  makeRowBuffers(b, loc);
  // Per KV head its rows, so that its slice of the cache is reused from
  // cache block after block. The heads [from, to) one at a time (kv null:
  // each head its own KV head).
  auto oneByOne = [&](OpBuilder &b1, Location l1, Value kv, Value from, Value to) {
    Emitter{b1, l1}.loop(from, to, 1, [&](OpBuilder &b2, Location l2, Value h) {
      Emitter e2{b2, l2};
      e2.loop(e2.index(0), rows, kMaxUnits, [&](OpBuilder &b3, Location l3, Value r) {
        emitHeads(b3, l3, r, kv ? kv : h, h, 1, kMaxUnits);
      });
    });
  };
  if (group == 1) {
    oneByOne(b, loc, Value(), headBegin, headEnd);
    return;
  }
  // KV heads [headBegin / group, ceil(headEnd / group)); each visits the
  // heads of its group inside [headBegin, headEnd).
  Value groupSize = e.index(group);
  Value kvFirst = arith::DivUIOp::create(b, loc, headBegin, groupSize);
  Value kvEnd = arith::CeilDivUIOp::create(b, loc, headEnd, groupSize);
  e.loop(kvFirst, kvEnd, 1, [&](OpBuilder &b1, Location l1, Value kv) {
    Emitter e1{b1, l1};
    Value groupFirst = e1.muli(kv, groupSize);
    Value from = arith::MaxSIOp::create(b1, l1, headBegin, groupFirst);
    Value to = arith::MinSIOp::create(b1, l1, headEnd, e1.addi(groupFirst, groupSize));
    Value whole = arith::CmpIOp::create(b1, l1, arith::CmpIPredicate::eq,
                                        arith::SubIOp::create(b1, l1, to, from), groupSize);
    auto branch = scf::IfOp::create(b1, l1, whole, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b1);
    b1.setInsertionPoint(branch.thenBlock()->getTerminator());
    e1.loop(e1.index(0), rows, rowBlock, [&](OpBuilder &b2, Location l2, Value r) {
      emitHeads(b2, l2, r, kv, from, group, rowBlock);
    });
    b1.setInsertionPoint(branch.elseBlock()->getTerminator());
    oneByOne(b1, l1, kv, from, to);
  });
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
    e.loop(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.loop(e1.index(0), e1.index(copied), kLanes,
              [&](OpBuilder &b2, Location l2, Value j) {
                Emitter e2{b2, l2};
                e2.store(e2.load(x, {r, e2.addi(j, e2.index(offset))}), out, {r, j});
              });
      if (copied < outWidth)
        e1.loop(e1.index(copied), e1.index(outWidth), kLanes,
                [&](OpBuilder &b2, Location l2, Value j) {
                  Emitter e2{b2, l2};
                  e2.store(e2.splatc(0.0f), out, {r, j});
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
      factor = arith::ExtFOp::create(b, loc, e.f32(), factor);
    Value splat = e.splat(factor);
    e.loop(e.index(0), rows, 1, [&](OpBuilder &b1, Location l1, Value r) {
      Emitter e1{b1, l1};
      e1.loop(e1.index(0), e1.index(width), kLanes,
              [&](OpBuilder &b2, Location l2, Value i) {
                Emitter e2{b2, l2};
                e2.store(e2.mul(e2.load(x, {r, i}), splat), out, {r, i});
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
        Value inner = e.div(v[0], e.splatc(cap));
        return e.mul(e.splatc(cap), math::TanhOp::create(e.b, e.loc, inner));
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
    e.loop(begin, end, 1, [&](OpBuilder &b1, Location l1, Value item) {
      Emitter e1{b1, l1};
      Value c = e1.muli(item, e1.index(kLanes));
      // The kernel's taps for these 16 channels: w[c * l + j].
      SmallVector<Value> taps;
      for (int64_t j = 0; j < l; ++j) {
        Value tap = e1.splatc(0.0f);
        for (int64_t lane = 0; lane < kLanes; ++lane) {
          Value at = e1.addi(e1.muli(e1.addi(c, e1.index(lane)), e1.index(l)),
                             e1.index(j));
          Value v = memref::LoadOp::create(b1, l1, w, ValueRange{at});
          if (!weightElement.isF32())
            v = arith::ExtFOp::create(b1, l1, e1.f32(), v);
          tap = vector::InsertOp::create(b1, l1, v, tap, ArrayRef<int64_t>{lane});
        }
        taps.push_back(tap);
      }
      SmallVector<Value> history;
      for (int64_t j = 0; j + 1 < l; ++j)
        history.push_back(arith::SelectOp::create(
            b1, l1, atStart, e1.splatc(0.0f), e1.load(state, {e1.index(j), c})));
      auto rowLoop = scf::ForOp::create(
          b1, l1, e1.index(0), rows, e1.index(1), history,
          [&](OpBuilder &b2, Location l2, Value r, ValueRange carried) {
            Emitter e2{b2, l2};
            Value bv = e2.load(x, {r, c});
            Value cv = e2.load(x, {r, e2.addi(c, e2.index(h))});
            Value xv = e2.load(x, {r, e2.addi(c, e2.index(2 * h))});
            Value bx = e2.mul(bv, xv);
            // y = sum_j taps[j] * Bx[t - (l - 1) + j], in j order.
            Value y;
            for (int64_t j = 0; j < l; ++j) {
              Value term = e2.mul(taps[j], j + 1 < l ? carried[j] : bx);
              y = j == 0 ? term : e2.add(y, term);
            }
            e2.store(e2.mul(cv, y), out, {r, c});
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
        return e.add(e.load(y, {r, c}), e.load(bias, {c}));
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
        return e.add(e.load(residual, {r, c}), e.load(y, {r, c}));
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
                       e2.store(e2.mul(e2.activate(gv, silu), e2.load(u, {r, c})),
                                out, {r, c});
                     });
  });
}
