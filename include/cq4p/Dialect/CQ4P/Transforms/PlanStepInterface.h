//===- PlanStepInterface.h - ops cq4p-lower-model plans ---------*- C++ -*-===//
//
// PlanStepOpInterface: how an op of a model graph plans itself into a step
// of cq4p-lower-model (PlanStepInterface.td).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_DIALECT_CQ4P_TRANSFORMS_PLANSTEPINTERFACE_H
#define CQ4P_DIALECT_CQ4P_TRANSFORMS_PLANSTEPINTERFACE_H

#include "mlir/IR/OpDefinition.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::cq4p {
class StepPlanner;

/// Attaches PlanStepOpInterface to every op a model graph may hold: cq4p's
/// graph ops, and the upstream ops it accepts.
void registerPlanStepInterfaceExternalModels(DialectRegistry &registry);
} // namespace mlir::cq4p

#include "cq4p/Dialect/CQ4P/Transforms/PlanStepInterface.h.inc"

#endif // CQ4P_DIALECT_CQ4P_TRANSFORMS_PLANSTEPINTERFACE_H
