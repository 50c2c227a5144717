//===- CQ4PToArmSME.h - convert-cq4p-to-arm-sme -----------------*- C++ -*-===//

#ifndef CQ4P_CONVERSION_CQ4PTOARMSME_CQ4PTOARMSME_H
#define CQ4P_CONVERSION_CQ4PTOARMSME_CQ4PTOARMSME_H

#include "cq4p/Conversion/KernelLowering/KernelTargetInfo.h"

#include "mlir/Pass/Pass.h"

namespace mlir::cq4p {

#define GEN_PASS_DECL_CONVERTCQ4PTOARMSME
#include "cq4p/Conversion/Passes.h.inc"

/// SME2's answers to cq4p-select-strategy (Sme2TargetInfo.cpp): its GEMM
/// tiles and embedding leaf. The kernel lowering itself takes NEON's
/// answers (getNeonKernelTargetInfo) for what the streaming leaves leave.
const KernelTargetInfo &getSme2KernelTargetInfo();

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_CQ4PTOARMSME_CQ4PTOARMSME_H
