//===- cq4p-opt.cpp - the cq4p optimizer driver ---------------------------===//
//
// The mlir-opt of cq4p: parses, verifies and transforms IR in the cq4p
// dialect and in the upstream dialects its lowerings produce (func, arith,
// scf, memref, tensor, vector, arm_neon, arm_sme, arm_sve, llvm, ub). IR
// that does not verify is reported with the verifier's message and a
// non-zero exit status.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
#include "cq4p/Pipelines/Pipelines.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ArmNeon/ArmNeonDialect.h"
#include "mlir/Dialect/ArmSME/IR/ArmSME.h"
#include "mlir/Dialect/ArmSVE/IR/ArmSVEDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::cq4p::CQ4PDialect, mlir::arith::ArithDialect,
                  mlir::arm_neon::ArmNeonDialect, mlir::arm_sme::ArmSMEDialect,
                  mlir::arm_sve::ArmSVEDialect, mlir::func::FuncDialect,
                  mlir::LLVM::LLVMDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect,
                  mlir::scf::SCFDialect, mlir::tensor::TensorDialect,
                  mlir::ub::UBDialect, mlir::vector::VectorDialect>();
  // Interfaces the upstream lowerings to LLVM rely on (convert-to-llvm).
  mlir::registerAllExtensions(registry);
  mlir::registerAllPasses();
  mlir::cq4p::registerCQ4PTransformsPasses();
  mlir::cq4p::registerCQ4PConversionPasses();
  mlir::cq4p::registerPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "cq4p optimizer driver\n", registry));
}
