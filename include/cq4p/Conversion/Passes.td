//===- Passes.td - cq4p conversion passes ------------------*- tablegen -*-===//

#ifndef CQ4P_CONVERSION_PASSES_TD
#define CQ4P_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

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
                           "mlir::LLVM::LLVMDialect", "mlir::math::MathDialect",
                           "mlir::memref::MemRefDialect", "mlir::scf::SCFDialect",
                           "mlir::vector::VectorDialect"];
}

def ConvertCQ4PToVector : Pass<"convert-cq4p-to-vector", "mlir::func::FuncOp"> {
  let summary = "Lower cq4p kernel ops to generic vector code (the host path)";
  let description = [{
    The same loop structure as `convert-cq4p-to-neon`, with the codebook
    lookup and the 4-way int8 dot written for the host: SSSE3 `pshufb` for
    the lookup on x86-64 when enabled, generic vector ops otherwise; with
    AVX-512 VNNI the dot is `vpdpbusd`, which multiplies unsigned by signed
    bytes: the activations are biased by 128 (a xor 0x80) and 128 times the
    weights' sum, one more `vpdpbusd` shared by every row, is subtracted.
  }];
  let options = [
    Option<"x86Ssse3", "x86-ssse3", "bool", /*default=*/"false",
           "Use the x86 SSSE3 byte shuffle for the codebook lookup">,
    Option<"x86Vnni", "x86-vnni", "bool", /*default=*/"false",
           "Use AVX-512 VNNI (vpdpbusd, 128-bit, needs AVX512VL) for the 4-way dot">,
  ];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::LLVM::LLVMDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect", "mlir::vector::VectorDialect"];
}

#endif // CQ4P_CONVERSION_PASSES_TD
