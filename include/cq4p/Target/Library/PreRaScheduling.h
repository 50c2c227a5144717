//===- PreRaScheduling.h - the pre-RA scheduler, per function ---*- C++ -*-===//
//
// LLVM has no function attribute for its pre-register-allocation machine
// scheduler: the pass runs where the subtarget enables it
// (AArch64Subtarget::enableMachineScheduler is always true) unless the
// process-wide option `-enable-misched` says otherwise. What LLVM does offer
// per function and per LLVMContext is the pass gate its passes ask before
// running on a function (OptPassGate, the hook of -opt-bisect): a function
// that carries kNoPreRaScheduling is skipped by the pre-RA scheduler alone;
// every other pass, and the post-RA scheduler, run as before.
//
// The library builder marks every AArch64 function: the kernels' loops are
// emitted in an order that fits the 32 vector registers (the panel GEMV holds
// 16 accumulators and loads each pair of slices next to its use), and the
// pre-RA scheduler of several cores' models (cortex-a76/a78, a710/a715/a720,
// a510/a520, neoverse-n2, generic) hoists the loads of a whole iteration
// ahead of their uses and spills, up to 1.45x the GEMV loop's instructions.
// The post-RA scheduler still orders instructions for the tuned core's
// latencies, within the allocation. Still so with LLVM 22 (bench/gemv.mlir
// for aarch64-neon, `--emit=llvm`, then llc -O3 with -enable-misched on and
// off per tune-cpu; instructions of the object, and its q-register stack
// accesses): cortex-a76 11030 vs 9681 (1772 vs 609), cortex-a78 11014 vs
// 9657, cortex-a710/a715/a720 10485 vs 9657, cortex-a510/a520 10818 vs 9593,
// neoverse-n2 10477 vs 9657, generic 10780 vs 9552, neoverse-v2 9673 vs 9657.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TARGET_LIBRARY_PRERASCHEDULING_H
#define CQ4P_TARGET_LIBRARY_PRERASCHEDULING_H

#include "llvm/ADT/StringRef.h"
#include "llvm/IR/OptBisect.h"

namespace llvm {
class Module;
} // namespace llvm

namespace mlir::cq4p {

/// The string function attribute that keeps LLVM's pre-RA machine scheduler
/// off one function.
inline constexpr llvm::StringLiteral kNoPreRaScheduling =
    "cq4p-no-pre-ra-scheduling";

/// A pass gate for the LLVMContext of `module`: refuses the pre-RA machine
/// scheduler on the module's functions marked kNoPreRaScheduling and lets
/// every other pass run. Install it with LLVMContext::setOptPassGate for as
/// long as the module's code is generated.
class PreRaSchedulingGate : public llvm::OptPassGate {
public:
  explicit PreRaSchedulingGate(const llvm::Module &module) : module(module) {}

  bool isEnabled() const override { return true; }
  bool shouldRunPass(llvm::StringRef passName,
                     llvm::StringRef irDescription) const override;

private:
  const llvm::Module &module;
};

} // namespace mlir::cq4p

#endif // CQ4P_TARGET_LIBRARY_PRERASCHEDULING_H
