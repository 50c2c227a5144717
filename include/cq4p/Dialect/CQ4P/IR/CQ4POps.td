//===- CQ4POps.td - cq4p operations ------------------------*- tablegen -*-===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4POPS_TD
#define CQ4P_DIALECT_CQ4P_IR_CQ4POPS_TD

include "mlir/Interfaces/SideEffectInterfaces.td"
include "cq4p/Dialect/CQ4P/IR/CQ4PTypes.td"

def CQ4P_LinearOp : CQ4P_Op<"linear", [Pure]> {
  let summary = "y[M, N] = x[M, K] times a CQ4 weight";
  let description = [{
    The graph-level linear map of a model: every activation row of `input`
    (`[M, K]`, fp32) is multiplied by the transpose of the CQ4 weight
    (`[N, K]`), giving `result` (`[M, N]`, fp32). Its meaning is the
    dequantized weight's (FORMAT.md section 2); kernels compute it by the
    compute contract of section 5 (activation transform and int8
    quantization, an exact int32 dot into partials, an fp32 rescale).

    M may be dynamic (the number of tokens of a prefill); K and N must be
    static and agree with the weight.

    Examples:

    ```mlir
    // 1) decode: one token through a 1536 -> 2048 projection.
    %y = cq4p.linear %x, %w : tensor<1x1536xf32>,
        !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
    // 2) prefill: any number of tokens.
    %y = cq4p.linear %x, %w : tensor<?x1536xf32>,
        !cq4p.weight<512x1536, gs = 128, hadamard, panels> -> tensor<?x512xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input, CQ4P_WeightType:$weight);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` qualified(type($weight))
    `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4POPS_TD
