//===- StreamingQuantize.h - SME2 activation transform leaf ----*- C++ -*-===//
//
// cq4p.quantize_activations as one streaming leaf per kernel call;
// StreamingQuantize.cpp explains the algorithm.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_CQ4PTOARMSME_STREAMINGQUANTIZE_H
#define CQ4P_LIB_CONVERSION_CQ4PTOARMSME_STREAMINGQUANTIZE_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::cq4p {

/// Whether `op` runs as the streaming leaf: groups of 64, 128 or 256
/// (whole 64-byte vectors of quantized bytes, at most two table pairs).
/// Other group sizes keep the NEON lowering.
bool hasStreamingQuantize(QuantizeActivationsOp op);

/// Replaces `op` by a call of its streaming leaf (made once per kernel and
/// operand types, `<kernel>_sme_quantize[_<gating>]`).
void lowerToStreamingQuantize(ModuleOp module, SymbolTable &symbols,
                              QuantizeActivationsOp op);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_CQ4PTOARMSME_STREAMINGQUANTIZE_H
