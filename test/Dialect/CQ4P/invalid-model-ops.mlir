// RUN: cq4p-opt %s -split-input-file -verify-diagnostics

func.func @norm_weight_does_not_divide(%x: tensor<?x256xf32>, %w: tensor<96xf16>) {
  // expected-error @+1 {{expected the weight's length (96) to divide the row width (256)}}
  %y = cq4p.rms_norm %x, %w {epsilon = 1.0e-06 : f32} : tensor<?x256xf32>, tensor<96xf16> -> tensor<?x256xf32>
  return
}

// -----

func.func @norm_result_shape(%x: tensor<?x256xf32>, %w: tensor<256xf16>) {
  // expected-error @+1 {{expected the result ([?, 128]) to have the shape of the input ([?, 256])}}
  %y = cq4p.rms_norm %x, %w {epsilon = 1.0e-06 : f32} : tensor<?x256xf32>, tensor<256xf16> -> tensor<?x128xf32>
  return
}

// -----

func.func @norm_negative_epsilon(%x: tensor<?x256xf32>, %w: tensor<256xf16>) {
  // expected-error @+1 {{expected a finite epsilon >= 0, got -1}}
  %y = cq4p.rms_norm %x, %w {epsilon = -1.0 : f32} : tensor<?x256xf32>, tensor<256xf16> -> tensor<?x256xf32>
  return
}

// -----

func.func @norm_rank(%x: tensor<256xf32>, %w: tensor<256xf16>) {
  // expected-error @+1 {{expected the input to have rank 2 ([M, width]), got rank 1}}
  %y = cq4p.rms_norm %x, %w {epsilon = 1.0e-06 : f32} : tensor<256xf32>, tensor<256xf16> -> tensor<256xf32>
  return
}

// -----

func.func @rope_odd_head_dim(%x: tensor<?x256xf32>, %p: index) {
  // expected-error @+1 {{expected an even, positive head dim, got 63}}
  %y = cq4p.rope %x, %p {head_dim = 63 : i64, theta = 1.0e+04 : f32, scaling = 1.0 : f32} : tensor<?x256xf32>, index -> tensor<?x256xf32>
  return
}

// -----

func.func @rope_head_dim_does_not_divide(%x: tensor<?x200xf32>, %p: index) {
  // expected-error @+1 {{expected the head dim (64) to divide the row width (200)}}
  %y = cq4p.rope %x, %p {head_dim = 64 : i64, theta = 1.0e+04 : f32, scaling = 1.0 : f32} : tensor<?x200xf32>, index -> tensor<?x200xf32>
  return
}

// -----

func.func @rope_theta(%x: tensor<?x256xf32>, %p: index) {
  // expected-error @+1 {{expected finite theta (0) and scaling (1) > 0}}
  %y = cq4p.rope %x, %p {head_dim = 64 : i64, theta = 0.0 : f32, scaling = 1.0 : f32} : tensor<?x256xf32>, index -> tensor<?x256xf32>
  return
}

// -----

func.func @attention_kv_heads(%q: tensor<?x256xf32>, %k: tensor<?x192xf32>, %v: tensor<?x192xf32>, %p: index) {
  // expected-error @+1 {{expected the kv heads (3) to divide the heads (4)}}
  %a = cq4p.cached_attention %q, %k, %v, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 3 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x256xf32>, tensor<?x192xf32>, tensor<?x192xf32>, index -> tensor<?x256xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<?x96xf32>, %k: tensor<?x48xf32>, %v: tensor<?x48xf32>, %p: index) {
  // expected-error @+1 {{expected the head dim (24) to be a multiple of 16}}
  %a = cq4p.cached_attention %q, %k, %v, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 24 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x96xf32>, tensor<?x48xf32>, tensor<?x48xf32>, index -> tensor<?x96xf32>
  return
}

// -----

func.func @attention_negative_layer(%q: tensor<?x256xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %p: index) {
  // expected-error @+1 {{expected a layer >= 0, got -1}}
  %a = cq4p.cached_attention %q, %k, %v, %p {layer = -1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32} : tensor<?x256xf32>, tensor<?x128xf32>, tensor<?x128xf32>, index -> tensor<?x256xf32>
  return
}

// -----

func.func @glu_activation(%g: tensor<?x256xf32>, %u: tensor<?x256xf32>) {
  // expected-error @+2 {{expected ::mlir::cq4p::Activation to be one of: silu, gelu_tanh}}
  // expected-error @+1 {{failed to parse CQ4P_ActivationAttr parameter 'value'}}
  %m = cq4p.glu <relu> %g, %u : tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @glu_shapes(%g: tensor<?x256xf32>, %u: tensor<?x512xf32>) {
  // expected-error @+1 {{expected the up ([?, 512]) to have the shape of the gate ([?, 256])}}
  %m = cq4p.glu <silu> %g, %u : tensor<?x256xf32>, tensor<?x512xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @linear_bias_length(%x: tensor<?x128xf32>, %w: !cq4p.weight<64x128, gs = 128, hadamard, panels>, %b: tensor<32xf16>) {
  // expected-error @+1 {{expected the bias to be [N = 64], got [32]}}
  %y = cq4p.linear %x, %w bias %b : tensor<?x128xf32>, !cq4p.weight<64x128, gs = 128, hadamard, panels>, tensor<32xf16> -> tensor<?x64xf32>
  return
}

// -----

func.func @norm_without_weight_or_chunk(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{expected a chunk attribute without a weight}}
  %y = cq4p.rms_norm %x {epsilon = 1.0e-06 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @norm_chunk_does_not_divide(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{expected the chunk (96) to be positive and divide the row width (256)}}
  %y = cq4p.rms_norm %x {chunk = 96 : i64, epsilon = 1.0e-06 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @norm_chunk_with_weight(%x: tensor<?x256xf32>, %w: tensor<256xf16>) {
  // expected-error @+1 {{expected no chunk attribute with a weight (the weight's length is the chunk)}}
  %y = cq4p.rms_norm %x, %w {chunk = 256 : i64, epsilon = 1.0e-06 : f32} : tensor<?x256xf32>, tensor<256xf16> -> tensor<?x256xf32>
  return
}

// -----

func.func @norm_unit_offset_without_weight(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{expected no unit_offset without a weight}}
  %y = cq4p.rms_norm %x {chunk = 256 : i64, epsilon = 1.0e-06 : f32, unit_offset} : tensor<?x256xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @norm_infinite_epsilon(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{expected a finite epsilon >= 0, got inf}}
  %y = cq4p.rms_norm %x {chunk = 256 : i64, epsilon = 0x7F800000 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @rope_frequency_count(%x: tensor<?x256xf32>, %p: index) {
  // expected-error @+1 {{expected head_dim / 2 = 32 frequencies in inv_freq, got 2}}
  %y = cq4p.rope %x, %p {head_dim = 64 : i64, inv_freq = array<f32: 1.0, 0.5>} : tensor<?x256xf32>, index -> tensor<?x256xf32>
  return
}

// -----

func.func @rope_negative_frequency(%x: tensor<?x8xf32>, %p: index) {
  // expected-error @+1 {{expected finite frequencies >= 0, got -1 at 1}}
  %y = cq4p.rope %x, %p {head_dim = 4 : i64, inv_freq = array<f32: 1.0, -1.0>} : tensor<?x8xf32>, index -> tensor<?x8xf32>
  return
}

// -----

func.func @rope_both_forms(%x: tensor<?x8xf32>, %p: index) {
  // expected-error @+1 {{expected either inv_freq or theta and scaling, not both}}
  %y = cq4p.rope %x, %p {head_dim = 4 : i64, theta = 1.0e+04 : f32, scaling = 1.0 : f32, inv_freq = array<f32: 1.0, 0.5>} : tensor<?x8xf32>, index -> tensor<?x8xf32>
  return
}

// -----

func.func @rope_no_frequencies(%x: tensor<?x8xf32>, %p: index) {
  // expected-error @+1 {{expected theta and scaling, or inv_freq}}
  %y = cq4p.rope %x, %p {head_dim = 4 : i64, theta = 1.0e+04 : f32} : tensor<?x8xf32>, index -> tensor<?x8xf32>
  return
}

// -----

func.func @rope_infinite_theta(%x: tensor<?x8xf32>, %p: index) {
  // expected-error @+1 {{expected finite theta (inf) and scaling (1) > 0}}
  %y = cq4p.rope %x, %p {head_dim = 4 : i64, theta = 0x7F800000 : f32, scaling = 1.0 : f32} : tensor<?x8xf32>, index -> tensor<?x8xf32>
  return
}

// -----

func.func @attention_scale_nan(%q: tensor<?x256xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>, %p: index) {
  // expected-error @+1 {{expected a finite scale, got nan}}
  %a = cq4p.cached_attention %q, %k, %v, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 0x7FC00000 : f32} : tensor<?x256xf32>, tensor<?x64xf32>, tensor<?x64xf32>, index -> tensor<?x256xf32>
  return
}

// -----

func.func @attention_shared_width(%q: tensor<?x256xf32>, %p: index) {
  // expected-error @+1 {{expected q's width (256) to be 512}}
  %a = cq4p.cached_attention %q, %p {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 1.0 : f32} : tensor<?x256xf32>, index -> tensor<?x256xf32>
  return
}

// -----

func.func @columns_offset(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{expected the offset (256) to be a column of the input (0 to 255)}}
  %y = cq4p.columns %x {offset = 256 : i64} : tensor<?x256xf32> -> tensor<?x16xf32>
  return
}

// -----

func.func @columns_rows(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{expected the result's rows (1) to equal the input's (?)}}
  %y = cq4p.columns %x {offset = 0 : i64} : tensor<?x256xf32> -> tensor<1x16xf32>
  return
}

// -----

func.func @scale_both(%x: tensor<?x256xf32>, %s: tensor<1xf16>) {
  // expected-error @+1 {{expected either a factor or a scalar operand}}
  %y = cq4p.scale %x by %s {factor = 2.0 : f32} : tensor<?x256xf32>, tensor<1xf16> -> tensor<?x256xf32>
  return
}

// -----

func.func @scale_scalar_shape(%x: tensor<?x256xf32>, %s: tensor<2xf16>) {
  // expected-error @+1 {{expected the scalar to be a 1-d tensor of 1 elements, got 'tensor<2xf16>'}}
  %y = cq4p.scale %x by %s : tensor<?x256xf32>, tensor<2xf16> -> tensor<?x256xf32>
  return
}

// -----

func.func @scale_infinite(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{expected a finite factor, got inf}}
  %y = cq4p.scale %x {factor = 0x7F800000 : f32} : tensor<?x256xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @softcap_zero(%x: tensor<1x256xf32>) {
  // expected-error @+1 {{expected a finite cap > 0, got 0}}
  %y = cq4p.softcap %x {cap = 0.0 : f32} : tensor<1x256xf32> -> tensor<1x256xf32>
  return
}

// -----

func.func @short_conv_width(%x: tensor<?x300xf32>, %w: tensor<300xf16>, %p: index) {
  // expected-error @+1 {{expected the input's width (300) to be 3 x the result's (B, C and x: 3 x 128 = 384)}}
  %y = cq4p.short_conv %x, %w, %p {layer = 0 : i64} : tensor<?x300xf32>, tensor<300xf16>, index -> tensor<?x128xf32>
  return
}

// -----

func.func @short_conv_weight(%x: tensor<?x384xf32>, %w: tensor<200xf16>, %p: index) {
  // expected-error @+1 {{expected the weight to be [H x L] = [128 x L] elements with 1 <= L <= 16, got 'tensor<200xf16>'}}
  %y = cq4p.short_conv %x, %w, %p {layer = 0 : i64} : tensor<?x384xf32>, tensor<200xf16>, index -> tensor<?x128xf32>
  return
}

// -----

func.func @short_conv_rows(%x: tensor<?x384xf32>, %w: tensor<384xf16>, %p: index) {
  // expected-error @+1 {{expected the result's rows (1) to equal the input's (?)}}
  %y = cq4p.short_conv %x, %w, %p {layer = 0 : i64} : tensor<?x384xf32>, tensor<384xf16>, index -> tensor<1x128xf32>
  return
}
