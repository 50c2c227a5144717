// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-vector | FileCheck %s

// cq4p.attention on the host (NEON's 4-lane code: CQ4PToNeon/attention.mlir):
// the 16-lane vector code of a flash-attention decode, per query row at
// %pos + r and head: keys in tiles of 16 from the window's start, their
// scores one vector, the running max and sum rescaled once per tile; exp a
// polynomial (no libm call). A whole tile loads its keys through the flat
// cache (one index plus constants), the partial last tile by rows, masked.
// One row (a decode step) takes the tiles outermost, every head of the
// range per tile, their states in stack buffers. A prompt's rows go, per KV
// head, in blocks (here 4 rows of a 2-head group: 8 units; a head of a
// group the range cuts, 8 rows) that walk the tiles of the KV head
// together, a tile whole for every unit without masks, each tile in three
// phases over the units: the scores (each key chunk loaded once for all of
// them) into a stack buffer, the softmax unit by unit, the values chunk by
// chunk; the buffers are made once, before the KV heads loop.
// CHECK-LABEL: func.func @cached_attention
// CHECK-SAME: %[[POS:[^:]*]]: index)
// CHECK-NOT: cq4p.attention
// CHECK: %[[FLATK:.*]] = memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<?x128xf16> into memref<?xf16>
// CHECK: %[[ROWS:.*]] = memref.dim %{{.*}}, %c0
// CHECK: %[[ONE:.*]] = arith.cmpi eq, %[[ROWS]], %c1
// CHECK: scf.if %[[ONE]] {
// CHECK: %[[END1:.*]] = arith.addi %[[POS]], %c1
// CHECK: %[[START1:.*]] = arith.subi %[[END1]], %c32
// CHECK: %[[FIRST1:.*]] = arith.maxsi %[[START1]], %c0
// CHECK: memref.alloca() : memref<4x64xf32>
// CHECK: scf.for %{{.*}} = %[[FIRST1]] to %{{.*}} step %c16 {
// CHECK-NEXT: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1 {
// CHECK: vector.load %[[FLATK]][%{{.*}}] : memref<?xf16>, vector<16xf16>
// CHECK: arith.extf
// CHECK: scf.if
// CHECK: vector.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x128xf16>, vector<16xf16>
// CHECK: } else {
// CHECK: memref.alloca() : memref<8x64xf32>
// CHECK: %[[DOTS:.*]] = memref.alloca() : memref<128x16xf32>
// CHECK: %[[WEIGHTS:.*]] = memref.alloca() : memref<8x16xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1 {
// CHECK: scf.if
// CHECK: scf.for %[[R:.*]] = %c0 to %[[ROWS]] step %c4
// CHECK: %[[LAST:.*]] = arith.subi %[[ROWS]], %c1
// CHECK: %[[ROW0:.*]] = arith.minui %[[R]], %[[LAST]]
// CHECK: %[[P:.*]] = arith.addi %[[POS]], %[[ROW0]]
// CHECK: %[[END:.*]] = arith.addi %[[P]], %c1
// CHECK: %[[START:.*]] = arith.subi %[[END]], %c32
// CHECK: %[[FIRST:.*]] = arith.maxsi %[[START]], %c0
// CHECK: scf.for %{{.*}} = %[[FIRST]] to %{{.*}} step %c16 {
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = %c0 to %c16 step %c1 {
// CHECK: vector.load %[[FLATK]][%{{.*}}] : memref<?xf16>, vector<16xf16>
// CHECK: math.fma
// CHECK: vector.store %{{.*}}, %[[DOTS]][%{{.*}}, %c0]
// CHECK: scf.for %{{.*}} = %c0 to %c2 step %c1 {
// CHECK: vector.load %[[DOTS]]
// CHECK: vector.shuffle
// CHECK: vector.store %{{.*}}, %[[WEIGHTS]]
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c16 {
// CHECK: memref.load %[[WEIGHTS]]
// CHECK: math.fma
// CHECK: } else {
// CHECK: vector.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x128xf16>, vector<16xf16>
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1 {
// CHECK: scf.for %{{.*}} = %c0 to %[[ROWS]] step %c8
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
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1 {
// CHECK: scf.for %[[R:.*]] = %c0 to %[[ROWS]] step %c4
// CHECK: %[[ROW0:.*]] = arith.minui %[[R]],
// CHECK: %[[END:.*]] = arith.addi %[[ROW0]], %c1
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c16
// CHECK: vector.load %{{.*}} : memref<?xf32>, vector<16xf32>
// CHECK-NOT: math.exp
// CHECK: return
func.func @prefill_attention(%q: memref<?x128xf32>, %k: memref<?x64xf32>, %v: memref<?x64xf32>,
                             %out: memref<?x128xf32>, %h0: index, %h1: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 {num_heads = 2 : i64, num_kv_heads = 1 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x128xf32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x128xf32>
  return
}
