//===- CQ4PToNeon.h - convert-cq4p-to-neon ----------------------*- C++ -*-===//

#ifndef CQ4P_CONVERSION_CQ4PTONEON_CQ4PTONEON_H
#define CQ4P_CONVERSION_CQ4PTONEON_CQ4PTONEON_H

#include "cq4p/Conversion/KernelLowering/KernelTargetInfo.h"

#include "mlir/Pass/Pass.h"

namespace mlir::cq4p {

#define GEN_PASS_DECL_CONVERTCQ4PTONEON
#include "cq4p/Conversion/Passes.h.inc"

/// The kernel ops to AArch64 NEON: the panel dot as TBL lookups and
/// arm_neon.intr.sdot, the rest by the shared lowering.
void populateCQ4PToNeonPatterns(RewritePatternSet &patterns);

/// NEON's answers to the shared kernel lowering (NeonTargetInfo.cpp), which
/// SME2 takes too for what its streaming leaves leave to NEON.
const KernelTargetInfo &getNeonKernelTargetInfo();

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_CQ4PTONEON_CQ4PTONEON_H
