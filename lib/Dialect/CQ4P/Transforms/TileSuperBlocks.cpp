//===- TileSuperBlocks.cpp - panel matmuls as partials then rescale -------===//
//
// The runtime's threads share a matmul by super-blocks of 64 output
// channels; inside one, the work is a loop over row tiles and groups. This
// pass makes that structure, and the split of the compute contract into
// exact int32 partials and an fp32 rescale, explicit:
//
//   cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
//
// becomes
//
//   %partials = memref.alloca() : memref<4x64xi32>
//   %accum = memref.alloca() : memref<4x64xf32>
//   scf.for %sb = %sb0 to %sb1 step %c1 {
//     scf.for %row = %c0 to %full_rows step %c4 {      // row tiles
//       (zero %accum)
//       scf.for %g = %c0 to %ng step %c1 {
//         cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
//         cq4p.rescale %partials, %scales, %norm_panels, %accum, %sb, %g, %row
//       }
//       (copy %accum to %y for the channels of %sb below N)
//     }
//     (the same with one-row tiles for the rows past the last full tile)
//   }
//
// A GEMV (one static row) has one-row tiles only. A GEMM whose recorded
// #cq4p.strategy (cq4p-select-strategy; SME2's) has tile_rows packs tiles of
// that many rows for outer products instead, pads the last one only if it
// has at least min_tile_rows rows, and runs the rows past its tiles as one
// tile of as many rows (1 to min_tile_rows - 1).
//
//===----------------------------------------------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
#include "cq4p/format.h"

#include "mlir/IR/Builders.h"

#include <algorithm>

namespace mlir::cq4p {
#define GEN_PASS_DEF_CQ4PTILESUPERBLOCKS
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h.inc"
} // namespace mlir::cq4p

using namespace mlir;
using namespace mlir::cq4p;

namespace {

Value constantIndex(OpBuilder &b, Location loc, int64_t value) {
  return arith::ConstantIndexOp::create(b, loc, value);
}

/// partials[j, :, :] of a [G][R][64] buffer, as an R x 64 buffer.
/// The decision recorded on a cq4p.panel_partials this pass emits: the loop
/// right after it rescales its groups in order, which a backend may fuse
/// into the partials (convert-cq4p-to-arm-sme does).
PartialsRescaleAttr rescaledByGroupLoop(OpBuilder &b) {
  return PartialsRescaleAttr::get(b.getContext(), PartialsRescale::group_loop);
}

Value groupSlice(OpBuilder &b, Location loc, Value partials, Value j) {
  auto type = cast<MemRefType>(partials.getType());
  int64_t rows = type.getDimSize(1);
  MemRefType viewType = memref::SubViewOp::inferRankReducedResultType(
      {rows, CQ4P_PANEL_CHANNELS}, type, {ShapedType::kDynamic, 0, 0},
      {1, rows, CQ4P_PANEL_CHANNELS}, {1, 1, 1});
  return memref::SubViewOp::create(
      b, loc, viewType, partials,
      ArrayRef<OpFoldResult>{j, b.getIndexAttr(0), b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(rows),
                             b.getIndexAttr(CQ4P_PANEL_CHANNELS)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1),
                             b.getIndexAttr(1)});
}

/// The channels of super-block `sb` below N: min(64, N - 64 sb).
Value channelsBelowN(OpBuilder &b, Location loc, int64_t n, Value sb) {
  Value c64 = constantIndex(b, loc, CQ4P_PANEL_CHANNELS);
  return arith::MinSIOp::create(
      b, loc,
      arith::SubIOp::create(b, loc, constantIndex(b, loc, n),
                            arith::MulIOp::create(b, loc, sb, c64)),
      c64);
}

/// Zeroes a tile's fp32 accumulator ([rows][64]).
void zeroAccumulator(OpBuilder &b, Location loc, Value accum) {
  int64_t rows = cast<MemRefType>(accum.getType()).getDimSize(0);
  auto f32x4 = VectorType::get({4}, b.getF32Type());
  Value zero = arith::ConstantOp::create(
      b, loc, f32x4, DenseElementsAttr::get(f32x4, b.getF32FloatAttr(0.0f)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < CQ4P_PANEL_CHANNELS; c += 4)
      vector::StoreOp::create(
          b, loc, zero, accum,
          ValueRange{constantIndex(b, loc, r), constantIndex(b, loc, c)});
}

/// y[row + r, 64 sb + c] = accum[r, c] for r < rows, c < validChannels:
/// whole rows of 64 channels as vectors, a last super-block short of 64
/// one value at a time.
void copyToOutput(OpBuilder &b, Location loc, Value accum, Value y, Value row,
                  Value rows, Value sb, Value validChannels) {
  OpBuilder::InsertionGuard guard(b);
  Value c0 = constantIndex(b, loc, 0), c1 = constantIndex(b, loc, 1);
  Value c64 = constantIndex(b, loc, CQ4P_PANEL_CHANNELS);
  Value first = arith::MulIOp::create(b, loc, sb, c64);
  Value whole =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, validChannels, c64);
  auto rowCopy = scf::ForOp::create(b, loc, c0, rows, c1);
  b.setInsertionPointToStart(rowCopy.getBody());
  Value r = rowCopy.getInductionVar();
  Value outRow = arith::AddIOp::create(b, loc, row, r);
  auto ifWhole = scf::IfOp::create(b, loc, whole, /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifWhole.thenBlock());
  auto f32x16 = VectorType::get({16}, b.getF32Type());
  for (int64_t c = 0; c < CQ4P_PANEL_CHANNELS; c += 16) {
    Value cIndex = constantIndex(b, loc, c);
    Value values = vector::LoadOp::create(b, loc, f32x16, accum, ValueRange{r, cIndex});
    vector::StoreOp::create(b, loc, values, y,
                            ValueRange{outRow, arith::AddIOp::create(b, loc, first, cIndex)});
  }
  b.setInsertionPointToStart(ifWhole.elseBlock());
  auto channelCopy = scf::ForOp::create(b, loc, c0, validChannels, c1);
  b.setInsertionPointToStart(channelCopy.getBody());
  Value c = channelCopy.getInductionVar();
  Value value = memref::LoadOp::create(b, loc, accum, ValueRange{r, c});
  memref::StoreOp::create(b, loc, value, y,
                          ValueRange{outRow, arith::AddIOp::create(b, loc, first, c)});
}

/// Panel bytes of a block of super-blocks that row tiles share (half of a
/// 1 MiB L2, leaving room for the activations and the output rows).
constexpr int64_t kPanelBlockBytes = 512 * 1024;

class TileSuperBlocks
    : public mlir::cq4p::impl::CQ4PTileSuperBlocksBase<TileSuperBlocks> {
public:
  using Base::Base;

  void runOnOperation() override {
    if (gemmRows < 1) {
      getOperation().emitError()
          << "cq4p-tile-super-blocks: gemm-rows must be at least 1, got "
          << gemmRows;
      return signalPassFailure();
    }
    SmallVector<PanelMatmulOp> matmuls;
    getOperation().walk([&](PanelMatmulOp op) { matmuls.push_back(op); });
    for (PanelMatmulOp op : matmuls) {
      bool singleRow =
          cast<MemRefType>(op.getAct().getType()).getDimSize(0) == 1;
      StrategyAttr strategy = getStrategy(op);
      if (strategy && strategy.getTileRows() > 0 && !singleRow)
        tileOuterProducts(op, strategy.getTileRows(), strategy.getMinTileRows());
      else if (strategy && strategy.getPairedTiles() && !singleRow)
        tilePaired(op);
      else
        tile(op, strategy && strategy.getSuperBlockPartials());
      op.erase();
    }
  }

private:
  /// One loop over row tiles of `tileRows` rows from `begin` to `end`, for
  /// super-block `sb`.
  void emitRowTiles(OpBuilder &b, Location loc, PanelMatmulOp op, Value sb,
                    Value begin, Value end, int64_t tileRows, Value partials,
                    Value accum, Value validChannels) {
    Value c0 = constantIndex(b, loc, 0), c1 = constantIndex(b, loc, 1);
    Value ng = constantIndex(
        b, loc, cast<MemRefType>(op.getPanels().getType()).getDimSize(1));
    Value step = constantIndex(b, loc, tileRows);
    auto rowLoop = scf::ForOp::create(b, loc, begin, end, step);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rowLoop.getBody());
    Value row = rowLoop.getInductionVar();

    zeroAccumulator(b, loc, accum);

    // Per group: exact int32 partials, then their fp32 rescale. With
    // super-block partials (SME2's rows), every group's partials first.
    bool allGroups = cast<MemRefType>(partials.getType()).getRank() == 3;
    if (allGroups)
      PanelPartialsOp::create(b, loc, op.getPanels(), op.getCbI8(), op.getAct(),
                              partials, sb, row, c0, rescaledByGroupLoop(b));
    auto groupLoop = scf::ForOp::create(b, loc, c0, ng, c1);
    {
      OpBuilder::InsertionGuard groupGuard(b);
      b.setInsertionPointToStart(groupLoop.getBody());
      Value g = groupLoop.getInductionVar();
      Value groupPartials = partials;
      if (allGroups) {
        groupPartials = groupSlice(b, loc, partials, g);
      } else {
        PanelDotOp::create(b, loc, op.getPanels(), op.getCbI8(), op.getAct(),
                           partials, sb, g, row);
      }
      RescaleOp::create(b, loc, groupPartials, op.getActScales(),
                        op.getNormPanels(), accum, sb, g, row);
    }

    // The super-block's channels below N, to the output.
    copyToOutput(b, loc, accum, op.getY(), row, step, sb, validChannels);
  }

  /// The NEON GEMM: tiles of gemm-rows rows, then at most one of half as
  /// many, each packed once per call for the pair loop (per 8 K values the
  /// 4 even-indexed bytes, then the 4 odd ones: one 16-byte load per row
  /// serves two pairs of kg-blocks), then every super-block's groups over
  /// the packed tile; the rows past the tiles one at a time.
  void tilePaired(PanelMatmulOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto actType = cast<MemRefType>(op.getAct().getType());
    int64_t k = actType.getDimSize(1);
    int64_t n = cast<MemRefType>(op.getY().getType()).getDimSize(1);
    int64_t ng = cast<MemRefType>(op.getPanels().getType()).getDimSize(1);
    Value c0 = constantIndex(b, loc, 0), c1 = constantIndex(b, loc, 1);
    Value rows = actType.isDynamicDim(0)
                     ? memref::DimOp::create(b, loc, op.getAct(), 0).getResult()
                     : constantIndex(b, loc, actType.getDimSize(0));
    Value done = c0;
    for (int64_t tileRows : {int64_t(gemmRows), int64_t(gemmRows) / 2}) {
      if (tileRows < 2 || k % 16 != 0)
        continue;
      Value packed = memref::AllocaOp::create(
          b, loc, MemRefType::get({tileRows, k}, b.getI8Type()));
      Value partials = memref::AllocaOp::create(
          b, loc, MemRefType::get({tileRows, CQ4P_PANEL_CHANNELS}, b.getI32Type()));
      Value accum = memref::AllocaOp::create(
          b, loc, MemRefType::get({tileRows, CQ4P_PANEL_CHANNELS}, b.getF32Type()));
      Value step = constantIndex(b, loc, tileRows);
      Value end = arith::AddIOp::create(
          b, loc, done,
          arith::MulIOp::create(
              b, loc,
              arith::DivUIOp::create(
                  b, loc, arith::SubIOp::create(b, loc, rows, done), step),
              step));
      auto tileLoop = scf::ForOp::create(b, loc, done, end, step);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(tileLoop.getBody());
        Value row = tileLoop.getInductionVar();
        packPairs(b, loc, op.getAct(), packed, row);
        auto sbLoop =
            scf::ForOp::create(b, loc, op.getSbBegin(), op.getSbEnd(), c1);
        b.setInsertionPointToStart(sbLoop.getBody());
        Value sb = sbLoop.getInductionVar();
        zeroAccumulator(b, loc, accum);
        auto groupLoop =
            scf::ForOp::create(b, loc, c0, constantIndex(b, loc, ng), c1);
        {
          OpBuilder::InsertionGuard groupGuard(b);
          b.setInsertionPointToStart(groupLoop.getBody());
          Value g = groupLoop.getInductionVar();
          auto dot = PanelDotOp::create(b, loc, op.getPanels(), op.getCbI8(),
                                        packed, partials, sb, g, c0);
          dot.setPairedActivations(true);
          RescaleOp::create(b, loc, partials, op.getActScales(),
                            op.getNormPanels(), accum, sb, g, row);
        }
        copyToOutput(b, loc, accum, op.getY(), row, step, sb,
                     channelsBelowN(b, loc, n, sb));
      }
      done = end;
    }
    Value rowPartials = memref::AllocaOp::create(
        b, loc, MemRefType::get({1, CQ4P_PANEL_CHANNELS}, b.getI32Type()));
    Value rowAccum = memref::AllocaOp::create(
        b, loc, MemRefType::get({1, CQ4P_PANEL_CHANNELS}, b.getF32Type()));
    auto sbLoop = scf::ForOp::create(b, loc, op.getSbBegin(), op.getSbEnd(), c1);
    b.setInsertionPointToStart(sbLoop.getBody());
    Value sb = sbLoop.getInductionVar();
    emitRowTiles(b, loc, op, sb, done, rows, 1, rowPartials, rowAccum,
                 channelsBelowN(b, loc, n, sb));
  }

  /// packed[r, 8p + i] = act[row + r, 8p + 2i] and packed[r, 8p + 4 + i] =
  /// act[row + r, 8p + 2i + 1] (i < 4) for the tile's rows.
  static void packPairs(OpBuilder &b, Location loc, Value act, Value packed,
                        Value row) {
    OpBuilder::InsertionGuard guard(b);
    auto type = cast<MemRefType>(packed.getType());
    Value c0 = constantIndex(b, loc, 0), c1 = constantIndex(b, loc, 1);
    auto i8x16 = VectorType::get({16}, b.getI8Type());
    auto rowLoop = scf::ForOp::create(
        b, loc, c0, constantIndex(b, loc, type.getDimSize(0)), c1);
    b.setInsertionPointToStart(rowLoop.getBody());
    Value r = rowLoop.getInductionVar();
    Value actRow = arith::AddIOp::create(b, loc, row, r);
    auto kLoop = scf::ForOp::create(b, loc, c0,
                                    constantIndex(b, loc, type.getDimSize(1)),
                                    constantIndex(b, loc, 16));
    b.setInsertionPointToStart(kLoop.getBody());
    Value k = kLoop.getInductionVar();
    Value bytes =
        vector::LoadOp::create(b, loc, i8x16, act, ValueRange{actRow, k});
    Value pairs = vector::ShuffleOp::create(
        b, loc, bytes, bytes,
        ArrayRef<int64_t>{0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15});
    vector::StoreOp::create(b, loc, pairs, packed, ValueRange{r, k});
  }

  /// The outer-product GEMM (SME2's strategy): tiles of `tileRows` rows
  /// (the last one padded with zero rows if it has at least `minTileRows`),
  /// packed once per tile for the outer products, then per
  /// super-block the partials of a few groups per streaming call, each
  /// group rescaled into the tile's accumulator.
  void tileOuterProducts(PanelMatmulOp op, int64_t tileRows,
                         int64_t minTileRows) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto panelsType = cast<MemRefType>(op.getPanels().getType());
    int64_t ng = panelsType.getDimSize(1), kg = panelsType.getDimSize(2);
    int64_t n = cast<MemRefType>(op.getY().getType()).getDimSize(1);
    // Every group in one streaming call per super-block (the leaf rescales
    // out of ZA, so the partials buffer is never written).
    int64_t chunk = ng;
    Value c0 = constantIndex(b, loc, 0), c1 = constantIndex(b, loc, 1);
    Value cTileRows = constantIndex(b, loc, tileRows);
    Value c64 = constantIndex(b, loc, CQ4P_PANEL_CHANNELS);
    Value packed = memref::AllocaOp::create(
        b, loc,
        MemRefType::get({ng, kg, tileRows, CQ4P_KG_BLOCK_K}, b.getI8Type()));
    Value packedScales = memref::AllocaOp::create(
        b, loc, MemRefType::get({tileRows, ng}, b.getF32Type()));
    Value partials = memref::AllocaOp::create(
        b, loc,
        MemRefType::get({chunk, tileRows, CQ4P_PANEL_CHANNELS}, b.getI32Type()));
    Value accum = memref::AllocaOp::create(
        b, loc,
        MemRefType::get({tileRows, CQ4P_PANEL_CHANNELS}, b.getF32Type()));
    Value rows = memref::DimOp::create(b, loc, op.getAct(), 0);
    // Whole tiles, and a padded last one if it has at least
    // minTileRows rows; the rows past them in one few-row block.
    Value tiles = arith::DivUIOp::create(
        b, loc,
        arith::AddIOp::create(b, loc, rows,
                              constantIndex(b, loc, tileRows - minTileRows)),
        cTileRows);
    Value tiledRows = arith::MinSIOp::create(
        b, loc, arith::MulIOp::create(b, loc, tiles, cTileRows), rows);

    auto tileLoop = scf::ForOp::create(b, loc, c0, tiles, c1);
    b.setInsertionPointToStart(tileLoop.getBody());
    Value row = arith::MulIOp::create(b, loc, tileLoop.getInductionVar(), cTileRows);
    PackActivationTileOp::create(b, loc, op.getAct(), op.getActScales(), packed,
                                 packedScales, row);
    Value validRows = arith::MinSIOp::create(
        b, loc, arith::SubIOp::create(b, loc, rows, row), cTileRows);

    auto sbLoop = scf::ForOp::create(b, loc, op.getSbBegin(), op.getSbEnd(), c1);
    b.setInsertionPointToStart(sbLoop.getBody());
    Value sb = sbLoop.getInductionVar();
    Value validChannels = channelsBelowN(b, loc, n, sb);
    // A whole tile (tileRows rows, 64 channels below N) accumulates straight
    // into y; a partial one into `accum`, then copied. Both as a
    // [tileRows][64] view
    // with a dynamic row stride, so one leaf serves both.
    auto viewType = MemRefType::get(
        {tileRows, CQ4P_PANEL_CHANNELS}, b.getF32Type(),
        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic,
                               {ShapedType::kDynamic, 1}));
    Value whole = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, validRows, cTileRows),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, validChannels, c64));
    auto target = scf::IfOp::create(b, loc, TypeRange{viewType}, whole,
                                    /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(target.thenBlock());
      Value outputs = memref::SubViewOp::create(
          b, loc, op.getY(),
          ArrayRef<OpFoldResult>{row, OpFoldResult(arith::MulIOp::create(b, loc, sb, c64))},
          ArrayRef<OpFoldResult>{b.getIndexAttr(tileRows),
                                 b.getIndexAttr(CQ4P_PANEL_CHANNELS)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1)});
      scf::YieldOp::create(b, loc,
                           Value(memref::CastOp::create(b, loc, viewType, outputs)));
      b.setInsertionPointToStart(target.elseBlock());
      scf::YieldOp::create(b, loc,
                           Value(memref::CastOp::create(b, loc, viewType, accum)));
    }
    Value tileAccum = target.getResult(0);
    zeroAccumulator(b, loc, tileAccum);

    auto chunkLoop = scf::ForOp::create(b, loc, c0, constantIndex(b, loc, ng),
                                        constantIndex(b, loc, chunk));
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(chunkLoop.getBody());
      Value first = chunkLoop.getInductionVar();
      PanelPartialsOp::create(b, loc, op.getPanels(), op.getCbI8(), packed,
                              partials, sb, c0, first, rescaledByGroupLoop(b));
      auto groupLoop =
          scf::ForOp::create(b, loc, c0, constantIndex(b, loc, chunk), c1);
      OpBuilder::InsertionGuard groupGuard(b);
      b.setInsertionPointToStart(groupLoop.getBody());
      Value j = groupLoop.getInductionVar();
      Value g = arith::AddIOp::create(b, loc, first, j);
      RescaleOp::create(b, loc, groupSlice(b, loc, partials, j), packedScales,
                        op.getNormPanels(), tileAccum, sb, g, c0);
    }

    // A partial tile's rows and channels that exist, to y.
    auto partialTile = scf::IfOp::create(
        b, loc, arith::XOrIOp::create(b, loc, whole,
                                      arith::ConstantIntOp::create(b, loc, 1, 1)),
        /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(partialTile.thenBlock());
      copyToOutput(b, loc, accum, op.getY(), row, validRows, sb, validChannels);
    }

    // The rows past the tiles, after every tile: one block of R = rows -
    // tiledRows < minTileRows rows through the R-row streaming leaf,
    // which expands each weight vector once for its R rows; nothing when
    // the tiles hold every row.
    b.setInsertionPointAfter(tileLoop);
    SmallVector<int64_t> blockSizes;
    SmallVector<std::pair<Value, Value>> blockBuffers; // partials, accum
    for (int64_t blockRows = 1; blockRows < minTileRows; ++blockRows) {
      blockSizes.push_back(blockRows);
      blockBuffers.emplace_back(
          memref::AllocaOp::create(
              b, loc,
              MemRefType::get({ng, blockRows, CQ4P_PANEL_CHANNELS}, b.getI32Type())),
          memref::AllocaOp::create(
              b, loc,
              MemRefType::get({blockRows, CQ4P_PANEL_CHANNELS}, b.getF32Type())));
    }
    auto byRows = scf::IndexSwitchOp::create(
        b, loc, TypeRange{}, arith::SubIOp::create(b, loc, rows, tiledRows),
        blockSizes, blockSizes.size());
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&byRows.getDefaultRegion().emplaceBlock());
      scf::YieldOp::create(b, loc);
    }
    for (auto [blockRows, buffers, region] :
         llvm::zip_equal(blockSizes, blockBuffers, byRows.getCaseRegions())) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&region.emplaceBlock());
      auto [blockPartials, blockAccum] = buffers;
      auto rowSbLoop =
          scf::ForOp::create(b, loc, op.getSbBegin(), op.getSbEnd(), c1);
      scf::YieldOp::create(b, loc);
      b.setInsertionPointToStart(rowSbLoop.getBody());
      Value rowSb = rowSbLoop.getInductionVar();
      emitRowTiles(b, loc, op, rowSb, tiledRows, rows, blockRows, blockPartials,
                   blockAccum, channelsBelowN(b, loc, n, rowSb));
    }
  }

  /// The shared tiling: row tiles of gemm-rows rows (one for a GEMV), the
  /// rows past them one-row tiles; with superBlockPartials a one-row tile
  /// computes every group's partials of its super-block at once.
  void tile(PanelMatmulOp op, bool superBlockPartials) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto actType = cast<MemRefType>(op.getAct().getType());
    int64_t n = cast<MemRefType>(op.getY().getType()).getDimSize(1);
    bool singleRow = actType.getDimSize(0) == 1;
    int64_t tileRows = singleRow ? 1 : int64_t(gemmRows);

    Value c0 = constantIndex(b, loc, 0), c1 = constantIndex(b, loc, 1);
    Value rows = actType.isDynamicDim(0)
                     ? memref::DimOp::create(b, loc, op.getAct(), 0).getResult()
                     : constantIndex(b, loc, actType.getDimSize(0));
    auto bufferType = [&](int64_t tile, Type element) {
      return MemRefType::get({tile, CQ4P_PANEL_CHANNELS}, element);
    };
    // One-row tiles with super-block partials hold every group's partials.
    int64_t ng = cast<MemRefType>(op.getPanels().getType()).getDimSize(1);
    auto partialsBuffer = [&](int64_t tile) -> Value {
      if (superBlockPartials && tile == 1)
        return memref::AllocaOp::create(
            b, loc,
            MemRefType::get({ng, 1, CQ4P_PANEL_CHANNELS}, b.getI32Type()));
      return memref::AllocaOp::create(b, loc, bufferType(tile, b.getI32Type()));
    };
    Value partials = partialsBuffer(tileRows);
    Value accum =
        memref::AllocaOp::create(b, loc, bufferType(tileRows, b.getF32Type()));
    Value tailPartials, tailAccum, fullRows = rows;
    if (tileRows > 1) {
      tailPartials = partialsBuffer(1);
      tailAccum =
          memref::AllocaOp::create(b, loc, bufferType(1, b.getF32Type()));
      Value step = constantIndex(b, loc, tileRows);
      fullRows = arith::MulIOp::create(
          b, loc, arith::DivUIOp::create(b, loc, rows, step), step);
    }

    if (tileRows > 1 && !actType.isDynamicDim(1)) {
      // Blocks of super-blocks whose panels stay in a core's L2 while every
      // row tile passes over them; within a block, each row tile visits
      // the block's super-blocks in turn, so that the x86 panel dot
      // rearranges a tile's activations once per block instead of once per
      // super-block (HostKernels.cpp). Every output sums the same groups
      // in the same order as before.
      int64_t panelBytes = CQ4P_PANEL_CHANNELS * actType.getDimSize(1) / 2;
      Value block = constantIndex(
          b, loc, std::max<int64_t>(1, kPanelBlockBytes / panelBytes));
      Value step = constantIndex(b, loc, tileRows);
      auto blockLoop =
          scf::ForOp::create(b, loc, op.getSbBegin(), op.getSbEnd(), block);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(blockLoop.getBody());
        Value first = blockLoop.getInductionVar();
        Value last = arith::MinUIOp::create(
            b, loc, arith::AddIOp::create(b, loc, first, block), op.getSbEnd());
        auto rowLoop = scf::ForOp::create(b, loc, c0, fullRows, step);
        b.setInsertionPointToStart(rowLoop.getBody());
        Value row = rowLoop.getInductionVar();
        auto sbLoop = scf::ForOp::create(b, loc, first, last, c1);
        b.setInsertionPointToStart(sbLoop.getBody());
        Value sb = sbLoop.getInductionVar();
        emitRowTiles(b, loc, op, sb, row, arith::AddIOp::create(b, loc, row, step),
                     tileRows, partials, accum, channelsBelowN(b, loc, n, sb));
      }
      auto tailLoop =
          scf::ForOp::create(b, loc, op.getSbBegin(), op.getSbEnd(), c1);
      b.setInsertionPointToStart(tailLoop.getBody());
      Value sb = tailLoop.getInductionVar();
      emitRowTiles(b, loc, op, sb, fullRows, rows, 1, tailPartials, tailAccum,
                   channelsBelowN(b, loc, n, sb));
      return;
    }

    auto sbLoop =
        scf::ForOp::create(b, loc, op.getSbBegin(), op.getSbEnd(), c1);
    b.setInsertionPointToStart(sbLoop.getBody());
    Value sb = sbLoop.getInductionVar();
    Value valid = channelsBelowN(b, loc, n, sb);
    emitRowTiles(b, loc, op, sb, c0, fullRows, tileRows, partials, accum,
                 valid);
    if (tileRows > 1)
      emitRowTiles(b, loc, op, sb, fullRows, rows, 1, tailPartials, tailAccum,
                   valid);
  }
};

} // namespace
