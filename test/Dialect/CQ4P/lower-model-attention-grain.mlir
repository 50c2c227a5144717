// RUN: cq4p-opt %s -cq4p-lower-model=prefill-chunk=8 | FileCheck %s

// Eight KV heads of two query heads each: attention's ranges hold whole
// groups (a grain of 2 heads) in both steps, so that a group's heads walk
// the cache together however many threads share the call. The model of
// lower-model.mlir, with one KV head, keeps heads as the unit.

// CHECK-LABEL: cq4p.step @decode
// CHECK: cq4p.dispatch @cq4p_cached_attention_h16_kv8_d16_w0_s{{[0-9]+}} <range> work [0, 16] {{.*}} scalars [rows, position, context, begin, end] {grain = 2 : i64}
// CHECK-LABEL: cq4p.step @prefill
// CHECK: cq4p.dispatch @cq4p_cached_attention_h16_kv8_d16_w0_s{{[0-9]+}} <range> work [0, 16] {{.*}} scalars [rows, position, context, begin, end] {grain = 2 : i64}

module attributes {cq4p.model = {architecture = "llama", digest = "abc", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 8 : i64, head_dim = 16 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "model.embed_tokens.weight"},
      %ln: tensor<128xf16> {cq4p.tensor = "l0.ln"},
      %wq: !cq4p.weight<256x128, gs = 128, hadamard, panels> {cq4p.tensor = "q", cq4p.transform = "t"},
      %wk: !cq4p.weight<128x128, gs = 128, hadamard, panels> {cq4p.tensor = "k", cq4p.transform = "t"},
      %wv: !cq4p.weight<128x128, gs = 128, hadamard, panels> {cq4p.tensor = "v", cq4p.transform = "t"},
      %wo: !cq4p.weight<128x256, gs = 128, hadamard, panels> {cq4p.tensor = "o", cq4p.transform = "t2"},
      %fn: tensor<128xf16> {cq4p.tensor = "norm"},
      %head: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "lm_head"}) -> tensor<1x256xf32> {
    %h0 = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %x = cq4p.rms_norm %h0, %ln {epsilon = 1.0e-06 : f32} : tensor<?x128xf32>, tensor<128xf16> -> tensor<?x128xf32>
    %q = cq4p.linear %x, %wq : tensor<?x128xf32>, !cq4p.weight<256x128, gs = 128, hadamard, panels> -> tensor<?x256xf32>
    %k = cq4p.linear %x, %wk : tensor<?x128xf32>, !cq4p.weight<128x128, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %v = cq4p.linear %x, %wv : tensor<?x128xf32>, !cq4p.weight<128x128, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %a = cq4p.cached_attention %q, %k, %v, %pos {layer = 0 : i64, num_heads = 16 : i64, num_kv_heads = 8 : i64, head_dim = 16 : i64, window = 0 : i64, scale = 0.25 : f32} : tensor<?x256xf32>, tensor<?x128xf32>, tensor<?x128xf32>, index -> tensor<?x256xf32>
    %o = cq4p.linear %a, %wo : tensor<?x256xf32>, !cq4p.weight<128x256, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %h1 = arith.addf %h0, %o : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h1, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %h1[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %f = cq4p.rms_norm %t, %fn {epsilon = 1.0e-06 : f32} : tensor<1x128xf32>, tensor<128xf16> -> tensor<1x128xf32>
    %logits = cq4p.linear %f, %head : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %logits : tensor<1x256xf32>
  }
}
