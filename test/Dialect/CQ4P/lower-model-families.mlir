// RUN: cq4p-opt %s -cq4p-lower-model=prefill-chunk=8 | FileCheck %s

// The families' ops in one graph: a padded K (columns), a biased
// projection, LFM2's short convolution and its state, an attention that
// writes layer 0's cache and one that reads it (Gemma 4's KV sharing), a
// bound layer scalar and soft-capped logits.

// The cache holds layer 0 alone (keys at 0, values at 256 bytes per
// position); the state the convolution's 2 rows of 128 floats.
// CHECK: cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = {{[0-9]+}}, kv_position_bytes = 512, kv_width = 64, state_bytes = 1024,
// CHECK-LABEL: cq4p.step @decode
// CHECK: cq4p.dispatch @cq4p_columns_128_o0_w96 <rows> work [1, 0] pointers [#cq4p.place<workspace, row_bytes = 512>, #cq4p.place<workspace, offset = [[H:[0-9]+]], row_bytes = 384>] scalars [rows]
// CHECK-NEXT: cq4p.dispatch @cq4p_columns_96_o0_w128 <rows> work [1, 0] pointers [#cq4p.place<workspace, offset = [[H]], row_bytes = 384>, #cq4p.place<workspace, {{.*}}row_bytes = 512>] scalars [rows]
// CHECK: cq4p.dispatch @cq4p_gemv_bias_384x128_gs128_f16 <range> work [0, 6] pointers [#cq4p.place<binding, index = 1>, {{.*}}, #cq4p.place<binding, index = 2>, {{.*}}] scalars [rows, begin, end]
// CHECK: cq4p.dispatch @cq4p_short_conv_128_l3_f16 <range> work [0, 8] pointers [{{.*}}, #cq4p.place<binding, index = 3>, #cq4p.place<state>, {{.*}}] scalars [rows, position, begin, end]
// CHECK: cq4p.dispatch @cq4p_cached_attention_h2_kv1_d64_w0_s{{[0-9]+}} <range> work [0, 2] pointers [{{.*}}, #cq4p.place<keys, row_bytes = 256>, #cq4p.place<values, cache_offset = 256, row_bytes = 256>
// The shared attention reads the same buffers, with its own window.
// CHECK: cq4p.dispatch @cq4p_cached_attention_h2_kv1_d64_w4_s{{[0-9]+}} <range> work [0, 2] pointers [{{.*}}, #cq4p.place<keys, row_bytes = 256>, #cq4p.place<values, cache_offset = 256, row_bytes = 256>
// CHECK: cq4p.dispatch @cq4p_scale_by_128_f16 <rows> work [1, 0] pointers [{{.*}}, #cq4p.place<binding, index = 4>, {{.*}}]
// CHECK: cq4p.dispatch @cq4p_gemv_256x128_gs128 <range> work [0, 4] pointers [{{.*}}, #cq4p.place<logits, row_bytes = 1024>] scalars [rows, begin, end] {single_row}
// CHECK-NEXT: cq4p.dispatch @cq4p_softcap_256_c{{[0-9]+}} <rows> work [0, 1] pointers [#cq4p.place<logits, row_bytes = 1024>, #cq4p.place<logits, row_bytes = 1024>] scalars [rows] {single_row}

module attributes {cq4p.model = {architecture = "test", digest = "d", vocab = 256 : i64, hidden = 128 : i64, layers = 3 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "e"},
      %win: !cq4p.weight<384x128, gs = 128, hadamard, panels> {cq4p.tensor = "in"},
      %bias: tensor<384xf16> {cq4p.tensor = "bias"},
      %conv: tensor<384xf16> {cq4p.tensor = "conv"},
      %scalar: tensor<1xf16> {cq4p.tensor = "scalar"},
      %head: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "h"}) -> tensor<1x256xf32> {
    %e = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %h = cq4p.columns %e {offset = 0 : i64} : tensor<?x128xf32> -> tensor<?x96xf32>
    %p = cq4p.columns %h {offset = 0 : i64} : tensor<?x96xf32> -> tensor<?x128xf32>
    %bcx = cq4p.linear %p, %win bias %bias : tensor<?x128xf32>, !cq4p.weight<384x128, gs = 128, hadamard, panels>, tensor<384xf16> -> tensor<?x384xf32>
    %y = cq4p.short_conv %bcx, %conv, %pos {layer = 1 : i64} : tensor<?x384xf32>, tensor<384xf16>, index -> tensor<?x128xf32>
    %k = cq4p.columns %bcx {offset = 128 : i64} : tensor<?x384xf32> -> tensor<?x64xf32>
    %v = cq4p.columns %bcx {offset = 256 : i64} : tensor<?x384xf32> -> tensor<?x64xf32>
    %a = cq4p.cached_attention %y, %k, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 1.0 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %b = cq4p.cached_attention %a, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 4 : i64, scale = 1.0 : f32} : tensor<?x128xf32>, index -> tensor<?x128xf32>
    %s = cq4p.scale %b by %scalar : tensor<?x128xf32>, tensor<1xf16> -> tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %s, %c0 : tensor<?x128xf32>
    %last = arith.subi %rows, %c1 : index
    %t = tensor.extract_slice %s[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %l = cq4p.linear %t, %head : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    %c = cq4p.softcap %l {cap = 30.0 : f32} : tensor<1x256xf32> -> tensor<1x256xf32>
    return %c : tensor<1x256xf32>
  }
}
