//===- ActivationTransform.h - vector lowering of the activation transform -===//

#ifndef CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H
#define CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

namespace mlir::cq4p {

/// Bytes of one quantized output vector: a group's bytes are chunks of 16.
inline constexpr int64_t kQuantizedChunk = 16;

/// Lowers cq4p.quantize_activations to straight-line vector code per group
/// on 4-lane fp32 vectors (butterflies between registers, a vector abs-max,
/// `target`'s rounding and output permutation), with the contract's fp32
/// operations in the contract's order: KernelTargetInfo's default
/// populateQuantizePatterns.
void populateActivationTransformPatterns(RewritePatternSet &patterns,
                                         const KernelTargetInfo &target);

/// The output permutation act[k0 + j] = natural[perm[j]] of one group: a
/// target's lookup indices, made from the permutation once per call (by
/// KernelTargetInfo::createGroupPermuter), then the stores of each row.
class GroupPermuter {
public:
  virtual ~GroupPermuter();

  /// Stores the group's quantized bytes `natural` (natural order, in
  /// vectors of kQuantizedChunk bytes) permuted to act[row, kBase + j].
  virtual void store(ArrayRef<Value> natural, Value act, Value row,
                     Value kBase) = 0;
};

/// A permuter by byte-table lookups (NEON's TBL/TBX, x86's PSHUFB): the
/// lookup `indices` made once per call by the target's constructor, each
/// permuted output vector stored where its chunk belongs.
class TablePermuter : public GroupPermuter {
protected:
  TablePermuter(OpBuilder &b, Location loc, int64_t gs) : b(b), loc(loc), gs(gs) {}

  /// act[row, kBase + 16 o ...] = out (one or more chunks' bytes).
  void storeChunks(Value out, Value act, Value row, Value kBase, int64_t o);

  OpBuilder &b;
  Location loc;
  int64_t gs;
  SmallVector<Value> indices;
};

/// The loops of a cq4p.quantize_activations lowering: over the op's groups
/// [groupBegin, groupEnd) outside (made by the constructor, which leaves the
/// builder at the start of its body), then over the rows inside (beginRows).
struct QuantizeLoops {
  QuantizeLoops(OpBuilder &b, Location loc, QuantizeActivationsOp op, int64_t gs);

  /// Element kBase + offset of the group's columns.
  Value at(int64_t offset);
  /// Opens the loop over the rows at the builder's insertion point, leaves
  /// the builder at the start of its body and returns the row.
  Value beginRows();

  OpBuilder &b;
  Location loc;
  Value c0, c1, rows;
  /// The group and its first column g * gs.
  Value g, kBase;
};

/// The vectors of `parts` (a power of two of them, of one type), end to end.
Value concatVectors(OpBuilder &b, Location loc, ArrayRef<Value> parts);

/// act_scales[row, g] = max(maxAbs / 127, 1e-10), the contract's group
/// scale; returns it.
Value storeGroupScale(OpBuilder &b, Location loc, Value maxAbs, Value actScales,
                      Value row, Value g);

/// A gated transform's input act(g) * u lane by lane, cq4p.glu's formula in
/// its order (fixed or scalable fp32 vectors): the vector lowerings and the
/// SME2 streaming transform share it, so their bytes agree.
Value gatedInput(OpBuilder &b, Location loc, Activation activation, Value g,
                 Value u);

/// One butterfly stage of the Hadamard transform between the vectors of `w`
/// `distance` apart: the sum into the lower one, lower - upper into the
/// upper one (the contract's a + b and a - b), fixed or scalable vectors.
void butterflies(OpBuilder &b, Location loc, MutableArrayRef<Value> w,
                 size_t distance);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H
