// RUN: cq4p-opt %s | cq4p-opt | FileCheck %s

// CHECK-LABEL: func.func @decoder_ops
func.func @decoder_ops(%ids: tensor<?xi64>, %pos: index,
                       %e: !cq4p.weight<512x256, gs = 128, orthogonal, panels>,
                       %w: tensor<256xf16>, %hw: tensor<64xf32>,
                       %k: tensor<?x128xf32>, %v: tensor<?x128xf32>)
    -> tensor<?x256xf32> {
  // CHECK: cq4p.embedding %{{.*}}, %{{.*}} {scale = 1.600000e+01 : f32}
  %h = cq4p.embedding %ids, %e {scale = 16.0 : f32} : tensor<?xi64>,
      !cq4p.weight<512x256, gs = 128, orthogonal, panels> -> tensor<?x256xf32>
  // CHECK: cq4p.rms_norm %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32, unit_offset}
  %x = cq4p.rms_norm %h, %w {epsilon = 1.0e-06 : f32, unit_offset}
      : tensor<?x256xf32>, tensor<256xf16> -> tensor<?x256xf32>
  // CHECK: cq4p.rms_norm %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32} : tensor<?x256xf32>, tensor<64xf32>
  %qn = cq4p.rms_norm %x, %hw {epsilon = 1.0e-06 : f32}
      : tensor<?x256xf32>, tensor<64xf32> -> tensor<?x256xf32>
  // CHECK: cq4p.rope %{{.*}}, %{{.*}} {head_dim = 64 : i64, scaling = 8.000000e+00 : f32, theta = 1.000000e+06 : f32}
  %q = cq4p.rope %qn, %pos {head_dim = 64 : i64, theta = 1.0e+06 : f32, scaling = 8.0 : f32}
      : tensor<?x256xf32>, index -> tensor<?x256xf32>
  // CHECK: cq4p.cached_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 64 : i64, layer = 2 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 1.250000e-01 : f32, window = 512 : i64}
  %a = cq4p.cached_attention %q, %k, %v, %pos {layer = 2 : i64, num_heads = 4 : i64,
      num_kv_heads = 2 : i64, head_dim = 64 : i64, window = 512 : i64, scale = 0.125 : f32}
      : tensor<?x256xf32>, tensor<?x128xf32>, tensor<?x128xf32>, index -> tensor<?x256xf32>
  // CHECK: cq4p.glu <gelu_tanh> %{{.*}}, %{{.*}} :
  %m = cq4p.glu <gelu_tanh> %a, %x
      : tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x256xf32>
  return %m : tensor<?x256xf32>
}

// The ops of LFM2, Gemma 4, Qwen2 and padded-K models.
// CHECK-LABEL: func.func @family_ops
func.func @family_ops(%x: tensor<?x576xf32>, %pos: index,
                      %w: !cq4p.weight<128x640, gs = 128, hadamard, panels>,
                      %b: tensor<128xf16>, %cw: tensor<384xf16>,
                      %s: tensor<1xf16>, %q: tensor<?x256xf32>)
    -> tensor<?x128xf32> {
  // CHECK: cq4p.columns %{{.*}} {offset = 0 : i64} : tensor<?x576xf32> -> tensor<?x640xf32>
  %p = cq4p.columns %x {offset = 0 : i64} : tensor<?x576xf32> -> tensor<?x640xf32>
  // CHECK: cq4p.linear %{{.*}}, %{{.*}} bias %{{.*}} : tensor<?x640xf32>, !cq4p.weight<128x640, gs = 128, hadamard, panels>, tensor<128xf16> -> tensor<?x128xf32>
  %y = cq4p.linear %p, %w bias %b : tensor<?x640xf32>,
      !cq4p.weight<128x640, gs = 128, hadamard, panels>, tensor<128xf16> -> tensor<?x128xf32>
  // CHECK: cq4p.rms_norm %{{.*}} {chunk = 64 : i64, epsilon = 9.99999997E-7 : f32} : tensor<?x128xf32> -> tensor<?x128xf32>
  %n = cq4p.rms_norm %y {chunk = 64 : i64, epsilon = 1.0e-06 : f32} : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: cq4p.rope %{{.*}}, %{{.*}} {head_dim = 4 : i64, inv_freq = array<f32: 1.000000e+00, 0.000000e+00>}
  %r = cq4p.rope %n, %pos {head_dim = 4 : i64, inv_freq = array<f32: 1.0, 0.0>}
      : tensor<?x128xf32>, index -> tensor<?x128xf32>
  // CHECK: cq4p.scale %{{.*}} by %{{.*}} : tensor<?x128xf32>, tensor<1xf16> -> tensor<?x128xf32>
  %sb = cq4p.scale %r by %s : tensor<?x128xf32>, tensor<1xf16> -> tensor<?x128xf32>
  // CHECK: cq4p.scale %{{.*}} {factor = 6.250000e-02 : f32}
  %sf = cq4p.scale %sb {factor = 0.0625 : f32} : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: cq4p.softcap %{{.*}} {cap = 3.000000e+01 : f32}
  %c = cq4p.softcap %sf {cap = 30.0 : f32} : tensor<?x128xf32> -> tensor<?x128xf32>
  // CHECK: cq4p.short_conv %{{.*}}, %{{.*}}, %{{.*}} {layer = 1 : i64} : tensor<?x384xf32>, tensor<384xf16>, index -> tensor<?x128xf32>
  %bcx = cq4p.columns %x {offset = 0 : i64} : tensor<?x576xf32> -> tensor<?x384xf32>
  %conv = cq4p.short_conv %bcx, %cw, %pos {layer = 1 : i64}
      : tensor<?x384xf32>, tensor<384xf16>, index -> tensor<?x128xf32>
  // CHECK: cq4p.cached_attention %{{.*}}, %{{.*}} {head_dim = 64 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 1 : i64, scale = 1.000000e+00 : f32, window = 0 : i64} : tensor<?x256xf32>, index -> tensor<?x256xf32>
  %a = cq4p.cached_attention %q, %pos {layer = 0 : i64, num_heads = 4 : i64,
      num_kv_heads = 1 : i64, head_dim = 64 : i64, window = 0 : i64, scale = 1.0 : f32}
      : tensor<?x256xf32>, index -> tensor<?x256xf32>
  %sum = arith.addf %c, %conv : tensor<?x128xf32>
  return %sum : tensor<?x128xf32>
}
