//===- CQ4PToVector.h - convert-cq4p-to-vector ------------------*- C++ -*-===//

#ifndef CQ4P_CONVERSION_CQ4PTOVECTOR_CQ4PTOVECTOR_H
#define CQ4P_CONVERSION_CQ4PTOVECTOR_CQ4PTOVECTOR_H

#include "cq4p/Conversion/KernelLowering/KernelTargetInfo.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Pass/Pass.h"

namespace mlir::cq4p {

#define GEN_PASS_DECL_CONVERTCQ4PTOVECTOR
#define GEN_PASS_DECL_DECLAREHOSTPREFETCHFLAG
#include "cq4p/Conversion/Passes.h.inc"

/// The module-level flag (an i8: 0 not yet known, 1 prefetch, 2 not) that
/// gates the host GEMV's software prefetch where the module declares it
/// (cq4p-declare-host-prefetch-flag); the first panel dot of a process sets
/// it from the CPU's vendor.
inline constexpr llvm::StringLiteral kHostPrefetchFlag = "cq4p_host_prefetch";

/// The kernel ops to the host's vector code, the panel dot as `dot` says.
void populateCQ4PToVectorPatterns(RewritePatternSet &patterns, X86Dot dot);

/// The host's answers to the shared kernel lowering for `dot`
/// (HostTargetInfo.cpp).
const KernelTargetInfo &getHostKernelTargetInfo(X86Dot dot);

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_CQ4PTOVECTOR_CQ4PTOVECTOR_H
