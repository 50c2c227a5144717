//===- NeonAttention.h - cq4p.attention in 128-bit NEON steps -*- C++ -*-===//

#ifndef CQ4P_LIB_CONVERSION_CQ4PTONEON_NEONATTENTION_H
#define CQ4P_LIB_CONVERSION_CQ4PTONEON_NEONATTENTION_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/PatternMatch.h"

namespace mlir::cq4p {

/// Whether emitNeonAttention takes `op`: head dims of whole 16s and a
/// positive scale (the softmax's max is taken before scaling).
bool hasNeonAttention(AttentionOp op);

/// `op` as 4-lane fp32 NEON code (NeonAttention.cpp), in place of it; the
/// caller erases it.
void emitNeonAttention(OpBuilder &b, AttentionOp op);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_CQ4PTONEON_NEONATTENTION_H
