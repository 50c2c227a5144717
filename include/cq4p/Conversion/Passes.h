//===- Passes.h - cq4p conversion passes ------------------------*- C++ -*-===//
//
// Every conversion of the kernel ops, one folder per target: the passes'
// declarations and their registration.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_CONVERSION_PASSES_H
#define CQ4P_CONVERSION_PASSES_H

#include "cq4p/Conversion/CQ4PToArmSME/CQ4PToArmSME.h"
#include "cq4p/Conversion/CQ4PToNeon/CQ4PToNeon.h"
#include "cq4p/Conversion/CQ4PToVector/CQ4PToVector.h"
#include "cq4p/Conversion/KernelLowering/KernelLowering.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ArmNeon/ArmNeonDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::cq4p {

#define GEN_PASS_REGISTRATION
#include "cq4p/Conversion/Passes.h.inc"

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_PASSES_H
