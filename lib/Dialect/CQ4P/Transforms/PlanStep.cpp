//===- PlanStep.cpp - how each op of a model graph plans itself -----------===//
//
// PlanStepOpInterface for every op cq4p-lower-model accepts in a model graph:
// cq4p's graph ops, the residual add (`arith.addf`), the slice of the last
// row (`tensor.extract_slice`) and the index arithmetic and terminator that
// plan nothing. Each places its results and adds the dispatches that compute
// them to the step the StepPlanner builds:
//
//   %x = cq4p.rms_norm %h, %ln {epsilon = 1.0e-06 : f32} : ...
//
// plans
//
//   cq4p.dispatch @cq4p_rms_norm_512_d512_f16_e... <rows> work [1, 0]
//       pointers [<h>, <ln>, <x>] scalars [rows]
//
// The models are external (attached by
// registerPlanStepInterfaceExternalModels, which cq4p-lower-model calls for
// its dependent dialects): planning creates kernels, whose generators
// (cq4p's Codegen library) are built on the dialect, and the upstream ops a
// graph uses are not cq4p's to declare.
//
//===----------------------------------------------------------------------===//

#include "StepPlanner.h"

#include "cq4p/Codegen/ModelKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/DialectRegistry.h"

#include "cq4p/Dialect/CQ4P/Transforms/PlanStepInterface.cpp.inc"

using namespace mlir;
using namespace mlir::cq4p;

namespace {


/// Rows per range of the token embedding's dispatch (but the last): the
/// same for every target, so that a plan does not depend on it; a multiple
/// of the embedding_rows any target's #cq4p.strategy records (SME2's 64,
/// Sme2Strategy.h), so that no range splits one of its chunks.
constexpr int64_t kEmbeddingGrain = 64;

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

//===----------------------------------------------------------------------===//
// cq4p.linear: the activation transform (shared), then the matmul, its
// epilogue adding a bias or a residual, or with the gate of a dense MLP the
// whole MLP.
//===----------------------------------------------------------------------===//

/// The residual `linear`'s result is added to, when that add can run in
/// the matmul's epilogue (the result's only use, the residual already
/// computed in the workspace); null otherwise.
Value residualOf(StepPlanner &planner, LinearOp linear) {
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
  auto place = planner.places.find(residual);
  if ((producer && !producer->isBeforeInBlock(linear)) ||
      place == planner.places.end() || place->second.base != PlaceBase::workspace ||
      planner.singleRow(residual) != planner.singleRow(y))
    return Value();
  return residual;
}

/// gate = linear(x), up = linear(x), glu(gate, up) as one dispatch, when
/// `gate` is the gate of such a pattern.
bool planDenseMlp(StepPlanner &planner, LinearOp gate, int64_t index) {
  Value g = gate.getResult();
  auto glu = g.hasOneUse() ? dyn_cast<GluOp>(*g.getUsers().begin()) : GluOp();
  if (!glu || glu.getGate() != g || !glu.getUp().hasOneUse())
    return false;
  auto up = glu.getUp().getDefiningOp<LinearOp>();
  WeightType w = gate.getWeight().getType();
  if (!up || gate.getBias() || up.getBias() || up.getInput() != gate.getInput() ||
      up.getWeight().getType() != w || w.getN() % 16 != 0 ||
      StepPlanner::quantizeKey(gate, gate.getInput(), index) !=
          StepPlanner::quantizeKey(up, up.getInput(), index) ||
      glu->getBlock() != gate->getBlock() || up->isBeforeInBlock(gate))
    return false;
  FailureOr<int64_t> gateBinding = planner.bindingOf(gate, gate.getWeight(), "the weight");
  FailureOr<int64_t> upBinding = planner.bindingOf(up, up.getWeight(), "the weight");
  if (failed(gateBinding) || failed(upBinding))
    return false;
  Value x = gate.getInput();
  bool single = planner.singleRow(x) || planner.maxRows == 1;
  SmallVector<FlatSymbolRefAttr> refs =
      createLinearKernels(planner.kernels, w, /*gemv=*/true, /*gemm=*/!single);
  StepPlanner::Quantized &q = planner.quantize(gate, Place::binding(*gateBinding), refs[0], index);
  // The gate's and the up's matmuls write scratch rows of N; only the
  // gated result outlives the dispatch.
  int64_t rowBytes = w.getN() * 4;
  int gSlot = planner.newSlot(planner.capacityRows(x) * rowBytes);
  int uSlot = planner.newSlot(planner.capacityRows(x) * rowBytes);
  Place out = planner.placeResult(glu.getResult(), index, {});
  planner.dispatch(createFusedMlpKernel(planner.kernels, w, glu.getActivation(), single),
                   DispatchSplit::range, {0, w.getNumSuperBlocks()},
                   {Place::binding(*gateBinding), Place::binding(*upBinding), q.act,
                    q.scales, planner.workspacePlace(gSlot, rowBytes),
                    planner.workspacePlace(uSlot, rowBytes), out},
                   {kRows, kBegin, kEnd}, planner.singleRow(x));
  planner.releaseSlot(gSlot);
  planner.releaseSlot(uSlot);
  planner.fused.insert(up);
  planner.fused.insert(glu);
  return true;
}

LogicalResult planLinear(StepPlanner &planner, LinearOp linear,
                         int64_t index) {
  if (planner.fuseDenseMlp && planDenseMlp(planner, linear, index))
    return success();
  WeightType w = linear.getWeight().getType();
  FailureOr<int64_t> binding = planner.bindingOf(linear, linear.getWeight(), "the weight");
  if (failed(binding))
    return failure();
  Value x = linear.getInput();
  bool single = planner.singleRow(x) || planner.maxRows == 1;
  Value bias = linear.getBias();
  SmallVector<FlatSymbolRefAttr> refs = createLinearKernels(
      planner.kernels, w, /*gemv=*/!bias, /*gemm=*/!bias && !single);
  Place weight = Place::binding(*binding);

  StepPlanner::Quantized &q = planner.quantize(linear, weight, refs[0], index);
  if (Value residual = bias ? Value() : residualOf(planner, linear)) {
    auto add = cast<arith::AddFOp>(*linear.getResult().getUsers().begin());
    Place y = planner.placeResult(add.getResult(), index, {});
    planner.dispatch(createResidualMatmulKernel(planner.kernels, w, single),
                     DispatchSplit::range, {0, w.getNumSuperBlocks()},
                     {weight, q.act, q.scales, planner.places[residual], y},
                     {kRows, kBegin, kEnd}, planner.singleRow(x));
    planner.fused.insert(add);
    return success();
  }
  Place y = planner.placeResult(linear.getResult(), index, {});
  if (!bias) {
    planner.dispatch(single ? refs[1] : refs[2], DispatchSplit::range, {0, w.getNumSuperBlocks()},
                     {weight, q.act, q.scales, y}, {kRows, kBegin, kEnd},
                     planner.singleRow(x));
    return success();
  }
  FailureOr<int64_t> biasBinding = planner.bindingOf(linear, bias, "the bias");
  if (failed(biasBinding))
    return failure();
  if (w.getN() % 16 != 0)
    return linear.emitOpError() << "expected N (" << w.getN()
                                << ") to be a multiple of 16 to add a bias";
  auto biasType = cast<RankedTensorType>(bias.getType());
  planner.dispatch(createBiasedMatmulKernel(planner.kernels, w, biasType.getElementType(), single),
                   DispatchSplit::range, {0, w.getNumSuperBlocks()},
                   {weight, q.act, q.scales, Place::binding(*biasBinding), y},
                   {kRows, kBegin, kEnd}, planner.singleRow(x));
  return success();
}

//===----------------------------------------------------------------------===//
// The other ops of a model graph.
//===----------------------------------------------------------------------===//

/// Gemma 4's per-layer embedding table is run as rows of one layer each
/// (`rows_per_id`, one K x K rotation of the per-layer width). A graph
/// that decodes it as one row per token (K = layers x width, the layout
/// converters wrote before) would read a K x K rotation per token (321 MB
/// of them in the file at E2B's widths): refused, naming the fix. The
/// graph says which it decodes by `rows_per_id` (1 for a one-layer model,
/// whose two layouts are the same rows).
LogicalResult checkPerLayerTable(StepPlanner &planner,
                                EmbeddingOp embedding) {
  auto arg = cast<BlockArgument>(embedding.getWeight());
  auto name = planner.forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                           "cq4p.tensor");
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

LogicalResult planEmbedding(StepPlanner &planner,
                            EmbeddingOp embedding, int64_t index) {
  Operation *op = embedding;
  FailureOr<int64_t> binding =
      planner.bindingOf(op, embedding.getWeight(), "the embedding table");
  if (failed(binding))
    return failure();
  if (embedding.getIds() != planner.forward.getArgument(0))
    return op->emitOpError() << "expected the ids to be @forward's ids";
  // The runtime checks ids against the model's vocab: every table must
  // have a row for each, or a kernel would read past its mapping.
  int64_t vocab = planner.model.getAs<IntegerAttr>("vocab").getInt();
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
  if (failed(checkPerLayerTable(planner, embedding)))
    return failure();
  Value out = embedding.getResult();
  Place place = planner.placeResult(out, index, {});
  // Ranges of 64 rows: the orthogonal row decode reads the whole K x K
  // rotation once per call (per stack chunk of rows), and SME2's outer
  // products take prompt rows 64 at a time (its embedding strategy).
  planner.rowsDispatch(createEmbeddingKernel(planner.kernels, embedding.getWeight().getType(), rowsPerId),
                       out, {Place::binding(*binding), planner.places[embedding.getIds()], place},
                       {kRows}, kEmbeddingGrain);
  if (FloatAttr scale = embedding.getScaleAttr())
    planner.rowsDispatch(createScaleKernel(planner.kernels,
                                           cast<ShapedType>(out.getType()).getDimSize(1),
                                           scale.getValue().convertToFloat()),
                         out, {place, place}, {kRows});
  return success();
}

/// The vector kernels take 16 lanes at a time: the `what` of an op (its
/// value `value`) must be a multiple of 16.
LogicalResult checkMultipleOf16(Operation *op, StringRef what, int64_t value) {
  if (value % 16 == 0)
    return success();
  return op->emitOpError() << "expected the " << what << " (" << value
                           << ") to be a multiple of 16 to compile it";
}

LogicalResult planRmsNorm(StepPlanner &planner, RmsNormOp norm, int64_t index) {
  Operation *op = norm;
  int64_t width = norm.getInput().getType().getDimSize(1);
  int64_t d = norm.getChunkLength();
  if (failed(checkMultipleOf16(op, "chunk length", d)))
    return failure();
  Place in = planner.places[norm.getInput()];
  Place out = planner.placeResult(norm.getResult(), index, {norm.getInput()});
  Type weightElement;
  SmallVector<Place> pointers = {in};
  if (Value weight = norm.getWeight()) {
    FailureOr<int64_t> binding = planner.bindingOf(op, weight, "the weight");
    if (failed(binding))
      return failure();
    weightElement = cast<RankedTensorType>(weight.getType()).getElementType();
    pointers.push_back(Place::binding(*binding));
  }
  pointers.push_back(out);
  planner.rowsDispatch(createRmsNormKernel(planner.kernels, width, weightElement, d,
                                           norm.getEpsilon().convertToFloat(),
                                           norm.getUnitOffset()),
                       norm.getResult(), pointers, {kRows});
  return success();
}

LogicalResult planColumns(StepPlanner &planner,
                          ColumnsOp columns, int64_t index) {
  Operation *op = columns;
  int64_t inWidth = columns.getInput().getType().getDimSize(1);
  int64_t outWidth = columns.getResult().getType().getDimSize(1);
  int64_t offset = columns.getOffset();
  if (inWidth % 16 || outWidth % 16 || offset % 16)
    return op->emitOpError() << "expected the widths (" << inWidth << ", "
                             << outWidth << ") and the offset (" << offset
                             << ") to be multiples of 16 to compile it";
  Place in = planner.places[columns.getInput()];
  Place out = planner.placeResult(columns.getResult(), index, {});
  planner.rowsDispatch(createColumnsKernel(planner.kernels, inWidth, outWidth, offset),
                       columns.getResult(), {in, out}, {kRows});
  return success();
}

LogicalResult planScale(StepPlanner &planner, ScaleOp scale, int64_t index) {
  Operation *op = scale;
  int64_t width = scale.getInput().getType().getDimSize(1);
  if (failed(checkMultipleOf16(op, "width", width)))
    return failure();
  Place in = planner.places[scale.getInput()];
  Place out = planner.placeResult(scale.getResult(), index, {scale.getInput()});
  if (Value scalar = scale.getScalar()) {
    FailureOr<int64_t> binding = planner.bindingOf(op, scalar, "the scalar");
    if (failed(binding))
      return failure();
    planner.rowsDispatch(createScaleByKernel(
                             planner.kernels, width,
                             cast<RankedTensorType>(scalar.getType()).getElementType()),
                         scale.getResult(), {in, Place::binding(*binding), out}, {kRows});
    return success();
  }
  planner.rowsDispatch(createScaleKernel(planner.kernels, width, scale.getFactor()->convertToFloat()),
                       scale.getResult(), {in, out}, {kRows});
  return success();
}

LogicalResult planSoftcap(StepPlanner &planner,
                          SoftcapOp softcap, int64_t index) {
  Operation *op = softcap;
  int64_t width = softcap.getInput().getType().getDimSize(1);
  if (failed(checkMultipleOf16(op, "width", width)))
    return failure();
  Place in = planner.places[softcap.getInput()];
  Place out = planner.placeResult(softcap.getResult(), index, {softcap.getInput()});
  planner.rowsDispatch(createSoftcapKernel(planner.kernels, width, softcap.getCap().convertToFloat()),
                       softcap.getResult(), {in, out}, {kRows});
  return success();
}

LogicalResult planShortConv(StepPlanner &planner,
                            ShortConvOp conv, int64_t index) {
  Operation *op = conv;
  if (failed(planner.checkPosition(op, conv.getPosition())))
    return failure();
  FailureOr<int64_t> binding = planner.bindingOf(op, conv.getWeight(), "the weight");
  if (failed(binding))
    return failure();
  int64_t h = conv.getResult().getType().getDimSize(1);
  if (failed(checkMultipleOf16(op, "width", h)))
    return failure();
  Place in = planner.places[conv.getInput()];
  Place out = planner.placeResult(conv.getResult(), index, {});
  Place state;
  state.base = PlaceBase::state;
  state.offset = planner.stateOffsets.at(conv.getLayer());
  planner.dispatch(createShortConvKernel(planner.kernels, h, conv.getKernelWidth(),
                                         conv.getWeight().getType().getElementType()),
                   DispatchSplit::range, {0, h / 16}, {in, Place::binding(*binding), state, out},
                   {kRows, kPosition, kBegin, kEnd}, planner.singleRow(conv.getInput()));
  return success();
}

LogicalResult planRope(StepPlanner &planner, RopeOp rope, int64_t index) {
  Operation *op = rope;
  if (failed(planner.checkPosition(op, rope.getPosition())))
    return failure();
  int64_t width = rope.getInput().getType().getDimSize(1);
  Place in = planner.places[rope.getInput()];
  Place out = planner.placeResult(rope.getResult(), index, {rope.getInput()});
  Type outElement = out.base == PlaceBase::keys || out.base == PlaceBase::values
                        ? planner.cacheElement
                        : Type(Float32Type::get(op->getContext()));
  planner.rowsDispatch(createRopeKernel(planner.kernels, width, rope.getHeadDim(),
                                        rope.getFrequencies(), outElement),
                       rope.getResult(), {in, out}, {kRows, kPosition});
  return success();
}

LogicalResult planCachedAttention(StepPlanner &planner,
                                  CachedAttentionOp attention, int64_t index) {
  Operation *op = attention;
  if (failed(planner.checkPosition(op, attention.getPosition())))
    return failure();
  Place q = planner.places[attention.getQueries()];
  Place out =
      planner.placeResult(attention.getResult(), index, {attention.getQueries()});
  // The kernel reads the whole cache.
  Place keys = planner.cachePlace(PlaceBase::keys, attention.getLayer());
  Place values = planner.cachePlace(PlaceBase::values, attention.getLayer());
  planner.dispatch(createCachedAttentionKernel(
                       planner.kernels, attention.getNumHeads(), attention.getNumKvHeads(),
                       attention.getHeadDim(), attention.getWindow(),
                       attention.getScale().convertToFloat(), planner.cacheElement),
                   DispatchSplit::range, {0, int64_t(attention.getNumHeads())}, {q, keys, values, out},
                   {kRows, kPosition, kContext, kBegin, kEnd},
                   planner.singleRow(attention.getQueries()),
                   attentionGrain(attention.getNumHeads(), attention.getNumKvHeads()));
  return success();
}

LogicalResult planGlu(StepPlanner &planner, GluOp glu, int64_t index) {
  if (planner.gated.count(glu.getResult())) {
    // Its users' transform reads the gate and up rows: they are released
    // after the last of them.
    int64_t last = planner.lastUse.lookup(glu.getResult());
    for (Value input : {glu.getGate(), glu.getUp()}) {
      Place &place = planner.places[input];
      if (planner.lastUse.lookup(input) == last && place.slot >= 0 &&
          !place.lastRow && !planner.donated.contains(input)) {
        planner.deferred[last].push_back(place.slot);
        place.slot = -1;
      }
    }
    return success();
  }
  Place gate = planner.places[glu.getGate()], up = planner.places[glu.getUp()];
  Place out = planner.placeResult(glu.getResult(), index, {glu.getGate(), glu.getUp()});
  planner.rowsDispatch(createGluKernel(planner.kernels, glu.getGate().getType().getDimSize(1),
                                       glu.getActivation()),
                       glu.getResult(), {gate, up, out}, {kRows});
  return success();
}

LogicalResult planAdd(StepPlanner &planner, arith::AddFOp add, int64_t index) {
  Operation *op = add;
  auto type = dyn_cast<RankedTensorType>(add.getType());
  if (!type || type.getRank() != 2 || !type.getElementType().isF32())
    return op->emitOpError() << "expected fp32 activations [M, width]";
  Place lhs = planner.places[add.getLhs()], rhs = planner.places[add.getRhs()];
  Place out = planner.placeResult(add.getResult(), index, {add.getLhs(), add.getRhs()});
  planner.rowsDispatch(createAddKernel(planner.kernels, type.getDimSize(1)), add.getResult(),
                       {lhs, rhs, out}, {kRows});
  return success();
}

LogicalResult planLastRowSlice(StepPlanner &planner,
                               tensor::ExtractSliceOp slice, int64_t index) {
  Operation *op = slice;
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
  Place view = planner.places[slice.getSource()];
  view.lastRow = true;
  planner.places[slice.getResult()] = view;
  // The source's slot lives as long as its view: released after the
  // view's last use instead of its own.
  int64_t viewEnd = planner.lastUse.lookup(slice.getResult());
  if (viewEnd > planner.lastUse.lookup(slice.getSource()) && view.slot >= 0) {
    planner.lastUse[slice.getSource()] = INT64_MAX;
    planner.deferred[viewEnd].push_back(view.slot);
  }
  return success();
}

/// Index arithmetic a last-row slice reads, and the terminator: nothing to
/// dispatch.
template <typename OpT>
LogicalResult planNothing(StepPlanner &, OpT, int64_t) {
  return success();
}

/// The interface of `OpT`, planned by `planOp`.
template <typename OpT, LogicalResult (*planOp)(StepPlanner &, OpT, int64_t)>
struct PlanStepModel
    : public PlanStepOpInterface::ExternalModel<PlanStepModel<OpT, planOp>,
                                                OpT> {
  LogicalResult planStep(Operation *op, StepPlanner &planner,
                         int64_t index) const {
    return planOp(planner, cast<OpT>(op), index);
  }
};

template <typename OpT, LogicalResult (*planOp)(StepPlanner &, OpT, int64_t)>
void attach(MLIRContext *ctx) {
  OpT::template attachInterface<PlanStepModel<OpT, planOp>>(*ctx);
}

} // namespace

void mlir::cq4p::registerPlanStepInterfaceExternalModels(
    DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, CQ4PDialect *) {
    attach<LinearOp, planLinear>(ctx);
    attach<EmbeddingOp, planEmbedding>(ctx);
    attach<RmsNormOp, planRmsNorm>(ctx);
    attach<ColumnsOp, planColumns>(ctx);
    attach<ScaleOp, planScale>(ctx);
    attach<SoftcapOp, planSoftcap>(ctx);
    attach<ShortConvOp, planShortConv>(ctx);
    attach<RopeOp, planRope>(ctx);
    attach<CachedAttentionOp, planCachedAttention>(ctx);
    attach<GluOp, planGlu>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, arith::ArithDialect *) {
    attach<arith::AddFOp, planAdd>(ctx);
    attach<arith::SubIOp, planNothing<arith::SubIOp>>(ctx);
    attach<arith::ConstantOp, planNothing<arith::ConstantOp>>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, tensor::TensorDialect *) {
    attach<tensor::ExtractSliceOp, planLastRowSlice>(ctx);
    attach<tensor::DimOp, planNothing<tensor::DimOp>>(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, func::FuncDialect *) {
    attach<func::ReturnOp, planNothing<func::ReturnOp>>(ctx);
  });
}
