//===- HostKernels.h - the x86 lowerings on 256- and 512-bit vectors ------===//
//
// What the host's KernelTargetInfo (HostTargetInfo.cpp) hands the shared
// kernel lowering for x86 with AVX2 or wider: the panel dot's loop
// (HostKernels.cpp explains it) and the activation quantization's pattern
// (HostQuantize.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_HOSTKERNELS_H
#define CQ4P_LIB_CONVERSION_HOSTKERNELS_H

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

namespace mlir::cq4p {

/// Whether `dot` is lowered by lowerWideX86PanelDot and
/// populateWideQuantizePatterns: AVX2 or wider.
bool isWideX86Dot(X86Dot dot);

/// Lowers `op` for avx2, avxvnni or avx512vnni.
LogicalResult lowerWideX86PanelDot(PanelDotOp op, PatternRewriter &rewriter,
                                   X86Dot dot);

/// cq4p.quantize_activations in natural order on `lanes` fp32 lanes (8 or
/// 16), with AVX-512's word permutes and rounding conversion if `avx512`;
/// `target` makes the output permutation where those do not.
void populateWideQuantizePatterns(RewritePatternSet &patterns,
                                  const KernelTargetInfo &target,
                                  int64_t lanes, bool avx512);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_HOSTKERNELS_H
