// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-vector | FileCheck %s

// cq4p.attention on the host (NEON's 4-lane code: CQ4PToNeon/attention.mlir):
// the 16-lane vector code of a flash-attention decode, per query row at
// %pos + r and head: keys in tiles of 16 from the window's start, their
// scores one vector, the running max and sum rescaled once per tile; exp a
// polynomial (no libm call).
// CHECK-LABEL: func.func @cached_attention
// CHECK-SAME: %[[POS:[^:]*]]: index)
// CHECK-NOT: cq4p.attention
// CHECK: %[[ROWS:.*]] = memref.dim %{{.*}}, %c0
// CHECK: scf.for %[[R:.*]] = %c0 to %[[ROWS]]
// CHECK: %[[P:.*]] = arith.addi %[[POS]], %[[R]]
// CHECK: %[[END:.*]] = arith.addi %[[P]], %c1
// CHECK: %[[START:.*]] = arith.subi %[[END]], %c32
// CHECK: %[[FIRST:.*]] = arith.maxsi %[[START]], %c0
// CHECK: scf.for %[[H:.*]] =
// CHECK: scf.for %{{.*}} = %[[FIRST]] to %[[END]] step %c16
// CHECK: vector.load %{{.*}} : memref<?x128xf16>, vector<16xf16>
// CHECK: arith.extf
// CHECK-NOT: math.exp
// CHECK-NOT: call
// CHECK: return
func.func @cached_attention(%q: memref<?x256xf32>, %k: memref<?x128xf16>, %v: memref<?x128xf16>,
                            %out: memref<?x256xf32>, %h0: index, %h1: index, %pos: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 at %pos {num_heads = 4 : i64, num_kv_heads = 2 : i64,
      head_dim = 64 : i64, window = 32 : i64, scale = 0.125 : f32}
      : memref<?x256xf32>, memref<?x128xf16>, memref<?x128xf16>, memref<?x256xf32>
  return
}

// -----

// A single tensor's attention is the same code at position 0.
// CHECK-LABEL: func.func @prefill_attention
// CHECK-NOT: cq4p.attention
// CHECK: %[[ROWS:.*]] = memref.dim %{{.*}}, %c0
// CHECK: scf.for %[[R:.*]] = %c0 to %[[ROWS]]
// CHECK: %[[END:.*]] = arith.addi %[[R]], %c1
// CHECK: scf.for %[[H:.*]] =
// CHECK: scf.for %{{.*}} = %c0 to %[[END]] step %c16
// CHECK: vector.load %{{.*}} : memref<?x64xf32>, vector<16xf32>
// CHECK-NOT: math.exp
// CHECK: return
func.func @prefill_attention(%q: memref<?x128xf32>, %k: memref<?x64xf32>, %v: memref<?x64xf32>,
                             %out: memref<?x128xf32>, %h0: index, %h1: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 {num_heads = 2 : i64, num_kv_heads = 1 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x128xf32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x128xf32>
  return
}
