//===- CQ4PToVector.cpp - convert-cq4p-to-vector --------------------------===//
//
// Lowers the kernel ops for the host: the shared kernel lowering
// (KernelLowering.cpp) with the host's KernelTargetInfo for `x86-dot`
// (HostTargetInfo.cpp): cq4p.panel_dot as 128-bit pshufb and a generic dot
// for SSSE3, HostKernels.cpp's loop on 256- or 512-bit vectors for AVX2,
// AVX-VNNI and AVX-512 VNNI, generic vector code otherwise.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/Passes.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CONVERTCQ4PTOVECTOR
#define GEN_PASS_DEF_DECLAREHOSTPREFETCHFLAG
#include "cq4p/Conversion/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

class ConvertCQ4PToVector
    : public mlir::cq4p::impl::ConvertCQ4PToVectorBase<ConvertCQ4PToVector> {
public:
  using Base::Base;
  void runOnOperation() override {
    if (failed(lowerCQ4PKernels(getOperation(), getHostKernelTargetInfo(x86Dot))))
      signalPassFailure();
  }
};

class DeclareHostPrefetchFlag
    : public mlir::cq4p::impl::DeclareHostPrefetchFlagBase<
          DeclareHostPrefetchFlag> {
public:
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (SymbolTable::lookupSymbolIn(module, kHostPrefetchFlag))
      return;
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    auto type = MemRefType::get({}, b.getI8Type());
    memref::GlobalOp::create(
        b, module.getLoc(), kHostPrefetchFlag, b.getStringAttr("private"), type,
        DenseElementsAttr::get(RankedTensorType::get({}, b.getI8Type()),
                               b.getI8IntegerAttr(0).getValue()),
        /*constant=*/false, /*alignment=*/nullptr);
  }
};

} // namespace

void mlir::cq4p::populateCQ4PToVectorPatterns(RewritePatternSet &patterns,
                                              X86Dot dot) {
  populateCQ4PKernelLoweringPatterns(patterns, getHostKernelTargetInfo(dot));
}
