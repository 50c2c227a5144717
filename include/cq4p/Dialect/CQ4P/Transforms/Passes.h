//===- Passes.h - cq4p dialect passes ---------------------------*- C++ -*-===//

#ifndef CQ4P_DIALECT_CQ4P_TRANSFORMS_PASSES_H
#define CQ4P_DIALECT_CQ4P_TRANSFORMS_PASSES_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::cq4p {

#define GEN_PASS_DECL
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"

} // namespace mlir::cq4p

#endif // CQ4P_DIALECT_CQ4P_TRANSFORMS_PASSES_H
