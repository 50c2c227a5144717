// RUN: cq4p-opt %s -cq4p-sme2-pipeline | FileCheck %s

// SME2 kernels: the leaf becomes a locally streaming LLVM function with new
// ZA and ZT0 state (no state leaks into the NEON caller); the table says
// aarch64-sme2 (target 3) and DOTPROD | SME2 (features 5).
// CHECK-LABEL: llvm.func internal @cq4p_gemv_100x256_gs128_impl
// CHECK: llvm.call @cq4p_gemv_100x256_gs128_sme_row_matmul
// CHECK-LABEL: llvm.func internal @cq4p_gemv_100x256_gs128_sme_row_matmul
// CHECK-SAME: arm_locally_streaming
// CHECK-SAME: arm_new_za
// CHECK-SAME: passthrough = ["aarch64_new_zt0"]
// CHECK: llvm.mlir.global private constant @__cq4p_kernel_descs
// CHECK: llvm.mlir.constant(3 : i32) : i32
// CHECK: llvm.mlir.constant(5 : i64) : i64
func.func @layer(%x: tensor<1x256xf32>,
                 %w: !cq4p.weight<100x256, gs = 128, hadamard, panels>) -> tensor<1x100xf32> {
  %y = cq4p.linear %x, %w : tensor<1x256xf32>,
      !cq4p.weight<100x256, gs = 128, hadamard, panels> -> tensor<1x100xf32>
  return %y : tensor<1x100xf32>
}
