// RUN: cq4p-opt %s -cq4p-neon-pipeline | FileCheck %s
// RUN: cq4p-opt %s -cq4p-host-pipeline | FileCheck %s --check-prefix=HOST

// The whole lowering: graph-level IR in, LLVM dialect out, with C-ABI entry
// points over the weight view and bare pointers, internal kernels, and the
// kernel table.

// CHECK-NOT: func.func
// CHECK-LABEL: llvm.func @cq4p_quantize_256_gs128_hadamard(
// CHECK-SAME: %[[W:[a-z0-9]+]]: !llvm.ptr, %[[X:[a-z0-9]+]]: !llvm.ptr, %[[A:[a-z0-9]+]]: !llvm.ptr, %[[S:[a-z0-9]+]]: !llvm.ptr, %[[ROWS:[a-z0-9]+]]: i64, %[[G0:[a-z0-9]+]]: i64, %[[G1:[a-z0-9]+]]: i64)
// The input scale reciprocal is field 4 of cq4p_weight_view.
// CHECK: %[[F4:.*]] = llvm.getelementptr %[[W]][0, 4] : (!llvm.ptr) -> !llvm.ptr, !llvm.struct<"cq4p_weight_view", (ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)>
// CHECK: %[[ISR:.*]] = llvm.load %[[F4]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.call @cq4p_quantize_256_gs128_hadamard_impl(%[[X]], %[[X]], %{{.*}}, %[[ROWS]], %{{.*}}, %{{.*}}, %{{.*}}, %[[ISR]], %[[ISR]],
// CHECK-LABEL: llvm.func internal @cq4p_quantize_256_gs128_hadamard_impl
// CHECK-LABEL: llvm.func @cq4p_gemv_100x256_gs128(
// CHECK-LABEL: llvm.func internal @cq4p_gemv_100x256_gs128_impl
// CHECK-COUNT-128: arm_neon.intr.sdot
// CHECK: llvm.mlir.global private constant @__cq4p_kernel_name_1("cq4p_gemv_100x256_gs128\00")
// CHECK: llvm.mlir.global external constant @cq4p_kernel_table() {{.*}} : !llvm.struct<"cq4p_kernel_table", (i32, i32, ptr)>
// ABI version 4, 3 kernels.
// CHECK: llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT: llvm.mlir.constant(3 : i32) : i32
// CHECK: llvm.mlir.addressof @__cq4p_kernel_descs
// HOST-NOT: arm_neon
// HOST: llvm.mlir.global external constant @cq4p_kernel_table()
func.func @layer(%x: tensor<?x256xf32>,
                 %w: !cq4p.weight<100x256, gs = 128, hadamard, panels>)
    -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>,
      !cq4p.weight<100x256, gs = 128, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}
