// RUN: cq4p-opt %s -split-input-file -cq4p-lower-model=prefill-chunk=8 | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -cq4p-lower-model=prefill-chunk=8 | FileCheck %s --check-prefix=KERNEL

// A residual add after a linear runs in the matmul's epilogue: one
// dispatch reads the residual's slot and writes the sum to a new one; the
// add's own dispatch is gone.

// CHECK-LABEL: cq4p.step @decode
// CHECK: cq4p.dispatch @cq4p_embedding_256x128 {{.*}} pointers [{{.*}}, #cq4p.place<workspace, row_bytes = 512>] scalars [rows]
// CHECK: cq4p.dispatch @cq4p_cached_attention_h2_kv1_d64_w0_s{{[0-9]+}}
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_128_gs128_hadamard
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_residual_128x128_gs128 <range> work [0, 2] pointers [#cq4p.place<binding, index = 3>, #cq4p.place<workspace, offset = {{[0-9]+}}, row_bytes = 128>, #cq4p.place<workspace, offset = {{[0-9]+}}, row_bytes = 4>, #cq4p.place<workspace, row_bytes = 512>, #cq4p.place<workspace, offset = [[Y:[0-9]+]], row_bytes = 512>] scalars [rows, begin, end]
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_128_orthogonal {{.*}} pointers [#cq4p.place<binding, index = 4>, #cq4p.place<workspace, offset = [[Y]], row_bytes = 512, last_row>
// CHECK-LABEL: cq4p.step @prefill
// CHECK: cq4p.dispatch @cq4p_gemm_residual_128x128_gs128 <range> work [0, 2]
// CHECK-NOT: cq4p_add_128

// The kernel: the matmul writes y over the range's super-blocks, then the
// epilogue adds the residual to those channels.
// KERNEL-LABEL: func.func @cq4p_gemv_residual_128x128_gs128(
// KERNEL-SAME: %[[RES:[a-z0-9]+]]: memref<1x128xf32>, %[[Y:[a-z0-9]+]]: memref<1x128xf32>, %{{.*}}: index, %[[B:[a-z0-9]+]]: index, %[[E:[a-z0-9]+]]: index)
// KERNEL-SAME: cq4p.kernel = #cq4p.kernel<matmul_residual
// KERNEL: cq4p.panel_matmul {{.*}}, %[[Y]], %[[B]], %[[E]]
// KERNEL: scf.for
// KERNEL: scf.for
// KERNEL-NEXT: %[[R:.+]] = vector.load %[[RES]]
// KERNEL-NEXT: %[[P:.+]] = vector.load %[[Y]]
// KERNEL-NEXT: %[[S:.+]] = arith.addf %[[R]], %[[P]] : vector<16xf32>
// KERNEL-NEXT: vector.store %[[S]], %[[Y]]

module attributes {cq4p.model = {architecture = "test", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %wk: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "k", cq4p.transform = "t"},
      %wv: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "v", cq4p.transform = "t"},
      %wo: !cq4p.weight<128x128, gs = 128, hadamard, panels> {cq4p.tensor = "o", cq4p.transform = "t"},
      %head: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "h"}) -> tensor<1x256xf32> {
    %h0 = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %k = cq4p.linear %h0, %wk : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %v = cq4p.linear %h0, %wv : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %a = cq4p.cached_attention %h0, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %o = cq4p.linear %a, %wo : tensor<?x128xf32>, !cq4p.weight<128x128, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %h1 = arith.addf %h0, %o : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h1, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %h1[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %logits = cq4p.linear %t, %head : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %logits : tensor<1x256xf32>
  }
}

// -----

// A linear whose result is also read elsewhere keeps its separate adds.

// CHECK-LABEL: cq4p.step @decode
// CHECK: cq4p.dispatch @cq4p_gemv_128x128_gs128
// CHECK-NEXT: cq4p.dispatch @cq4p_add_128
// CHECK-NEXT: cq4p.dispatch @cq4p_add_128
// CHECK-NOT: residual

module attributes {cq4p.model = {architecture = "test", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %wk: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "k", cq4p.transform = "t"},
      %wv: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "v", cq4p.transform = "t"},
      %wo: !cq4p.weight<128x128, gs = 128, hadamard, panels> {cq4p.tensor = "o", cq4p.transform = "t"},
      %head: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "h"}) -> tensor<1x256xf32> {
    %h0 = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %k = cq4p.linear %h0, %wk : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %v = cq4p.linear %h0, %wv : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %a = cq4p.cached_attention %h0, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %o = cq4p.linear %a, %wo : tensor<?x128xf32>, !cq4p.weight<128x128, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %h1 = arith.addf %h0, %o : tensor<?x128xf32>
    %h2 = arith.addf %h1, %o : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h2, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %h2[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %logits = cq4p.linear %t, %head : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %logits : tensor<1x256xf32>
  }
}

// -----

// A residual computed after the linear: the matmul's epilogue cannot read
// it, so the add stays a dispatch of its own.

// CHECK-LABEL: cq4p.step @decode
// CHECK: cq4p.dispatch @cq4p_gemv_128x128_gs128
// CHECK-NEXT: cq4p.dispatch @cq4p_add_128
// CHECK-NEXT: cq4p.dispatch @cq4p_add_128
// CHECK-NOT: residual

module attributes {cq4p.model = {architecture = "test", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %wk: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "k", cq4p.transform = "t"},
      %wv: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "v", cq4p.transform = "t"},
      %wo: !cq4p.weight<128x128, gs = 128, hadamard, panels> {cq4p.tensor = "o", cq4p.transform = "t"},
      %head: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "h"}) -> tensor<1x256xf32> {
    %h0 = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %k = cq4p.linear %h0, %wk : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %v = cq4p.linear %h0, %wv : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %a = cq4p.cached_attention %h0, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %o = cq4p.linear %a, %wo : tensor<?x128xf32>, !cq4p.weight<128x128, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %r = arith.addf %h0, %a : tensor<?x128xf32>
    %h1 = arith.addf %r, %o : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h1, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %h1[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %logits = cq4p.linear %t, %head : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %logits : tensor<1x256xf32>
  }
}
