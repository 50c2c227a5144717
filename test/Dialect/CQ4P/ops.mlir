// RUN: cq4p-opt %s -split-input-file | FileCheck %s
// Round trip: what cq4p-opt prints, it parses back to the same IR.
// RUN: cq4p-opt %s -split-input-file | cq4p-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @decode_q_proj
// CHECK-SAME: (%[[X:.*]]: tensor<1x1536xf32>, %[[W:.*]]: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>)
func.func @decode_q_proj(%x: tensor<1x1536xf32>,
                         %w: !cq4p.weight<2048x1536, gs = 128, hadamard, panels>)
    -> tensor<1x2048xf32> {
  // CHECK: %[[Y:.*]] = cq4p.linear %[[X]], %[[W]] : tensor<1x1536xf32>, !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
  %y = cq4p.linear %x, %w : tensor<1x1536xf32>,
      !cq4p.weight<2048x1536, gs = 128, hadamard, panels> -> tensor<1x2048xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<1x2048xf32>
}

// -----

// A prefill of any number of tokens: M is dynamic, N a ragged tail (100).
// CHECK-LABEL: func.func @prefill_dynamic_m
// CHECK: cq4p.linear %{{.*}}, %{{.*}} : tensor<?x256xf32>, !cq4p.weight<100x256, gs = 32, hadamard, panels> -> tensor<?x100xf32>
func.func @prefill_dynamic_m(%x: tensor<?x256xf32>,
                             %w: !cq4p.weight<100x256, gs = 32, hadamard, panels>)
    -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>,
      !cq4p.weight<100x256, gs = 32, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}

// -----

// Orthogonal lm_head: virtual 128-wide groups over K = 1536.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: !cq4p.weight<262144x1536, gs = 128, orthogonal, panels>
func.func @lm_head(%x: tensor<1x1536xf32>,
                   %w: !cq4p.weight<262144x1536, gs = 128, orthogonal, panels>)
    -> tensor<1x262144xf32> {
  %y = cq4p.linear %x, %w : tensor<1x1536xf32>,
      !cq4p.weight<262144x1536, gs = 128, orthogonal, panels> -> tensor<1x262144xf32>
  return %y : tensor<1x262144xf32>
}

// -----

// The legacy layouts still parse, so legacy bundles can be described.
// CHECK-LABEL: func.func @legacy
// CHECK-SAME: !cq4p.weight<512x1536, gs = 64, hadamard, interleaved4row>
// CHECK-SAME: !cq4p.weight<1000x1536, gs = 1536, orthogonal, interleaved4row>
func.func @legacy(%a: !cq4p.weight<512x1536, gs = 64, hadamard, interleaved4row>,
                  %b: !cq4p.weight<1000x1536, gs = 1536, orthogonal, interleaved4row>) {
  return
}

// -----

// Group sizes at the edges of the panel rules: 32 and 256.
// CHECK-LABEL: func.func @panel_group_sizes
// CHECK-SAME: gs = 32
// CHECK-SAME: gs = 256
func.func @panel_group_sizes(%a: !cq4p.weight<64x256, gs = 32, hadamard, panels>,
                             %b: !cq4p.weight<64x256, gs = 256, hadamard, panels>) {
  return
}

// -----

// The attention op over a KV cache: `at %pos`, the cache's own length and
// element type (fp16 here) for the keys and values.
// CHECK-LABEL: func.func @attention_over_a_cache
// CHECK: cq4p.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} at %{{.*}} {head_dim = 64 : i64
// CHECK-SAME: memref<?x256xf32>, memref<128x128xf16>, memref<128x128xf16>, memref<?x256xf32>
func.func @attention_over_a_cache(%q: memref<?x256xf32>, %k: memref<128x128xf16>,
                                  %v: memref<128x128xf16>, %o: memref<?x256xf32>,
                                  %h0: index, %h1: index, %pos: index) {
  cq4p.attention %q, %k, %v, %o, %h0, %h1 at %pos {num_heads = 4 : i64, num_kv_heads = 2 : i64,
      head_dim = 64 : i64, window = 0 : i64, scale = 0.125 : f32}
      : memref<?x256xf32>, memref<128x128xf16>, memref<128x128xf16>, memref<?x256xf32>
  return
}
