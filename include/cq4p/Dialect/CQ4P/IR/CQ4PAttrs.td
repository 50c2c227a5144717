//===- CQ4PAttrs.td - cq4p enums and attributes ------------*- tablegen -*-===//
//
// The weight type's parameters, and the typed contract between the model
// planner (cq4p-lower-model), the kernels and the step exporter
// (cq4p-export-steps): how a dispatch splits its work, where each of a
// kernel entry's pointers points (`#cq4p.place`), which integer each of its
// scalars is, what each kernel function computes (`#cq4p.kernel`), what
// the library's model descriptor records (`#cq4p.model_plan`), and the pass
// options that choose a target.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_DIALECT_CQ4P_IR_CQ4PATTRS_TD
#define CQ4P_DIALECT_CQ4P_IR_CQ4PATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "cq4p/Dialect/CQ4P/IR/CQ4PDialect.td"

def CQ4P_Rotation : I32EnumAttr<"Rotation", "rotation family of a CQ4 weight", [
    I32EnumAttrCase<"hadamard", 0>,
    I32EnumAttrCase<"orthogonal", 1>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_Layout : I32EnumAttr<"Layout", "data layout of a CQ4 weight file", [
    I32EnumAttrCase<"panels", 0>,
    I32EnumAttrCase<"interleaved4row", 1>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// The dispatch contract.
//===----------------------------------------------------------------------===//

def CQ4P_DispatchSplit : I32EnumAttr<"DispatchSplit",
    "how the parallel-for splits a dispatch's work items", [
    // Work items are rows: each range's pointers move to its first row.
    I32EnumAttrCase<"rows", 0>,
    // Work items are the kernel's own (super-blocks, groups, heads): each
    // range is passed as `begin` and `end`.
    I32EnumAttrCase<"range", 1>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_DispatchSplitAttr : EnumAttr<CQ4P_Dialect, CQ4P_DispatchSplit, "split"> {
  let assemblyFormat = "`<` $value `>`";
}

def CQ4P_PlaceBase : I32EnumAttr<"PlaceBase",
    "the cq4p_step_args buffer a kernel pointer is based on", [
    I32EnumAttrCase<"binding", 0>,   // bindings[index]: a bound tensor's view
    I32EnumAttrCase<"workspace", 1>,
    I32EnumAttrCase<"keys", 2>,      // the KV cache of layer `index`
    I32EnumAttrCase<"values", 3>,
    I32EnumAttrCase<"state", 4>,     // recurrent state (short convolutions)
    I32EnumAttrCase<"ids", 5>,
    I32EnumAttrCase<"logits", 6>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_DispatchScalar : I32EnumAttr<"DispatchScalar",
    "an integer parameter of a kernel entry, from the step's arguments", [
    I32EnumAttrCase<"rows", 0>,
    I32EnumAttrCase<"position", 1>,
    I32EnumAttrCase<"begin", 2>,
    I32EnumAttrCase<"end", 3>,
    I32EnumAttrCase<"context", 4>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_DispatchScalarAttr
    : EnumAttr<CQ4P_Dialect, CQ4P_DispatchScalar, "scalar"> {
  let assemblyFormat = "`<` $value `>`";
}

def CQ4P_DispatchScalarArrayAttr
    : TypedArrayAttrBase<CQ4P_DispatchScalarAttr, "array of dispatch scalars">;

def CQ4P_PlaceAttr : AttrDef<CQ4P_Dialect, "Place"> {
  let mnemonic = "place";
  let summary = "where a kernel entry's pointer points while a step runs";
  let description = [{
    A pointer of a `cq4p.dispatch`: `base` names the buffer of
    `cq4p_step_args` (kernel_abi.h) it starts from; `index` is the binding
    (`binding`) or the layer (`keys`, `values`); `offset` is in bytes. For
    `keys` and `values` the layer's buffer starts at
    `kv_cache + context * cache_offset`. The pointer then moves by
    `row_bytes` per row: by the range's first row for a `rows` split, by the
    step's position with `at_position`, to the step's last row with
    `last_row`. Fields at zero are left out.

    Example:

    ```mlir
    #cq4p.place<binding, index = 3>
    #cq4p.place<workspace, offset = 1024, row_bytes = 2048, last_row>
    #cq4p.place<keys, index = 1, cache_offset = 512, row_bytes = 256, at_position>
    ```
  }];
  let parameters = (ins
    EnumParameter<CQ4P_PlaceBase>:$base,
    DefaultValuedParameter<"int64_t", "0">:$index,
    DefaultValuedParameter<"int64_t", "0">:$offset,
    DefaultValuedParameter<"int64_t", "0">:$cache_offset,
    DefaultValuedParameter<"int64_t", "0">:$row_bytes,
    DefaultValuedParameter<"bool", "false">:$at_position,
    DefaultValuedParameter<"bool", "false">:$last_row
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def CQ4P_PlaceArrayAttr
    : TypedArrayAttrBase<CQ4P_PlaceAttr, "array of kernel pointer places">;

//===----------------------------------------------------------------------===//
// Model ops and kernels.
//===----------------------------------------------------------------------===//

def CQ4P_Activation : I32EnumAttr<"Activation", "a gated MLP's activation", [
    I32EnumAttrCase<"silu", 0>,
    I32EnumAttrCase<"gelu_tanh", 1>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_ActivationAttr : EnumAttr<CQ4P_Dialect, CQ4P_Activation, "activation"> {
  let assemblyFormat = "`<` $value `>`";
}

// The values are kernel_abi.h's cq4p_kv_dtype.
def CQ4P_KvDtype : I32EnumAttr<"KvDtype", "element type of the KV cache", [
    I32EnumAttrCase<"f32", 1>,
    I32EnumAttrCase<"f16", 2>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_KvDtypeAttr : EnumAttr<CQ4P_Dialect, CQ4P_KvDtype, "kv_dtype"> {
  let assemblyFormat = "`<` $value `>`";
}

// What a kernel function computes (`#cq4p.kernel`'s kind). The first five
// are the kernels of the kernel table, with a fixed C signature each; their
// values are kernel_abi.h's cq4p_kernel_op. The others are a model's
// kernels, called by its steps only, whose C signature is their own
// parameters (cq4p-export-kernels).
def CQ4P_KernelKind : I32EnumAttr<"KernelKind", "what a kernel function computes", [
    I32EnumAttrCase<"quantize_hadamard", 1>,
    I32EnumAttrCase<"quantize_orthogonal", 2>,
    I32EnumAttrCase<"matmul", 3>,
    I32EnumAttrCase<"embedding", 4>,
    I32EnumAttrCase<"attention", 5>,
    I32EnumAttrCase<"quantize_glu", 64>,
    I32EnumAttrCase<"embedding_rows", 65>,
    I32EnumAttrCase<"matmul_bias", 66>,
    I32EnumAttrCase<"matmul_residual", 67>,
    I32EnumAttrCase<"dense_mlp", 68>,
    I32EnumAttrCase<"rms_norm", 69>,
    I32EnumAttrCase<"rope", 70>,
    I32EnumAttrCase<"cached_attention", 71>,
    I32EnumAttrCase<"short_conv", 72>,
    I32EnumAttrCase<"glu", 73>,
    I32EnumAttrCase<"add", 74>,
    I32EnumAttrCase<"scale", 75>,
    I32EnumAttrCase<"scale_by", 76>,
    I32EnumAttrCase<"softcap", 77>,
    I32EnumAttrCase<"convert", 78>,
    I32EnumAttrCase<"columns", 79>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_KernelAttr : AttrDef<CQ4P_Dialect, "Kernel"> {
  let mnemonic = "kernel";
  let summary = "what a kernel function computes, and its parameters";
  let description = [{
    The `cq4p.kernel` attribute of a kernel function: what
    cq4p-export-kernels needs to give it a C entry point and list it in the
    kernel table (kernel_abi.h). `kind` is what it computes; `n`, `k`,
    `group_size`, `orthogonal` and `window` the shape the table records (the
    weight's, or heads and head dim for attention); `min_rows` and
    `max_rows` the row counts it takes (`max_rows` 0: unbounded). `params`
    are the function's parameters in order, each with its ABI name
    (`weight.<region>` reads a region of that weight view) and type; a
    buffer whose dynamic dimension is not the op's row count names the
    integer parameter that gives it (`sized_by`). Fields at their default
    (0, `min_rows` 1) are left out.

    Example:

    ```mlir
    #cq4p.kernel<add, n = 512, params = ["a": memref<?x512xf32>,
        "b": memref<?x512xf32>, "out": memref<?x512xf32>, "rows": index]>
    #cq4p.kernel<cached_attention, n = 8, k = 64, params = [
        "q": memref<?x512xf32>, "keys": memref<?x256xf16> sized_by "context",
        ..., "context": index, ...]>
    ```
  }];
  let parameters = (ins
    EnumParameter<CQ4P_KernelKind>:$kind,
    DefaultValuedParameter<"int64_t", "0">:$n,
    DefaultValuedParameter<"int64_t", "0">:$k,
    DefaultValuedParameter<"int64_t", "0">:$group_size,
    DefaultValuedParameter<"int64_t", "0">:$window,
    DefaultValuedParameter<"bool", "false">:$orthogonal,
    DefaultValuedParameter<"int64_t", "1">:$min_rows,
    DefaultValuedParameter<"int64_t", "0">:$max_rows,
    ArrayRefParameter<"KernelParameter">:$params
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

// The values are kernel_abi.h's cq4p_binding_kind.
def CQ4P_BindingKind : I32EnumAttr<"BindingKind",
    "the file a model binding is", [
    I32EnumAttrCase<"cq4", 1>,
    I32EnumAttrCase<"fp16", 2>,
    I32EnumAttrCase<"fp32", 3>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_ModelPlanAttr : AttrDef<CQ4P_Dialect, "ModelPlan"> {
  let mnemonic = "model_plan";
  let summary = "what cq4p-lower-model planned for the library's model descriptor";
  let description = [{
    The `cq4p.model_plan` attribute cq4p-lower-model sets on the module and
    cq4p-export-steps writes into `cq4p_model_desc` (kernel_abi.h): the
    prefill step's rows, the KV cache's element type, the bytes of the
    workspace, of the KV cache per position and of the step state, the
    widest layer's cache row (elements), and the bound tensors in
    `@forward`'s order, each with the shape the runtime checks its file
    against: a CQ4 weight's `NxK`, group size and rotation, a dense
    tensor's element count.

    Example:

    ```mlir
    #cq4p.model_plan<prefill_chunk = 128, kv_dtype = f16,
        workspace_bytes = 1048576, kv_position_bytes = 1024, kv_width = 256,
        state_bytes = 0, bindings = [
          "model.embed_tokens.weight": cq4<1024x512, gs = 128, orthogonal>,
          "model.layers.0.input_layernorm.weight": fp16<512>,
          "model.layers.0.self_attn.q_proj.weight": cq4<512x512, gs = 128>]>
    ```
  }];
  let parameters = (ins
    "int64_t":$prefill_chunk,
    EnumParameter<CQ4P_KvDtype>:$kv_dtype,
    "int64_t":$workspace_bytes,
    "int64_t":$kv_position_bytes,
    "int64_t":$kv_width,
    "int64_t":$state_bytes,
    ArrayRefParameter<"PlanBinding">:$bindings
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Tiling decisions recorded for the lowerings.
//===----------------------------------------------------------------------===//

def CQ4P_PartialsRescale : I32EnumAttr<"PartialsRescale",
    "what rescales the partials of a cq4p.panel_partials", [
    // Whatever reads the partials buffer.
    I32EnumAttrCase<"stored", 0>,
    // The loop right after the op: over the partials' groups in order, one
    // cq4p.rescale each, at the op's super-block and row. A backend may
    // rescale them where it computes them (SME2: straight out of ZA) and
    // drop the loop.
    I32EnumAttrCase<"group_loop", 1>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_PartialsRescaleAttr
    : EnumAttr<CQ4P_Dialect, CQ4P_PartialsRescale, "partials_rescale"> {
  let assemblyFormat = "`<` $value `>`";
}

def CQ4P_StrategyAttr : AttrDef<CQ4P_Dialect, "Strategy"> {
  let mnemonic = "strategy";
  let summary = "how a target computes one kernel op, chosen once";
  let description = [{
    The `cq4p.strategy` attribute cq4p-select-strategy records on a kernel
    op from its target's KernelTargetInfo; tiling and the conversions read
    it instead of deciding again. On a `cq4p.panel_matmul` of more than one
    row, `tile_rows` > 0 asks for outer-product row tiles of that many rows
    (the last padded with zero rows if it has at least `min_tile_rows`, the
    rows past the tiles one tile of as many rows). On a
    `cq4p.decode_embedding`, `embedding_rows` > 0 asks for an outer-product
    leaf over chunks of that many prompt rows, a chunk of fewer than
    `embedding_min_rows` rows taking the rotation leaf.
    `super_block_partials` (SME2's) makes a `cq4p.panel_matmul`'s one-row
    tiles compute every group's int32 partials of a super-block at once
    (`cq4p.panel_partials` with `#cq4p.partials_rescale<group_loop>`), then
    rescale them group by group. `paired_tiles` (NEON's) packs a GEMM's row
    tiles once per call for the pair loop (each 8 K values' even bytes, then
    the odd ones), every super-block then running over the packed tiles; it
    and `tile_rows` are two GEMM tilings, so at most one is set. Fields at 0
    or false (the default, left out) decide nothing: the shared lowering's
    default.

    Example:

    ```mlir
    #cq4p.strategy<tile_rows = 16, min_tile_rows = 7, super_block_partials = true>
    #cq4p.strategy<embedding_rows = 64, embedding_min_rows = 32>
    #cq4p.strategy<paired_tiles = true>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "0">:$tile_rows,
    DefaultValuedParameter<"int64_t", "0">:$min_tile_rows,
    DefaultValuedParameter<"int64_t", "0">:$embedding_rows,
    DefaultValuedParameter<"int64_t", "0">:$embedding_min_rows,
    DefaultValuedParameter<"bool", "false">:$super_block_partials,
    DefaultValuedParameter<"bool", "false">:$paired_tiles
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Pass options.
//===----------------------------------------------------------------------===//

// The values are kernel_abi.h's cq4p_target.
def CQ4P_Target : I32EnumAttr<"Target", "the target kernels are lowered for", [
    I32EnumAttrCase<"host", 1>,
    I32EnumAttrCase<"aarch64_neon", 2, "aarch64-neon">,
    I32EnumAttrCase<"aarch64_sme2", 3, "aarch64-sme2">,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

def CQ4P_X86Dot : I32EnumAttr<"X86Dot", "the host path's panel dot", [
    I32EnumAttrCase<"generic", 0>,
    I32EnumAttrCase<"ssse3", 1>,
    I32EnumAttrCase<"avx2", 2>,
    I32EnumAttrCase<"avxvnni", 3>,
    I32EnumAttrCase<"avx512vnni", 4>,
  ]> {
  let cppNamespace = "::mlir::cq4p";
  let genSpecializedAttr = 0;
}

#endif // CQ4P_DIALECT_CQ4P_IR_CQ4PATTRS_TD
