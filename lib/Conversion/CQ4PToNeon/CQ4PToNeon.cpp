//===- CQ4PToNeon.cpp - convert-cq4p-to-neon ------------------------------===//
//
// Lowers the kernel ops for AArch64 NEON: cq4p.panel_dot becomes the
// pair-zip loop of TBL lookups and arm_neon.intr.sdot (KernelLowering.cpp
// explains the data movement); the other kernel ops take the shared
// lowering.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/Passes.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CONVERTCQ4PTONEON
#define GEN_PASS_DEF_CONVERTCQ4PTOVECTOR
#include "cq4p/Conversion/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

LogicalResult lowerKernels(func::FuncOp func, DotTarget target) {
  RewritePatternSet patterns(func.getContext());
  populateCQ4PKernelLoweringPatterns(patterns, target);
  // The lowering creates no kernel op, so one walk over the function
  // suffices; refuse to leave a kernel op behind.
  if (failed(applyPatternsGreedily(func, std::move(patterns))))
    return failure();
  WalkResult left = func.walk([](Operation *op) {
    if (isa<PanelDotOp, RescaleOp, QuantizeActivationsOp,
            RotateQuantizeActivationsOp, DecodeEmbeddingOp,
            PackActivationTileOp, PanelPartialsOp, AttentionOp>(op)) {
      op->emitError() << "could not lower " << op->getName();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(left.wasInterrupted());
}

class ConvertCQ4PToNeon
    : public mlir::cq4p::impl::ConvertCQ4PToNeonBase<ConvertCQ4PToNeon> {
public:
  void runOnOperation() override {
    if (failed(lowerKernels(getOperation(), DotTarget::Neon)))
      signalPassFailure();
  }
};

class ConvertCQ4PToVector
    : public mlir::cq4p::impl::ConvertCQ4PToVectorBase<ConvertCQ4PToVector> {
public:
  using Base::Base;
  void runOnOperation() override {
    FailureOr<DotTarget> target = parseHostDotTarget(x86Dot);
    if (failed(target)) {
      getOperation().emitError()
          << "convert-cq4p-to-vector: unknown x86-dot '" << x86Dot
          << "' (expected ssse3, avx2, avxvnni, avx512vnni or nothing)";
      return signalPassFailure();
    }
    if (failed(lowerKernels(getOperation(), *target)))
      signalPassFailure();
  }
};

} // namespace

FailureOr<DotTarget> mlir::cq4p::parseHostDotTarget(StringRef name) {
  if (name.empty())
    return DotTarget::Generic;
  if (name == "ssse3")
    return DotTarget::X86Ssse3;
  if (name == "avx2")
    return DotTarget::X86Avx2;
  if (name == "avxvnni")
    return DotTarget::X86AvxVnni;
  if (name == "avx512vnni")
    return DotTarget::X86Avx512Vnni;
  return failure();
}
