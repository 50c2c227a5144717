//===- StepPlanner.h - the planner of a model's steps -----------*- C++ -*-===//
//
// The state cq4p-lower-model keeps while it plans one step of a model graph
// (LowerModel.cpp): where each value lives, the workspace's slots, the KV
// cache's and the step state's layout, and the activation transforms
// linears share. Each op of the graph plans itself through
// PlanStepOpInterface (PlanStep.cpp) with the helpers here: it places its
// results and adds the dispatches that compute them to the step.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_STEPPLANNER_H
#define CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_STEPPLANNER_H

#include "cq4p/Codegen/KernelBuilder.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/PlanStepInterface.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <array>
#include <map>
#include <string>

namespace mlir::cq4p {

constexpr int64_t kAlignment = 64;

inline int64_t alignUp(int64_t value) {
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

  //===--------------------------------------------------------------------===//
  // What the ops' planning (PlanStepOpInterface) uses.
  //===--------------------------------------------------------------------===//

  /// The key under which linears share the activation transform of `input`.
  static std::string quantizeKey(LinearOp linear, Value input, int64_t index);
  /// The quantized activation `linear` reads (dispatched when new).
  Quantized &quantize(LinearOp linear, Place weight,
                      FlatSymbolRefAttr kernel, int64_t index);

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
  /// Ops a fused dispatch has already computed.
  llvm::DenseSet<Operation *> fused;
  std::map<int64_t, int64_t> stateOffsets; ///< short-conv layer -> bytes
  llvm::DenseMap<Value, Place> places;
  llvm::DenseMap<Value, int64_t> lastUse;
  llvm::DenseSet<Value> donated;
  /// Gatings computed by their users' activation transforms, by result.
  llvm::DenseMap<Value, GluOp> gated;
  /// Slots to release after the op of the given index.
  std::map<int64_t, SmallVector<int>> deferred;

private:
  LogicalResult placeSpecialValues();
  /// Marks the gatings whose result only Hadamard linears read: their
  /// activation transform forms the gated row (`gated`), and the gate and
  /// up rows live until the last of them.
  void planGatedTransforms();
  /// `op`'s dispatches, unless a fused dispatch has computed it.
  LogicalResult planOp(Operation *op, int64_t index);

  bool gateInTransform;
  OpBuilder &b;
  /// Keys and values: their place in the KV cache. A value its producer
  /// cannot write there (an fp16 cache, but not a rotary embedding's
  /// output) lives in the workspace and is converted into the cache.
  llvm::DenseMap<Value, Place> cachePlaces;
  std::map<int64_t, Cache> caches; ///< by layer
  int64_t positionBytes = 0, widestCache = 0, stateSize = 0;
  Arena arena;
  SmallVector<Slot> slots;
  std::map<std::string, Quantized> quantized;
};

} // namespace mlir::cq4p

#endif // CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_STEPPLANNER_H
