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
// The StepPlanner (StepPlanner.h) keeps the places, the workspace and the
// caches; each op plans its own dispatches through PlanStepOpInterface
// (PlanStep.cpp), so that an op of a model graph is planned where it is
// made a kernel, not in a switch over every op here.
//
//===----------------------------------------------------------------------===//

#include "StepPlanner.h"

#include "cq4p/Codegen/ModelKernels.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"

#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CQ4PLOWERMODEL
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

std::string StepPlanner::quantizeKey(LinearOp linear, Value input,
                                     int64_t index) {
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

LogicalResult StepPlanner::planOp(Operation *op, int64_t index) {
  if (fused.contains(op))
    return success();
  auto planning = dyn_cast<PlanStepOpInterface>(op);
  if (!planning)
    return op->emitOpError() << "is not supported in a model graph";
  return planning.planStep(*this, index);
}

namespace {

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

  void getDependentDialects(DialectRegistry &registry) const override {
    Base::getDependentDialects(registry);
    registerPlanStepInterfaceExternalModels(registry);
  }

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

    // The softcap's tanh as a polynomial: vector code instead of a libm
    // call per lane, and the same bits on every target. The other kernels'
    // transcendental functions are EmitBuilder's polynomials already
    // (activateLanes, expNonPositive, sinCosLanes).
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns, [](StringRef name) {
      return name == "exp" || name == "tanh" || name == "math.exp" ||
             name == "math.tanh";
    });
    FrozenRewritePatternSet frozen(std::move(patterns));
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      auto kernel = func->getAttrOfType<KernelAttr>("cq4p.kernel");
      if (kernel && kernel.getKind() == KernelKind::softcap)
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
