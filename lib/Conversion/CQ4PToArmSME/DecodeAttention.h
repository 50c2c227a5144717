//===- DecodeAttention.h - SME2 decode attention leaf ----------*- C++ -*-===//
//
// A decode step's attention (one query row against an fp32 KV cache) as one
// streaming leaf; DecodeAttention.cpp explains the algorithm.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_CQ4PTOARMSME_DECODEATTENTION_H
#define CQ4P_LIB_CONVERSION_CQ4PTOARMSME_DECODEATTENTION_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::cq4p {

/// Whether `op`'s one-row form runs as the streaming decode leaf: fp32 keys
/// and values, a head dim of whole 64s and a GQA group that divides 16.
bool hasStreamingDecodeAttention(AttentionOp op);

/// Calls, at `b`'s insertion point, the streaming leaf that computes `op`
/// for its one query row (made once per kernel, `<kernel>_sme_decode`).
void emitStreamingDecodeAttention(OpBuilder &b, ModuleOp module,
                                  SymbolTable &symbols, AttentionOp op);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_CQ4PTOARMSME_DECODEATTENTION_H
