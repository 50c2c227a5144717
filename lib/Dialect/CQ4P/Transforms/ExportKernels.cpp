//===- ExportKernels.cpp - C-ABI entry points and the kernel table --------===//
//
// After the lowering to the LLVM dialect a kernel takes its buffers as
// expanded memref descriptors. The runtime calls it through the C ABI of
// runtime/include/cq4p/kernel_abi.h instead: a pointer to the weight's
// region view, bare buffer pointers and sizes. For every kernel (a function
// with a `cq4p.kernel` attribute) this pass
//
//   - renames it `<name>_impl` with internal linkage;
//   - adds `<name>` with the C signature of its kind, which loads each weight
//     region's pointer from the cq4p_weight_view, builds every descriptor
//     (static sizes from the kernel's buffer types, the dynamic row count
//     from the `rows`/`count` parameter, row-major strides) and calls it;
//   - lists it in the exported `cq4p_kernel_table` with its op, shapes,
//     target and the CPU features it needs.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Codegen/KernelAbi.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSwitch.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CQ4PEXPORTKERNELS
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

/// The C parameters of each op's entry point, in order.
struct AbiSignature {
  cq4p_kernel_op op; ///< 0: a model kernel, called by the steps only
  SmallVector<StringRef> params; ///< pointer params first, then i64 ones
  unsigned pointerCount;
  StringRef rowsParam; ///< fills the buffers' dynamic dimension
};

// The enums' values are kernel_abi.h's.
static_assert(int(KernelKind::quantize_hadamard) == CQ4P_KERNEL_QUANTIZE_HADAMARD &&
              int(KernelKind::quantize_orthogonal) ==
                  CQ4P_KERNEL_QUANTIZE_ORTHOGONAL &&
              int(KernelKind::matmul) == CQ4P_KERNEL_MATMUL &&
              int(KernelKind::embedding) == CQ4P_KERNEL_EMBEDDING &&
              int(KernelKind::attention) == CQ4P_KERNEL_ATTENTION);
static_assert(int(Target::host) == CQ4P_TARGET_HOST &&
              int(Target::aarch64_neon) == CQ4P_TARGET_AARCH64_NEON &&
              int(Target::aarch64_sme2) == CQ4P_TARGET_AARCH64_SME2);

/// The C signature of a kernel of the kernel table; none for a model kernel.
std::optional<AbiSignature> tableSignature(KernelKind kind) {
  auto op = cq4p_kernel_op(kind);
  switch (kind) {
  case KernelKind::quantize_hadamard:
  case KernelKind::quantize_orthogonal:
    return AbiSignature{op,
                        {"weight", "x", "act", "act_scales", "rows",
                         "group_begin", "group_end"},
                        4,
                        "rows"};
  case KernelKind::matmul:
    return AbiSignature{op,
                        {"weight", "act", "act_scales", "y", "rows",
                         "sb_begin", "sb_end"},
                        4,
                        "rows"};
  case KernelKind::embedding:
    return AbiSignature{op, {"weight", "ids", "out", "count"}, 3, "count"};
  case KernelKind::attention:
    return AbiSignature{op,
                        {"q", "k", "v", "out", "seq", "head_begin", "head_end"},
                        4,
                        "seq"};
  default:
    return std::nullopt;
  }
}

/// A model kernel's entry (called by the model's steps, not listed in the
/// table): one cq4p_weight_view pointer per weight it reads regions of
/// (`<view>.<region>` parameters, views in order of first appearance), then
/// its buffers' pointers and its integer parameters, in the kernel's order.
AbiSignature genericSignature(ArrayRef<KernelParameter> params) {
  AbiSignature abi{cq4p_kernel_op(0), {}, 0, "rows"};
  SmallVector<StringRef> views, buffers, scalars;
  for (const KernelParameter &param : params) {
    StringRef name = param.name.getValue();
    auto [view, region] = name.split('.');
    if (!region.empty()) {
      if (!llvm::is_contained(views, view))
        views.push_back(view);
      continue;
    }
    if (isa<MemRefType>(param.type))
      buffers.push_back(name);
    else
      scalars.push_back(name);
  }
  abi.params.append(views);
  abi.params.append(buffers);
  abi.pointerCount = abi.params.size();
  abi.params.append(scalars);
  return abi;
}

using WeightView = abi::Fields<cq4p_weight_view>;
using KernelDesc = abi::Fields<cq4p_kernel_desc>;
using KernelTable = abi::Fields<cq4p_kernel_table>;

/// The cq4p_weight_view field a kernel's `<view>.<region>` parameter reads:
/// its regions are the struct's fields, by name.
std::optional<WeightView::Field> weightField(StringRef region) {
#define CQ4P_WEIGHT_REGION(type, name, kind) .Case(#name, WeightView::name)
  return llvm::StringSwitch<std::optional<WeightView::Field>>(region)
      CQ4P_WEIGHT_VIEW_FIELDS(CQ4P_WEIGHT_REGION)
      .Default(std::nullopt);
#undef CQ4P_WEIGHT_REGION
}

struct ExportedKernel {
  std::string name;
  cq4p_kernel_op op;
  int64_t n, k, groupSize, minRows, maxRows;
  bool orthogonal;
  LLVM::LLVMFuncOp entry;
  int64_t window;
};


class ExportKernels
    : public mlir::cq4p::impl::CQ4PExportKernelsBase<ExportKernels> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<LLVM::LLVMFuncOp> kernels;
    module.walk([&](LLVM::LLVMFuncOp func) {
      if (func->hasAttr("cq4p.kernel"))
        kernels.push_back(func);
      if (func->hasAttr("cq4p.sme_leaf"))
        markStreamingLeaf(func);
    });
    SmallVector<ExportedKernel> exported;
    for (LLVM::LLVMFuncOp func : kernels) {
      FailureOr<ExportedKernel> entry = exportKernel(func);
      if (failed(entry))
        return signalPassFailure();
      if (entry->op != 0)
        exported.push_back(*entry);
    }
    emitTable(module, exported, cq4p_target(target.getValue()));
  }

private:
  /// An SME2 leaf is called like any function: it enters streaming mode in
  /// its body and owns fresh ZA and ZT0 state, so nothing leaks into the
  /// (NEON) caller. ZT0 has no dialect attribute: LLVM's function attribute.
  static void markStreamingLeaf(LLVM::LLVMFuncOp func) {
    func.setLinkage(LLVM::Linkage::Internal);
    func->removeAttr("sym_visibility");
    func.setArmLocallyStreaming(true);
    func.setArmNewZa(true);
    // A leaf of fixed-length 16-lane vector code (a model's small per-row
    // kernels) runs at the 512-bit streaming vector length the SME2 target
    // assumes: with vscale known, LLVM keeps a 16-lane vector in one Z
    // register instead of four 128-bit pieces.
    if (func->hasAttr("cq4p.sme_fixed_lanes")) {
      func.setVscaleRangeAttr(LLVM::VScaleRangeAttr::get(
          func.getContext(), IntegerAttr::get(IntegerType::get(func.getContext(), 32), 4),
          IntegerAttr::get(IntegerType::get(func.getContext(), 32), 4)));
      func->removeAttr("cq4p.sme_fixed_lanes");
    }
    SmallVector<Attribute> passthrough;
    if (ArrayAttr existing = func.getPassthroughAttr())
      passthrough.append(existing.begin(), existing.end());
    passthrough.push_back(StringAttr::get(func.getContext(), "aarch64_new_zt0"));
    func.setPassthroughAttr(ArrayAttr::get(func.getContext(), passthrough));
    func->removeAttr("cq4p.sme_leaf");
  }

  FailureOr<ExportedKernel> exportKernel(LLVM::LLVMFuncOp impl) {
    auto info = impl->getAttrOfType<KernelAttr>("cq4p.kernel");
    ArrayRef<KernelParameter> params = info.getParams();
    std::optional<AbiSignature> abi = tableSignature(info.getKind());
    if (!abi)
      abi = genericSignature(params);

    MLIRContext *ctx = &getContext();
    OpBuilder b(impl);
    Location loc = impl.getLoc();
    auto ptrType = LLVM::LLVMPointerType::get(ctx);
    auto i64 = IntegerType::get(ctx, 64);
    std::string name = impl.getSymName().str();
    impl.setSymName(name + "_impl");
    impl.setLinkage(LLVM::Linkage::Internal);
    impl->removeAttr("cq4p.kernel");

    SmallVector<Type> abiTypes;
    for (unsigned i = 0; i < abi->params.size(); ++i)
      abiTypes.push_back(i < abi->pointerCount ? Type(ptrType) : Type(i64));
    auto wrapper = LLVM::LLVMFuncOp::create(
        b, loc, name,
        LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), abiTypes));
    Block *entry = wrapper.addEntryBlock(b);
    b.setInsertionPointToStart(entry);
    auto abiArg = [&](StringRef param) -> Value {
      for (unsigned i = 0; i < abi->params.size(); ++i)
        if (abi->params[i] == param)
          return entry->getArgument(i);
      return Value();
    };
    auto constant = [&](int64_t value) -> Value {
      return LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(value));
    };

    if (abi->op == 0)
      wrapper.setLinkage(LLVM::Linkage::Internal);

    SmallVector<Value> callArgs;
    for (const KernelParameter &kernelParam : params) {
      StringRef param = kernelParam.name.getValue();
      Type type = kernelParam.type;
      Value pointer;
      if (auto [view, region] = param.split('.'); !region.empty()) {
        std::optional<WeightView::Field> field = weightField(region);
        if (!field || !abiArg(view))
          return impl.emitError() << "cq4p-export-kernels: unknown weight region '"
                                  << param << "'";
        param = region;
        Value address = LLVM::GEPOp::create(
            b, loc, ptrType, abi::structType<cq4p_weight_view>(ctx),
            abiArg(view), ArrayRef<LLVM::GEPArg>{0, int32_t(*field)});
        pointer = LLVM::LoadOp::create(b, loc, ptrType, address);
      } else {
        Value arg = abiArg(param);
        if (!arg)
          return impl.emitError() << "cq4p-export-kernels: the "
                                  << stringifyKernelKind(info.getKind())
                                  << " ABI has no parameter '" << param << "'";
        if (!isa<MemRefType>(type)) {
          callArgs.push_back(arg);
          continue;
        }
        pointer = arg;
      }
      auto memref = cast<MemRefType>(type);
      // Descriptor: allocated and aligned pointer, offset, sizes, strides.
      callArgs.push_back(pointer);
      callArgs.push_back(pointer);
      callArgs.push_back(constant(0));
      StringRef sizeParam = kernelParam.sizedBy
                                ? kernelParam.sizedBy.getValue()
                                : abi->rowsParam;
      SmallVector<Value> sizes;
      for (int64_t dim : memref.getShape()) {
        if (!ShapedType::isDynamic(dim)) {
          sizes.push_back(constant(dim));
          continue;
        }
        Value size = abiArg(sizeParam);
        if (!size)
          return impl.emitError() << "cq4p-export-kernels: " << name
                                  << " has no size parameter '" << sizeParam
                                  << "' for its buffer '" << param << "'";
        sizes.push_back(size);
      }
      callArgs.append(sizes);
      SmallVector<int64_t> strides(memref.getRank(), 1);
      for (int64_t d = memref.getRank() - 2; d >= 0; --d)
        strides[d] = strides[d + 1] * memref.getDimSize(d + 1);
      for (int64_t stride : strides)
        callArgs.push_back(constant(stride));
    }
    if (callArgs.size() != impl.getNumArguments())
      return impl.emitError() << "cq4p-export-kernels: " << name << " takes "
                              << impl.getNumArguments()
                              << " lowered arguments, the ABI gives "
                              << callArgs.size();
    LLVM::CallOp::create(b, loc, impl, callArgs);
    LLVM::ReturnOp::create(b, loc, ValueRange{});

    return ExportedKernel{name,
                          abi->op,
                          info.getN(),
                          info.getK(),
                          info.getGroupSize(),
                          info.getMinRows(),
                          info.getMaxRows(),
                          info.getOrthogonal(),
                          wrapper,
                          info.getWindow()};
  }

  void emitTable(ModuleOp module, ArrayRef<ExportedKernel> kernels,
                 cq4p_target targetId) {
    MLIRContext *ctx = &getContext();
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    Location loc = module.getLoc();
    auto descType = abi::structType<cq4p_kernel_desc>(ctx);
    auto tableType = abi::structType<cq4p_kernel_table>(ctx);

    SmallVector<LLVM::GlobalOp> names;
    for (auto [i, kernel] : llvm::enumerate(kernels)) {
      std::string text = kernel.name + std::string(1, '\0');
      names.push_back(LLVM::GlobalOp::create(
          b, loc, LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8), text.size()),
          /*isConstant=*/true, LLVM::Linkage::Private,
          "__cq4p_kernel_name_" + std::to_string(i), b.getStringAttr(text)));
    }

    auto arrayType = LLVM::LLVMArrayType::get(descType, kernels.size());
    auto descs = LLVM::GlobalOp::create(b, loc, arrayType, /*isConstant=*/true,
                                        LLVM::Linkage::Private,
                                        "__cq4p_kernel_descs", Attribute());
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(b.createBlock(&descs.getInitializerRegion()));
      Value array = LLVM::UndefOp::create(b, loc, arrayType);
      for (auto [i, kernel] : llvm::enumerate(kernels)) {
        SmallVector<Value> values(descType.getBody().size());
        auto set = [&](KernelDesc::Field field, int64_t value) {
          Type type = abi::fieldType<cq4p_kernel_desc>(ctx, field);
          values[field] = LLVM::ConstantOp::create(
              b, loc, type, b.getIntegerAttr(type, value));
        };
        values[KernelDesc::name] = LLVM::AddressOfOp::create(b, loc, names[i]);
        set(KernelDesc::op, kernel.op);
        set(KernelDesc::target, targetId);
        set(KernelDesc::features, int64_t(features));
        set(KernelDesc::n, kernel.n);
        set(KernelDesc::k, kernel.k);
        set(KernelDesc::group_size, kernel.groupSize);
        set(KernelDesc::orthogonal, kernel.orthogonal);
        set(KernelDesc::min_rows, kernel.minRows);
        set(KernelDesc::max_rows, kernel.maxRows);
        values[KernelDesc::entry] =
            LLVM::AddressOfOp::create(b, loc, kernel.entry);
        set(KernelDesc::window, kernel.window);
        set(KernelDesc::reserved, 0);
        array = LLVM::InsertValueOp::create(
            b, loc, array, abi::structValue(b, loc, descType, values),
            ArrayRef<int64_t>{int64_t(i)});
      }
      LLVM::ReturnOp::create(b, loc, array);
    }

    auto table = LLVM::GlobalOp::create(b, loc, tableType, /*isConstant=*/true,
                                        LLVM::Linkage::External,
                                        CQ4P_KERNEL_TABLE_SYMBOL, Attribute());
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(b.createBlock(&table.getInitializerRegion()));
    auto i32 = IntegerType::get(ctx, 32);
    SmallVector<Value> fields(tableType.getBody().size());
    fields[KernelTable::abi_version] = LLVM::ConstantOp::create(
        b, loc, i32, b.getI32IntegerAttr(CQ4P_KERNEL_ABI_VERSION));
    fields[KernelTable::count] = LLVM::ConstantOp::create(
        b, loc, i32, b.getI32IntegerAttr(kernels.size()));
    fields[KernelTable::kernels] = LLVM::AddressOfOp::create(b, loc, descs);
    LLVM::ReturnOp::create(b, loc, abi::structValue(b, loc, tableType, fields));
  }
};

} // namespace
