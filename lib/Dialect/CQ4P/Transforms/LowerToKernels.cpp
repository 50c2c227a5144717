//===- LowerToKernels.cpp - graph-level ops to kernel functions -----------===//
//
// A model graph names what to compute (`cq4p.linear` of x and a CQ4
// weight); the runtime calls kernels, each a function over buffers with a
// fixed C ABI (runtime/include/cq4p/kernel_abi.h). This pass creates those
// functions:
//
//   %y = cq4p.linear %x, %w : tensor<?x1536xf32>,
//       !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<?x2048xf32>
//
// becomes the same op with `cq4p.kernels = [@cq4p_quantize_1536_gs128_hadamard,
// @cq4p_gemv_2048x1536_gs128, @cq4p_gemm_2048x1536_gs128]` and, at module
// level,
//
//   func.func @cq4p_gemv_2048x1536_gs128(
//       %panels: memref<32x12x32x128xi8>, %norm_panels: memref<32x12x64xf32>,
//       %cb_i8: memref<16xi8>, %act: memref<1x1536xi8>,
//       %act_scales: memref<1x12xf32>, %y: memref<1x2048xf32>,
//       %sb_begin: index, %sb_end: index) attributes {cq4p.kernel = {...}} {
//     cq4p.panel_matmul %panels, ... : ...
//   }
//
// M-dispatch: a GEMV (one row, static shapes) serves M = 1, a GEMM (dynamic
// rows) serves M > 1; a static M selects one of them, a dynamic M keeps
// both. Kernels are shared by every op of the same shape.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
#include "KernelBuilder.h"
#include "cq4p/format.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/bit.h"

#include <cmath>

namespace mlir::cq4p {
#define GEN_PASS_DEF_CQ4PLOWERTOKERNELS
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

constexpr int64_t kDynamic = ShapedType::kDynamic;

FlatSymbolRefAttr mlir::cq4p::KernelBuilder::getOrCreate(
    const KernelSpec &spec,
    function_ref<void(OpBuilder &, Location, ValueRange)> body) {
  auto ref = FlatSymbolRefAttr::get(b.getContext(), spec.name);
  if (module.lookupSymbol(spec.name))
    return ref;
  SmallVector<Type> types;
  SmallVector<Attribute> names, typeAttrs, dynamicSizes;
  bool namedSizes = false;
  for (const KernelParam &param : spec.params) {
    types.push_back(param.type);
    names.push_back(b.getStringAttr(param.name));
    typeAttrs.push_back(TypeAttr::get(param.type));
    dynamicSizes.push_back(b.getStringAttr(param.dynamicSize));
    namedSizes |= !param.dynamicSize.empty();
  }
  Location loc = module.getLoc();
  b.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(b, loc, spec.name,
                                   b.getFunctionType(types, {}));
  SmallVector<NamedAttribute> info = {
      b.getNamedAttr("op", b.getStringAttr(spec.op)),
      b.getNamedAttr("n", b.getI64IntegerAttr(spec.n)),
      b.getNamedAttr("k", b.getI64IntegerAttr(spec.k)),
      b.getNamedAttr("group_size", b.getI64IntegerAttr(spec.groupSize)),
      b.getNamedAttr("window", b.getI64IntegerAttr(spec.window)),
      b.getNamedAttr("orthogonal", b.getBoolAttr(spec.orthogonal)),
      b.getNamedAttr("min_rows", b.getI64IntegerAttr(spec.minRows)),
      b.getNamedAttr("max_rows", b.getI64IntegerAttr(spec.maxRows)),
      b.getNamedAttr("params", b.getArrayAttr(names)),
      b.getNamedAttr("param_types", b.getArrayAttr(typeAttrs))};
  if (namedSizes)
    info.push_back(
        b.getNamedAttr("dynamic_sizes", b.getArrayAttr(dynamicSizes)));
  func->setAttr("cq4p.kernel", b.getDictionaryAttr(info));
  Block *entry = func.addEntryBlock();
  OpBuilder inner = OpBuilder::atBlockBegin(entry);
  body(inner, loc, entry->getArguments());
  func::ReturnOp::create(inner, loc);
  return ref;
}

static std::string shapeName(WeightType w) {
  return std::to_string(w.getN()) + "x" + std::to_string(w.getK()) + "_gs" +
         std::to_string(w.getGroupSize());
}

MemRefType mlir::cq4p::panelsType(WeightType w) {
  return MemRefType::get({w.getNumSuperBlocks(), w.getNumGroups(),
                          w.getGroupSize() / CQ4P_KG_BLOCK_K,
                          CQ4P_KG_BLOCK_BYTES},
                         IntegerType::get(w.getContext(), 8));
}

SmallVector<FlatSymbolRefAttr>
mlir::cq4p::createLinearKernels(KernelBuilder &kernels, WeightType w, bool gemv,
                              bool gemm) {
  MLIRContext *ctx = w.getContext();
  Type f32 = Float32Type::get(ctx), f16 = Float16Type::get(ctx);
  Type i8 = IntegerType::get(ctx, 8), i32 = IntegerType::get(ctx, 32);
  Type index = IndexType::get(ctx);
  int64_t n = w.getN(), k = w.getK(), gs = w.getGroupSize(),
          ng = w.getNumGroups();
  bool orthogonal = w.getRotation() == Rotation::orthogonal;
  SmallVector<FlatSymbolRefAttr> refs;

  // The activation kernel, shared by the GEMV and the GEMM.
  KernelSpec quantize;
  quantize.describeWeight(w);
  quantize.n = 1; // the activation transform does not depend on N
  quantize.minRows = 1;
  quantize.maxRows = 0;
  MemRefType xType = MemRefType::get({kDynamic, k}, f32);
  MemRefType actType = MemRefType::get({kDynamic, k}, i8);
  MemRefType scalesType = MemRefType::get({kDynamic, ng}, f32);
  MemRefType isrType = MemRefType::get({k}, f16);
  if (orthogonal) {
    quantize.name = "cq4p_quantize_" + std::to_string(k) + "_orthogonal";
    quantize.op = "quantize_orthogonal";
    quantize.params = {{"x", xType},
                       {"weight.input_scale_recip", isrType},
                       {"weight.rotation", MemRefType::get({k, k}, f16)},
                       {"act", actType},
                       {"act_scales", scalesType},
                       {"group_begin", index},
                       {"group_end", index}};
    refs.push_back(kernels.getOrCreate(
        quantize, [&](OpBuilder &b, Location loc, ValueRange args) {
          RotateQuantizeActivationsOp::create(
              b, loc, args[0], args[1], args[2], args[3], args[4], args[5],
              args[6], b.getI64IntegerAttr(gs));
        }));
  } else {
    quantize.name = "cq4p_quantize_" + std::to_string(k) + "_gs" +
                    std::to_string(gs) + "_hadamard";
    quantize.op = "quantize_hadamard";
    MemRefType signsType = MemRefType::get({gs}, i8);
    quantize.params = {{"x", xType},
                       {"weight.input_scale_recip", isrType},
                       {"weight.left_signs", signsType},
                       {"weight.right_signs", signsType},
                       {"weight.permutation", MemRefType::get({gs}, i32)},
                       {"act", actType},
                       {"act_scales", scalesType},
                       {"group_begin", index},
                       {"group_end", index}};
    refs.push_back(kernels.getOrCreate(
        quantize, [&](OpBuilder &b, Location loc, ValueRange args) {
          QuantizeActivationsOp::create(b, loc, args[0], args[1], args[2],
                                        args[3], args[4], args[5], args[6],
                                        args[7], args[8],
                                        b.getI64IntegerAttr(gs));
        }));
  }

  for (bool single : {true, false}) {
    if (single ? !gemv : !gemm)
      continue;
    int64_t rows = single ? 1 : kDynamic;
    KernelSpec matmul;
    matmul.name =
        std::string(single ? "cq4p_gemv_" : "cq4p_gemm_") + shapeName(w);
    matmul.op = "matmul";
    matmul.describeWeight(w);
    // The panel bytes and their rescale do not depend on the rotation.
    matmul.orthogonal = false;
    matmul.minRows = single ? 1 : 2;
    matmul.maxRows = single ? 1 : 0;
    matmul.params = {
        {"weight.panels", panelsType(w)},
        {"weight.norm_panels",
         MemRefType::get({w.getNumSuperBlocks(), ng, CQ4P_PANEL_CHANNELS},
                         f32)},
        {"weight.cb_i8", MemRefType::get({CQ4P_CODEBOOK_LEVELS}, i8)},
        {"act", MemRefType::get({rows, k}, i8)},
        {"act_scales", MemRefType::get({rows, ng}, f32)},
        {"y", MemRefType::get({rows, n}, f32)},
        {"sb_begin", index},
        {"sb_end", index}};
    refs.push_back(kernels.getOrCreate(
        matmul, [&](OpBuilder &b, Location loc, ValueRange args) {
          PanelMatmulOp::create(b, loc, args[0], args[1], args[2], args[3],
                                args[4], args[5], args[6], args[7]);
        }));
  }
  return refs;
}


FlatSymbolRefAttr mlir::cq4p::createEmbeddingKernel(KernelBuilder &kernels,
                                                 WeightType w) {
  MLIRContext *ctx = w.getContext();
  Type f32 = Float32Type::get(ctx), f16 = Float16Type::get(ctx);
  int64_t n = w.getN(), k = w.getK();
  KernelSpec spec;
  spec.name = "cq4p_embedding_" + std::to_string(n) + "x" + std::to_string(k);
  spec.op = "embedding";
  spec.describeWeight(w);
  spec.minRows = 1;
  spec.maxRows = 0;
  spec.params = {
      {"weight.panels", panelsType(w)},
      {"weight.norms", MemRefType::get({n, w.getNumGroups()}, f16)},
      {"weight.codebook", MemRefType::get({CQ4P_CODEBOOK_LEVELS}, f16)},
      {"weight.rotation_t", MemRefType::get({k, k}, f16)},
      {"weight.input_scale_recip", MemRefType::get({k}, f16)},
      {"ids", MemRefType::get({kDynamic}, IntegerType::get(ctx, 64))},
      {"out", MemRefType::get({kDynamic, k}, f32)}};
  return kernels.getOrCreate(
      spec, [&](OpBuilder &b, Location loc, ValueRange args) {
        DecodeEmbeddingOp::create(b, loc, args[0], args[1], args[2], args[3],
                                  args[4], args[5], args[6]);
      });
}

namespace {

class LowerToKernels
    : public mlir::cq4p::impl::CQ4PLowerToKernelsBase<LowerToKernels> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> graphFunctions;
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (!func->hasAttr("cq4p.kernel"))
        graphFunctions.push_back(func);
    KernelBuilder kernels(module);
    bool failed = false;
    module.walk([&](Operation *op) {
      if (auto linear = dyn_cast<LinearOp>(op)) {
        if (!checkPanels(op, linear.getWeight().getType()))
          failed = true;
        else
          lowerLinear(linear, kernels);
      } else if (auto attention = dyn_cast<PrefillAttentionOp>(op)) {
        lowerAttention(attention, kernels);
      } else if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
        if (!checkPanels(op, embedding.getWeight().getType()))
          failed = true;
        else
          lowerEmbedding(embedding, kernels);
      }
    });
    if (failed)
      return signalPassFailure();
    if (kernelsOnly)
      for (func::FuncOp func : graphFunctions)
        func.erase();
  }

private:
  static bool checkPanels(Operation *op, WeightType weight) {
    if (weight.getLayout() == Layout::panels)
      return true;
    op->emitError() << "weight layout interleaved4row is not compiled: upgrade "
                       "the bundle's legacy files to packed panels (python -m "
                       "cq4p upgrade)";
    return false;
  }

  void lowerLinear(LinearOp linear, KernelBuilder &kernels) {
    // M-dispatch.
    int64_t m = linear.getInput().getType().getDimSize(0);
    SmallVector<FlatSymbolRefAttr> refs = createLinearKernels(
        kernels, linear.getWeight().getType(),
        /*gemv=*/m == 1 || ShapedType::isDynamic(m), /*gemm=*/m != 1);
    linear->setAttr("cq4p.kernels",
                    ArrayAttr::get(&getContext(), SmallVector<Attribute>(
                                                      refs.begin(), refs.end())));
  }

  void lowerAttention(PrefillAttentionOp attention, KernelBuilder &kernels) {
    MLIRContext *ctx = &getContext();
    int64_t heads = attention.getNumHeads(), kvHeads = attention.getNumKvHeads();
    int64_t dim = attention.getHeadDim(), window = attention.getWindow();
    KernelSpec spec;
    spec.name = "cq4p_attention_h" + std::to_string(heads) + "_kv" +
                std::to_string(kvHeads) + "_d" + std::to_string(dim) +
                (window ? "_w" + std::to_string(window) : "");
    // The scale is part of what the kernel computes.
    float scale = attention.getScale().convertToFloat();
    if (scale != float(1.0 / std::sqrt(double(dim))))
      spec.name += "_s" + std::to_string(llvm::bit_cast<uint32_t>(scale));
    spec.op = "attention";
    spec.n = heads;
    spec.k = dim;
    spec.groupSize = kvHeads;
    spec.window = window;
    spec.minRows = 1;
    spec.maxRows = 0;
    Type f32 = Float32Type::get(ctx), index = IndexType::get(ctx);
    MemRefType wide = MemRefType::get({kDynamic, heads * dim}, f32);
    MemRefType narrow = MemRefType::get({kDynamic, kvHeads * dim}, f32);
    spec.params = {{"q", wide},          {"k", narrow},
                   {"v", narrow},        {"out", wide},
                   {"head_begin", index}, {"head_end", index}};
    FlatSymbolRefAttr ref = kernels.getOrCreate(
        spec, [&](OpBuilder &b, Location loc, ValueRange args) {
          AttentionOp::create(b, loc, args[0], args[1], args[2], args[3], args[4],
                              args[5], attention.getNumHeadsAttr(),
                              attention.getNumKvHeadsAttr(),
                              attention.getHeadDimAttr(), attention.getWindowAttr(),
                              attention.getScaleAttr());
        });
    attention->setAttr("cq4p.kernels", ArrayAttr::get(ctx, {ref}));
  }

  void lowerEmbedding(EmbeddingOp embedding, KernelBuilder &kernels) {
    FlatSymbolRefAttr ref =
        createEmbeddingKernel(kernels, embedding.getWeight().getType());
    embedding->setAttr("cq4p.kernels", ArrayAttr::get(&getContext(), {ref}));
  }
};

} // namespace
