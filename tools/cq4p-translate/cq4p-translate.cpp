//===- cq4p-translate.cpp - the LLVM dialect and cq4p_intr to LLVM IR -----===//
//
// mlir-translate with the translations cq4p-compile registers: the LLVM,
// ArmNeon and ArmSME dialects' and cq4p_intr's. The lit tests of the
// cq4p_intr operations check their LLVM IR with it:
//
//   cq4p-translate --cq4p-to-llvmir input.mlir
//
//===----------------------------------------------------------------------===//

#include "cq4p/Target/LLVMIR/CQ4PIntrToLLVMIRTranslation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Dialect/ArmNeon/ArmNeonToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/ArmSME/ArmSMEToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

using namespace mlir;

int main(int argc, char **argv) {
  TranslateFromMLIRRegistration registration(
      "cq4p-to-llvmir",
      "Translate the LLVM dialect (with ArmNeon, ArmSME and cq4p_intr "
      "operations) to LLVM IR",
      [](Operation *op, raw_ostream &output) {
        llvm::LLVMContext llvmContext;
        std::unique_ptr<llvm::Module> module =
            translateModuleToLLVMIR(op, llvmContext);
        if (!module)
          return failure();
        module->print(output, /*AAW=*/nullptr);
        return success();
      },
      [](DialectRegistry &registry) {
        registerBuiltinDialectTranslation(registry);
        registerLLVMDialectTranslation(registry);
        registerArmNeonDialectTranslation(registry);
        registerArmSMEDialectTranslation(registry);
        cq4p_intr::registerCQ4PIntrDialectTranslation(registry);
      });
  return failed(mlirTranslateMain(
      argc, argv,
      "cq4p-translate: the cq4p translation driver (mlir-translate with the\n"
      "translation cq4p-compile uses). --cq4p-to-llvmir translates a module in the\n"
      "LLVM dialect, with the ArmNeon, ArmSME and cq4p_intr operations the\n"
      "lowerings produce, to LLVM IR; the lit tests of the cq4p_intr operations\n"
      "check their LLVM IR with it:\n"
      "\n"
      "  cq4p-translate --cq4p-to-llvmir test/Target/LLVMIR/cq4p-intr.mlir "
      "-split-input-file\n"));
}
