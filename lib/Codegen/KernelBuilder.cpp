//===- KernelBuilder.cpp - kernel functions with the kernel ABI -----------===//
//
// Creating a kernel function once per name with its `cq4p.kernel`
// attribute, and the kernels of the graph-level ops with a fixed C ABI: the
// linears' activation transform, GEMV and GEMM, and the embedding decoder.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Codegen/KernelBuilder.h"

#include "cq4p/format.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

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
  SmallVector<KernelParameter> params;
  for (const KernelParam &param : spec.params) {
    types.push_back(param.type);
    params.push_back({b.getStringAttr(param.name), param.type,
                      param.dynamicSize.empty()
                          ? StringAttr()
                          : b.getStringAttr(param.dynamicSize)});
  }
  Location loc = module.getLoc();
  b.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(b, loc, spec.name,
                                   b.getFunctionType(types, {}));
  func->setAttr("cq4p.kernel",
                KernelAttr::get(b.getContext(), spec.kind, spec.n, spec.k,
                                spec.groupSize, spec.window, spec.orthogonal,
                                spec.minRows, spec.maxRows, params));
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
    quantize.kind = KernelKind::quantize_orthogonal;
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
    quantize.kind = KernelKind::quantize_hadamard;
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
          QuantizeActivationsOp::create(b, loc, args[0], /*up=*/Value(),
                                        args[1], args[2], args[3], args[4],
                                        args[5], args[6], args[7], args[8],
                                        b.getI64IntegerAttr(gs),
                                        /*gating=*/ActivationAttr());
        }));
  }

  for (bool single : {true, false}) {
    if (single ? !gemv : !gemm)
      continue;
    int64_t rows = single ? 1 : kDynamic;
    KernelSpec matmul;
    matmul.name =
        std::string(single ? "cq4p_gemv_" : "cq4p_gemm_") + shapeName(w);
    matmul.kind = KernelKind::matmul;
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

FlatSymbolRefAttr mlir::cq4p::createGatedQuantizeKernel(KernelBuilder &kernels,
                                                        WeightType w,
                                                        Activation activation) {
  MLIRContext *ctx = w.getContext();
  Type f32 = Float32Type::get(ctx), f16 = Float16Type::get(ctx);
  Type i8 = IntegerType::get(ctx, 8), i32 = IntegerType::get(ctx, 32);
  Type index = IndexType::get(ctx);
  int64_t k = w.getK(), gs = w.getGroupSize(), ng = w.getNumGroups();
  KernelSpec spec;
  spec.describeWeight(w);
  spec.n = 1; // the activation transform does not depend on N
  spec.minRows = 1;
  spec.maxRows = 0;
  spec.name = "cq4p_quantize_glu_" + stringifyActivation(activation).str() +
              "_" + std::to_string(k) + "_gs" + std::to_string(gs) +
              "_hadamard";
  spec.kind = KernelKind::quantize_glu;
  MemRefType rowsType = MemRefType::get({kDynamic, k}, f32);
  MemRefType signsType = MemRefType::get({gs}, i8);
  spec.params = {{"gate", rowsType},
                 {"up", rowsType},
                 {"weight.input_scale_recip", MemRefType::get({k}, f16)},
                 {"weight.left_signs", signsType},
                 {"weight.right_signs", signsType},
                 {"weight.permutation", MemRefType::get({gs}, i32)},
                 {"act", MemRefType::get({kDynamic, k}, i8)},
                 {"act_scales", MemRefType::get({kDynamic, ng}, f32)},
                 {"rows", index},
                 {"group_begin", index},
                 {"group_end", index}};
  return kernels.getOrCreate(
      spec, [&](OpBuilder &b, Location loc, ValueRange args) {
        QuantizeActivationsOp::create(
            b, loc, args[0], args[1], args[2], args[3], args[4], args[5],
            args[6], args[7], args[9], args[10], b.getI64IntegerAttr(gs),
            ActivationAttr::get(ctx, activation));
      });
}

FlatSymbolRefAttr mlir::cq4p::createEmbeddingKernel(KernelBuilder &kernels,
                                                 WeightType w,
                                                 int64_t rowsPerId) {
  MLIRContext *ctx = w.getContext();
  Type f32 = Float32Type::get(ctx), f16 = Float16Type::get(ctx);
  Type i64 = IntegerType::get(ctx, 64);
  int64_t n = w.getN(), k = w.getK();
  KernelSpec spec;
  spec.name = "cq4p_embedding_" + std::to_string(n) + "x" + std::to_string(k);
  spec.kind = KernelKind::embedding;
  spec.describeWeight(w);
  spec.minRows = 1;
  spec.maxRows = 0;
  spec.params = {
      {"weight.panels", panelsType(w)},
      {"weight.norms", MemRefType::get({n, w.getNumGroups()}, f16)},
      {"weight.codebook", MemRefType::get({CQ4P_CODEBOOK_LEVELS}, f16)},
      {"weight.rotation_t", MemRefType::get({k, k}, f16)},
      {"weight.input_scale_recip", MemRefType::get({k}, f16)},
      {"ids", MemRefType::get({kDynamic}, i64)},
      {"out", MemRefType::get({kDynamic, k}, f32)}};
  if (rowsPerId == 1)
    return kernels.getOrCreate(
        spec, [&](OpBuilder &b, Location loc, ValueRange args) {
          DecodeEmbeddingOp::create(b, loc, args[0], args[1], args[2], args[3],
                                    args[4], args[5], args[6]);
        });
  // R rows per id: the ids' rows id * R + l listed in a stack buffer (R
  // per id, 8 bytes each: a chunk of 128 ids and R = 35 is 35 KiB) and the
  // output's [rows, R * K] seen as [rows * R, K], then the one row decoder
  // of every target over them.
  spec.name += "_r" + std::to_string(rowsPerId);
  spec.kind = KernelKind::embedding_rows;
  spec.params.back().type = MemRefType::get({kDynamic, rowsPerId * k}, f32);
  spec.params.push_back({"rows", IndexType::get(ctx)});
  return kernels.getOrCreate(
      spec, [&](OpBuilder &b, Location loc, ValueRange args) {
        Value ids = args[5], out = args[6], rows = args[7];
        Value per = arith::ConstantIndexOp::create(b, loc, rowsPerId);
        Value perI64 = arith::ConstantIntOp::create(b, loc, i64, rowsPerId);
        Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
        Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
        Value total = arith::MulIOp::create(b, loc, rows, per);
        Value tableRows = memref::AllocaOp::create(
            b, loc, MemRefType::get({kDynamic}, i64), ValueRange{total});
        auto loop = scf::ForOp::create(b, loc, c0, rows, c1);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(loop.getBody());
          Value i = loop.getInductionVar();
          Value first = arith::MulIOp::create(
              b, loc, memref::LoadOp::create(b, loc, ids, ValueRange{i}), perI64);
          Value at = arith::MulIOp::create(b, loc, i, per);
          auto inner = scf::ForOp::create(b, loc, c0, per, c1);
          b.setInsertionPointToStart(inner.getBody());
          Value l = inner.getInductionVar();
          Value row = arith::AddIOp::create(
              b, loc, first, arith::IndexCastOp::create(b, loc, i64, l));
          memref::StoreOp::create(b, loc, row, tableRows,
                                  ValueRange{arith::AddIOp::create(b, loc, at, l)});
        }
        Value flat = memref::ReinterpretCastOp::create(
            b, loc, MemRefType::get({kDynamic, k}, f32), out, /*offset=*/b.getIndexAttr(0),
            /*sizes=*/ArrayRef<OpFoldResult>{total, b.getIndexAttr(k)},
            /*strides=*/ArrayRef<OpFoldResult>{b.getIndexAttr(k), b.getIndexAttr(1)});
        DecodeEmbeddingOp::create(b, loc, args[0], args[1], args[2], args[3],
                                  args[4], tableRows, flat);
      });
}
