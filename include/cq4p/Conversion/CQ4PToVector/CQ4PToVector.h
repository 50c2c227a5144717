//===- CQ4PToVector.h - convert-cq4p-to-vector ------------------*- C++ -*-===//

#ifndef CQ4P_CONVERSION_CQ4PTOVECTOR_CQ4PTOVECTOR_H
#define CQ4P_CONVERSION_CQ4PTOVECTOR_CQ4PTOVECTOR_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::cq4p {

#define GEN_PASS_DECL_CONVERTCQ4PTOVECTOR
#include "cq4p/Conversion/Passes.h.inc"

/// The kernel ops to the host's vector code, the panel dot as `dot` says.
void populateCQ4PToVectorPatterns(RewritePatternSet &patterns, X86Dot dot);

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_CQ4PTOVECTOR_CQ4PTOVECTOR_H
