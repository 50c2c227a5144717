// RUN: cq4p-opt %s -cq4p-export-kernels=target=aarch64-sme2 | FileCheck %s
// RUN: cq4p-opt %s -cq4p-export-kernels=target=aarch64-neon | FileCheck %s --check-prefix=NEON
// RUN: not cq4p-opt %s -cq4p-export-kernels=target=aarch64-sve 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: cq4p-opt: for the --target option: Cannot find option named 'aarch64-sve'!

// A kernel of the ABI (attention) gets an exported C entry over bare
// pointers and sizes and a row in the kernel table; a model kernel (add) an
// internal entry its steps call; an SME2 leaf becomes locally streaming
// with new ZA and ZT0.

// CHECK-LABEL: llvm.func internal @cq4p_add_4(
// CHECK-SAME: %[[A:.*]]: !llvm.ptr, %[[OUT:.*]]: !llvm.ptr, %[[ROWS:.*]]: i64)
// CHECK: llvm.call @cq4p_add_4_impl(%[[A]], %[[A]], %{{.*}}, %[[ROWS]], %{{.*}}, %{{.*}}, %{{.*}}, %[[OUT]], %[[OUT]], %{{.*}}, %[[ROWS]], %{{.*}}, %{{.*}}, %{{.*}}, %[[ROWS]])
// CHECK-LABEL: llvm.func internal @cq4p_add_4_impl(
// CHECK-LABEL: llvm.func @cq4p_attention(
// CHECK-SAME: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CHECK: llvm.call @cq4p_attention_impl(
// CHECK-LABEL: llvm.func internal @cq4p_attention_impl(
// CHECK-LABEL: llvm.func internal @leaf() attributes
// CHECK-SAME: arm_locally_streaming
// CHECK-SAME: arm_new_za
// CHECK-SAME: passthrough = ["aarch64_new_zt0"]
// CHECK-NOT: cq4p.sme_leaf
// A leaf of 16-lane fixed-length vector code runs at the 512-bit vector
// length the SME2 target assumes (vscale 4), so LLVM keeps a 16-lane vector
// in one Z register.
// CHECK-LABEL: llvm.func internal @fixed_lanes_leaf() vscale_range(4, 4)
// CHECK-SAME: arm_locally_streaming
// CHECK-NOT: cq4p.sme_fixed_lanes
// CHECK: llvm.mlir.global private constant @__cq4p_kernel_name_0("cq4p_attention\00")
// CHECK: llvm.mlir.global private constant @__cq4p_kernel_descs() {{.*}} : !llvm.array<1 x struct<"cq4p_kernel_desc", (ptr, i32, i32, i64, i64, i64, i32, i32, i32, i32, ptr, i32, i32)>>
// CHECK-DAG: llvm.mlir.constant(5 : i32) : i32
// CHECK-DAG: llvm.mlir.constant(3 : i32) : i32
// CHECK: llvm.mlir.global external constant @cq4p_kernel_table()
// NEON: llvm.mlir.global private constant @__cq4p_kernel_descs()
// NEON-DAG: llvm.mlir.constant(5 : i32) : i32
// NEON-DAG: llvm.mlir.constant(2 : i32) : i32
module {
  llvm.func @cq4p_add_4(%a0: !llvm.ptr, %a1: !llvm.ptr, %a2: i64, %a3: i64, %a4: i64, %a5: i64, %a6: i64, %a7: !llvm.ptr, %a8: !llvm.ptr, %a9: i64, %a10: i64, %a11: i64, %a12: i64, %a13: i64, %a14: i64) attributes {cq4p.kernel = #cq4p.kernel<add, n = 4, params = ["a": memref<?x4xf32>, "out": memref<?x4xf32>, "rows": index]>} {
    llvm.return
  }
  llvm.func @cq4p_attention(%a0: !llvm.ptr, %a1: !llvm.ptr, %a2: i64, %a3: i64, %a4: i64, %a5: i64, %a6: i64, %a7: !llvm.ptr, %a8: !llvm.ptr, %a9: i64, %a10: i64, %a11: i64, %a12: i64, %a13: i64, %a14: !llvm.ptr, %a15: !llvm.ptr, %a16: i64, %a17: i64, %a18: i64, %a19: i64, %a20: i64, %a21: !llvm.ptr, %a22: !llvm.ptr, %a23: i64, %a24: i64, %a25: i64, %a26: i64, %a27: i64, %a28: i64, %a29: i64, %a30: i64) attributes {cq4p.kernel = #cq4p.kernel<attention, n = 64, k = 64, group_size = 1, max_rows = 16, params = ["q": memref<?x64xf32>, "k": memref<?x64xf32>, "v": memref<?x64xf32>, "out": memref<?x64xf32>, "seq": index, "head_begin": index, "head_end": index]>} {
    llvm.return
  }
  llvm.func @leaf() attributes {cq4p.sme_leaf} {
    llvm.return
  }
  llvm.func @fixed_lanes_leaf() attributes {cq4p.sme_leaf, cq4p.sme_fixed_lanes} {
    llvm.return
  }
}

