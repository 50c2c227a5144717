//===- SelectStrategy.cpp - cq4p-select-strategy --------------------------===//
//
// Records, once, how the target computes each kernel op: its
// KernelTargetInfo's selectStrategy for every cq4p.panel_matmul and
// cq4p.decode_embedding becomes the op's cq4p.strategy attribute, which
// cq4p-tile-super-blocks, convert-cq4p-to-arm-sme and the shared kernel
// lowering read. On SME2, for a GEMM and an embedding of K = 128:
//
//   cq4p.panel_matmul %panels, ... : memref<?x512xi8>, ...
//   cq4p.decode_embedding %rt, ... : memref<128x128xf16>, ...
//
// become
//
//   cq4p.panel_matmul %panels, ... {cq4p.strategy =
//       #cq4p.strategy<tile_rows = 16, min_tile_rows = 7, super_block_partials = true>}
//   cq4p.decode_embedding %rt, ... {cq4p.strategy =
//       #cq4p.strategy<embedding_rows = 64, embedding_min_rows = 32>}
//
// and a GEMV's one-row tiles take every group's partials of a super-block at
// once (#cq4p.strategy<super_block_partials = true>). NEON records
// #cq4p.strategy<paired_tiles = true> on a GEMM (row tiles packed once per
// call for its pair loop); the host records nothing: the shared default is
// its strategy.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/CQ4PToArmSME/CQ4PToArmSME.h"
#include "cq4p/Conversion/CQ4PToNeon/CQ4PToNeon.h"
#include "cq4p/Conversion/CQ4PToVector/CQ4PToVector.h"
#include "cq4p/Conversion/KernelLowering/KernelLowering.h"

namespace mlir::cq4p {
#define GEN_PASS_DEF_CQ4PSELECTSTRATEGY
#include "cq4p/Conversion/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

const KernelTargetInfo &mlir::cq4p::getKernelTargetInfo(Target target) {
  switch (target) {
  case Target::aarch64_sme2:
    return getSme2KernelTargetInfo();
  case Target::aarch64_neon:
    return getNeonKernelTargetInfo();
  case Target::host:
    break;
  }
  // The host's strategies do not depend on its panel dot.
  return getHostKernelTargetInfo(X86Dot::generic);
}

namespace {

class SelectStrategy
    : public mlir::cq4p::impl::CQ4PSelectStrategyBase<SelectStrategy> {
public:
  using Base::Base;

  void runOnOperation() override {
    const KernelTargetInfo &info = getKernelTargetInfo(target);
    getOperation().walk([&](Operation *op) {
      if (!isa<PanelMatmulOp, DecodeEmbeddingOp>(op) || getStrategy(op))
        return;
      if (StrategyAttr strategy = info.selectStrategy(op))
        op->setAttr(kStrategyAttrName, strategy);
    });
  }
};

} // namespace
