// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-vector | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-vector=x86-dot=avx512vnni | FileCheck %s --check-prefix=WIDE

// cq4p.attention on the host (NEON's 4-lane code: CQ4PToNeon/attention.mlir):
// the 16-lane vector code of a flash-attention decode, per query row at
// %pos + r and head: keys in tiles of 16 from the window's start, their
// scores one vector, the running max and sum rescaled once per tile; exp a
// polynomial (no libm call). A whole tile loads its keys through the flat
// cache (one index plus constants), the partial last tile by rows, masked.
// One row (a decode step) takes the tiles outermost, every head of the
// range per tile, their states in stack buffers: a step one head, or two
// heads of a KV head with AVX-512's 32 registers (the WIDE run), and each
// step prefetches its share of the next tile's rows of its KV head into L2
// (here two steps of 8 rows a KV head, or one of 16; an fp16 row's 64
// values are two lines). A prompt's rows put query
// units (rows times the heads of one KV head) in the lanes of the target's
// vectors (4 here, 16 with AVX-512: the WIDE run): per KV head, heads at
// most a vector's lanes at a time, blocks of vectors x lanes / heads rows
// (two vectors of units with AVX-512's 32 registers, one otherwise). A
// block gathers its queries one head dim a vector, then walks tiles of 16
// keys from a multiple of 16: the scores loops over the head dim whose sums
// (8 keys times the block's vectors) are their iteration arguments (query
// vectors times one broadcast key element each), the softmax lane-wise, the
// values a loop over the head dim (weights times broadcast value elements,
// each broadcast feeding every vector); an fp16 cache's tile is first
// converted to fp32 on the stack. The outputs are scattered back.
// CHECK-LABEL: func.func @cached_attention
// WIDE-LABEL: func.func @cached_attention
// WIDE: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16 {
// WIDE: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c2 {
// WIDE-COUNT-64: memref.prefetch %{{.*}}[%{{.*}}], read, locality<2>, data : memref<?xf16>
// WIDE: scf.if
// WIDE: } else {
// WIDE: memref.alloca() : memref<64x32xf32>
// WIDE: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16 {
// WIDE: arith.divui %c32, %{{.*}} : index
// WIDE-COUNT-2: vector.gather {{.*}} into vector<16xf32>
// WIDE: scf.for %{{.*}} = %c0 to %c64 step %c8 iter_args(
// WIDE-SAME: -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>) {
// WIDE: %[[KEY:.*]] = vector.broadcast %{{.*}} : f32 to vector<16xf32>
// WIDE-NEXT: math.fma %{{.*}}, %[[KEY]], %{{.*}} : vector<16xf32>
// WIDE-NEXT: math.fma %{{.*}}, %[[KEY]], %{{.*}} : vector<16xf32>
// WIDE-COUNT-2: vector.scatter {{.*}} vector<16xf32>
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
// CHECK-COUNT-32: memref.prefetch %{{.*}}[%{{.*}}], read, locality<2>, data : memref<?xf16>
// CHECK-NOT: memref.prefetch
// CHECK: vector.load %[[FLATK]][%{{.*}}] : memref<?xf16>, vector<16xf16>
// CHECK: arith.extf
// CHECK: scf.if
// CHECK: vector.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x128xf16>, vector<16xf16>
// CHECK: } else {
// CHECK: %[[Q:.*]] = memref.alloca() : memref<64x4xf32>
// CHECK: %[[ACC:.*]] = memref.alloca() : memref<64x4xf32>
// CHECK: %[[KS:.*]] = memref.alloca() : memref<16x64xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1 {
// CHECK: scf.for %[[H0:.*]] = %{{.*}} to %{{.*}} step %c4 {
// CHECK: %[[PER:.*]] = arith.divui %c4, %{{.*}} : index
// CHECK: scf.for %{{.*}} = %c0 to %[[ROWS]] step %[[PER]] {
// CHECK: arith.divui %{{.*}} : vector<4xi32>
// CHECK: %[[TILE0:.*]] = arith.divui %{{.*}}, %c16 : index
// CHECK: %[[FIRST:.*]] = arith.muli %[[TILE0]], %c16 : index
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c1 {
// CHECK: vector.gather
// CHECK: vector.store %{{.*}}, %[[Q]]
// CHECK: scf.for %{{.*}} = %[[FIRST]] to %{{.*}} step %c16 iter_args(
// CHECK-SAME: -> (vector<4xf32>, vector<4xf32>)
// CHECK: scf.if %{{.*}} -> (vector<4xf32>, vector<4xf32>) {
// CHECK: vector.load %{{.*}} : memref<?x128xf16>, vector<16xf16>
// CHECK: arith.extf
// CHECK: vector.store %{{.*}}, %[[KS]]
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c4 iter_args(
// CHECK: vector.load %[[Q]]
// CHECK: memref.load %[[KS]]
// CHECK: vector.broadcast
// CHECK: math.fma
// CHECK: arith.maximumf
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c4 {
// CHECK: vector.load %[[ACC]]
// CHECK: math.fma
// CHECK: vector.store %{{.*}}, %[[ACC]]
// CHECK: } else {
// CHECK: arith.cmpi slt, %{{.*}} : vector<4xi32>
// CHECK: arith.cmpi sge, %{{.*}} : vector<4xi32>
// CHECK: arith.divf
// CHECK: vector.scatter
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
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c4 {
// CHECK: scf.for %{{.*}} = %c0 to %[[ROWS]] step %{{.*}} {
// CHECK: vector.gather
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16 iter_args(
// CHECK: memref.load %{{.*}} : memref<?x64xf32>
// CHECK: math.fma
// CHECK-NOT: math.exp
// CHECK: return
func.func @prefill_attention(%q: memref<?x128xf32>, %k: memref<?x64xf32>, %v: memref<?x64xf32>,
                             %out: memref<?x128xf32>, %h0: index, %h1: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 {num_heads = 2 : i64, num_kv_heads = 1 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x128xf32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x128xf32>
  return
}

// -----

// An odd group (3 heads a KV head) with AVX-512's pairs: a KV head's steps
// are one pair and its last head, each prefetching half the next tile's 16
// rows (8 rows of two fp16 lines, keys and values: 32), the last head's
// share the rows the pair leaves, not a third of them.
// WIDE-LABEL: func.func @odd_group
// WIDE: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16 {
// WIDE: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c2 {
// WIDE-COUNT-32: memref.prefetch %{{.*}}[%{{.*}}], read, locality<2>, data : memref<?xf16>
// WIDE-NOT: memref.prefetch
// WIDE: scf.if
// WIDE-COUNT-32: memref.prefetch %{{.*}}[%{{.*}}], read, locality<2>, data : memref<?xf16>
// WIDE-NOT: memref.prefetch
// WIDE: } else {
// WIDE: return
func.func @odd_group(%q: memref<?x384xf32>, %k: memref<?x128xf16>, %v: memref<?x128xf16>,
                     %out: memref<?x384xf32>, %h0: index, %h1: index, %pos: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 at %pos {num_heads = 6 : i64, num_kv_heads = 2 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x384xf32>, memref<?x128xf16>, memref<?x128xf16>, memref<?x384xf32>
  return
}
