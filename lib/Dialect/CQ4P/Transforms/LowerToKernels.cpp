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

#include "cq4p/Codegen/KernelBuilder.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
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
    spec.kind = KernelKind::attention;
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
                              args[5], /*position=*/Value(), attention.getNumHeadsAttr(),
                              attention.getNumKvHeadsAttr(),
                              attention.getHeadDimAttr(), attention.getWindowAttr(),
                              attention.getScaleAttr());
        });
    attention->setAttr("cq4p.kernels", ArrayAttr::get(ctx, {ref}));
  }

  void lowerEmbedding(EmbeddingOp embedding, KernelBuilder &kernels) {
    FlatSymbolRefAttr ref = createEmbeddingKernel(
        kernels, embedding.getWeight().getType(), embedding.getRowsPerIdOrOne());
    embedding->setAttr("cq4p.kernels", ArrayAttr::get(&getContext(), {ref}));
  }
};

} // namespace
