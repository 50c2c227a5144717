//===- CQ4PToNeon.cpp - convert-cq4p-to-neon ------------------------------===//
//
// Lowers the kernel ops for AArch64 NEON: the shared kernel lowering
// (KernelLowering.cpp) with NEON's KernelTargetInfo (NeonTargetInfo.cpp):
// cq4p.panel_dot becomes the pair-zip loop of TBL lookups and
// arm_neon.intr.sdot, cq4p.attention 4-lane NEON code.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/Passes.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CONVERTCQ4PTONEON
#include "cq4p/Conversion/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

void mlir::cq4p::populateCQ4PToNeonPatterns(RewritePatternSet &patterns) {
  populateCQ4PKernelLoweringPatterns(patterns, getNeonKernelTargetInfo());
}

namespace {

class ConvertCQ4PToNeon
    : public mlir::cq4p::impl::ConvertCQ4PToNeonBase<ConvertCQ4PToNeon> {
public:
  void runOnOperation() override {
    if (failed(lowerCQ4PKernels(getOperation(), getNeonKernelTargetInfo())))
      signalPassFailure();
  }
};

} // namespace
