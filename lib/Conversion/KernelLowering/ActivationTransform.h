//===- ActivationTransform.h - vector lowering of the activation transform -===//

#ifndef CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H
#define CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H

#include "cq4p/Conversion/Passes.h"

namespace mlir::cq4p {

/// Lowers cq4p.quantize_activations to straight-line vector code per group
/// (butterflies between registers, a vector abs-max, a table permute), with
/// the contract's fp32 operations in the contract's order.
void populateActivationTransformPatterns(RewritePatternSet &patterns,
                                         DotTarget target);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_ACTIVATIONTRANSFORM_H
