//===- CQ4PIntrToLLVMIRTranslation.cpp - cq4p_intr to LLVM IR -------------===//
//
// The cq4p_intr dialect's LLVM IR translation interface: each intrinsic op
// becomes one call of its intrinsic (the code ODS generates from
// LLVM_IntrOpBase), `cq4p_intr.opaque` an empty inline asm tying its output
// register to its input.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Target/LLVMIR/CQ4PIntrToLLVMIRTranslation.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"

#include "mlir/IR/Operation.h"
#include "mlir/Target/LLVMIR/LLVMTranslationInterface.h"
#include "mlir/Target/LLVMIR/ModuleTranslation.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsAArch64.h"
#include "llvm/IR/IntrinsicsX86.h"

using namespace mlir;
using namespace mlir::cq4p_intr;

namespace {

/// `value` through `asm "", "=r,0"`: no instruction, an opaque result.
llvm::Value *createOpaqueValue(llvm::IRBuilderBase &builder, llvm::Value *value) {
  auto *type = llvm::FunctionType::get(value->getType(), {value->getType()},
                                       /*isVarArg=*/false);
  llvm::InlineAsm *empty =
      llvm::InlineAsm::get(type, /*AsmString=*/"", /*Constraints=*/"=r,0",
                           /*hasSideEffects=*/false, /*isAlignStack=*/false);
  return builder.CreateCall(empty, {value});
}

/// EBX of CPUID leaf 0 (EAX = ECX = 0), through an inline asm of the one
/// instruction: LLVM has no intrinsic for it.
llvm::Value *createCpuidVendor(llvm::IRBuilderBase &builder) {
  auto *i32 = builder.getInt32Ty();
  auto *type = llvm::FunctionType::get(llvm::StructType::get(i32, i32, i32, i32),
                                       {i32, i32}, /*isVarArg=*/false);
  llvm::InlineAsm *cpuid = llvm::InlineAsm::get(
      type, "cpuid", "={ax},={bx},={cx},={dx},{ax},{cx}",
      /*hasSideEffects=*/true, /*isAlignStack=*/false);
  llvm::Value *registers =
      builder.CreateCall(cpuid, {builder.getInt32(0), builder.getInt32(0)});
  return builder.CreateExtractValue(registers, 1);
}

class CQ4PIntrDialectLLVMIRTranslationInterface
    : public LLVMTranslationDialectInterface {
public:
  using LLVMTranslationDialectInterface::LLVMTranslationDialectInterface;

  LogicalResult
  convertOperation(Operation *op, llvm::IRBuilderBase &builder,
                   LLVM::ModuleTranslation &moduleTranslation) const final {
    Operation &opInst = *op;
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntrConversions.inc"
    return failure();
  }
};

} // namespace

void mlir::cq4p_intr::registerCQ4PIntrDialectTranslation(
    DialectRegistry &registry) {
  registry.insert<CQ4PIntrDialect>();
  registry.addExtension(+[](MLIRContext *context, CQ4PIntrDialect *dialect) {
    dialect->addInterfaces<CQ4PIntrDialectLLVMIRTranslationInterface>();
  });
}

void mlir::cq4p_intr::registerCQ4PIntrDialectTranslation(MLIRContext &context) {
  DialectRegistry registry;
  registerCQ4PIntrDialectTranslation(registry);
  context.appendDialectRegistry(registry);
}
