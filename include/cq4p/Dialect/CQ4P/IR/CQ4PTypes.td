//===- CQ4PTypes.td - cq4p types ---------------------------*- tablegen -*-===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4PTYPES_TD
#define CQ4P_DIALECT_CQ4P_IR_CQ4PTYPES_TD

include "mlir/IR/AttrTypeBase.td"
include "cq4p/Dialect/CQ4P/IR/CQ4PAttrs.td"

class CQ4P_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<CQ4P_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

// An enum parameter spelled as a bare keyword, refused with a message that
// lists what is allowed.
class CQ4P_KeywordEnumParameter<EnumAttrInfo info, string what, string choices>
    : EnumParameter<info> {
  let parser = "::mlir::cq4p::parseEnumKeyword<" # info.cppNamespace # "::"
             # info.className # ">($_parser, \"" # what # "\", \""
             # choices # "\")";
}

def CQ4P_WeightType : CQ4P_Type<"Weight", "weight"> {
  let summary = "a CQ4 weight tensor of N output channels by K inputs";
  let description = [{
    The weight of a linear map from K inputs to N outputs, stored as CQ4:
    `W[n, g*gs:(g+1)*gs] = norm[n, g] * (codebook[idx] @ rot^T) / s`.
    The parameters fix what a kernel must know about the file:

    - `N x K`: output channels by input features;
    - `gs`: the group size as the kernel sees it (`num_groups = K / gs`);
    - the rotation family: `hadamard` (per group of gs, linear layers) or
      `orthogonal` (one dense K x K rotation: token embedding and lm_head);
    - the layout: `panels` (64-channel packed panels, the production format)
      or `interleaved4row` (the legacy 4-row interleaved indices).

    A panel weight obeys the format's panel rules: Hadamard panels need a
    power-of-two group size that is a multiple of 32 and at most 256;
    orthogonal panels use virtual 128-wide groups (`gs = 128`, K a multiple
    of 128). A legacy orthogonal weight has one group spanning the row
    (`gs = K`).

    Examples:

    ```mlir
    // 1) q_proj of a Gemma-4-E2B-class model: 1536 -> 2048, groups of 128.
    !cq4p.weight<2048x1536, gs = 128, hadamard, panels>
    // 2) its lm_head: 1536 -> 262144, orthogonal, 12 virtual groups.
    !cq4p.weight<262144x1536, gs = 128, orthogonal, panels>
    // 3) a legacy interleaved file, before `python -m cq4p upgrade`.
    !cq4p.weight<512x1536, gs = 128, hadamard, interleaved4row>
    ```
  }];
  let parameters = (ins
    "int64_t":$n,
    "int64_t":$k,
    "int64_t":$groupSize,
    CQ4P_KeywordEnumParameter<CQ4P_Rotation, "rotation family",
                              "hadamard or orthogonal">:$rotation,
    CQ4P_KeywordEnumParameter<CQ4P_Layout, "layout",
                              "panels or interleaved4row">:$layout
  );
  let assemblyFormat = [{
    `<` custom<WeightShape>($n, $k) `,` `gs` `=` $groupSize `,` $rotation `,`
    $layout `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of groups along K (`K / gs`).
    int64_t getNumGroups() const { return getK() / getGroupSize(); }
    /// Number of 64-channel super-blocks (`ceil(N / 64)`), the unit that
    /// kernels and the runtime's threads split N into.
    int64_t getNumSuperBlocks() const;
    /// Size in bytes of the data region of the weight's panel file
    /// (`ceil64(N) * K / 2`); only meaningful for the `panels` layout.
    int64_t getPanelDataBytes() const;
  }];
}

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4PTYPES_TD
