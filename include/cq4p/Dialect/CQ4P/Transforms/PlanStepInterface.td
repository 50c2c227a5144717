//===- PlanStepInterface.td - ops cq4p-lower-model plans ---*- tablegen -*-===//
//
// The interface through which each op of a model graph plans itself into a
// step (cq4p-lower-model).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_DIALECT_CQ4P_TRANSFORMS_PLANSTEPINTERFACE_TD
#define CQ4P_DIALECT_CQ4P_TRANSFORMS_PLANSTEPINTERFACE_TD

include "mlir/IR/OpBase.td"

def CQ4P_PlanStepOpInterface : OpInterface<"PlanStepOpInterface"> {
  let cppNamespace = "::mlir::cq4p";
  let description = [{
    An op cq4p-lower-model accepts in a model graph (`@forward`). Planning a
    step, the planner asks each op in graph order, unless a fused dispatch
    of an earlier op has computed it, to place its results (a workspace
    slot, the KV cache, the logits, or a view of an operand) and to add the
    `cq4p.dispatch`es that compute them, creating their kernels. An op
    without this interface is refused.

    The models are attached by `registerPlanStepInterfaceExternalModels`
    (PlanStep.cpp), to cq4p's graph ops and to the upstream ops a graph
    uses (`arith.addf`, the last-row `tensor.extract_slice` and what it
    reads, `func.return`).
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{
        Places this op's results and adds its dispatches to the step
        `planner` builds; `index` is the op's position in the graph, which
        values' last uses are counted in. Fails with an error on the op when
        the op cannot be compiled as it is.
      }],
      /*retTy=*/"::llvm::LogicalResult",
      /*methodName=*/"planStep",
      /*args=*/(ins "::mlir::cq4p::StepPlanner &":$planner,
                    "int64_t":$index)>,
  ];
}

#endif // CQ4P_DIALECT_CQ4P_TRANSFORMS_PLANSTEPINTERFACE_TD
