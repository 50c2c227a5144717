//===- CQ4PIntrToLLVMIRTranslation.h - cq4p_intr to LLVM IR -----*- C++ -*-===//
//
// Registers the cq4p_intr dialect and its translation to LLVM IR (each op to
// its intrinsic call), as upstream's registerArmSMEDialectTranslation does.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TARGET_LLVMIR_CQ4PINTRTOLLVMIRTRANSLATION_H
#define CQ4P_TARGET_LLVMIR_CQ4PINTRTOLLVMIRTRANSLATION_H

namespace mlir {
class DialectRegistry;
class MLIRContext;
} // namespace mlir

namespace mlir::cq4p_intr {
/// Registers the dialect and its LLVM IR translation interface in `registry`.
void registerCQ4PIntrDialectTranslation(DialectRegistry &registry);
/// The same, in `context`'s registry.
void registerCQ4PIntrDialectTranslation(MLIRContext &context);
} // namespace mlir::cq4p_intr

#endif // CQ4P_TARGET_LLVMIR_CQ4PINTRTOLLVMIRTRANSLATION_H
