//===- ExportSteps.h - model steps as C-ABI functions -----------*- C++ -*-===//

#ifndef CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_EXPORTSTEPS_H
#define CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_EXPORTSTEPS_H

#include "mlir/IR/BuiltinOps.h"

namespace mlir::cq4p {

/// Lowers the module's `cq4p.step` ops (cq4p-lower-model) to the step
/// functions and the `cq4p_model_steps` descriptor of kernel_abi.h; the kernels'
/// C-ABI entries must exist. A module without steps is left alone.
LogicalResult exportModelSteps(ModuleOp module, uint32_t targetId,
                               uint64_t features);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_DIALECT_CQ4P_TRANSFORMS_EXPORTSTEPS_H
