//===- PairZip.h - the pair-zip panel dot's pieces, for targets -*- C++ -*-===//
//
// The pieces of cq4p.panel_dot's pair-zip loop (KernelLowering.cpp explains
// it) that a target's own loop reuses (KernelTargetInfo::emitOneRowPanelDot):
// the unpacking of a pair of kg-blocks into the dot's operands, the dot,
// and the loop over a group's steps.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_KERNELLOWERING_PAIRZIP_H
#define CQ4P_LIB_CONVERSION_KERNELLOWERING_PAIRZIP_H

#include "cq4p/Conversion/KernelLowering/KernelTargetInfo.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::cq4p {

inline Value shuffle(OpBuilder &b, Location loc, Value lhs, Value rhs,
                     ArrayRef<int64_t> mask) {
  return vector::ShuffleOp::create(b, loc, lhs, rhs, mask);
}

inline Value bitcast(OpBuilder &b, Location loc, Value value, VectorType type) {
  return vector::BitCastOp::create(b, loc, type, value);
}

/// The values a panel dot's loop shares, made once per op: the codebook
/// (16 x i8), splats of 0x0F and 4 (16 x i8), the accumulators' zero
/// (4 x i32), the group's first K index and its K values.
struct PairZipValues {
  Value table, lowMask, four, zeroAcc, groupBase;
  int64_t groupSize;
};

/// The target's codebook lookup and 4-way dot, applied to the pair-zip
/// layout.
class DotEmitter {
public:
  DotEmitter(const KernelTargetInfo &target, OpBuilder &b, Location loc)
      : target(target), b(b), loc(loc) {}

  /// The codebook values of two 16-byte slices `a` and `bb` at one byte
  /// offset of kg-blocks t and t+1: zipped as 16-bit lanes, then per half
  /// (4 channels) the low and the high nibbles looked up in `table`, the
  /// operands of the dots with the even and the odd activations, handed to
  /// use(half, low, high) at once (so a half's weights die before the next
  /// half's are made). `lowMask` and `four` are splats of 0x0F and 4.
  void unpackPair(Value table, Value lowMask, Value four, Value a, Value bb,
                  function_ref<void(int64_t, Value, Value)> use);

  /// acc[i] + sum_{j<4} lhs[4i+j] * rhs[4i+j], exactly, in int32.
  Value dot(Value acc, Value lhs, Value rhs) {
    return target.dot(b, loc, acc, lhs, rhs);
  }

private:
  const KernelTargetInfo &target;
  OpBuilder &b;
  Location loc;
};

/// The loop over a group's steps of 32 K values carrying `inits`:
/// body(b, step, carried) builds one step and returns what the next step
/// carries.
scf::ForOp forKSteps(
    OpBuilder &b, Location loc, int64_t groupSize, ValueRange inits,
    function_ref<SmallVector<Value>(OpBuilder &, Value, SmallVector<Value>)> body);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_KERNELLOWERING_PAIRZIP_H
