//===- KernelTargetInfo.h - what the kernel lowering asks a target -*- C++ -*-===//
//
// The kernel ops lower the same way on every target (KernelLowering.h)
// except where a target has instructions of its own; there the shared
// patterns ask the target's KernelTargetInfo: its fp32 vector width, how
// its registers block the rotations, the panel dot's codebook lookup and
// 4-way dot (or a loop of its own), the activation quantization's rounding
// and output permutation (or patterns of its own), and its attention; and,
// before any of that, cq4p-select-strategy asks it for each kernel op's
// #cq4p.strategy (the tiling and leaves it chooses). The defaults are
// portable vector code. Each target implements the interface in its own
// folder (CQ4PToNeon/, CQ4PToVector/, CQ4PToArmSME/) and hands it out
// through its conversion's header; docs/DIALECT.md lists what a new target
// writes.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_CONVERSION_KERNELLOWERING_KERNELTARGETINFO_H
#define CQ4P_CONVERSION_KERNELLOWERING_KERNELTARGETINFO_H

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/IR/PatternMatch.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>

namespace mlir::cq4p {

class DotEmitter;
struct PairZipValues;
class GroupPermuter;

/// How the orthogonal rotations are blocked for the target's registers:
/// `lanes` outputs per fp32 vector; tiles of up to `tileRows` rows (then
/// halves of that, down to one row) hold `sums` vector sums, so a tile of
/// r rows sums sums / r vectors of outputs at once (at most `rowVectors`),
/// each rotation vector converted to fp32 once for the tile's rows; the
/// rotation is taken `spanRows` of its rows at a time (see rotateRows in
/// KernelLowering.cpp). With `laneBroadcast`, a row's values are loaded
/// four at a time and each multiplies by lane (NEON's FMLA by element, no
/// DUP); otherwise each is one broadcast load (x86's VBROADCASTSS). With
/// `prefetchNextSpan`, a one-row tile (a decode step's embedding row, the
/// lm_head's last row) prefetches, beside each rotation row it reads, the
/// same outputs of the row one span further on: one row streams the whole
/// K x K matrix from memory with nothing else to hide the misses behind.
struct RotationBlocking {
  int64_t lanes, tileRows, sums, rowVectors, spanRows;
  bool laneBroadcast;
  bool prefetchNextSpan = false;

  /// Vectors of outputs a tile of `rows` rows sums at once.
  int64_t vectorsFor(int64_t rows) const {
    return std::max<int64_t>(1, std::min(rowVectors, sums / rows));
  }
};

/// One kernel target as the shared lowering sees it. Implementations hold
/// no state that changes: the patterns keep a reference to one for as long
/// as they live.
class KernelTargetInfo {
public:
  virtual ~KernelTargetInfo();

  //===--------------------------------------------------------------------===//
  // Strategy
  //===--------------------------------------------------------------------===//

  /// The #cq4p.strategy cq4p-select-strategy records on kernel op `op`, or
  /// null to record none (the shared lowering's default, as here).
  virtual StrategyAttr selectStrategy(Operation *op) const { return {}; }

  //===--------------------------------------------------------------------===//
  // Vector width and register budget
  //===--------------------------------------------------------------------===//

  /// fp32 lanes of the target's widest vector register: cq4p.rescale's
  /// width. Each lane's arithmetic is the same chain of fp32 operations at
  /// every width, so the width changes the instructions and not the bits.
  virtual int64_t floatLanes() const { return 4; }

  /// How cq4p.rotate_quantize_activations and cq4p.decode_embedding block
  /// their matrix product for the target's registers.
  virtual RotationBlocking rotationBlocking() const;

  //===--------------------------------------------------------------------===//
  // cq4p.panel_dot
  //===--------------------------------------------------------------------===//

  /// `op` lowered by a loop of the target's own, or std::nullopt where the
  /// shared pair-zip loop (KernelLowering.cpp) takes it.
  virtual std::optional<LogicalResult>
  lowerPanelDot(PanelDotOp op, PatternRewriter &rewriter) const {
    return std::nullopt;
  }

  /// For a one-row `op` of natural-order activations: emits the pair-zip
  /// loop the target's own way (its loads, its register use) in place of
  /// the shared one and returns true, or emits nothing and returns false.
  virtual bool emitOneRowPanelDot(OpBuilder &b, Location loc, PanelDotOp op,
                                  DotEmitter &emit,
                                  const PairZipValues &values) const {
    return false;
  }

  /// table[index] per byte of 16-byte vectors, indices in [0, 16).
  virtual Value lookup(OpBuilder &b, Location loc, Value table,
                       Value index) const;

  /// acc[i] + sum_{j<4} lhs[4i+j] * rhs[4i+j], exactly, in int32 (acc
  /// 4 x i32, lhs and rhs 16 x i8).
  virtual Value dot(OpBuilder &b, Location loc, Value acc, Value lhs,
                    Value rhs) const;

  //===--------------------------------------------------------------------===//
  // cq4p.quantize_activations
  //===--------------------------------------------------------------------===//

  /// Adds the patterns that lower cq4p.quantize_activations for this
  /// target: by default the 4-lane straight-line code of
  /// ActivationTransform.cpp, which asks roundToBytes and
  /// createGroupPermuter below.
  virtual void populateQuantizePatterns(RewritePatternSet &patterns) const;

  /// round_half_even of four 4 x f32 pieces of quotients, saturated to
  /// [-128, 127], as 16 bytes.
  virtual Value roundToBytes(OpBuilder &b, Location loc,
                             ArrayRef<Value> quotients) const;

  /// The output permutation of a group of `gs` bytes (ActivationTransform.h),
  /// its per-call values made here from `permutation` (the u32 indices) and
  /// `permBytes` (them truncated to bytes, 16 per vector).
  virtual std::unique_ptr<GroupPermuter>
  createGroupPermuter(OpBuilder &b, Location loc, Value permutation,
                      ArrayRef<Value> permBytes, int64_t gs) const;

  //===--------------------------------------------------------------------===//
  // cq4p.attention
  //===--------------------------------------------------------------------===//

  /// Emits `op` as the target's own code in its place and returns true, or
  /// emits nothing and returns false (then the shared vector code takes
  /// it); the caller erases `op`.
  virtual bool emitAttention(OpBuilder &b, AttentionOp op) const {
    return false;
  }
};

} // namespace mlir::cq4p

#endif // CQ4P_CONVERSION_KERNELLOWERING_KERNELTARGETINFO_H
