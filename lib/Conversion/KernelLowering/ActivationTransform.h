//===- ActivationTransform.h - vector lowering of the activation transform -===//

#ifndef CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H
#define CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

namespace mlir::cq4p {

/// Lowers cq4p.quantize_activations to straight-line vector code per group
/// (butterflies between registers, a vector abs-max, a table permute), with
/// the contract's fp32 operations in the contract's order.
void populateActivationTransformPatterns(RewritePatternSet &patterns,
                                         DotTarget target);

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
