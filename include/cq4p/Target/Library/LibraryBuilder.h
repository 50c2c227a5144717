//===- LibraryBuilder.h - a model's kernel library --------------*- C++ -*-===//
//
// Builds the kernel library of graph-level cq4p IR (a bundle's model.mlir):
//
//   1. the target-independent front of the kernel pipeline (the model's
//      planning, kernel outlining and tiling), once;
//   2. per code variant (TargetChoice.h), one at a time so that memory peaks
//      at one variant's: the back of the pipeline down to the LLVM dialect
//      from a copy, translation to LLVM IR, the functions' target attributes,
//      LLVM's O3 and code generation into an object of its own; the variants
//      after the first get their symbols renamed (Variants.h);
//   3. the variant table when there are x86-64 levels, and the SME ABI
//      routines for SME2 (Codegen.h), an object each;
//   4. the lld link (Link.h): a shared library that exports the C-ABI kernels
//      and `cq4p_kernel_table` (runtime/include/cq4p/kernel_abi.h), or one
//      relocatable object.
//
// --emit=mlir and --emit=llvm stop after step 2's first variant, writing the
// LLVM dialect or the optimized LLVM IR.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TARGET_LIBRARY_LIBRARYBUILDER_H
#define CQ4P_TARGET_LIBRARY_LIBRARYBUILDER_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Target/Library/TargetChoice.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::cq4p {

/// What the build writes.
enum class EmitKind { Library, Object, LlvmIr, Mlir };

struct LibraryOptions {
  EmitKind emit = EmitKind::Library;
  /// The file written.
  std::string output;
  /// Names the input in messages.
  std::string inputName;
  /// The model_digest of the bundle the library is for, recorded as
  /// kernel_abi.h's `cq4p_bundle_digest` (none if empty).
  std::string digest;
  /// The CPU whose scheduling model tunes AArch64 code.
  std::string aarch64TuneCpu;
  /// The kernel pipeline's options (Pipelines.h).
  int64_t gemmRows = 4;
  int64_t prefillChunk = 128;
  KvDtype kvCache = KvDtype::f32;
  bool fuseDenseMlp = false;
  bool gateInTransform = true;
  bool sme2FmlalRotation = true;
};

/// Builds the library of `module` for `variants` (narrowest first). Pass
/// failures are reported through the context's diagnostics as well as in
/// the returned one-line message.
llvm::Error buildKernelLibrary(OwningOpRef<ModuleOp> module,
                               const std::vector<TargetChoice> &variants,
                               const LibraryOptions &options);

/// The number of distinct kernel shapes `module` needs (kernels are made per
/// shape: a compile's memory grows with their number).
size_t countKernelShapes(ModuleOp module);

/// Peak memory per distinct linear shape (its GEMV and GEMM) beyond a fixed
/// cost, as bench/compile/run measured it: 3.1 MiB for the host, 3.5 for
/// aarch64-neon, linear from 10 to 100 shapes.
constexpr const char *kMemoryPerShape = "3.5 MiB";
/// What a compile takes before its first shape, in MiB (bench/compile).
constexpr uint64_t kFixedMemoryMiB = 128;

} // namespace mlir::cq4p

#endif // CQ4P_TARGET_LIBRARY_LIBRARYBUILDER_H
