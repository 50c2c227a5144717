//===- Pipelines.h - cq4p lowering pipelines --------------------*- C++ -*-===//

#ifndef CQ4P_PIPELINES_PIPELINES_H
#define CQ4P_PIPELINES_PIPELINES_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <cstdint>
#include <string>

namespace mlir::cq4p {

struct KernelPipelineOptions
    : public PassPipelineOptions<KernelPipelineOptions> {
  PassOptions::Option<int64_t> gemmRows{
      *this, "gemm-rows",
      llvm::cl::desc("Rows per GEMM tile, 1 or more (default 4)"),
      llvm::cl::init(4)};
  PassOptions::Option<X86Dot> x86Dot{
      *this, "x86-dot",
      llvm::cl::desc("Host path: the x86 panel dot (default generic)"),
      llvm::cl::init(X86Dot::generic),
      llvm::cl::values(
          clEnumValN(X86Dot::generic, "generic", "generic vector code"),
          clEnumValN(X86Dot::ssse3, "ssse3", "128-bit pshufb"),
          clEnumValN(X86Dot::avx2, "avx2", "256-bit pshufb and pmaddubsw"),
          clEnumValN(X86Dot::avxvnni, "avxvnni", "AVX-VNNI vpdpbusd"),
          clEnumValN(X86Dot::avx512vnni, "avx512vnni",
                     "AVX-512 VNNI vpdpbusd"))};
  PassOptions::Option<int64_t> prefillChunk{
      *this, "prefill-chunk",
      llvm::cl::desc("Most rows one prefill step of a model takes, 2 to "
                     "65536 (default 128)"),
      llvm::cl::init(128)};
  PassOptions::Option<KvDtype> kvCache{
      *this, "kv-cache",
      llvm::cl::desc("Element type of a model's KV cache (default f32)"),
      llvm::cl::init(KvDtype::f32),
      llvm::cl::values(clEnumValN(KvDtype::f32, "f32", "fp32"),
                       clEnumValN(KvDtype::f16, "f16", "fp16"))};
  PassOptions::Option<bool> fuseDenseMlp{
      *this, "fuse-dense-mlp",
      llvm::cl::desc("A model's gate and up projections and gating in one "
                     "dispatch (default false, opt-in)"),
      llvm::cl::init(false)};
  PassOptions::Option<bool> gateInTransform{
      *this, "gate-in-transform",
      llvm::cl::desc("A model's gating formed by the down projection's "
                     "activation transform (default true; false: a separate "
                     "pass)"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> sme2FmlalRotation{
      *this, "sme2-fmlal-rotation",
      llvm::cl::desc("SME2: the lm_head's rotation from fp16-rounded "
                     "activations with FMLAL (default true; false: NEON's "
                     "bits)"),
      llvm::cl::init(true)};
  PassOptions::Option<uint64_t> features{
      *this, "features",
      llvm::cl::desc("CQ4P_FEATURE_* bits recorded in the kernel table "
                     "(kernel_abi.h; default 0)"),
      llvm::cl::init(0)};
};

/// Graph-level cq4p IR to LLVM dialect kernels with the C ABI and the
/// kernel table, for `target`:
///   cq4p-lower-model, cq4p-lower-to-kernels, cq4p-tile-super-blocks,
///   [convert-cq4p-to-arm-sme,] convert-cq4p-to-neon | convert-cq4p-to-vector,
///   canonicalize,
///   the upstream lowering to LLVM, cq4p-export-kernels, cq4p-export-steps.
void buildKernelPipeline(OpPassManager &pm, Target target,
                         const KernelPipelineOptions &options);

/// buildKernelPipeline in two parts, the first independent of the panel dot
/// and the features (options.x86Dot, options.features), so that one run of
/// it serves every x86-64 level a library holds:
///   front: cq4p-lower-model, cq4p-lower-to-kernels, cq4p-tile-super-blocks;
///   back: the rest.
void buildKernelFrontPipeline(OpPassManager &pm, Target target,
                              const KernelPipelineOptions &options);
void buildKernelBackPipeline(OpPassManager &pm, Target target,
                             const KernelPipelineOptions &options);

/// Registers cq4p-neon-pipeline, cq4p-sme2-pipeline and cq4p-host-pipeline.
void registerPipelines();

} // namespace mlir::cq4p

#endif // CQ4P_PIPELINES_PIPELINES_H
