//===- Passes.h - cq4p conversion passes ------------------------*- C++ -*-===//

#ifndef CQ4P_CONVERSION_PASSES_H
#define CQ4P_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ArmNeon/ArmNeonDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace mlir::cq4p {

/// How a target spells the two operations the panel dot is built from.
enum class DotTarget {
  Neon,       ///< tbl + arm_neon.intr.sdot
  X86Ssse3,      ///< 128-bit pshufb + generic 4-way dot
  X86Avx2,       ///< 256-bit pshufb + pmaddubsw/pmaddwd (HostKernels.cpp)
  X86AvxVnni,    ///< 256-bit pshufb + AVX-VNNI vpdpbusd, biased codebook
  X86Avx512Vnni, ///< 512-bit pshufb + AVX-512 VNNI vpdpbusd, biased codebook
  Generic,       ///< generic vector code only
};

/// Patterns lowering cq4p kernel ops (panel_dot for `target`, and the
/// target-independent rescale, activation quantization and embedding
/// decode) to scf, vector, arith, math, memref and target intrinsics.
void populateCQ4PKernelLoweringPatterns(RewritePatternSet &patterns,
                                        DotTarget target);

/// The host panel dot named by convert-cq4p-to-vector's `x86-dot` option
/// ("", ssse3, avx2, avxvnni, avx512vnni), or failure for another name.
FailureOr<DotTarget> parseHostDotTarget(StringRef name);

#define GEN_PASS_DECL
#include "cq4p/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cq4p/Conversion/Passes.h.inc"

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_PASSES_H
