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
  // expected-error @+1 {{expected epsilon >= 0, got -1}}
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
  // expected-error @+1 {{expected theta (0.000000e+00) and scaling (1.000000e+00) > 0}}
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
  // expected-error @+1 {{expected the activation 'silu' or 'gelu_tanh', got 'relu'}}
  %m = cq4p.glu %g, %u {activation = "relu"} : tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x256xf32>
  return
}

// -----

func.func @glu_shapes(%g: tensor<?x256xf32>, %u: tensor<?x512xf32>) {
  // expected-error @+1 {{expected the up ([?, 512]) to have the shape of the gate ([?, 256])}}
  %m = cq4p.glu %g, %u {activation = "silu"} : tensor<?x256xf32>, tensor<?x512xf32> -> tensor<?x256xf32>
  return
}
