//===- Passes.td - cq4p conversion passes ------------------*- tablegen -*-===//

#ifndef CQ4P_CONVERSION_PASSES_TD
#define CQ4P_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def CQ4PSelectStrategy : Pass<"cq4p-select-strategy", "mlir::ModuleOp"> {
  let summary = "Record each kernel op's #cq4p.strategy for a target, once";
  let description = [{
    Asks `target`'s KernelTargetInfo (selectStrategy) how it computes each
    `cq4p.panel_matmul` and `cq4p.decode_embedding`, and records the answer
    as the op's `cq4p.strategy` attribute (none where the target takes the
    shared lowering's default). The decisions are then made in one place:
    `cq4p-tile-super-blocks` tiles a GEMM as the strategy says and
    `convert-cq4p-to-arm-sme` and the shared kernel lowering build and call
    the leaves it names, instead of each deciding again from constants of
    their own. An op that already has a strategy keeps it.

    Example (`target=aarch64-sme2`):

    ```mlir
    cq4p.panel_matmul ... {cq4p.strategy = #cq4p.strategy<tile_rows = 16,
                                                          min_tile_rows = 7>}
    ```
  }];
  let options = [
    Option<"target", "target", "mlir::cq4p::Target",
           /*default=*/"mlir::cq4p::Target::host",
           "Target whose strategies are recorded (default host)",
           [{::llvm::cl::values(
               clEnumValN(mlir::cq4p::Target::host, "host", "this machine"),
               clEnumValN(mlir::cq4p::Target::aarch64_neon, "aarch64-neon",
                          "AArch64 with NEON"),
               clEnumValN(mlir::cq4p::Target::aarch64_sme2, "aarch64-sme2",
                          "AArch64 with SME2"))}]>,
  ];
}

def ConvertCQ4PToNeon : Pass<"convert-cq4p-to-neon", "mlir::func::FuncOp"> {
  let summary = "Lower cq4p kernel ops to AArch64 NEON (SDOT and TBL)";
  let description = [{
    `cq4p.panel_dot` becomes the pair-zip SDOT loop over the panel bytes:
    the packed bytes of two adjacent kg-blocks are zipped as 16-bit
    elements, so that each 32-bit lane holds one channel's nibble pairs of
    both blocks; the low and high nibbles are looked up in the int8 codebook
    (`tbl`) and each feeds an `arm_neon.intr.sdot` against the even or odd
    activations of the pair. One permute per 32 weights, no expansion of the
    weights in memory, and (for a GEMM tile) each unpacked vector serves
    every row of the tile. The other kernel ops lower to portable vector and
    scalar code shared with the host path.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::arm_neon::ArmNeonDialect",
                           "mlir::LLVM::LLVMDialect", "mlir::cq4p_intr::CQ4PIntrDialect", "mlir::math::MathDialect",
                           "mlir::memref::MemRefDialect", "mlir::scf::SCFDialect",
                           "mlir::vector::VectorDialect"];
}

def ConvertCQ4PToVector : Pass<"convert-cq4p-to-vector", "mlir::func::FuncOp"> {
  let summary = "Lower cq4p kernel ops to generic vector code (the host path)";
  let description = [{
    The same loop structure as `convert-cq4p-to-neon`, with the codebook
    lookup and the 4-way int8 dot written for the host, as `x86-dot` says:
    `ssse3`: 128-bit `pshufb` and a generic dot; `avx2`: 256-bit `pshufb`,
    `pmaddubsw(|a|, sign(w, a))` and `pmaddwd`; `avxvnni` / `avx512vnni`:
    256- / 512-bit `pshufb` and `vpdpbusd` on a codebook biased by 128, the
    bias removed once per row and group (HostKernels.cpp); `generic`
    (the default): generic vector code.
  }];
  let options = [
    Option<"x86Dot", "x86-dot", "mlir::cq4p::X86Dot",
           /*default=*/"mlir::cq4p::X86Dot::generic",
           "The x86 panel dot (default generic)",
           [{::llvm::cl::values(
               clEnumValN(mlir::cq4p::X86Dot::generic, "generic",
                          "generic vector code"),
               clEnumValN(mlir::cq4p::X86Dot::ssse3, "ssse3",
                          "128-bit pshufb and a generic dot"),
               clEnumValN(mlir::cq4p::X86Dot::avx2, "avx2",
                          "256-bit pshufb, pmaddubsw and pmaddwd"),
               clEnumValN(mlir::cq4p::X86Dot::avxvnni, "avxvnni",
                          "256-bit pshufb and AVX-VNNI vpdpbusd"),
               clEnumValN(mlir::cq4p::X86Dot::avx512vnni, "avx512vnni",
                          "512-bit pshufb and AVX-512 VNNI vpdpbusd"))}]>,
  ];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::LLVM::LLVMDialect", "mlir::cq4p_intr::CQ4PIntrDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect", "mlir::vector::VectorDialect"];
}

def DeclareHostPrefetchFlag
    : Pass<"cq4p-declare-host-prefetch-flag", "mlir::ModuleOp"> {
  let summary = "Declare the flag that gates the host GEMV's software prefetch";
  let description = [{
    Adds `memref.global "private" @cq4p_host_prefetch : memref<i8>` (0:
    not yet known) to the module unless it has one. `convert-cq4p-to-vector`
    then runs the one-row panel dot's prefetch hints only where the flag
    says they help: the first panel dot of a process reads the CPU's vendor
    and stores 1 (prefetch) or 2 (not, on AMD's CPUs, where the hints were
    measured to slow the stream down: HostKernels.cpp). A module without the
    flag keeps the hints unconditionally. A pass of its own because the
    lowering runs per function, in parallel, and may not add module-level
    symbols.
  }];
  let dependentDialects = ["mlir::memref::MemRefDialect"];
}

def ConvertCQ4PToArmSME : Pass<"convert-cq4p-to-arm-sme", "mlir::ModuleOp"> {
  let summary = "Lower super-block panel partials to SME2 (LUTI4 from ZT0, SDOT into ZA)";
  let description = [{
    Each `cq4p.panel_partials` becomes a call to a streaming leaf (locally
    streaming, with new ZA and ZT0 state, so it leaks nothing into its
    caller and is called like any function) that loads the int8 codebook
    into ZT0, and per kg-block of 64 channels x 4 K expands the 128 panel
    bytes with two LUTI4 (x2) into four vectors [16 channels][4 K] (nibble j
    becomes byte j) and accumulates them with one multi-vector SDOT, indexed
    by the kg-block's 4 activations, into four ZA vectors: 16 groups at a
    time, each in its own ZA slice. Where the partials' rescale follows
    (a GEMV, a GEMM tile), the leaf rescales them straight out of ZA in
    streaming mode (multi-vector ZA reads, SCVTF x4, the contract's fp32
    multiplies and adds in its order, so the results equal NEON's bit for
    bit); otherwise they are stored from ZA to the partials buffer with
    `str za` and rescaled in NEON. The int32 partials are exactly NEON's.
    ZA zero, the outer products, `str za` and the ZA tile reads are typed
    `arm_sme.intr` operations; LUTI4, ZT0 and the multi-vector ZA
    operations, which the dialect lacks, are intrinsic calls. The leaves
    assume a 512-bit streaming vector length; the runtime runs them only
    there.

    `cq4p.attention` (head dims a multiple of 64) takes fp32 outer products:
    per tile of 16 query rows, Q K^T with FMOPA into ZA0.S per tile of 16
    keys, the softmax in NEON, and P V with four FMOPA per key into the four
    32-bit tiles (64 dimensions at a time).

    `cq4p.rotate_quantize_activations` and `cq4p.decode_embedding` (K a
    multiple of 64) get a streaming leaf for their K x K fp16 matrix
    product, named on the op as `cq4p.sme_rotation` and called by the
    shared kernel lowering in place of its vector loops: the sums in ZA,
    one multi-vector FMLA by lane per 64 outputs and row after extending
    LD1H and FCVT that four rows share; each sum is the vector code's chain
    of fused multiply-adds, so the outputs equal NEON's bit for bit.
    `cq4p.decode_embedding` (K a multiple of 64) also gets a leaf for
    prompt rows, `cq4p.sme_embedding_mopa`, which the lowering calls for
    chunks of at least 32 of its 64 rows: the rows' indices transposed
    through ZA, then per c one LUTI4 of the 64 rows' levels (fp32, from
    ZT0) and four non-widening FP32 FMOPA with rotation_t's widened row,
    the same exact products and the same chain of adds.

    With `fmlal-rotation`, the lm_head's rotation takes the embedding's
    path too: the shared lowering rounds each row's a = x * isr to fp16
    after a power-of-two scaling (its largest |a| to [2^14, 2^15)), the
    leaf adds one multi-vector FMLAL by lane per 128 outputs and row
    (exact fp16 products, fp32 sums, no widening of the matrix), and the
    sums are scaled back exactly. About a fifth of the instructions of the
    FMLA path; the rounded values make the lm_head's activations, and so
    its outputs, differ from NEON's (docs/MODEL.md, "SME2's FMLAL
    rotation").
  }];
  let options = [
    Option<"fmlalRotation", "fmlal-rotation", "bool", /*default=*/"true",
           "The lm_head's rotation from fp16-rounded activations with FMLAL "
           "(default true; false: FMLA of fp32 values, NEON's bits)">,
  ];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::arm_sme::ArmSMEDialect",
                           "mlir::func::FuncDialect", "mlir::LLVM::LLVMDialect", "mlir::cq4p_intr::CQ4PIntrDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect", "mlir::vector::VectorDialect"];
}

#endif // CQ4P_CONVERSION_PASSES_TD
