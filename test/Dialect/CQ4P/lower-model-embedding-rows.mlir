// RUN: cq4p-opt %s -cq4p-lower-model=prefill-chunk=8 | FileCheck %s
// RUN: cq4p-opt %s -cq4p-host-pipeline=prefill-chunk=8 | FileCheck %s --check-prefix=HOST
// RUN: cq4p-opt %s -cq4p-sme2-pipeline=prefill-chunk=8 | FileCheck %s --check-prefix=SME2

// A table stored as 3 rows per id (Gemma 4's per-layer embeddings: rows of
// one layer each): one dispatch over the step's rows, each writing a row of
// 3 x 128 floats, through a model kernel that lists the ids' table rows
// and runs the one row decoder over the output seen as [rows * 3, 128].
// CHECK-LABEL: cq4p.step @decode
// CHECK: cq4p.dispatch @cq4p_embedding_768x128_r3 <rows> work [1, 0] pointers [#cq4p.place<binding, index = 1>, #cq4p.place<ids, row_bytes = 8>, #cq4p.place<workspace, offset = 512, row_bytes = 1536>] scalars [rows] {grain = 64 : i64}
// CHECK: func.func @cq4p_embedding_768x128_r3(%{{.*}}: memref<12x1x32x128xi8>, %{{.*}}: memref<768x1xf16>, %{{.*}}: memref<16xf16>, %{{.*}}: memref<128x128xf16>, %{{.*}}: memref<128xf16>, %[[IDS:.*]]: memref<?xi64>, %[[OUT:.*]]: memref<?x384xf32>, %[[ROWS:.*]]: index)
// CHECK-SAME: cq4p.kernel = #cq4p.kernel<embedding_rows
// CHECK: %[[TOTAL:.*]] = arith.muli %[[ROWS]], %{{.*}} : index
// CHECK: %[[TABLE:.*]] = memref.alloca(%[[TOTAL]]) : memref<?xi64>
// CHECK: scf.for
// CHECK: memref.load %[[IDS]]
// CHECK: arith.muli %{{.*}} : i64
// CHECK: scf.for
// CHECK: memref.store %{{.*}}, %[[TABLE]]
// CHECK: %[[FLAT:.*]] = memref.reinterpret_cast %[[OUT]] to offset: [0], sizes: [%[[TOTAL]], 128], strides: [128, 1] : memref<?x384xf32> to memref<?x128xf32>
// CHECK: cq4p.decode_embedding {{.*}}, %[[TABLE]], %[[FLAT]]
// CHECK-LABEL: cq4p.step @prefill
// CHECK: cq4p.dispatch @cq4p_embedding_768x128_r3 <rows> work [1, 0] pointers [#cq4p.place<binding, index = 1>, #cq4p.place<ids, row_bytes = 8>, #cq4p.place<workspace, offset = 4096, row_bytes = 1536>] scalars [rows] {grain = 64 : i64}

// The pipelines compile it into a model kernel (internal, called by the
// steps' tasks); on SME2 its rows go through the row decoder's streaming
// leaves (a decoded token's 3 rows through the FMLAL one, 32 or more
// rows of a chunk through the outer-product one).
// HOST: llvm.func internal @cq4p_embedding_768x128_r3(
// SME2-DAG: llvm.func internal @cq4p_embedding_768x128_r3(
// SME2-DAG: llvm.func internal @cq4p_embedding_768x128_r3_sme_rotation(
// SME2-DAG: llvm.func internal @cq4p_embedding_768x128_r3_sme_embedding(

module attributes {cq4p.model = {architecture = "gemma4", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %ple: !cq4p.weight<768x128, gs = 128, orthogonal, panels> {cq4p.tensor = "p"}) -> tensor<1x256xf32> {
    %h = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %p = cq4p.embedding %ids, %ple {rows_per_id = 3 : i64} : tensor<?xi64>, !cq4p.weight<768x128, gs = 128, orthogonal, panels> -> tensor<?x384xf32>
    %q = cq4p.columns %p {offset = 256 : i64} : tensor<?x384xf32> -> tensor<?x128xf32>
    %k = cq4p.columns %p {offset = 0 : i64} : tensor<?x384xf32> -> tensor<?x64xf32>
    %v = cq4p.columns %p {offset = 64 : i64} : tensor<?x384xf32> -> tensor<?x64xf32>
    %a = cq4p.cached_attention %q, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 1.0 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %s = arith.addf %h, %a : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %s, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %s[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %embed : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %l : tensor<1x256xf32>
  }
}
