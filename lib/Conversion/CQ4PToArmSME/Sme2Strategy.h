//===- Sme2Strategy.h - the numbers SME2's strategies are made of -*- C++ -*-===//
//
// SME2's row counts, at a 512-bit streaming vector length: what its
// KernelTargetInfo records in each kernel op's #cq4p.strategy
// (Sme2TargetInfo.cpp) and what its streaming leaves are built for
// (CQ4PToArmSME.cpp). Nothing outside this folder uses them: the shared
// tiling and lowering read the recorded strategy.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_CQ4PTOARMSME_SME2STRATEGY_H
#define CQ4P_LIB_CONVERSION_CQ4PTOARMSME_SME2STRATEGY_H

#include <cstdint>

namespace mlir::cq4p {

/// Rows per outer-product tile: the 16 rows of a 32-bit ZA tile.
inline constexpr int64_t kSmeTileRows = 16;

/// Fewest rows of a padded outer-product tile: a tile costs the same
/// whatever its rows, so fewer rows than this go through the R-row leaf
/// instead, whose cost grows with R (bench/run, section 5.5, 1024x1024: the
/// padded tile costs about 81k instructions at 7 or 8 rows, the 6-row leaf
/// 75k; a 7-row leaf measured 84k, QEMU instruction counts).
inline constexpr int64_t kSmeMinTileRows = 7;

/// Rows of the embedding's outer-product leaf's pass: four 16-row fp32 ZA
/// tiles.
inline constexpr int64_t kSmeEmbeddingMopaRows = 64;

/// The fewest rows the embedding's outer-product leaf takes: its cost
/// hardly depends on the rows (the outer products cover all 64), the FMLAL
/// rotation leaf's grows with them.
inline constexpr int64_t kSmeEmbeddingMopaMinRows = 32;

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_CQ4PTOARMSME_SME2STRATEGY_H
