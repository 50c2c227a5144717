// RUN: cq4p-opt %s -split-input-file -cq4p-lower-to-kernels | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -cq4p-lower-to-kernels=kernels-only | FileCheck %s --check-prefix=ONLY

// A dynamic M keeps both the GEMV and the GEMM; the graph op names them.
// CHECK-LABEL: func.func @prefill_or_decode
// CHECK: cq4p.linear %{{.*}}, %{{.*}} {cq4p.kernels = [@cq4p_quantize_256_gs128_hadamard, @cq4p_gemv_100x256_gs128, @cq4p_gemm_100x256_gs128]}
// CHECK-LABEL: func.func @cq4p_quantize_256_gs128_hadamard
// CHECK-SAME: (%[[X:.*]]: memref<?x256xf32>, %[[ISR:.*]]: memref<256xf16>, %[[L:.*]]: memref<128xi8>, %[[R:.*]]: memref<128xi8>, %[[P:.*]]: memref<128xi32>, %[[A:.*]]: memref<?x256xi8>, %[[S:.*]]: memref<?x2xf32>, %[[G0:.*]]: index, %[[G1:.*]]: index)
// CHECK-SAME: cq4p.kernel = #cq4p.kernel<quantize_hadamard, n = 1, k = 256, group_size = 128, params = ["x": memref<?x256xf32>, "weight.input_scale_recip": memref<256xf16>
// CHECK: cq4p.quantize_activations %[[X]], %[[ISR]], %[[L]], %[[R]], %[[P]], %[[A]], %[[S]], %[[G0]], %[[G1]] {group_size = 128 : i64}
// CHECK-LABEL: func.func @cq4p_gemv_100x256_gs128
// CHECK-SAME: memref<2x2x32x128xi8>, %{{[a-z0-9]*}}: memref<2x2x64xf32>, %{{[a-z0-9]*}}: memref<16xi8>, %{{[a-z0-9]*}}: memref<1x256xi8>, %{{[a-z0-9]*}}: memref<1x2xf32>, %{{[a-z0-9]*}}: memref<1x100xf32>
// CHECK-SAME: cq4p.kernel = #cq4p.kernel<matmul, n = 100, k = 256, group_size = 128, max_rows = 1, params = ["weight.panels": memref<2x2x32x128xi8>
// CHECK: cq4p.panel_matmul
// CHECK-LABEL: func.func @cq4p_gemm_100x256_gs128
// CHECK-SAME: memref<?x256xi8>, %{{[a-z0-9]*}}: memref<?x2xf32>, %{{[a-z0-9]*}}: memref<?x100xf32>
// CHECK-SAME: cq4p.kernel = #cq4p.kernel<matmul, n = 100, k = 256, group_size = 128, min_rows = 2, params = [
// ONLY-NOT: func.func @prefill_or_decode
// ONLY: func.func @cq4p_quantize_256_gs128_hadamard
func.func @prefill_or_decode(%x: tensor<?x256xf32>,
                             %w: !cq4p.weight<100x256, gs = 128, hadamard, panels>)
    -> tensor<?x100xf32> {
  %y = cq4p.linear %x, %w : tensor<?x256xf32>,
      !cq4p.weight<100x256, gs = 128, hadamard, panels> -> tensor<?x100xf32>
  return %y : tensor<?x100xf32>
}

// -----

// M = 1 needs only the GEMV; two ops of one shape share the kernels.
// CHECK-LABEL: func.func @decode_twice
// CHECK: cq4p.kernels = [@cq4p_quantize_512_gs64_hadamard, @cq4p_gemv_64x512_gs64]
// CHECK: cq4p.kernels = [@cq4p_quantize_512_gs64_hadamard, @cq4p_gemv_64x512_gs64]
// CHECK-NOT: cq4p_gemm
// CHECK-COUNT-1: func.func @cq4p_gemv_64x512_gs64
// CHECK-NOT: func.func @cq4p_gemv_64x512_gs64
func.func @decode_twice(%x: tensor<1x512xf32>,
                        %w: !cq4p.weight<64x512, gs = 64, hadamard, panels>,
                        %v: !cq4p.weight<64x512, gs = 64, hadamard, panels>) {
  %a = cq4p.linear %x, %w : tensor<1x512xf32>,
      !cq4p.weight<64x512, gs = 64, hadamard, panels> -> tensor<1x64xf32>
  %b = cq4p.linear %x, %v : tensor<1x512xf32>,
      !cq4p.weight<64x512, gs = 64, hadamard, panels> -> tensor<1x64xf32>
  return
}

// -----

// The orthogonal lm_head quantizes through the rotation; a static M > 1 takes
// the GEMM only.
// CHECK-LABEL: func.func @lm_head_prefill
// CHECK: cq4p.kernels = [@cq4p_quantize_256_orthogonal, @cq4p_gemm_1000x256_gs128]
// CHECK-LABEL: func.func @cq4p_quantize_256_orthogonal
// CHECK-SAME: memref<256x256xf16>
// CHECK: cq4p.rotate_quantize_activations
func.func @lm_head_prefill(%x: tensor<4x256xf32>,
                           %w: !cq4p.weight<1000x256, gs = 128, orthogonal, panels>) {
  %y = cq4p.linear %x, %w : tensor<4x256xf32>,
      !cq4p.weight<1000x256, gs = 128, orthogonal, panels> -> tensor<4x1000xf32>
  return
}

// -----

// CHECK-LABEL: func.func @embed
// CHECK: cq4p.kernels = [@cq4p_embedding_1000x256]
// CHECK-LABEL: func.func @cq4p_embedding_1000x256
// CHECK-SAME: memref<16x2x32x128xi8>, %{{.*}}: memref<1000x2xf16>, %{{.*}}: memref<16xf16>, %{{.*}}: memref<256x256xf16>, %{{.*}}: memref<256xf16>, %{{.*}}: memref<?xi64>, %{{.*}}: memref<?x256xf32>
// CHECK: cq4p.decode_embedding
func.func @embed(%ids: tensor<?xi64>,
                 %w: !cq4p.weight<1000x256, gs = 128, orthogonal, panels>) {
  %rows = cq4p.embedding %ids, %w : tensor<?xi64>,
      !cq4p.weight<1000x256, gs = 128, orthogonal, panels> -> tensor<?x256xf32>
  return
}
