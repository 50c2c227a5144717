//===- TargetChoice.h - what a kernel library's code runs on ----*- C++ -*-===//
//
// A kernel library is compiled for one target (--target): aarch64-neon,
// aarch64-sme2 or this machine (host). Each becomes one or more code
// variants, each an LLVM triple, CPU and feature string plus what the
// kernel pipeline makes of them (the panel dot, the widest vectors, the
// CQ4P_FEATURE_* bits the runtime checks before it runs the variant):
//
//   - aarch64-neon / aarch64-sme2: one variant, Armv8.2-A with the dot
//     product (and SME2 in the streaming leaves), on any AArch64 triple;
//   - host on x86-64: the instruction set levels of kernel_abi.h's
//     CQ4P_X86_LEVELS, by default the levels it marks (narrowest first, one
//     object each in the library), or the one level --host-cpu pins;
//   - host elsewhere: this machine's CPU and features as LLVM sees them.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TARGET_LIBRARY_TARGETCHOICE_H
#define CQ4P_TARGET_LIBRARY_TARGETCHOICE_H

#include "cq4p/Pipelines/Pipelines.h"

#include "llvm/Support/Error.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir::cq4p {

/// One code variant of a library.
struct TargetChoice {
  Target kernelTarget = Target::host;
  llvm::Triple triple;
  std::string cpu, features, tuneCpu;
  uint64_t kernelFeatures = 0;
  X86Dot x86Dot = X86Dot::generic;
  int64_t vectorBits = 0; ///< the widest vectors the code may use (x86)
  /// The x86-64 level's name (kernel_abi.h's cq4p_kernel_variant.name);
  /// empty off x86-64.
  std::string level;
};

/// What the user asked for: the target's name (host, aarch64-neon or
/// aarch64-sme2), the triple if one was given, and on an x86-64 host the
/// level --host-cpu pins (a CQ4P_X86_LEVELS name, native or widest).
struct TargetRequest {
  std::string target;
  std::string triple; ///< empty: the target's default
  std::optional<std::string> hostCpu;
  /// Only the first default level (text output holds one variant).
  bool oneLevel = false;
};

/// The request's code variants: one, except for an x86-64 host without
/// --host-cpu (several levels, narrowest first) unless `oneLevel`; or a
/// one-line message naming what is wrong.
llvm::Expected<std::vector<TargetChoice>>
chooseTargets(const TargetRequest &request);

/// The CQ4P_FEATURE_* bits of the x86 levels this machine runs, from LLVM's
/// view of the host (cpuid and the OS's saved register state).
uint64_t hostX86Features();

/// Makes LLVM's targets, their MC layers, printers and parsers available
/// (once per process; later calls do nothing).
void initializeLlvmTargets();

/// Checks that `tuneCpu` names a CPU of `choice`'s scheduling models
/// (AArch64, where it is used; `given` says whether the user named one, which
/// on other targets is an error).
llvm::Error checkTuneCpu(const TargetChoice &choice, llvm::StringRef targetName,
                         llvm::StringRef tuneCpu, bool given);

/// The LLVM target machine of a variant: position-independent code, -O3.
llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createTargetMachine(const TargetChoice &choice);

} // namespace mlir::cq4p

#endif // CQ4P_TARGET_LIBRARY_TARGETCHOICE_H
