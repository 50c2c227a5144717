//===- PreRaScheduling.cpp - the pre-RA scheduler, per function -----------===//

#include "cq4p/Target/Library/PreRaScheduling.h"

#include "llvm/IR/Function.h"
#include "llvm/IR/Module.h"

bool mlir::cq4p::PreRaSchedulingGate::shouldRunPass(
    llvm::StringRef passName, llvm::StringRef irDescription) const {
  // The legacy pass manager names the pass by its argument or, failing
  // that, its name; the IR unit as "function (<name>)".
  if (passName != "machine-scheduler" &&
      passName != "Machine Instruction Scheduler")
    return true;
  llvm::StringRef name = irDescription;
  if (!name.consume_front("function (") || !name.consume_back(")"))
    return true;
  const llvm::Function *function = module.getFunction(name);
  return !function || !function->hasFnAttribute(kNoPreRaScheduling);
}
