//===- Sme2TargetInfo.cpp - SME2's strategies for the kernel ops ----------===//
//
// SME2's KernelTargetInfo answers one question of its own: the strategy of
// each kernel op (cq4p-select-strategy records it). A GEMM's panel matmul
// takes 16-row outer-product tiles (cq4p-tile-super-blocks packs them,
// convert-cq4p-to-arm-sme builds their leaf); a token embedding whose K is
// a multiple of 64 takes the outer-product leaf for chunks of 64 prompt
// rows. Every other answer is the portable default: what SME2's streaming
// leaves leave to NEON is lowered with NEON's answers
// (getNeonKernelTargetInfo).
//
//===----------------------------------------------------------------------===//

#include "Sme2Strategy.h"

#include "cq4p/Conversion/CQ4PToArmSME/CQ4PToArmSME.h"

using namespace mlir;
using namespace mlir::cq4p;

namespace {

class Sme2TargetInfo final : public KernelTargetInfo {
public:
  StrategyAttr selectStrategy(Operation *op) const override {
    MLIRContext *context = op->getContext();
    if (auto matmul = dyn_cast<PanelMatmulOp>(op)) {
      // One-row tiles: the row leaf computes every group's partials of a
      // super-block in one streaming call.
      bool superBlockPartials = true;
      // One row: no GEMM tiles to choose.
      if (cast<MemRefType>(matmul.getAct().getType()).getDimSize(0) == 1)
        return StrategyAttr::get(context, /*tileRows=*/0, /*minTileRows=*/0,
                                 /*embeddingRows=*/0, /*embeddingMinRows=*/0,
                                 superBlockPartials, /*pairedTiles=*/false);
      return StrategyAttr::get(context, kSmeTileRows, kSmeMinTileRows,
                               /*embeddingRows=*/0, /*embeddingMinRows=*/0,
                               superBlockPartials, /*pairedTiles=*/false);
    }
    if (auto embedding = dyn_cast<DecodeEmbeddingOp>(op)) {
      // The leaf's FP32 outer products take 64 values of c per byte tile
      // of the transpose.
      int64_t k = cast<MemRefType>(embedding.getRotationT().getType()).getDimSize(1);
      if (k % 64 != 0)
        return {};
      return StrategyAttr::get(context, /*tileRows=*/0, /*minTileRows=*/0,
                               kSmeEmbeddingMopaRows, kSmeEmbeddingMopaMinRows,
                               /*superBlockPartials=*/false, /*pairedTiles=*/false);
    }
    return {};
  }
};

} // namespace

const KernelTargetInfo &mlir::cq4p::getSme2KernelTargetInfo() {
  static const Sme2TargetInfo info;
  return info;
}
