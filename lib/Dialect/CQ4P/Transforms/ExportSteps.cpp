//===- ExportSteps.cpp - model steps as C-ABI functions -------------------===//
//
// After the kernels have their C-ABI entries (cq4p-export-kernels), each
// `cq4p.step` becomes `cq4p_step_<name>(const cq4p_step_args *)` and each of
// its dispatches a task function `(args, begin, end)` that computes the
// entry's pointers and integers from the step arguments and calls it:
//
//   cq4p.dispatch @cq4p_gemv_512x512_gs128 <range> work [0, 8]
//       pointers [#cq4p.place<binding, index = 3>, #cq4p.place<workspace>,
//                 ...] scalars [rows, begin, end]
//
// becomes a call of `args->parallel_for(args->pool, task, args, 8)` in the
// step (for a dispatch with a `grain`, of the count in blocks of grain
// work items, the task turning its block range back into items), and
//
//   task(args, begin, end):
//     cq4p_gemv_512x512_gs128(args->bindings[3], args->workspace + 0, ...,
//                             args->rows, begin, end)
//
// Then `cq4p_model_steps` describes the steps (kernel_abi.h, cq4p_model_desc).
//
//===----------------------------------------------------------------------===//

#include "cq4p/Codegen/KernelAbi.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CQ4PEXPORTSTEPS
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

using StepArgs = abi::Fields<cq4p_step_args>;
using ModelBinding = abi::Fields<cq4p_model_binding>;
using ModelDesc = abi::Fields<cq4p_model_desc>;

class StepExporter {
public:
  StepExporter(ModuleOp module) : module(module), ctx(module.getContext()) {
    ptr = LLVM::LLVMPointerType::get(ctx);
    i64 = IntegerType::get(ctx, 64);
    argsType = abi::structType<cq4p_step_args>(ctx);
  }

  LogicalResult run(uint32_t targetId, uint64_t features);

private:
  /// Loads the cq4p_step_args field `index` of `args`.
  Value field(OpBuilder &b, Location loc, Value args, StepArgs::Field index) {
    Value address = LLVM::GEPOp::create(b, loc, ptr, argsType, args,
                                        ArrayRef<LLVM::GEPArg>{0, int32_t(index)});
    return LLVM::LoadOp::create(
        b, loc, abi::fieldType<cq4p_step_args>(ctx, index), address);
  }
  Value constant(OpBuilder &b, Location loc, int64_t value) {
    return LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(value));
  }
  /// A dispatch's work items, work[0] * rows + work[1].
  Value workCount(OpBuilder &b, Location loc, DispatchOp dispatch, Value rows) {
    ArrayRef<int64_t> work = dispatch.getWork();
    Value count = constant(b, loc, work[1]);
    if (work[0])
      count = LLVM::AddOp::create(
          b, loc, LLVM::MulOp::create(b, loc, rows, constant(b, loc, work[0])),
          count);
    return count;
  }
  Value byteOffset(OpBuilder &b, Location loc, Value base, Value bytes) {
    return LLVM::GEPOp::create(b, loc, ptr, IntegerType::get(ctx, 8), base,
                               ArrayRef<LLVM::GEPArg>{bytes});
  }

  FailureOr<LLVM::LLVMFuncOp> task(DispatchOp dispatch, StringRef stepName,
                                   unsigned number);
  FailureOr<LLVM::LLVMFuncOp> step(StepOp stepOp);
  void emitModel(DictionaryAttr model, ModelPlanAttr plan,
                 LLVM::LLVMFuncOp prefill, LLVM::LLVMFuncOp decode,
                 uint32_t targetId, uint64_t features);
  LLVM::GlobalOp string(OpBuilder &b, Location loc, StringRef name,
                        StringRef text);

  ModuleOp module;
  MLIRContext *ctx;
  Type ptr, i64;
  LLVM::LLVMStructType argsType;
  uint32_t kvDtypeId = CQ4P_KV_F32;
  static_assert(int(KvDtype::f32) == CQ4P_KV_F32 &&
                int(KvDtype::f16) == CQ4P_KV_F16);
  static_assert(int(BindingKind::cq4) == CQ4P_BINDING_CQ4 &&
                int(BindingKind::fp16) == CQ4P_BINDING_FP16 &&
                int(BindingKind::fp32) == CQ4P_BINDING_FP32);
  unsigned strings = 0;
};

FailureOr<LLVM::LLVMFuncOp> StepExporter::task(DispatchOp dispatch,
                                               StringRef stepName,
                                               unsigned number) {
  auto entry = module.lookupSymbol<LLVM::LLVMFuncOp>(dispatch.getKernel());
  if (!entry)
    return dispatch.emitOpError() << "no C-ABI entry @" << dispatch.getKernel()
                                  << " (run cq4p-export-kernels first)";
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = dispatch.getLoc();
  auto func = LLVM::LLVMFuncOp::create(
      b, loc, ("__cq4p_task_" + stepName + "_" + Twine(number)).str(),
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), {ptr, i64, i64}),
      LLVM::Linkage::Internal);
  Block *block = func.addEntryBlock(b);
  b.setInsertionPointToStart(block);
  Value args = block->getArgument(0), begin = block->getArgument(1),
        end = block->getArgument(2);
  bool rowsSplit = dispatch.getSplit() == DispatchSplit::rows;
  if (std::optional<int64_t> grain = dispatch.getGrain(); grain && *grain > 1) {
    // The parallel-for split ceil(count / grain) blocks: back to work
    // items (rows, or the range's), the last block cut at the count.
    Value cGrain = constant(b, loc, *grain);
    begin = LLVM::MulOp::create(b, loc, begin, cGrain);
    Value blockEnd = LLVM::MulOp::create(b, loc, end, cGrain);
    Value total = workCount(b, loc, dispatch, field(b, loc, args, StepArgs::rows));
    Value past = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::sgt, blockEnd, total);
    end = LLVM::SelectOp::create(b, loc, past, total, blockEnd);
  }
  Value stepRows = dispatch.getSingleRow() ? constant(b, loc, 1)
                                           : field(b, loc, args, StepArgs::rows);
  Value position = field(b, loc, args, StepArgs::position);
  Value context = field(b, loc, args, StepArgs::context);

  SmallVector<Value> operands;
  for (PlaceAttr place : dispatch.getPointers().getAsRange<PlaceAttr>()) {
    Value pointer;
    switch (place.getBase()) {
    case PlaceBase::binding: {
      Value table = field(b, loc, args, StepArgs::bindings);
      Value slot = LLVM::GEPOp::create(
          b, loc, ptr, ptr, table,
          ArrayRef<LLVM::GEPArg>{int32_t(place.getIndex())});
      pointer = LLVM::LoadOp::create(b, loc, ptr, slot);
      break;
    }
    case PlaceBase::workspace:
      pointer = field(b, loc, args, StepArgs::workspace);
      break;
    case PlaceBase::ids:
      pointer = field(b, loc, args, StepArgs::ids);
      break;
    case PlaceBase::logits:
      pointer = field(b, loc, args, StepArgs::logits);
      break;
    case PlaceBase::state:
      pointer = field(b, loc, args, StepArgs::state);
      break;
    case PlaceBase::keys:
    case PlaceBase::values:
      // [context][row_bytes] after `cache_offset` bytes per position of the
      // buffers before them
      pointer = byteOffset(
          b, loc, field(b, loc, args, StepArgs::kv_cache),
          LLVM::MulOp::create(b, loc, context,
                              constant(b, loc, place.getCacheOffset())));
      break;
    }
    int64_t rowBytes = place.getRowBytes();
    Value rowsAhead = constant(b, loc, 0);
    if (rowsSplit && rowBytes)
      rowsAhead = begin;
    if (place.getAtPosition())
      rowsAhead = LLVM::AddOp::create(b, loc, rowsAhead, position);
    if (place.getLastRow())
      rowsAhead = LLVM::AddOp::create(
          b, loc, rowsAhead,
          LLVM::SubOp::create(b, loc, field(b, loc, args, StepArgs::rows),
                              constant(b, loc, 1)));
    Value bytes = LLVM::AddOp::create(
        b, loc, constant(b, loc, place.getOffset()),
        LLVM::MulOp::create(b, loc, rowsAhead, constant(b, loc, rowBytes)));
    operands.push_back(byteOffset(b, loc, pointer, bytes));
  }
  for (auto scalar : dispatch.getScalars().getAsRange<DispatchScalarAttr>()) {
    switch (scalar.getValue()) {
    case DispatchScalar::rows:
      operands.push_back(rowsSplit ? LLVM::SubOp::create(b, loc, end, begin)
                                   : stepRows);
      break;
    case DispatchScalar::position:
      operands.push_back(rowsSplit ? LLVM::AddOp::create(b, loc, position, begin)
                                   : position);
      break;
    case DispatchScalar::begin:
      operands.push_back(begin);
      break;
    case DispatchScalar::end:
      operands.push_back(end);
      break;
    case DispatchScalar::context:
      operands.push_back(context);
      break;
    }
  }
  LLVM::LLVMFunctionType entryType = entry.getFunctionType();
  if (entryType.getNumParams() != operands.size())
    return dispatch.emitOpError()
           << "@" << dispatch.getKernel() << " takes "
           << entryType.getNumParams() << " parameters, the dispatch gives "
           << operands.size();
  LLVM::CallOp::create(b, loc, entry, operands);
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return func;
}

FailureOr<LLVM::LLVMFuncOp> StepExporter::step(StepOp stepOp) {
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = stepOp.getLoc();
  SmallVector<LLVM::LLVMFuncOp> tasks;
  for (auto [number, dispatch] :
       llvm::enumerate(stepOp.getBody().front().getOps<DispatchOp>())) {
    FailureOr<LLVM::LLVMFuncOp> fn = task(dispatch, stepOp.getSymName(), number);
    if (failed(fn))
      return failure();
    tasks.push_back(*fn);
  }
  auto func = LLVM::LLVMFuncOp::create(
      b, loc, ("cq4p_step_" + stepOp.getSymName()).str(),
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), {ptr}),
      LLVM::Linkage::Internal);
  Block *entry = func.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  Value args = entry->getArgument(0);
  Value rows = field(b, loc, args, StepArgs::rows);

  if (FlatSymbolRefAttr single = stepOp.getSingleRowAttr()) {
    // One row runs the single-row step (GEMV kernels throughout).
    auto target = module.lookupSymbol<LLVM::LLVMFuncOp>(
        ("cq4p_step_" + single.getValue()).str());
    if (!target)
      return stepOp.emitOpError() << "single-row step @" << single.getValue()
                                  << " must be exported first";
    Block *oneRow = func.addBlock();
    Block *many = func.addBlock();
    Value isOne = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::eq, rows,
                                       constant(b, loc, 1));
    LLVM::CondBrOp::create(b, loc, isOne, oneRow, many);
    b.setInsertionPointToStart(oneRow);
    LLVM::CallOp::create(b, loc, target, ValueRange{args});
    LLVM::ReturnOp::create(b, loc, ValueRange{});
    b.setInsertionPointToStart(many);
  }

  Value parallelFor = field(b, loc, args, StepArgs::parallel_for);
  Value pool = field(b, loc, args, StepArgs::pool);
  auto forType = LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx),
                                             {ptr, ptr, ptr, i64});
  for (auto [dispatch, fn] :
       llvm::zip(stepOp.getBody().front().getOps<DispatchOp>(), tasks)) {
    Value count = workCount(b, loc, dispatch, rows);
    if (std::optional<int64_t> grain = dispatch.getGrain(); grain && *grain > 1)
      count = LLVM::UDivOp::create(
          b, loc, LLVM::AddOp::create(b, loc, count, constant(b, loc, *grain - 1)),
          constant(b, loc, *grain));
    Value taskAddress = LLVM::AddressOfOp::create(b, loc, fn);
    SmallVector<Value> callArgs = {parallelFor, pool, taskAddress, args, count};
    LLVM::CallOp::create(b, loc, forType, callArgs);
  }
  LLVM::ReturnOp::create(b, loc, ValueRange{});
  return func;
}

LLVM::GlobalOp StepExporter::string(OpBuilder &b, Location loc, StringRef name,
                                    StringRef text) {
  std::string value = text.str() + std::string(1, '\0');
  return LLVM::GlobalOp::create(
      b, loc, LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8), value.size()),
      /*isConstant=*/true, LLVM::Linkage::Private,
      ("__cq4p_model_" + name + "_" + Twine(strings++)).str(),
      b.getStringAttr(value));
}

void StepExporter::emitModel(DictionaryAttr model, ModelPlanAttr plan,
                             LLVM::LLVMFuncOp prefill, LLVM::LLVMFuncOp decode,
                             uint32_t targetId, uint64_t features) {
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = module.getLoc();
  auto bindingType = abi::structType<cq4p_model_binding>(ctx);
  auto descType = abi::structType<cq4p_model_desc>(ctx);
  auto intOf = [](DictionaryAttr dict, StringRef key) {
    auto value = dict.getAs<IntegerAttr>(key);
    return value ? value.getInt() : int64_t(0);
  };
  ArrayRef<PlanBinding> bindings = plan.getBindings();
  SmallVector<LLVM::GlobalOp> names;
  for (const PlanBinding &binding : bindings)
    names.push_back(string(b, loc, "tensor", binding.tensor.getValue()));
  auto arch = model.getAs<StringAttr>("architecture");
  auto digest = model.getAs<StringAttr>("digest");
  LLVM::GlobalOp archName = string(b, loc, "architecture", arch ? arch.getValue() : "");
  LLVM::GlobalOp digestText = string(b, loc, "digest", digest ? digest.getValue() : "");

  auto arrayType = LLVM::LLVMArrayType::get(bindingType, std::max<size_t>(bindings.size(), 1));
  auto table = LLVM::GlobalOp::create(b, loc, arrayType, /*isConstant=*/true,
                                      LLVM::Linkage::Private,
                                      "__cq4p_model_bindings", Attribute());
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(b.createBlock(&table.getInitializerRegion()));
    Value array = LLVM::ZeroOp::create(b, loc, arrayType);
    for (auto [i, binding] : llvm::enumerate(bindings)) {
      SmallVector<Value> values(bindingType.getBody().size());
      auto set = [&](ModelBinding::Field field, int64_t value) {
        Type type = abi::fieldType<cq4p_model_binding>(ctx, field);
        values[field] = LLVM::ConstantOp::create(b, loc, type,
                                                 b.getIntegerAttr(type, value));
      };
      values[ModelBinding::tensor] = LLVM::AddressOfOp::create(b, loc, names[i]);
      set(ModelBinding::kind, int64_t(binding.kind));
      set(ModelBinding::orthogonal, binding.orthogonal);
      set(ModelBinding::n, binding.n);
      set(ModelBinding::k, binding.k);
      set(ModelBinding::group_size, binding.groupSize);
      set(ModelBinding::reserved, 0);
      array = LLVM::InsertValueOp::create(
          b, loc, array, abi::structValue(b, loc, bindingType, values),
          ArrayRef<int64_t>{int64_t(i)});
    }
    LLVM::ReturnOp::create(b, loc, array);
  }

  auto desc = LLVM::GlobalOp::create(b, loc, descType, /*isConstant=*/true,
                                     LLVM::Linkage::External, CQ4P_MODEL_SYMBOL,
                                     Attribute());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(b.createBlock(&desc.getInitializerRegion()));
  SmallVector<Value> values(descType.getBody().size());
  auto set = [&](ModelDesc::Field field, int64_t value) {
    Type type = abi::fieldType<cq4p_model_desc>(ctx, field);
    values[field] =
        LLVM::ConstantOp::create(b, loc, type, b.getIntegerAttr(type, value));
  };
  auto address = [&](ModelDesc::Field field, auto symbol) {
    values[field] = LLVM::AddressOfOp::create(b, loc, symbol);
  };
  set(ModelDesc::abi_version, CQ4P_KERNEL_ABI_VERSION);
  set(ModelDesc::binding_count, bindings.size());
  address(ModelDesc::bindings, table);
  address(ModelDesc::architecture, archName);
  address(ModelDesc::digest, digestText);
  set(ModelDesc::vocab, intOf(model, "vocab"));
  set(ModelDesc::hidden, intOf(model, "hidden"));
  set(ModelDesc::layers, intOf(model, "layers"));
  set(ModelDesc::kv_width, plan.getKvWidth());
  set(ModelDesc::kv_dtype, kvDtypeId);
  set(ModelDesc::target, targetId);
  set(ModelDesc::features, int64_t(features));
  set(ModelDesc::prefill_chunk, plan.getPrefillChunk());
  set(ModelDesc::workspace_bytes, plan.getWorkspaceBytes());
  address(ModelDesc::prefill, prefill);
  address(ModelDesc::decode, decode);
  set(ModelDesc::kv_position_bytes, plan.getKvPositionBytes());
  set(ModelDesc::state_bytes, plan.getStateBytes());
  LLVM::ReturnOp::create(b, loc, abi::structValue(b, loc, descType, values));
}

LogicalResult StepExporter::run(uint32_t targetId, uint64_t features) {
  auto model = module->getAttrOfType<DictionaryAttr>("cq4p.model");
  auto plan = module->getAttrOfType<ModelPlanAttr>("cq4p.model_plan");
  SmallVector<StepOp> steps(module.getOps<StepOp>());
  if (steps.empty())
    return success();
  if (!model || !plan)
    return module.emitError()
           << "cq4p.step ops need the cq4p.model and cq4p.model_plan "
              "attributes (run cq4p-lower-model)";
  kvDtypeId = uint32_t(plan.getKvDtype());
  LLVM::LLVMFuncOp decode, prefill;
  // The single-row step first: the others branch to it.
  llvm::stable_sort(steps, [](StepOp a, StepOp b) {
    return !a.getSingleRowAttr() && b.getSingleRowAttr();
  });
  for (StepOp stepOp : steps) {
    FailureOr<LLVM::LLVMFuncOp> fn = step(stepOp);
    if (failed(fn))
      return failure();
    if (stepOp.getSymName() == "decode")
      decode = *fn;
    else if (stepOp.getSymName() == "prefill")
      prefill = *fn;
  }
  if (!decode || !prefill)
    return module.emitError() << "a model needs the steps @decode and @prefill";
  emitModel(model, plan, prefill, decode, targetId, features);
  for (StepOp stepOp : steps)
    stepOp.erase();
  return success();
}

class ExportSteps
    : public mlir::cq4p::impl::CQ4PExportStepsBase<ExportSteps> {
public:
  using Base::Base;

  void runOnOperation() override {
    if (failed(StepExporter(getOperation())
                   .run(uint32_t(target.getValue()), features)))
      signalPassFailure();
  }
};

} // namespace
