//===- HostKernels.h - the x86 panel dot on 256- and 512-bit vectors ------===//
//
// The hook KernelLowering.cpp calls for x86 targets with AVX2 or wider;
// HostKernels.cpp explains the loop.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_HOSTKERNELS_H
#define CQ4P_LIB_CONVERSION_HOSTKERNELS_H

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

namespace mlir::cq4p {

/// Whether `target` is lowered by lowerWideX86PanelDot.
bool isWideX86DotTarget(DotTarget target);

/// Lowers `op` for X86Avx2, X86AvxVnni or X86Avx512Vnni.
LogicalResult lowerWideX86PanelDot(PanelDotOp op, PatternRewriter &rewriter,
                                   DotTarget target);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_HOSTKERNELS_H
