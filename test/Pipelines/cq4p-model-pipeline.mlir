// RUN: cq4p-opt %S/../Dialect/CQ4P/lower-model.mlir -cq4p-neon-pipeline=prefill-chunk=8 | FileCheck %s

// A model graph through the NEON pipeline: the model kernels get internal
// C-ABI entries, every dispatch a task (args, begin, end) that calls one,
// each step hands its tasks to the runtime's parallel-for (one indirect
// call per dispatch: 20 in decode, the gating inside the down projection's
// transform), prefill sends one row to decode, and cq4p_model_steps
// describes it all (ABI 3, 12 bindings, chunk 8).

// CHECK-LABEL: llvm.func internal @cq4p_rms_norm_128_d128_f16_e{{[0-9]+}}(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64)
// CHECK-LABEL: llvm.func internal @__cq4p_task_decode_0(%{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64)
// CHECK: llvm.call @cq4p_embedding_256x128(
// CHECK-LABEL: llvm.func internal @cq4p_step_decode(%{{.*}}: !llvm.ptr)
// CHECK-COUNT-20: llvm.call %{{.*}} : !llvm.ptr, (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> ()
// CHECK-NOT: llvm.call
// CHECK: llvm.return
// CHECK-LABEL: llvm.func internal @cq4p_step_prefill(%{{.*}}: !llvm.ptr)
// CHECK: llvm.icmp "eq"
// CHECK: llvm.call @cq4p_step_decode(
// CHECK-LABEL: llvm.mlir.global external constant @cq4p_model_steps()
// CHECK-NEXT: llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT: llvm.mlir.constant(12 : i32) : i32
// CHECK: llvm.mlir.constant(8 : i64) : i64
// CHECK: llvm.mlir.addressof @cq4p_step_prefill
// CHECK: llvm.mlir.addressof @cq4p_step_decode
