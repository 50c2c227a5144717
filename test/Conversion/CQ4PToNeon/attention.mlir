// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-neon | FileCheck %s

// cq4p.attention on NEON (and SME2's calls its streaming leaves do not
// take): 4-lane code per query row and GQA group, keys in blocks of 256
// from the window's start with the softmax's running max and sum carried
// between blocks. Q K^T a pair of heads and four keys at a time, 16 dims
// per step (8 accumulators; an fp16 key slice loaded once and widened for
// both heads; each key row from a pointer of its own), folded by FADDPs into the four keys' scores in a stack
// buffer; the exponentials in place; P V by lanes of the weights into the
// heads' accumulators (a stack buffer of heads x dims). No libm exp.
// CHECK-LABEL: func.func @cached_attention
// CHECK-SAME: %[[Q:[^:]*]]: memref<?x256xf32>, %[[K:[^:]*]]: memref<?x128xf16>, %[[V:[^:]*]]: memref<?x128xf16>,
// CHECK-SAME: %[[OUT:[^:]*]]: memref<?x256xf32>, %{{[^:]*}}: index, %{{[^:]*}}: index, %[[POS:[^:]*]]: index)
// CHECK-DAG: %[[ACC:.*]] = memref.alloca() : memref<128xf32>
// CHECK-DAG: %[[S:.*]] = memref.alloca() : memref<4096xf32>
// CHECK-DAG: %[[QS:.*]] = memref.alloca() : memref<2x64xf32>
// CHECK-NOT: cq4p.attention
// CHECK: scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK: %[[P:.*]] = arith.addi %[[POS]], %[[R]]
// CHECK: %[[END:.*]] = arith.addi %[[P]], %{{.*}}
// CHECK: %[[START:.*]] = arith.subi %[[END]], %{{.*}}
// CHECK: %[[FIRST:.*]] = arith.maxsi %[[START]], %{{.*}}
// CHECK: scf.if
// The group's queries times scale log2(e): scores in base 2.
// CHECK: vector.load %[[Q]][%[[R]], %{{.*}}] : memref<?x256xf32>, vector<4xf32>
// CHECK: arith.mulf
// CHECK: vector.store %{{.*}}, %[[QS]]
// CHECK: memref.extract_aligned_pointer_as_index %[[QS]]
// CHECK: %[[QPTR:.*]] = cq4p_intr.opaque %{{.*}} : !llvm.ptr
// CHECK: scf.for %[[B0:.*]] = %[[FIRST]] to %[[END]] step %{{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32)
// CHECK: %[[WHOLE:.*]] = arith.andi
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %[[WHOLE]] step %{{.*}} iter_args({{.*}}) -> (vector<4xf32>, vector<4xf32>)
// Each key row its own base pointer (LDP with small offsets).
// CHECK: %[[ROW:.*]] = arith.addi %[[B0]], %[[J]]
// CHECK: memref.extract_aligned_pointer_as_index %[[K]]
// CHECK: %[[KPTR:.*]] = cq4p_intr.opaque %{{.*}} : !llvm.ptr
// CHECK: llvm.load %[[QPTR]] {{.*}} -> vector<4xf32>
// CHECK: %[[KEY:.*]] = llvm.load %[[KPTR]] {{.*}} -> vector<8xf16>
// CHECK: %[[HALF:.*]] = vector.extract_strided_slice %[[KEY]] {offsets = [0]
// CHECK: %[[WIDE:.*]] = arith.extf %[[HALF]] : vector<4xf16> to vector<4xf32>
// The first 16 dims start the sums with products, the rest add to them.
// CHECK: arith.mulf %{{.*}}, %[[WIDE]] : vector<4xf32>
// CHECK: arith.mulf %{{.*}}, %[[WIDE]] : vector<4xf32>
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>)
// CHECK: llvm.getelementptr %[[KPTR]]
// CHECK: math.fma
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 2, 4, 6] : vector<4xf32>, vector<4xf32>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [1, 3, 5, 7] : vector<4xf32>, vector<4xf32>
// Scores by quad, then head (S[j / 4][g][j % 4]).
// CHECK: %[[SJ:.*]] = arith.muli %[[J]], %{{.*}} : index
// CHECK: vector.store %{{.*}}, %[[S]][%[[SJ]]] : memref<4096xf32>, vector<4xf32>
// CHECK: arith.maximumf %{{.*}} : vector<4xf32>
// The last, partial quad: its lanes past the end are -inf.
// CHECK: %[[TAIL:.*]]:2 = scf.if %{{.*}} -> (vector<4xf32>, vector<4xf32>)
// CHECK: arith.cmpi {{.*}} : vector<4xi32>
// CHECK: arith.select
// CHECK: vector.reduction <maximumf>, %[[TAIL]]#0
// CHECK: vector.reduction <maximumf>, %[[TAIL]]#1
// The exponentials of the group's heads in one loop.
// CHECK: scf.for {{.*}} -> (vector<4xf32>, vector<4xf32>)
// CHECK: vector.load %[[S]]
// CHECK: arith.shli
// CHECK: vector.store %{{.*}}, %[[S]]
// CHECK: vector.load %[[ACC]]
// CHECK: scf.for %[[JV:.*]] = %{{.*}} to %[[WHOLE]] step
// CHECK: %[[WJ:.*]] = arith.muli %[[JV]], %{{.*}} : index
// CHECK: %[[W:.*]] = vector.load %[[S]][%[[WJ]]] : memref<4096xf32>, vector<4xf32>
// CHECK: vector.load %[[V]][%{{.*}}] : memref<?x128xf16>, vector<8xf16>
// CHECK: %[[W0:.*]] = vector.shuffle %[[W]], %[[W]] [0, 0, 0, 0]
// CHECK: math.fma %{{.*}}, %[[W0]], %{{.*}} : vector<4xf32>
// CHECK: vector.store %{{.*}}, %[[ACC]]
// CHECK: arith.divf
// CHECK: vector.store %{{.*}}, %[[OUT]][%[[R]], %{{.*}}] : memref<?x256xf32>, vector<4xf32>
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

// One head per KV head, an fp32 cache: Q K^T one head at a time (four
// accumulators). Whole quads load each 16-value slice of the query, a key
// or a value by one LD1 x4 through pointers carried by the loops (the
// post-indexed steps); the partial quad reads its clamped rows as fp32
// vectors.
// CHECK-LABEL: func.func @single_heads
// CHECK-SAME: %{{[^:]*}}: memref<?x64xf32>, %[[K:[^:]*]]: memref<?x64xf32>, %[[V:[^:]*]]: memref<?x64xf32>
// CHECK-DAG: memref.alloca() : memref<4096xf32>
// CHECK-DAG: memref.alloca() : memref<32xf32>
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (f32, f32)
// The quads' loop carries the 4 key rows' and the query's pointers.
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<4xf32>, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK: cq4p_intr.aarch64.neon.ld1x4 %{{.*}} : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>)>
// Two quads per step, then an odd whole quad, then the partial one.
// CHECK: scf.if
// CHECK: cq4p_intr.aarch64.neon.ld1x4
// CHECK: scf.if
// CHECK: %[[KPTR:.*]] = cq4p_intr.opaque
// CHECK: llvm.load %[[KPTR]] {{.*}} -> vector<4xf32>
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, !llvm.ptr)
// CHECK: cq4p_intr.aarch64.neon.ld1x4
// CHECK: vector.load %[[V]][%{{.*}}] : memref<?x64xf32>, vector<4xf32>
// CHECK-NOT: arith.extf
// CHECK: return
func.func @single_heads(%q: memref<?x64xf32>, %k: memref<?x64xf32>, %v: memref<?x64xf32>,
                        %out: memref<?x64xf32>, %h0: index, %h1: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 {num_heads = 2 : i64, num_kv_heads = 2 : i64,
      head_dim = 32 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x64xf32>, memref<?x64xf32>, memref<?x64xf32>, memref<?x64xf32>
  return
}

// -----

// A head dim that is not a multiple of 16 keeps the shared scalar-softmax
// code.
// CHECK-LABEL: func.func @negative_head_dim_8
// CHECK-NOT: cq4p.attention
// CHECK-NOT: [0, 2, 4, 6]
// CHECK: return
func.func @negative_head_dim_8(%q: memref<?x16xf32>, %k: memref<?x16xf32>, %v: memref<?x16xf32>,
                               %out: memref<?x16xf32>, %h0: index, %h1: index) {
  cq4p.attention %q, %k, %v, %out, %h0, %h1 {num_heads = 2 : i64, num_kv_heads = 2 : i64,
      head_dim = 8 : i64, window = 0 : i64, scale = 0.35 : f32}
      : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>
  return
}
