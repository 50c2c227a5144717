//===- Pipelines.cpp - graph-level cq4p IR to exported LLVM kernels -------===//

#include "cq4p/Pipelines/Pipelines.h"

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
#include "cq4p/kernel_abi.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::cq4p;

// The kernel target is the ODS Target everywhere in the compiler; its
// values are the ones the kernel table carries (kernel_abi.h).
static_assert(uint32_t(Target::host) == CQ4P_TARGET_HOST &&
                  uint32_t(Target::aarch64_neon) == CQ4P_TARGET_AARCH64_NEON &&
                  uint32_t(Target::aarch64_sme2) == CQ4P_TARGET_AARCH64_SME2,
              "the ODS Target must keep kernel_abi.h's cq4p_target values");

void mlir::cq4p::buildKernelPipeline(OpPassManager &pm, Target target,
                                     const KernelPipelineOptions &options) {
  buildKernelFrontPipeline(pm, target, options);
  buildKernelBackPipeline(pm, target, options);
}

void mlir::cq4p::buildKernelFrontPipeline(OpPassManager &pm, Target target,
                                          const KernelPipelineOptions &options) {
  // A model graph: its kernels and the planned prefill and decode steps.
  pm.addPass(createCQ4PLowerModel(
      CQ4PLowerModelOptions{options.prefillChunk, options.kvCache,
                            options.fuseDenseMlp, options.gateInTransform}));
  // Graph-level ops to kernel functions over buffers (M-dispatch).
  pm.addPass(createCQ4PLowerToKernels(CQ4PLowerToKernelsOptions{true}));
  // Each kernel op's strategy, once, from the target's KernelTargetInfo:
  // what the tiling below and the conversions read.
  pm.addPass(createCQ4PSelectStrategy(CQ4PSelectStrategyOptions{target}));
  // Super-blocks, row tiles, and the int32-partials / fp32-rescale split,
  // as each op's strategy says.
  pm.addNestedPass<func::FuncOp>(
      createCQ4PTileSuperBlocks(CQ4PTileSuperBlocksOptions{options.gemmRows}));
}

void mlir::cq4p::buildKernelBackPipeline(OpPassManager &pm, Target target,
                                         const KernelPipelineOptions &options) {
  bool sme2 = target == Target::aarch64_sme2;
  if (sme2)
    pm.addPass(createConvertCQ4PToArmSME(
        ConvertCQ4PToArmSMEOptions{options.sme2FmlalRotation}));
  // The target's panel dot; the shared lowering of the rest.
  if (target != Target::host) {
    pm.addNestedPass<func::FuncOp>(createConvertCQ4PToNeon());
  } else {
    pm.addPass(createDeclareHostPrefetchFlag());
    pm.addNestedPass<func::FuncOp>(createConvertCQ4PToVector(
        ConvertCQ4PToVectorOptions{options.x86Dot}));
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // Upstream dialects to LLVM.
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertVectorToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  // The C ABI entry points and the kernel table.
  CQ4PExportKernelsOptions exportOptions;
  exportOptions.target = target;
  // What the target's code needs, on top of what the caller adds (the
  // host's own features, for the host path).
  uint64_t implied = target == Target::aarch64_neon
                         ? CQ4P_FEATURE_AARCH64_DOTPROD
                     : target == Target::aarch64_sme2
                         ? CQ4P_FEATURE_AARCH64_DOTPROD | CQ4P_FEATURE_AARCH64_SME2
                         : 0;
  exportOptions.features = options.features | implied;
  pm.addPass(createCQ4PExportKernels(exportOptions));
  // A model's steps as C functions over the entries, and its descriptor.
  pm.addPass(createCQ4PExportSteps(
      CQ4PExportStepsOptions{exportOptions.target, exportOptions.features}));
}

void mlir::cq4p::registerPipelines() {
  PassPipelineRegistration<KernelPipelineOptions>(
      "cq4p-neon-pipeline",
      "Graph-level cq4p IR to exported AArch64 NEON kernels in the LLVM dialect",
      [](OpPassManager &pm, const KernelPipelineOptions &options) {
        buildKernelPipeline(pm, Target::aarch64_neon, options);
      });
  PassPipelineRegistration<KernelPipelineOptions>(
      "cq4p-sme2-pipeline",
      "Graph-level cq4p IR to exported AArch64 SME2 kernels (NEON rescale) in "
      "the LLVM dialect",
      [](OpPassManager &pm, const KernelPipelineOptions &options) {
        buildKernelPipeline(pm, Target::aarch64_sme2, options);
      });
  PassPipelineRegistration<KernelPipelineOptions>(
      "cq4p-host-pipeline",
      "Graph-level cq4p IR to exported host kernels in the LLVM dialect",
      [](OpPassManager &pm, const KernelPipelineOptions &options) {
        buildKernelPipeline(pm, Target::host, options);
      });
}
