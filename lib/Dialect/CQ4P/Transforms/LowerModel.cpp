//===- LowerModel.cpp - a model graph to kernels and planned steps --------===//
//
// A bundle's model.mlir is the forward pass of the model (docs/MODEL.md):
// `func.func @forward(%ids, %pos, <bound tensors>...)` of graph-level ops.
// The runtime runs it as two compiled steps (kernel_abi.h): `decode` for
// one token and `prefill` for up to `prefill-chunk` tokens. This pass plans
// both:
//
//   %x = cq4p.rms_norm %h, %ln {epsilon = 1.0e-06 : f32} : ...
//   %q = cq4p.linear %x, %wq : ...
//
// becomes, in `cq4p.step @prefill {max_rows = 128, single_row = @decode}`,
//
//   cq4p.dispatch @cq4p_rms_norm_512_d512_f16_e... <rows> work [1, 0]
//       pointers [<h>, <ln>, <x>] scalars [rows]
//   cq4p.dispatch @cq4p_quantize_512_gs128_hadamard <range> work [0, 4] ...
//   cq4p.dispatch @cq4p_gemm_512x512_gs128 <range> work [0, 8] ...
//
// where each pointer is a `#cq4p.place` (`#cq4p.place<workspace, offset =
// 1024, row_bytes = 2048>`).
//
// Places: every value gets a workspace slot sized for the step's rows; a
// slot is reused once every value in it is dead, and an elementwise op
// writes over an input that dies with it. Keys and values are written by
// their producers straight into the layer's KV cache at the step's
// position; the graph's result is the logits. Linears that read the same
// value with the same activation transform (`cq4p.transform`) share one
// quantization. A linear whose only use is a residual add (`arith.addf`
// with a value already in the workspace) adds it in the matmul's epilogue,
// while the channels its range wrote are in cache:
//
//   %o = cq4p.linear %a, %wo : ...
//   %h2 = arith.addf %h, %o : tensor<?x512xf32>
//
// is one `cq4p_gemm_residual_512x512_gs128` dispatch instead of a matmul
// and a `cq4p_add_512` pass. A gating whose only users are Hadamard
// linears (a dense MLP's down projection) is not a pass either: the
// linear's activation transform reads the gate and up rows and forms
// act(gate) * up as it loads each group (`cq4p_quantize_glu_silu_...`), so
// the gated row is never written (the gate and up rows live until then).
// The order of dispatches is the graph's order.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Codegen/KernelBuilder.h"
#include "cq4p/Codegen/ModelKernels.h"
#include "cq4p/Conversion/KernelLowering/KernelLowering.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
#include "cq4p/format.h"
#include "cq4p/kernel_abi.h"

#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/DenseMap.h"

#include <map>

namespace mlir::cq4p {
#define GEN_PASS_DEF_CQ4PLOWERMODEL
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

/// Rows per range of the token embedding's dispatch (but the last).
constexpr int64_t kEmbeddingGrain = kSmeEmbeddingMopaRows;

/// Attention's ranges hold whole groups of query heads (those of one KV
/// head) when the model has at least this many KV heads. A group walks the
/// cache together, its keys and values read once for all its heads; a range
/// that cuts a group takes its heads one at a time, each reading them again
/// (on the 16-layer hidden-2048 model of bench/model, 32 heads in groups of
/// 4, ranges of two heads doubled a 2-thread prefill's attention time). With
/// fewer KV heads, whole groups would leave fewer ranges than a phone has
/// cores, so heads stay the unit there.
constexpr int64_t kMinGroupRanges = 8;

/// The grain of an attention dispatch over `heads` query heads.
int64_t attentionGrain(int64_t heads, int64_t kvHeads) {
  if (kvHeads <= 0 || heads % kvHeads != 0 || kvHeads < kMinGroupRanges)
    return 1;
  return heads / kvHeads;
}

constexpr int64_t kAlignment = 64;

int64_t alignUp(int64_t value) {
  return (value + kAlignment - 1) / kAlignment * kAlignment;
}

/// Where a value lives while a step runs.
struct Place {
  PlaceBase base = PlaceBase::workspace;
  int64_t index = 0;  ///< the binding, or the layer for keys and values
  int64_t offset = 0; ///< bytes
  /// Keys and values: bytes per position of the cache buffers before this
  /// one (the buffer starts at kv_cache + context * cacheOffset).
  int64_t cacheOffset = 0;
  int64_t rowBytes = 0;
  bool atPosition = false; ///< row 0 is the step's position (KV cache)
  bool lastRow = false;    ///< a view of the last row of a workspace value
  int slot = -1;           ///< the workspace slot (refcounted)

  PlaceAttr attr(MLIRContext *ctx) const {
    return PlaceAttr::get(ctx, base, index, offset, cacheOffset, rowBytes,
                          atPosition, lastRow);
  }

  static Place binding(int64_t index) {
    Place place;
    place.base = PlaceBase::binding;
    place.index = index;
    return place;
  }
};

constexpr DispatchScalar kRows = DispatchScalar::rows;
constexpr DispatchScalar kPosition = DispatchScalar::position;
constexpr DispatchScalar kBegin = DispatchScalar::begin;
constexpr DispatchScalar kEnd = DispatchScalar::end;
constexpr DispatchScalar kContext = DispatchScalar::context;

/// First-fit allocation of 64-byte aligned blocks in one workspace.
class Arena {
public:
  int64_t allocate(int64_t size) {
    size = alignUp(std::max<int64_t>(size, 1));
    int64_t offset = 0;
    for (auto [start, length] : blocks) {
      if (start - offset >= size)
        break;
      offset = std::max(offset, start + length);
    }
    blocks[offset] = size;
    high = std::max(high, offset + size);
    return offset;
  }
  void release(int64_t offset) { blocks.erase(offset); }
  int64_t size() const { return high; }

private:
  std::map<int64_t, int64_t> blocks; ///< offset -> size
  int64_t high = 0;
};

struct Slot {
  int64_t offset;
  int refs;
};

/// Plans one step of the graph.
class StepPlanner {
public:
  /// Shared activation transforms: key -> (act, scales) places, last use.
  struct Quantized {
    Place act, scales;
    int64_t lastUse;
  };
  StepPlanner(func::FuncOp forward, KernelBuilder &kernels, int64_t maxRows,
              DictionaryAttr model, Type cacheElement, bool fuseDenseMlp,
              bool gateInTransform, OpBuilder &stepBuilder)
      : forward(forward), kernels(kernels), maxRows(maxRows), model(model),
        cacheElement(cacheElement), fuseDenseMlp(fuseDenseMlp),
        gateInTransform(gateInTransform),
        b(stepBuilder) {}

  LogicalResult plan();
  int64_t workspaceBytes() const { return arena.size(); }
  /// The KV cache's bytes per position, its widest layer (elements) and
  /// the step state's bytes.
  int64_t kvPositionBytes() const { return positionBytes; }
  int64_t kvWidth() const { return widestCache; }
  int64_t stateBytes() const { return stateSize; }

private:
  LogicalResult placeSpecialValues();
  LogicalResult planOp(Operation *op, int64_t index);
  LogicalResult planLinear(LinearOp linear, int64_t index);
  /// The quantized activation `linear` reads (dispatched when new).
  Quantized &quantize(LinearOp linear, Place weight,
                      FlatSymbolRefAttr kernel, int64_t index);
  /// gate = linear(x), up = linear(x), glu(gate, up) as one dispatch, when
  /// `gate` is the gate of such a pattern.
  bool planDenseMlp(LinearOp gate, int64_t index);
  /// Marks the gatings whose result only Hadamard linears read: their
  /// activation transform forms the gated row (`gated`), and the gate and
  /// up rows live until the last of them.
  void planGatedTransforms();
  /// The residual `linear`'s result is added to, when that add can run in
  /// the matmul's epilogue (the result's only use, the residual already
  /// computed in the workspace); null otherwise.
  Value residualOf(LinearOp linear);

  /// The bound tensor an operand is (a @forward argument after ids and pos).
  FailureOr<int64_t> bindingOf(Operation *op, Value value, StringRef what) {
    auto arg = dyn_cast<BlockArgument>(value);
    if (!arg || arg.getOwner() != &forward.getBody().front() ||
        arg.getArgNumber() < 2)
      return op->emitOpError() << "expected " << what
                               << " to be a bound tensor (an argument of "
                                  "@forward after the ids and the position)";
    return int64_t(arg.getArgNumber() - 2);
  }

  /// Gemma 4's per-layer embedding table is run as rows of one layer each
  /// (`rows_per_id`, one K x K rotation of the per-layer width). A graph
  /// that decodes it as one row per token (K = layers x width, the layout
  /// converters wrote before) would read a K x K rotation per token (321 MB
  /// of them in the file at E2B's widths): refused, naming the fix. The
  /// graph says which it decodes by `rows_per_id` (1 for a one-layer model,
  /// whose two layouts are the same rows).
  LogicalResult checkPerLayerTable(EmbeddingOp embedding) {
    auto arg = cast<BlockArgument>(embedding.getWeight());
    auto name = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "cq4p.tensor");
    if (!name || !name.getValue().ends_with("embed_tokens_per_layer.weight") ||
        embedding.getRowsPerId())
      return success();
    WeightType table = embedding.getWeight().getType();
    return embedding.emitOpError()
           << "the per-layer embedding table '" << name.getValue() << "' is stored as one ["
           << table.getN() << " x " << table.getK()
           << "] orthogonal tensor, a layout this cq4p no longer compiles (a " << table.getK()
           << " x " << table.getK()
           << " rotation read for every token); reconvert the checkpoint with `python -m "
              "cq4p convert`, which stores it as rows of one layer each";
  }

  LogicalResult checkPosition(Operation *op, Value position) {
    if (position != forward.getArgument(1))
      return op->emitOpError()
             << "expected the position to be @forward's position argument";
    return success();
  }

  /// Rows of a value: 1 when static, the step's rows otherwise.
  static bool singleRow(Value value) {
    return cast<ShapedType>(value.getType()).getDimSize(0) == 1;
  }
  int64_t capacityRows(Value value) const {
    return singleRow(value) ? 1 : maxRows;
  }
  static int64_t rowBytesOf(Value value) {
    auto type = cast<ShapedType>(value.getType());
    return type.getDimSize(1) * int64_t(type.getElementTypeBitWidth() / 8);
  }

  int newSlot(int64_t bytes) {
    slots.push_back({arena.allocate(bytes), 1});
    return int(slots.size()) - 1;
  }
  void releaseSlot(int slot) {
    if (slot >= 0 && --slots[slot].refs == 0)
      arena.release(slots[slot].offset);
  }
  Place workspacePlace(int slot, int64_t rowBytes) {
    Place place;
    place.offset = slots[slot].offset;
    place.rowBytes = rowBytes;
    place.slot = slot;
    return place;
  }

  /// The place of a new value: its special place, else the slot of an
  /// input that dies here (same row size, not a view), else a new slot.
  Place placeResult(Value result, int64_t index, ArrayRef<Value> inPlace) {
    auto special = places.find(result);
    if (special != places.end())
      return special->second;
    int64_t rowBytes = rowBytesOf(result);
    for (Value input : inPlace) {
      auto it = places.find(input);
      if (it == places.end() || it->second.slot < 0 || it->second.lastRow ||
          lastUse.lookup(input) != index || rowBytesOf(input) != rowBytes ||
          singleRow(input) != singleRow(result) || donated.contains(input))
        continue;
      donated.insert(input); // the result takes the input's reference
      Place place = it->second;
      places[result] = place;
      return place;
    }
    Place place = workspacePlace(newSlot(capacityRows(result) * rowBytes),
                                 rowBytes);
    places[result] = place;
    return place;
  }

  void dispatch(FlatSymbolRefAttr kernel, DispatchSplit split,
                std::array<int64_t, 2> work, ArrayRef<Place> pointers,
                ArrayRef<DispatchScalar> scalars, bool single,
                int64_t grain = 1) {
    MLIRContext *ctx = b.getContext();
    SmallVector<Attribute> pointerAttrs, scalarAttrs;
    for (const Place &place : pointers)
      pointerAttrs.push_back(place.attr(ctx));
    for (DispatchScalar scalar : scalars)
      scalarAttrs.push_back(DispatchScalarAttr::get(ctx, scalar));
    DispatchOp::create(b, forward.getLoc(), kernel,
                       DispatchSplitAttr::get(ctx, split),
                       b.getDenseI64ArrayAttr(work), b.getArrayAttr(pointerAttrs),
                       b.getArrayAttr(scalarAttrs), /*serial=*/nullptr,
                       single ? b.getUnitAttr() : nullptr,
                       grain > 1 ? b.getI64IntegerAttr(grain) : nullptr);
  }
  /// A kernel over rows (a rows split), of `rowsOf`'s row count, its ranges
  /// whole multiples of `grain` rows but the last.
  void rowsDispatch(FlatSymbolRefAttr kernel, Value rowsOf,
                    ArrayRef<Place> pointers, ArrayRef<DispatchScalar> scalars,
                    int64_t grain = 1) {
    bool single = singleRow(rowsOf);
    dispatch(kernel, DispatchSplit::rows, {single ? 0 : 1, single ? 1 : 0},
             pointers, scalars, single, single ? 1 : grain);
  }

  /// A layer's KV cache: where its keys and values start (bytes per
  /// position before them) and the writer's shape.
  struct Cache {
    int64_t keysOffset, valuesOffset, rowBytes, kvHeads, headDim;
  };
  Place cachePlace(PlaceBase base, int64_t layer) const {
    const Cache &cache = caches.at(layer);
    Place place;
    place.base = base;
    place.index = layer;
    place.rowBytes = cache.rowBytes;
    place.cacheOffset =
        base == PlaceBase::keys ? cache.keysOffset : cache.valuesOffset;
    return place;
  }

  func::FuncOp forward;
  KernelBuilder &kernels;
  int64_t maxRows;
  DictionaryAttr model;
  Type cacheElement; ///< f32 or f16
  bool fuseDenseMlp;
  bool gateInTransform;
  OpBuilder &b;
  /// Ops a fused dispatch has already computed.
  llvm::DenseSet<Operation *> fused;
  /// Keys and values: their place in the KV cache. A value its producer
  /// cannot write there (an fp16 cache, but not a rotary embedding's
  /// output) lives in the workspace and is converted into the cache.
  llvm::DenseMap<Value, Place> cachePlaces;

  std::map<int64_t, Cache> caches;       ///< by layer
  std::map<int64_t, int64_t> stateOffsets; ///< short-conv layer -> bytes
  int64_t positionBytes = 0, widestCache = 0, stateSize = 0;

  Arena arena;
  SmallVector<Slot> slots;
  llvm::DenseMap<Value, Place> places;
  llvm::DenseMap<Value, int64_t> lastUse;
  llvm::DenseSet<Value> donated;
  /// Gatings computed by their users' activation transforms, by result.
  llvm::DenseMap<Value, GluOp> gated;
  std::map<std::string, Quantized> quantized;
  /// Slots to release after the op of the given index.
  std::map<int64_t, SmallVector<int>> deferred;
};

std::string quantizeKey(LinearOp linear, Value input, int64_t index) {
  WeightType w = linear.getWeight().getType();
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(
                        input.getAsOpaquePointer())) +
                    "/" + std::to_string(w.getK()) + "/" +
                    std::to_string(w.getGroupSize()) + "/" +
                    (w.getRotation() == Rotation::orthogonal ? "o" : "h");
  auto forward = linear->getParentOfType<func::FuncOp>();
  auto arg = dyn_cast<BlockArgument>(linear.getWeight());
  StringAttr digest =
      arg ? forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                 "cq4p.transform")
          : StringAttr();
  if (digest && w.getRotation() == Rotation::hadamard)
    return key + "/" + digest.getValue().str();
  return key + "/op" + std::to_string(index); // not shared
}

LogicalResult StepPlanner::placeSpecialValues() {
  auto width = [&](StringRef key) {
    auto attr = model.getAs<IntegerAttr>(key);
    return attr ? attr.getInt() : int64_t(-1);
  };
  int64_t layers = width("layers");
  int64_t elementBytes = cacheElement.getIntOrFloatBitWidth() / 8;
  // The KV cache holds, in graph order, the keys then the values of each
  // layer whose attention computes them; an attention without keys and
  // values reads the cache of the earlier one that wrote its layer.
  for (Operation &op : forward.getBody().front()) {
    if (auto conv = dyn_cast<ShortConvOp>(op)) {
      int64_t layer = conv.getLayer();
      if (layer >= layers)
        return conv.emitOpError() << "layer " << layer << " is past the model's "
                                  << layers << " layers";
      if (stateOffsets.count(layer))
        return conv.emitOpError() << "layer " << layer
                                  << "'s convolution state already belongs to "
                                     "an earlier cq4p.short_conv";
      stateOffsets[layer] = stateSize;
      stateSize += std::max<int64_t>(conv.getKernelWidth() - 1, 1) *
                   conv.getResult().getType().getDimSize(1) * 4;
      continue;
    }
    auto attention = dyn_cast<CachedAttentionOp>(op);
    if (!attention)
      continue;
    int64_t layer = attention.getLayer();
    if (layer >= layers)
      return attention.emitOpError() << "layer " << layer << " is past the model's "
                                     << layers << " layers";
    int64_t kvHeads = attention.getNumKvHeads(), headDim = attention.getHeadDim();
    auto cache = caches.find(layer);
    if (!attention.getKeys()) {
      if (cache == caches.end())
        return attention.emitOpError()
               << "reads layer " << layer
               << "'s KV cache, which no earlier cq4p.cached_attention writes";
      if (cache->second.kvHeads != kvHeads || cache->second.headDim != headDim)
        return attention.emitOpError()
               << "expected layer " << layer << "'s cache shape ("
               << cache->second.kvHeads << " kv heads of "
               << cache->second.headDim << "), got " << kvHeads
               << " kv heads of " << headDim;
      continue;
    }
    if (cache != caches.end())
      return attention.emitOpError()
             << "writes layer " << layer
             << "'s KV cache, which an earlier cq4p.cached_attention writes";
    int64_t rowBytes = kvHeads * headDim * elementBytes;
    caches[layer] = {positionBytes, positionBytes + rowBytes, rowBytes, kvHeads,
                     headDim};
    positionBytes += 2 * rowBytes;
    widestCache = std::max(widestCache, kvHeads * headDim);
    for (auto [value, base] :
         {std::pair<Value, PlaceBase>{attention.getKeys(), PlaceBase::keys},
          {attention.getValues(), PlaceBase::values}}) {
      if (!value.hasOneUse() || !value.getDefiningOp()) {
        attention.emitOpError()
            << "expected the " << stringifyPlaceBase(base)
            << " to be computed for this attention alone (they are written "
               "straight into the KV cache)";
        return failure();
      }
      Place place = cachePlace(base, layer);
      place.atPosition = true;
      cachePlaces[value] = place;
      if (cacheElement.isF32() || value.getDefiningOp<RopeOp>())
        places[value] = place;
    }
  }

  auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  if (ret.getNumOperands() != 1)
    return ret.emitOpError() << "expected @forward to return the logits alone";
  Value logits = ret.getOperand(0);
  auto logitsType = cast<ShapedType>(logits.getType());
  // The logits: a cq4p.linear's, or their soft-capping (computed in place).
  auto softcap = logits.getDefiningOp<SoftcapOp>();
  Value product = softcap ? softcap.getInput() : logits;
  if (!product.getDefiningOp<LinearOp>() || (softcap && !product.hasOneUse()) ||
      logitsType.getDimSize(0) != 1 || logitsType.getDimSize(1) != width("vocab"))
    return ret.emitOpError()
           << "expected @forward to return the logits of one row ([1, vocab = "
           << width("vocab")
           << "]) computed by a cq4p.linear (optionally soft-capped)";
  Place place;
  place.base = PlaceBase::logits;
  place.rowBytes = logitsType.getDimSize(1) * 4;
  places[logits] = place;
  lastUse[logits] = INT64_MAX;
  if (softcap) {
    places[product] = place;
    lastUse[product] = INT64_MAX;
  }
  return success();
}

LogicalResult StepPlanner::plan() {
  Block &body = forward.getBody().front();
  int64_t index = 0;
  llvm::DenseMap<Operation *, int64_t> order;
  for (Operation &op : body)
    order[&op] = index++;
  for (Operation &op : body)
    for (Value result : op.getResults())
      for (Operation *user : result.getUsers())
        lastUse[result] = std::max(lastUse.lookup(result), order[user]);
  if (failed(placeSpecialValues()))
    return failure();
  planGatedTransforms();

  // Which linears share an activation transform, and until when.
  for (Operation &op : body)
    if (auto linear = dyn_cast<LinearOp>(op)) {
      std::string key = quantizeKey(linear, linear.getInput(), order[&op]);
      quantized[key].lastUse = order[&op];
    }

  Value ids = forward.getArgument(0);
  Place idsPlace;
  idsPlace.base = PlaceBase::ids;
  idsPlace.rowBytes = 8;
  places[ids] = idsPlace;

  for (Operation &op : body) {
    if (failed(planOp(&op, order[&op])))
      return failure();
    for (Value result : op.getResults()) {
      auto cached = cachePlaces.find(result);
      if (cached == cachePlaces.end() || places[result].base != PlaceBase::workspace)
        continue;
      rowsDispatch(createConvertKernel(kernels,
                                       cast<ShapedType>(result.getType()).getDimSize(1),
                                       cacheElement),
                   result, {places[result], cached->second}, {kRows});
    }
    // Values that die here give their slot back (a donated value's
    // reference went to the result that took its slot).
    for (Value operand : op.getOperands()) {
      if (lastUse.lookup(operand) != order[&op] || !places.count(operand))
        continue;
      if (donated.contains(operand))
        continue;
      Place &place = places[operand];
      if (place.slot >= 0 && !place.lastRow) {
        releaseSlot(place.slot);
        place.slot = -1;
      }
    }
    for (int slot : deferred[order[&op]])
      releaseSlot(slot);
    for (auto &[key, q] : quantized)
      if (q.lastUse == order[&op] && q.act.slot >= 0) {
        releaseSlot(q.act.slot);
        releaseSlot(q.scales.slot);
        q.act.slot = q.scales.slot = -1;
      }
  }
  return success();
}

void StepPlanner::planGatedTransforms() {
  // The dense-MLP fusion computes its gating in the matmul's epilogue.
  if (fuseDenseMlp || !gateInTransform)
    return;
  for (auto glu : forward.getBody().front().getOps<GluOp>()) {
    Value result = glu.getResult();
    if (result.use_empty() || places.count(result))
      continue;
    bool linearsOnly = llvm::all_of(result.getUsers(), [&](Operation *user) {
      auto linear = dyn_cast<LinearOp>(user);
      return linear && linear.getInput() == result &&
             linear->getBlock() == glu->getBlock() &&
             linear.getWeight().getType().getRotation() == Rotation::hadamard;
    });
    if (!linearsOnly)
      continue;
    gated[result] = glu;
    int64_t last = lastUse.lookup(result);
    for (Value input : {glu.getGate(), glu.getUp()})
      lastUse[input] = std::max(lastUse.lookup(input), last);
  }
}

StepPlanner::Quantized &StepPlanner::quantize(LinearOp linear, Place weight,
                                              FlatSymbolRefAttr kernel,
                                              int64_t index) {
  WeightType w = linear.getWeight().getType();
  Value x = linear.getInput();
  Quantized &q = quantized[quantizeKey(linear, x, index)];
  if (q.act.rowBytes == 0) {
    int64_t rows = capacityRows(x);
    q.act = workspacePlace(newSlot(rows * w.getK()), w.getK());
    q.scales = workspacePlace(newSlot(rows * w.getNumGroups() * 4),
                              w.getNumGroups() * 4);
    SmallVector<Place> pointers = {weight, places[x]};
    if (GluOp glu = gated.lookup(x)) {
      kernel = createGatedQuantizeKernel(kernels, w, glu.getActivation());
      pointers = {weight, places[glu.getGate()], places[glu.getUp()]};
    }
    pointers.append({q.act, q.scales});
    dispatch(kernel, DispatchSplit::range, {0, w.getNumGroups()}, pointers,
             {kRows, kBegin, kEnd}, singleRow(x));
  }
  return q;
}

Value StepPlanner::residualOf(LinearOp linear) {
  Value y = linear.getResult();
  auto add = y.hasOneUse() ? dyn_cast<arith::AddFOp>(*y.getUsers().begin())
                           : arith::AddFOp();
  if (!add || add.getLhs() == add.getRhs() ||
      add->getBlock() != linear->getBlock())
    return Value();
  auto type = dyn_cast<RankedTensorType>(add.getType());
  if (!type || type.getRank() != 2 || !type.getElementType().isF32() ||
      type.getDimSize(1) % 16 != 0 ||
      type.getDimSize(1) != linear.getWeight().getType().getN())
    return Value();
  Value residual = add.getLhs() == y ? add.getRhs() : add.getLhs();
  // Computed before the matmul, and somewhere the epilogue can read it.
  Operation *producer = residual.getDefiningOp();
  auto place = places.find(residual);
  if ((producer && !producer->isBeforeInBlock(linear)) ||
      place == places.end() || place->second.base != PlaceBase::workspace ||
      singleRow(residual) != singleRow(y))
    return Value();
  return residual;
}

bool StepPlanner::planDenseMlp(LinearOp gate, int64_t index) {
  Value g = gate.getResult();
  auto glu = g.hasOneUse() ? dyn_cast<GluOp>(*g.getUsers().begin()) : GluOp();
  if (!glu || glu.getGate() != g || !glu.getUp().hasOneUse())
    return false;
  auto up = glu.getUp().getDefiningOp<LinearOp>();
  WeightType w = gate.getWeight().getType();
  if (!up || gate.getBias() || up.getBias() || up.getInput() != gate.getInput() ||
      up.getWeight().getType() != w || w.getN() % 16 != 0 ||
      quantizeKey(gate, gate.getInput(), index) !=
          quantizeKey(up, up.getInput(), index) ||
      glu->getBlock() != gate->getBlock() || up->isBeforeInBlock(gate))
    return false;
  FailureOr<int64_t> gateBinding = bindingOf(gate, gate.getWeight(), "the weight");
  FailureOr<int64_t> upBinding = bindingOf(up, up.getWeight(), "the weight");
  if (failed(gateBinding) || failed(upBinding))
    return false;
  Value x = gate.getInput();
  bool single = singleRow(x) || maxRows == 1;
  SmallVector<FlatSymbolRefAttr> refs =
      createLinearKernels(kernels, w, /*gemv=*/true, /*gemm=*/!single);
  Quantized &q = quantize(gate, Place::binding(*gateBinding), refs[0], index);
  // The gate's and the up's matmuls write scratch rows of N; only the
  // gated result outlives the dispatch.
  int64_t rowBytes = w.getN() * 4;
  int gSlot = newSlot(capacityRows(x) * rowBytes);
  int uSlot = newSlot(capacityRows(x) * rowBytes);
  Place out = placeResult(glu.getResult(), index, {});
  dispatch(createFusedMlpKernel(kernels, w, glu.getActivation(), single),
           DispatchSplit::range, {0, w.getNumSuperBlocks()},
           {Place::binding(*gateBinding), Place::binding(*upBinding), q.act,
            q.scales, workspacePlace(gSlot, rowBytes),
            workspacePlace(uSlot, rowBytes), out},
           {kRows, kBegin, kEnd}, singleRow(x));
  releaseSlot(gSlot);
  releaseSlot(uSlot);
  fused.insert(up);
  fused.insert(glu);
  return true;
}

LogicalResult StepPlanner::planLinear(LinearOp linear, int64_t index) {
  WeightType w = linear.getWeight().getType();
  FailureOr<int64_t> binding = bindingOf(linear, linear.getWeight(), "the weight");
  if (failed(binding))
    return failure();
  Value x = linear.getInput();
  bool single = singleRow(x) || maxRows == 1;
  Value bias = linear.getBias();
  SmallVector<FlatSymbolRefAttr> refs = createLinearKernels(
      kernels, w, /*gemv=*/!bias, /*gemm=*/!bias && !single);
  Place weight = Place::binding(*binding);

  Quantized &q = quantize(linear, weight, refs[0], index);
  if (Value residual = bias ? Value() : residualOf(linear)) {
    auto add = cast<arith::AddFOp>(*linear.getResult().getUsers().begin());
    Place y = placeResult(add.getResult(), index, {});
    dispatch(createResidualMatmulKernel(kernels, w, single),
             DispatchSplit::range, {0, w.getNumSuperBlocks()},
             {weight, q.act, q.scales, places[residual], y},
             {kRows, kBegin, kEnd}, singleRow(x));
    fused.insert(add);
    return success();
  }
  Place y = placeResult(linear.getResult(), index, {});
  if (!bias) {
    dispatch(single ? refs[1] : refs[2], DispatchSplit::range, {0, w.getNumSuperBlocks()},
             {weight, q.act, q.scales, y}, {kRows, kBegin, kEnd},
             singleRow(x));
    return success();
  }
  FailureOr<int64_t> biasBinding = bindingOf(linear, bias, "the bias");
  if (failed(biasBinding))
    return failure();
  if (w.getN() % 16 != 0)
    return linear.emitOpError() << "expected N (" << w.getN()
                                << ") to be a multiple of 16 to add a bias";
  auto biasType = cast<RankedTensorType>(bias.getType());
  dispatch(createBiasedMatmulKernel(kernels, w, biasType.getElementType(), single),
           DispatchSplit::range, {0, w.getNumSuperBlocks()},
           {weight, q.act, q.scales, Place::binding(*biasBinding), y},
           {kRows, kBegin, kEnd}, singleRow(x));
  return success();
}

LogicalResult StepPlanner::planOp(Operation *op, int64_t index) {
  if (fused.contains(op))
    return success();
  if (auto linear = dyn_cast<LinearOp>(op)) {
    if (fuseDenseMlp && planDenseMlp(linear, index))
      return success();
    return planLinear(linear, index);
  }

  if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
    FailureOr<int64_t> binding =
        bindingOf(op, embedding.getWeight(), "the embedding table");
    if (failed(binding))
      return failure();
    if (embedding.getIds() != forward.getArgument(0))
      return op->emitOpError() << "expected the ids to be @forward's ids";
    // The runtime checks ids against the model's vocab: every table must
    // have a row for each, or a kernel would read past its mapping.
    int64_t vocab = model.getAs<IntegerAttr>("vocab").getInt();
    int64_t tableRows = embedding.getWeight().getType().getN();
    int64_t rowsPerId = embedding.getRowsPerIdOrOne();
    if (tableRows / rowsPerId < vocab)
      return op->emitOpError() << "expected the table's rows (" << tableRows
                               << (rowsPerId > 1 ? ", " + std::to_string(rowsPerId) +
                                                       " per id"
                                                 : std::string())
                               << ") to cover the model's vocab (" << vocab
                               << "): ids up to " << vocab - 1
                               << " would read past it";
    if (failed(checkPerLayerTable(embedding)))
      return failure();
    Value out = embedding.getResult();
    Place place = placeResult(out, index, {});
    // Ranges of 64 rows: the orthogonal row decode reads the whole K x K
    // rotation once per call (per stack chunk of rows), and SME2's outer
    // products take prompt rows 64 at a time (kSmeEmbeddingMopaRows).
    rowsDispatch(createEmbeddingKernel(kernels, embedding.getWeight().getType(), rowsPerId),
                 out, {Place::binding(*binding), places[embedding.getIds()], place},
                 {kRows}, kEmbeddingGrain);
    if (FloatAttr scale = embedding.getScaleAttr())
      rowsDispatch(createScaleKernel(kernels,
                                     cast<ShapedType>(out.getType()).getDimSize(1),
                                     scale.getValue().convertToFloat()),
                   out, {place, place}, {kRows});
    return success();
  }

  if (auto norm = dyn_cast<RmsNormOp>(op)) {
    int64_t width = norm.getInput().getType().getDimSize(1);
    int64_t d = norm.getChunkLength();
    if (d % 16 != 0)
      return op->emitOpError() << "expected the chunk length (" << d
                               << ") to be a multiple of 16 to compile it";
    Place in = places[norm.getInput()];
    Place out = placeResult(norm.getResult(), index, {norm.getInput()});
    Type weightElement;
    SmallVector<Place> pointers = {in};
    if (Value weight = norm.getWeight()) {
      FailureOr<int64_t> binding = bindingOf(op, weight, "the weight");
      if (failed(binding))
        return failure();
      weightElement = cast<RankedTensorType>(weight.getType()).getElementType();
      pointers.push_back(Place::binding(*binding));
    }
    pointers.push_back(out);
    rowsDispatch(createRmsNormKernel(kernels, width, weightElement, d,
                                     norm.getEpsilon().convertToFloat(),
                                     norm.getUnitOffset()),
                 norm.getResult(), pointers, {kRows});
    return success();
  }

  if (auto columns = dyn_cast<ColumnsOp>(op)) {
    int64_t inWidth = columns.getInput().getType().getDimSize(1);
    int64_t outWidth = columns.getResult().getType().getDimSize(1);
    int64_t offset = columns.getOffset();
    if (inWidth % 16 || outWidth % 16 || offset % 16)
      return op->emitOpError() << "expected the widths (" << inWidth << ", "
                               << outWidth << ") and the offset (" << offset
                               << ") to be multiples of 16 to compile it";
    Place in = places[columns.getInput()];
    Place out = placeResult(columns.getResult(), index, {});
    rowsDispatch(createColumnsKernel(kernels, inWidth, outWidth, offset),
                 columns.getResult(), {in, out}, {kRows});
    return success();
  }

  if (auto scale = dyn_cast<ScaleOp>(op)) {
    int64_t width = scale.getInput().getType().getDimSize(1);
    if (width % 16)
      return op->emitOpError() << "expected the width (" << width
                               << ") to be a multiple of 16 to compile it";
    Place in = places[scale.getInput()];
    Place out = placeResult(scale.getResult(), index, {scale.getInput()});
    if (Value scalar = scale.getScalar()) {
      FailureOr<int64_t> binding = bindingOf(op, scalar, "the scalar");
      if (failed(binding))
        return failure();
      rowsDispatch(createScaleByKernel(
                       kernels, width,
                       cast<RankedTensorType>(scalar.getType()).getElementType()),
                   scale.getResult(), {in, Place::binding(*binding), out}, {kRows});
      return success();
    }
    rowsDispatch(createScaleKernel(kernels, width, scale.getFactor()->convertToFloat()),
                 scale.getResult(), {in, out}, {kRows});
    return success();
  }

  if (auto softcap = dyn_cast<SoftcapOp>(op)) {
    int64_t width = softcap.getInput().getType().getDimSize(1);
    if (width % 16)
      return op->emitOpError() << "expected the width (" << width
                               << ") to be a multiple of 16 to compile it";
    Place in = places[softcap.getInput()];
    Place out = placeResult(softcap.getResult(), index, {softcap.getInput()});
    rowsDispatch(createSoftcapKernel(kernels, width, softcap.getCap().convertToFloat()),
                 softcap.getResult(), {in, out}, {kRows});
    return success();
  }

  if (auto conv = dyn_cast<ShortConvOp>(op)) {
    if (failed(checkPosition(op, conv.getPosition())))
      return failure();
    FailureOr<int64_t> binding = bindingOf(op, conv.getWeight(), "the weight");
    if (failed(binding))
      return failure();
    int64_t h = conv.getResult().getType().getDimSize(1);
    if (h % 16)
      return op->emitOpError() << "expected the width (" << h
                               << ") to be a multiple of 16 to compile it";
    Place in = places[conv.getInput()];
    Place out = placeResult(conv.getResult(), index, {});
    Place state;
    state.base = PlaceBase::state;
    state.offset = stateOffsets.at(conv.getLayer());
    dispatch(createShortConvKernel(kernels, h, conv.getKernelWidth(),
                                   conv.getWeight().getType().getElementType()),
             DispatchSplit::range, {0, h / 16}, {in, Place::binding(*binding), state, out},
             {kRows, kPosition, kBegin, kEnd}, singleRow(conv.getInput()));
    return success();
  }

  if (auto rope = dyn_cast<RopeOp>(op)) {
    if (failed(checkPosition(op, rope.getPosition())))
      return failure();
    int64_t width = rope.getInput().getType().getDimSize(1);
    Place in = places[rope.getInput()];
    Place out = placeResult(rope.getResult(), index, {rope.getInput()});
    Type outElement = out.base == PlaceBase::keys || out.base == PlaceBase::values
                          ? cacheElement
                          : Type(Float32Type::get(op->getContext()));
    rowsDispatch(createRopeKernel(kernels, width, rope.getHeadDim(),
                                  rope.getFrequencies(), outElement),
                 rope.getResult(), {in, out}, {kRows, kPosition});
    return success();
  }

  if (auto attention = dyn_cast<CachedAttentionOp>(op)) {
    if (failed(checkPosition(op, attention.getPosition())))
      return failure();
    Place q = places[attention.getQueries()];
    Place out =
        placeResult(attention.getResult(), index, {attention.getQueries()});
    // The kernel reads the whole cache.
    Place keys = cachePlace(PlaceBase::keys, attention.getLayer());
    Place values = cachePlace(PlaceBase::values, attention.getLayer());
    dispatch(createCachedAttentionKernel(
                 kernels, attention.getNumHeads(), attention.getNumKvHeads(),
                 attention.getHeadDim(), attention.getWindow(),
                 attention.getScale().convertToFloat(), cacheElement),
             DispatchSplit::range, {0, int64_t(attention.getNumHeads())}, {q, keys, values, out},
             {kRows, kPosition, kContext, kBegin, kEnd},
             singleRow(attention.getQueries()),
             attentionGrain(attention.getNumHeads(), attention.getNumKvHeads()));
    return success();
  }

  if (auto glu = dyn_cast<GluOp>(op)) {
    if (gated.count(glu.getResult())) {
      // Its users' transform reads the gate and up rows: they are released
      // after the last of them.
      int64_t last = lastUse.lookup(glu.getResult());
      for (Value input : {glu.getGate(), glu.getUp()}) {
        Place &place = places[input];
        if (lastUse.lookup(input) == last && place.slot >= 0 &&
            !place.lastRow && !donated.contains(input)) {
          deferred[last].push_back(place.slot);
          place.slot = -1;
        }
      }
      return success();
    }
    Place gate = places[glu.getGate()], up = places[glu.getUp()];
    Place out = placeResult(glu.getResult(), index, {glu.getGate(), glu.getUp()});
    rowsDispatch(createGluKernel(kernels, glu.getGate().getType().getDimSize(1),
                                 glu.getActivation()),
                 glu.getResult(), {gate, up, out}, {kRows});
    return success();
  }

  if (auto add = dyn_cast<arith::AddFOp>(op)) {
    auto type = dyn_cast<RankedTensorType>(add.getType());
    if (!type || type.getRank() != 2 || !type.getElementType().isF32())
      return op->emitOpError() << "expected fp32 activations [M, width]";
    Place lhs = places[add.getLhs()], rhs = places[add.getRhs()];
    Place out = placeResult(add.getResult(), index, {add.getLhs(), add.getRhs()});
    rowsDispatch(createAddKernel(kernels, type.getDimSize(1)), add.getResult(),
                 {lhs, rhs, out}, {kRows});
    return success();
  }

  if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
    // Only the last row: offsets [dim(source, 0) - 1, 0], sizes [1, width].
    auto sub = slice.getOffsets().size() == 1
                   ? slice.getOffsets()[0].getDefiningOp<arith::SubIOp>()
                   : arith::SubIOp();
    auto dim = sub ? sub.getLhs().getDefiningOp<tensor::DimOp>() : tensor::DimOp();
    std::optional<int64_t> one = sub ? getConstantIntValue(sub.getRhs()) : std::nullopt;
    std::optional<int64_t> dimIndex = dim ? dim.getConstantIndex() : std::nullopt;
    auto resultType = slice.getResultType();
    if (!dim || dim.getSource() != slice.getSource() || !one || *one != 1 ||
        !dimIndex || *dimIndex != 0 || resultType.getRank() != 2 ||
        resultType.getDimSize(0) != 1 ||
        resultType.getDimSize(1) != slice.getSourceType().getDimSize(1))
      return op->emitOpError()
             << "only the last row of an activation can be sliced "
                "(offsets [dim(x, 0) - 1, 0], sizes [1, width])";
    Place view = places[slice.getSource()];
    view.lastRow = true;
    places[slice.getResult()] = view;
    // The source's slot lives as long as its view: released after the
    // view's last use instead of its own.
    int64_t viewEnd = lastUse.lookup(slice.getResult());
    if (viewEnd > lastUse.lookup(slice.getSource()) && view.slot >= 0) {
      lastUse[slice.getSource()] = INT64_MAX;
      deferred[viewEnd].push_back(view.slot);
    }
    return success();
  }

  if (isa<tensor::DimOp, arith::SubIOp, arith::ConstantOp, func::ReturnOp>(op))
    return success();
  return op->emitOpError() << "is not supported in a model graph";
}

/// The module's `hidden` and `layers` against the graph they describe (the
/// runtime sizes and checks by them): the token embedding (the first
/// cq4p.embedding) is `hidden` wide, or `hidden` zero-padded to its group
/// size, and each layer has one cq4p.cached_attention or cq4p.short_conv.
LogicalResult checkModelAttributes(func::FuncOp forward, DictionaryAttr model) {
  int64_t hidden = model.getAs<IntegerAttr>("hidden").getInt();
  int64_t layers = model.getAs<IntegerAttr>("layers").getInt();
  int64_t mixers = 0;
  EmbeddingOp tokens;
  for (Operation &op : forward.getBody().front()) {
    if (isa<CachedAttentionOp, ShortConvOp>(op))
      ++mixers;
    if (auto embedding = dyn_cast<EmbeddingOp>(op); embedding && !tokens)
      tokens = embedding;
  }
  if (tokens) {
    WeightType table = tokens.getWeight().getType();
    int64_t groupSize = table.getGroupSize();
    int64_t padded = (hidden + groupSize - 1) / groupSize * groupSize;
    if (table.getK() != hidden && table.getK() != padded)
      return tokens.emitOpError()
             << "expected the token embedding's width (" << table.getK()
             << ") to be the model's hidden (" << hidden
             << "), or hidden zero-padded to the group size (" << padded << ")";
  }
  if (mixers != layers)
    return forward.emitOpError()
           << "has " << mixers
           << " cq4p.cached_attention and cq4p.short_conv ops, expected one "
              "per layer of the model's "
           << layers << " layers";
  return success();
}

class LowerModel : public mlir::cq4p::impl::CQ4PLowerModelBase<LowerModel> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward)
      return;
    auto model = module->getAttrOfType<DictionaryAttr>("cq4p.model");
    if (!model) {
      forward.emitError() << "a model graph needs the module attribute "
                             "cq4p.model (architecture, digest, vocab, "
                             "hidden, layers)";
      return signalPassFailure();
    }
    for (StringRef key : {"vocab", "hidden", "layers"}) {
      auto value = model.getAs<IntegerAttr>(key);
      if (!value || value.getInt() <= 0) {
        module.emitError() << "cq4p.model: expected a positive integer '"
                           << key << "'";
        return signalPassFailure();
      }
    }
    if (prefillChunk < 2 || prefillChunk > 65536) {
      module.emitError() << "prefill chunk " << int64_t(prefillChunk)
                         << " is out of range (2 to 65536)";
      return signalPassFailure();
    }
    if (failed(checkSignature(forward)))
      return signalPassFailure();
    Type cacheElement = kvCache == KvDtype::f16
                            ? Type(Float16Type::get(&getContext()))
                            : Type(Float32Type::get(&getContext()));

    KernelBuilder kernels(module);
    OpBuilder b(module.getContext());
    b.setInsertionPointToEnd(module.getBody());
    int64_t workspace = 0, kvPositionBytes = 0, kvWidth = 0, stateBytes = 0;
    for (auto [name, rows] : {std::pair<StringRef, int64_t>{"decode", 1},
                              {"prefill", int64_t(prefillChunk)}}) {
      auto step = StepOp::create(
          b, forward.getLoc(), b.getStringAttr(name), b.getI64IntegerAttr(rows),
          rows > 1 ? FlatSymbolRefAttr::get(b.getContext(), "decode")
                   : FlatSymbolRefAttr());
      step.getBody().emplaceBlock();
      OpBuilder stepBuilder = OpBuilder::atBlockEnd(&step.getBody().front());
      StepPlanner planner(forward, kernels, rows, model, cacheElement,
                          fuseDenseMlp, gateInTransform, stepBuilder);
      if (failed(planner.plan()))
        return signalPassFailure();
      workspace = std::max(workspace, planner.workspaceBytes());
      kvPositionBytes = planner.kvPositionBytes();
      kvWidth = planner.kvWidth();
      stateBytes = planner.stateBytes();
      b.setInsertionPointToEnd(module.getBody());
    }
    if (failed(checkModelAttributes(forward, model)))
      return signalPassFailure();

    // What the library's model descriptor records.
    SmallVector<PlanBinding> bindings;
    for (unsigned i = 2; i < forward.getNumArguments(); ++i) {
      Type type = forward.getArgument(i).getType();
      PlanBinding binding;
      binding.tensor = forward.getArgAttrOfType<StringAttr>(i, "cq4p.tensor");
      if (auto w = dyn_cast<WeightType>(type)) {
        binding.kind = BindingKind::cq4;
        binding.n = w.getN();
        binding.k = w.getK();
        binding.groupSize = w.getGroupSize();
        binding.orthogonal = w.getRotation() == Rotation::orthogonal;
      } else {
        auto tensor = cast<RankedTensorType>(type);
        binding.kind = tensor.getElementType().isF16() ? BindingKind::fp16
                                                       : BindingKind::fp32;
        binding.n = tensor.getNumElements();
      }
      bindings.push_back(binding);
    }
    module->setAttr("cq4p.model_plan",
                    ModelPlanAttr::get(b.getContext(), prefillChunk, kvCache,
                                       alignUp(workspace), kvPositionBytes,
                                       kvWidth, stateBytes, bindings));
    forward.erase();

    // exp and tanh as polynomials: vector code instead of a libm call per
    // lane, and the same bits on every target.
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns, [](StringRef name) {
      return name == "exp" || name == "tanh" || name == "math.exp" ||
             name == "math.tanh";
    });
    FrozenRewritePatternSet frozen(std::move(patterns));
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      auto kernel = func->getAttrOfType<KernelAttr>("cq4p.kernel");
      if (kernel && llvm::is_contained({KernelKind::glu, KernelKind::dense_mlp,
                                        KernelKind::cached_attention,
                                        KernelKind::softcap},
                                       kernel.getKind()))
        if (failed(applyPatternsGreedily(func, frozen)))
          return signalPassFailure();
    }
  }

private:
  static LogicalResult checkSignature(func::FuncOp forward) {
    FunctionType type = forward.getFunctionType();
    auto ids = type.getNumInputs() > 0 ? dyn_cast<RankedTensorType>(type.getInput(0))
                                       : RankedTensorType();
    if (!ids || ids.getRank() != 1 || !ids.getElementType().isInteger(64) ||
        type.getNumInputs() < 2 || !type.getInput(1).isIndex())
      return forward.emitOpError()
             << "expected @forward(%ids: tensor<?xi64>, %pos: index, <bound "
                "tensors>...)";
    for (unsigned i = 2; i < type.getNumInputs(); ++i) {
      if (!forward.getArgAttrOfType<StringAttr>(i, "cq4p.tensor"))
        return forward.emitOpError() << "argument " << i
                                     << " has no cq4p.tensor name";
      Type t = type.getInput(i);
      auto tensor = dyn_cast<RankedTensorType>(t);
      if (!isa<WeightType>(t) &&
          !(tensor && tensor.getRank() == 1 && tensor.hasStaticShape() &&
            (tensor.getElementType().isF16() || tensor.getElementType().isF32())))
        return forward.emitOpError()
               << "argument " << i
               << " must be a !cq4p.weight or a static 1-d f16/f32 tensor";
    }
    return success();
  }
};

} // namespace
