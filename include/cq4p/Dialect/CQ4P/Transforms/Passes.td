//===- Passes.td - cq4p dialect passes ---------------------*- tablegen -*-===//

#ifndef CQ4P_DIALECT_CQ4P_TRANSFORMS_PASSES_TD
#define CQ4P_DIALECT_CQ4P_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def CQ4PLowerToKernels : Pass<"cq4p-lower-to-kernels", "mlir::ModuleOp"> {
  let summary = "Outline graph-level cq4p ops into kernel functions";
  let description = [{
    For every `cq4p.linear` and `cq4p.embedding` of the module, creates the
    kernel functions that compute it, over buffers, with the kernel ABI's
    parameters (the `cq4p.kernel` attribute, a `#cq4p.kernel`):

    - the activation kernel: `cq4p.quantize_activations` (Hadamard) or
      `cq4p.rotate_quantize_activations` (orthogonal lm_head);
    - M-dispatch: a GEMV (`rows = 1`) when M may be 1 and a GEMM (any
      `rows >= 2`) when M may exceed 1, each a `cq4p.panel_matmul`;
    - `cq4p.decode_embedding` for an embedding.

    Kernels are named after what they compute (`cq4p_gemv_2048x1536_gs128`)
    and shared by every op of the same shape. Each graph-level op records its
    kernels in a `cq4p.kernels` attribute; with `kernels-only`, the graph
    functions are dropped instead (what cq4p-compile builds a library of).
  }];
  let options = [
    Option<"kernelsOnly", "kernels-only", "bool", /*default=*/"false",
           "Keep only the kernel functions, dropping the model graph (default "
           "false)">,
  ];
  let dependentDialects = ["mlir::func::FuncDialect", "mlir::memref::MemRefDialect"];
}

def CQ4PLowerModel : Pass<"cq4p-lower-model", "mlir::ModuleOp"> {
  let summary = "Lower a model graph (@forward) to kernels and planned steps";
  let description = [{
    For a module with a `cq4p.model` attribute and a `@forward` graph
    function (docs/MODEL.md), creates every kernel the graph needs (the
    linears' activation transforms, GEMVs and GEMMs, the embedding decoder,
    and the model kernels: RMSNorm, rotary embedding, attention over the KV
    cache, gated activation, residual add, scale) and plans two steps,
    `cq4p.step @decode` (one row) and `cq4p.step @prefill` (up to
    `prefill-chunk` rows; one row runs @decode): each value of the graph
    gets a place (a workspace slot reused once the value is dead, the KV
    cache for keys and values, the logits for the result), linears that
    read the same value with the same activation transform share one
    quantization, and every kernel call becomes a `cq4p.dispatch` over its
    work items. The graph function is then erased, and what the library's
    model descriptor records goes into the module's `cq4p.model_plan` (a
    `#cq4p.model_plan`). A module without `@forward` is left alone.
  }];
  let options = [
    Option<"prefillChunk", "prefill-chunk", "int64_t", /*default=*/"128",
           "Most rows one prefill step takes, 2 to 65536 (default 128)">,
    Option<"kvCache", "kv-cache", "mlir::cq4p::KvDtype",
           /*default=*/"mlir::cq4p::KvDtype::f32",
           "Element type of the KV cache (default f32)",
           [{::llvm::cl::values(
               clEnumValN(mlir::cq4p::KvDtype::f32, "f32", "fp32"),
               clEnumValN(mlir::cq4p::KvDtype::f16, "f16",
                          "fp16: half the memory and the attention's reads; "
                          "keys and values rounded to nearest"))}]>,
    Option<"fuseDenseMlp", "fuse-dense-mlp", "bool", /*default=*/"false",
           "Gate and up projections in one dispatch with one quantized "
           "activation, the gating applied per super-block right after "
           "their rescale (default false, opt-in: it costs decode time on some "
           "cores)">,
    Option<"gateInTransform", "gate-in-transform", "bool", /*default=*/"true",
           "A gating that only Hadamard linears read is formed by their "
           "activation transform from the gate and up rows (no gating pass; "
           "false keeps the separate pass, the same bits; default true)">,
  ];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::func::FuncDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect", "mlir::vector::VectorDialect"];
}

def CQ4PTileSuperBlocks : Pass<"cq4p-tile-super-blocks", "mlir::func::FuncOp"> {
  let summary = "Split panel matmuls into int32 partials and fp32 rescale per super-block";
  let description = [{
    Rewrites `cq4p.panel_matmul` into a loop over its super-blocks (the unit
    the runtime's threads share) and row tiles; per group, `cq4p.panel_dot`
    produces exact int32 partials into a buffer and `cq4p.rescale`
    accumulates them in fp32; the accumulated channels of the super-block
    are then written to the output, those past N left alone.

    The target's choices come from each op's `cq4p.strategy` (recorded by
    `cq4p-select-strategy`). A GEMM whose strategy has `tile_rows` is tiled
    for outer products: packed tiles of that many rows, the last padded if
    it has at least `min_tile_rows`. A GEMM whose strategy has
    `paired_tiles` packs its row tiles once per call for the NEON pair loop
    (even and odd bytes of each 8 K values), then every super-block runs
    over the packed tiles.

    With `super_block_partials` in the strategy, a one-row tile computes
    every group's partials at once: each `cq4p.panel_partials` records the
    tiling chosen here for the lowering (`rescale =
    #cq4p.partials_rescale<group_loop>`: the loop right after it rescales
    its groups in order), which `convert-cq4p-to-arm-sme` reads instead of
    recognising the loop's shape.
  }];
  let options = [
    Option<"gemmRows", "gemm-rows", "int64_t", /*default=*/"4",
           "Rows per GEMM tile: each unpacked weight vector serves this many "
           "rows, 1 or more (default 4)">,
  ];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect", "mlir::vector::VectorDialect"];
}

def CQ4PExportKernels : Pass<"cq4p-export-kernels", "mlir::ModuleOp"> {
  let summary = "Give lowered kernels the C ABI and a versioned kernel table";
  let description = [{
    Runs on the LLVM dialect. For every kernel function (`cq4p.kernel`),
    adds an exported C-ABI entry point over bare pointers and sizes
    (runtime/include/cq4p/kernel_abi.h) that loads the weight regions from
    the runtime's `cq4p_weight_view`, builds the buffers' descriptors and
    calls the kernel, which becomes internal; then emits the
    `cq4p_kernel_table` describing every entry (ABI version, kind, shapes,
    target, CPU features).
  }];
  let options = [
    Option<"target", "target", "mlir::cq4p::Target",
           /*default=*/"mlir::cq4p::Target::host",
           "Target the kernels were lowered for (default host)",
           [{::llvm::cl::values(
               clEnumValN(mlir::cq4p::Target::host, "host", "this machine"),
               clEnumValN(mlir::cq4p::Target::aarch64_neon, "aarch64-neon",
                          "AArch64 with dotprod"),
               clEnumValN(mlir::cq4p::Target::aarch64_sme2, "aarch64-sme2",
                          "AArch64 with SME2 (512-bit streaming vectors)"))}]>,
    Option<"features", "features", "uint64_t", /*default=*/"0",
           "CQ4P_FEATURE_* bits the kernels need (kernel_abi.h; default 0)">,
  ];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

def CQ4PExportSteps : Pass<"cq4p-export-steps", "mlir::ModuleOp"> {
  let summary = "Turn a model's planned steps into C functions and their descriptor";
  let description = [{
    Runs on the LLVM dialect after `cq4p-export-kernels`. Each `cq4p.step`
    (`cq4p-lower-model`) becomes `cq4p_step_<name>(const cq4p_step_args *)`,
    which hands each of its dispatches to the runtime's parallel-for as a
    task `(args, begin, end)` computing the kernel entry's pointers (from
    each `#cq4p.place`) and integers (its scalars) and calling the entry;
    then `cq4p_model_steps` describes the model (kernel_abi.h,
    cq4p_model_desc) from the module's `cq4p.model` and `cq4p.model_plan`.
    A module without steps is left alone.
  }];
  let options = [
    Option<"target", "target", "mlir::cq4p::Target",
           /*default=*/"mlir::cq4p::Target::host",
           "Target the steps' kernels were lowered for (default host)",
           [{::llvm::cl::values(
               clEnumValN(mlir::cq4p::Target::host, "host", "this machine"),
               clEnumValN(mlir::cq4p::Target::aarch64_neon, "aarch64-neon",
                          "AArch64 with dotprod"),
               clEnumValN(mlir::cq4p::Target::aarch64_sme2, "aarch64-sme2",
                          "AArch64 with SME2 (512-bit streaming vectors)"))}]>,
    Option<"features", "features", "uint64_t", /*default=*/"0",
           "CQ4P_FEATURE_* bits the steps' kernels need (kernel_abi.h; default "
           "0)">,
  ];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

#endif // CQ4P_DIALECT_CQ4P_TRANSFORMS_PASSES_TD
