// RUN: cq4p-opt %s -cq4p-lower-model=prefill-chunk=8 | FileCheck %s
// RUN: cq4p-opt %s -cq4p-lower-model=prefill-chunk=8 | FileCheck %s --check-prefix=KERNEL
// RUN: cq4p-opt %s -cq4p-lower-model="prefill-chunk=8 kv-cache=f16" | FileCheck %s --check-prefix=F16
// RUN: not cq4p-opt %s -cq4p-lower-model="kv-cache=bf16" 2>&1 | FileCheck %s --check-prefix=BAD

// RUN: cq4p-opt %s -cq4p-lower-model="prefill-chunk=8 fuse-dense-mlp" | FileCheck %s --check-prefix=FUSED

// RUN: cq4p-opt %s -cq4p-lower-model="prefill-chunk=8 gate-in-transform=false" | FileCheck %s --check-prefix=PASS

// gate-in-transform=false: the gating as its own pass over rows, then the
// ungated transform reads its row.
// PASS-LABEL: cq4p.step @decode
// PASS: cq4p.dispatch @cq4p_glu_silu_256 <rows> {{.*}} pointers [{{.*}}, #cq4p.place<workspace, [[M:(offset = [0-9]+, )?]]row_bytes = 1024>] scalars [rows]
// PASS-NEXT: cq4p.dispatch @cq4p_quantize_256_gs128_hadamard <range> work [0, 2] pointers [#cq4p.place<binding, index = 9>, #cq4p.place<workspace, [[M]]row_bytes = 1024>,
// PASS-NOT: cq4p_quantize_glu

// BAD: for the --kv-cache option: Cannot find option named 'bf16'!

// With fuse-dense-mlp, the gate and up projections and their gating are one
// dispatch over the super-blocks, after the one shared activation transform.
// FUSED-LABEL: cq4p.step @decode
// FUSED: cq4p.dispatch @cq4p_gemv_residual_128x128_gs128
// FUSED-NEXT: cq4p.dispatch @cq4p_rms_norm_128_d128_f16
// FUSED-NEXT: cq4p.dispatch @cq4p_quantize_128_gs128_hadamard {{.*}} pointers [#cq4p.place<binding, index = 7>, {{.*}}, #cq4p.place<workspace, offset = [[A:[0-9]+]], row_bytes = 128>, #cq4p.place<workspace, offset = [[S:[0-9]+]], row_bytes = 4>]
// FUSED-NEXT: cq4p.dispatch @cq4p_mlp_gemv_256x128_gs128_silu <range> work [0, 4] pointers [#cq4p.place<binding, index = 7>, #cq4p.place<binding, index = 8>, #cq4p.place<workspace, offset = [[A]], row_bytes = 128>, #cq4p.place<workspace, offset = [[S]], row_bytes = 4>, {{.*}}] scalars [rows, begin, end]
// FUSED-NEXT: cq4p.dispatch @cq4p_quantize_256_gs128_hadamard
// FUSED-LABEL: cq4p.step @prefill
// FUSED: cq4p.dispatch @cq4p_mlp_gemm_256x128_gs128_silu
// FUSED-NOT: cq4p_glu

// An fp16 KV cache: the rotary embedding writes the keys as fp16; the
// values are computed into the workspace and converted into the cache.
// F16: cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f16,
// F16-LABEL: cq4p.step @decode
// F16: cq4p.dispatch @cq4p_gemv_64x128_gs128 {{.*}} pointers [#cq4p.place<binding, index = 4>, {{.*}}, #cq4p.place<workspace, offset = [[V:[0-9]+]], row_bytes = 256>]
// F16-NEXT: cq4p.dispatch @cq4p_convert_64_f16 <rows> {{.*}} pointers [#cq4p.place<workspace, offset = [[V]], row_bytes = 256>, #cq4p.place<values, cache_offset = 128, row_bytes = 128, at_position>] scalars [rows]
// F16: cq4p.dispatch @cq4p_rope_64_d64_f{{[0-9a-f]+}}_f16 {{.*}} pointers [{{.*}}, #cq4p.place<keys, row_bytes = 128, at_position>]
// F16-NEXT: cq4p.dispatch @cq4p_cached_attention_h2_kv1_d64_w0_s{{[0-9]+}}_f16 {{.*}} pointers [{{.*}}, #cq4p.place<keys, row_bytes = 128>, #cq4p.place<values, cache_offset = 128, row_bytes = 128>

// One llama-style layer. The decode step runs GEMVs, the prefill step
// GEMMs and hands a single row to @decode; q, k and v (and gate, up) share
// one activation transform; keys and values go straight into the KV cache;
// the residual adds run in the o and down projections' epilogues; the last
// row feeds the final norm and the lm_head, which writes the
// logits; the graph function is gone.

// The descriptor's facts: bindings in argument order, the workspace.
// CHECK: cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f32, workspace_bytes = {{[0-9]+}}, kv_position_bytes = 512, kv_width = 64, state_bytes = 0,
// CHECK-SAME: bindings = ["model.embed_tokens.weight": cq4<256x128, gs = 128, orthogonal>, "l0.ln": fp16<128>, "q": cq4<128x128, gs = 128>,
// CHECK-NOT: func.func @forward
// CHECK-LABEL: cq4p.step @decode attributes {max_rows = 1 : i64} {
// CHECK-NEXT: cq4p.dispatch @cq4p_embedding_256x128 <rows> work [1, 0] pointers [#cq4p.place<binding>, #cq4p.place<ids, row_bytes = 8>, #cq4p.place<workspace, row_bytes = 512>] scalars [rows]
// CHECK-NEXT: cq4p.dispatch @cq4p_rms_norm_128_d128_f16_e{{[0-9]+}} {{.*}} pointers [#cq4p.place<workspace, row_bytes = 512>, #cq4p.place<binding, index = 1>, #cq4p.place<workspace, offset = [[X:[0-9]+]], row_bytes = 512>]
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_128_gs128_hadamard <range> work [0, 1] pointers [#cq4p.place<binding, index = 2>, #cq4p.place<workspace, offset = [[X]], row_bytes = 512>, #cq4p.place<workspace, offset = [[A:[0-9]+]], row_bytes = 128>, #cq4p.place<workspace, offset = [[S:[0-9]+]], row_bytes = 4>] scalars [rows, begin, end]
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_128x128_gs128 <range> work [0, 2] pointers [#cq4p.place<binding, index = 2>, #cq4p.place<workspace, offset = [[A]], row_bytes = 128>, #cq4p.place<workspace, offset = [[S]], row_bytes = 4>, #cq4p.place<workspace, offset = [[Q:[0-9]+]], row_bytes = 512>] scalars [rows, begin, end]
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_64x128_gs128 {{.*}} pointers [#cq4p.place<binding, index = 3>, #cq4p.place<workspace, offset = [[A]]{{.*}}, #cq4p.place<workspace, offset = [[K:[0-9]+]], row_bytes = 256>]
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_64x128_gs128 {{.*}} pointers [#cq4p.place<binding, index = 4>, #cq4p.place<workspace, offset = [[A]]{{.*}}, #cq4p.place<values, cache_offset = 256, row_bytes = 256, at_position>]
// CHECK-NEXT: cq4p.dispatch @cq4p_rope_128_d64_f{{[0-9a-f]+}} <rows> {{.*}} pointers [#cq4p.place<workspace, offset = [[Q]], row_bytes = 512>, #cq4p.place<workspace, offset = [[Q]], row_bytes = 512>] scalars [rows, position]
// CHECK-NEXT: cq4p.dispatch @cq4p_rope_64_d64_f{{[0-9a-f]+}} {{.*}} pointers [#cq4p.place<workspace, offset = [[K]], row_bytes = 256>, #cq4p.place<keys, row_bytes = 256, at_position>]
// CHECK-NEXT: cq4p.dispatch @cq4p_cached_attention_h2_kv1_d64_w0_s{{[0-9]+}} <range> work [0, 2] pointers [#cq4p.place<workspace, offset = [[Q]], row_bytes = 512>, #cq4p.place<keys, row_bytes = 256>, #cq4p.place<values, cache_offset = 256, row_bytes = 256>, #cq4p.place<workspace, offset = [[Q]], row_bytes = 512>] scalars [rows, position, context, begin, end]{{$}}
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_128_gs128_hadamard
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_residual_128x128_gs128
// CHECK-NEXT: cq4p.dispatch @cq4p_rms_norm_128_d128_f16
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_128_gs128_hadamard
// The gating is formed by the down projection's activation transform from
// the gate and up rows (no cq4p_glu pass, no gated row in the workspace).
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_256x128_gs128 {{.*}} pointers [#cq4p.place<binding, index = 7>, {{.*}}, #cq4p.place<workspace, [[G:(offset = [0-9]+, )?]]row_bytes = 1024>]
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_256x128_gs128 {{.*}} pointers [#cq4p.place<binding, index = 8>, {{.*}}, #cq4p.place<workspace, [[U:(offset = [0-9]+, )?]]row_bytes = 1024>]
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_glu_silu_256_gs128_hadamard <range> work [0, 2] pointers [#cq4p.place<binding, index = 9>, #cq4p.place<workspace, [[G]]row_bytes = 1024>, #cq4p.place<workspace, [[U]]row_bytes = 1024>, #cq4p.place<workspace, [[A2:(offset = [0-9]+, )?]]row_bytes = 256>, #cq4p.place<workspace, [[S2:(offset = [0-9]+, )?]]row_bytes = 8>] scalars [rows, begin, end]{{$}}
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_residual_128x256_gs128 {{.*}} pointers [#cq4p.place<binding, index = 9>, #cq4p.place<workspace, [[A2]]row_bytes = 256>, #cq4p.place<workspace, [[S2]]row_bytes = 8>,
// CHECK-NEXT: cq4p.dispatch @cq4p_rms_norm_128_d128_f16_e{{[0-9]+}} <rows> work [0, 1] pointers [#cq4p.place<workspace, offset = {{[0-9]+}}, row_bytes = 512, last_row>, #cq4p.place<binding, index = 10>, {{.*}}] scalars [rows] {single_row}
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_128_orthogonal
// CHECK-NEXT: cq4p.dispatch @cq4p_gemv_256x128_gs128 {{.*}} pointers [#cq4p.place<binding, index = 11>, {{.*}}, #cq4p.place<logits, row_bytes = 1024>] scalars [rows, begin, end] {single_row}
// CHECK-NEXT: {{^  \}$}}
// CHECK-LABEL: cq4p.step @prefill attributes {max_rows = 8 : i64, single_row = @decode} {
// The embedding's rows in ranges of 64 (SME2's outer-product leaf's block).
// CHECK-NEXT: cq4p.dispatch @cq4p_embedding_256x128 <rows> {{.*}} scalars [rows] {grain = 64 : i64}
// CHECK-NEXT: cq4p.dispatch @cq4p_rms_norm_128_d128_f16
// CHECK-NEXT: cq4p.dispatch @cq4p_quantize_128_gs128_hadamard
// CHECK-NEXT: cq4p.dispatch @cq4p_gemm_128x128_gs128
// CHECK: cq4p.dispatch @cq4p_quantize_glu_silu_256_gs128_hadamard <range> work [0, 2] {{.*}} scalars [rows, begin, end]{{$}}
// CHECK-NEXT: cq4p.dispatch @cq4p_gemm_residual_128x256_gs128
// CHECK: cq4p.dispatch @cq4p_gemv_256x128_gs128 {{.*}}#cq4p.place<logits
// CHECK-NEXT: {{^  \}$}}
// CHECK-NOT: cq4p_glu_
// The fused transform's kernel: gate and up rows, the weight's regions.
// KERNEL: func.func @cq4p_quantize_glu_silu_256_gs128_hadamard(%{{.*}}: memref<?x256xf32>, %{{.*}}: memref<?x256xf32>, %{{.*}}: memref<256xf16>, %{{.*}}: memref<128xi8>, %{{.*}}: memref<128xi8>, %{{.*}}: memref<128xi32>, %{{.*}}: memref<?x256xi8>, %{{.*}}: memref<?x2xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// KERNEL-SAME: cq4p.kernel = #cq4p.kernel<quantize_glu
// KERNEL-NEXT: cq4p.quantize_activations %{{.*}} gated by %{{.*}} : memref<?x256xf32>, {{.*}} {gating = #cq4p.activation<silu>, group_size = 128 : i64}

module attributes {cq4p.model = {architecture = "llama", digest = "abc", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64}} {
  func.func @forward(%ids: tensor<?xi64>, %pos: index,
      %embed: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "model.embed_tokens.weight"},
      %ln: tensor<128xf16> {cq4p.tensor = "l0.ln"},
      %wq: !cq4p.weight<128x128, gs = 128, hadamard, panels> {cq4p.tensor = "q", cq4p.transform = "t"},
      %wk: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "k", cq4p.transform = "t"},
      %wv: !cq4p.weight<64x128, gs = 128, hadamard, panels> {cq4p.tensor = "v", cq4p.transform = "t"},
      %wo: !cq4p.weight<128x128, gs = 128, hadamard, panels> {cq4p.tensor = "o", cq4p.transform = "t"},
      %ln2: tensor<128xf16> {cq4p.tensor = "l0.ln2"},
      %wg: !cq4p.weight<256x128, gs = 128, hadamard, panels> {cq4p.tensor = "g", cq4p.transform = "t"},
      %wu: !cq4p.weight<256x128, gs = 128, hadamard, panels> {cq4p.tensor = "u", cq4p.transform = "t"},
      %wd: !cq4p.weight<128x256, gs = 128, hadamard, panels> {cq4p.tensor = "d", cq4p.transform = "t2"},
      %fn: tensor<128xf16> {cq4p.tensor = "norm"},
      %head: !cq4p.weight<256x128, gs = 128, orthogonal, panels> {cq4p.tensor = "lm_head"}) -> tensor<1x256xf32> {
    %h0 = cq4p.embedding %ids, %embed : tensor<?xi64>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<?x128xf32>
    %x = cq4p.rms_norm %h0, %ln {epsilon = 1.0e-06 : f32} : tensor<?x128xf32>, tensor<128xf16> -> tensor<?x128xf32>
    %q = cq4p.linear %x, %wq : tensor<?x128xf32>, !cq4p.weight<128x128, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %k = cq4p.linear %x, %wk : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %v = cq4p.linear %x, %wv : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels> -> tensor<?x64xf32>
    %qr = cq4p.rope %q, %pos {head_dim = 64 : i64, theta = 1.0e+04 : f32, scaling = 1.0 : f32} : tensor<?x128xf32>, index -> tensor<?x128xf32>
    %kr = cq4p.rope %k, %pos {head_dim = 64 : i64, theta = 1.0e+04 : f32, scaling = 1.0 : f32} : tensor<?x64xf32>, index -> tensor<?x64xf32>
    %a = cq4p.cached_attention %qr, %kr, %v, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x128xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x128xf32>
    %o = cq4p.linear %a, %wo : tensor<?x128xf32>, !cq4p.weight<128x128, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %h1 = arith.addf %h0, %o : tensor<?x128xf32>
    %x2 = cq4p.rms_norm %h1, %ln2 {epsilon = 1.0e-06 : f32} : tensor<?x128xf32>, tensor<128xf16> -> tensor<?x128xf32>
    %g = cq4p.linear %x2, %wg : tensor<?x128xf32>, !cq4p.weight<256x128, gs = 128, hadamard, panels> -> tensor<?x256xf32>
    %u = cq4p.linear %x2, %wu : tensor<?x128xf32>, !cq4p.weight<256x128, gs = 128, hadamard, panels> -> tensor<?x256xf32>
    %m = cq4p.glu <silu> %g, %u : tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x256xf32>
    %d = cq4p.linear %m, %wd : tensor<?x256xf32>, !cq4p.weight<128x256, gs = 128, hadamard, panels> -> tensor<?x128xf32>
    %h2 = arith.addf %h1, %d : tensor<?x128xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = tensor.dim %h2, %c0 : tensor<?x128xf32>
    %last = arith.subi %n, %c1 : index
    %t = tensor.extract_slice %h2[%last, 0] [1, 128] [1, 1] : tensor<?x128xf32> to tensor<1x128xf32>
    %f = cq4p.rms_norm %t, %fn {epsilon = 1.0e-06 : f32} : tensor<1x128xf32>, tensor<128xf16> -> tensor<1x128xf32>
    %logits = cq4p.linear %f, %head : tensor<1x128xf32>, !cq4p.weight<256x128, gs = 128, orthogonal, panels> -> tensor<1x256xf32>
    return %logits : tensor<1x256xf32>
  }
}
