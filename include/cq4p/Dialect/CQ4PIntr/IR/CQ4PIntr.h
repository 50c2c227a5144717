//===- CQ4PIntr.h - the cq4p_intr dialect of LLVM intrinsics ----*- C++ -*-===//
//
// Typed operations for the LLVM intrinsics cq4p's lowerings call that no
// upstream dialect has (CQ4PIntr.td says which and why).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_DIALECT_CQ4PINTR_IR_CQ4PINTR_H
#define CQ4P_DIALECT_CQ4PINTR_IR_CQ4PINTR_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::cq4p_intr {
/// Whether `type` is SVE's predicate-as-counter,
/// `!llvm.target<"aarch64.svcount">`.
bool isSvCount(Type type);
/// Whether `type` is a literal LLVM struct of `count` members of one type:
/// how an intrinsic with `count` results returns them.
bool isUniformStruct(Type type, unsigned count);
} // namespace mlir::cq4p_intr

#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntrDialect.h.inc"

#define GET_OP_CLASSES
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h.inc"

#endif // CQ4P_DIALECT_CQ4PINTR_IR_CQ4PINTR_H
