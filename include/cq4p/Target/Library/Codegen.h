//===- Codegen.h - a variant's LLVM module into an object file --*- C++ -*-===//
//
// The steps from a variant's LLVM IR to its object file: the functions'
// target attributes (CPU, features, tuning, vector width, the pre-RA
// scheduler kept off AArch64 kernels), LLVM's standard O3 pipeline, and code
// generation. And the one object not generated from IR: the SME ABI support
// routines an SME2 library's streaming leaves call, assembled by LLVM's MC
// from runtime/src/sme_abi/sme_abi.S (the runtime's own copy of them).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TARGET_LIBRARY_CODEGEN_H
#define CQ4P_TARGET_LIBRARY_CODEGEN_H

#include "cq4p/Target/Library/TargetChoice.h"

#include "llvm/IR/Module.h"
#include "llvm/Support/Error.h"
#include "llvm/Target/TargetMachine.h"

#include <string>

namespace mlir::cq4p {

/// Sets every function `module` defines to `choice`'s CPU, features and
/// tuning (`aarch64TuneCpu` on AArch64, where the instruction set is fixed
/// and the tuning chosen apart), and keeps wide x86 vectors whole.
void setFunctionAttributes(llvm::Module &module, const TargetChoice &choice,
                           llvm::StringRef aarch64TuneCpu);

/// Runs LLVM's standard O3 module pipeline for `machine` over `module`.
void optimize(llvm::Module &module, llvm::TargetMachine &machine);

/// Generates `module`'s code into the object file `path`, with the pre-RA
/// scheduler gated per function (PreRaScheduling.h).
llvm::Error emitObject(llvm::TargetMachine &machine, llvm::Module &module,
                       const std::string &path);

/// Assembles the SME ABI support routines into the object file `path` for
/// `machine`'s triple: hidden, so that they neither leak from the library
/// nor clash with another copy, and with their "SME available" flag set
/// (the runtime loads an SME2 library only where SME2 runs; SVE outside
/// streaming mode is not assumed).
llvm::Error assembleSmeAbiRoutines(llvm::TargetMachine &machine,
                                   const std::string &path);

} // namespace mlir::cq4p

#endif // CQ4P_TARGET_LIBRARY_CODEGEN_H
