// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme -convert-cq4p-to-neon \
// RUN:   | FileCheck %s --check-prefix=CALL

// The orthogonal lm_head's rotation on SME2: the op names its streaming
// leaf, which the shared lowering then calls with the chunk's scaled rows
// and basis as [?][K] rows instead of emitting its vector loops. In the
// leaf, rows in groups of 4 (then single rows), passes of 4, 2, 1 blocks of
// 64 outputs per row (16, 8, 4, 2, 1 for one row); per 4 rotation rows
// one LD1RQ of each row's values, then per rotation row and block four
// extending loads and FCVT (fpext) shared by the group's rows and one
// multi-vector FMLA by lane per row; the sums read from ZA four vectors at
// a time and stored.
// CHECK-LABEL: func.func @cq4p_quantize_256_orthogonal
// CHECK: cq4p.rotate_quantize_activations
// CHECK-SAME: cq4p.sme_rotation = @cq4p_quantize_256_orthogonal_sme_rotation
// CHECK-LABEL: func.func private @cq4p_quantize_256_orthogonal_sme_rotation
// CHECK-SAME: (%{{.*}}: memref<256x256xf16>, %{{.*}}: memref<?x256xf32>, %{{.*}}: memref<?x256xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: scf.for
// CHECK: scf.for
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c256{{.*}} step %c4
// CHECK-COUNT-4: cq4p_intr.aarch64.sve.ld1rq
// CHECK: llvm.load %{{.*}} {alignment = 2 : i64} : !llvm.ptr -> vector<[4]xf16>
// CHECK: llvm.fpext %{{.*}} : vector<[4]xf16> to vector<[4]xf32>
// CHECK-COUNT-3: llvm.fpext
// CHECK-COUNT-4: cq4p_intr.aarch64.sme.fmla.lane.vg1x4 {{.*}} {lane = 0 : i32}
// CHECK: cq4p_intr.aarch64.sme.read.vg1x4
// CHECK: cq4p_intr.aarch64.sve.st1.pn.x4
// CALL-LABEL: func.func @cq4p_quantize_256_orthogonal
// CALL-NOT: cq4p.rotate_quantize_activations
// CALL: memref.cast %{{.*}} : memref<{{[0-9]+}}x256xf32> to memref<?x256xf32>
// CALL: call @cq4p_quantize_256_orthogonal_sme_rotation(%{{.*}}) : (memref<256x256xf16>, memref<?x256xf32>, memref<?x256xf32>, index, index, index, index) -> ()
// CALL-NOT: math.fma
// CALL: arith.fptosi
func.func @cq4p_quantize_256_orthogonal(%x: memref<?x256xf32>, %isr: memref<256xf16>,
                                        %rotation: memref<256x256xf16>,
                                        %act: memref<?x256xi8>, %scales: memref<?x2xf32>,
                                        %g0: index, %g1: index) {
  cq4p.rotate_quantize_activations %x, %isr, %rotation, %act, %scales, %g0, %g1
      {group_size = 128 : i64}
      : memref<?x256xf32>, memref<256xf16>, memref<256x256xf16>, memref<?x256xi8>,
        memref<?x2xf32>
  return
}

// -----

// The embedding's product: the decoded rows times rotation_t, the sums
// stored straight into the output rows.
// CHECK-LABEL: func.func @cq4p_embedding_100x128
// CHECK: cq4p.decode_embedding
// CHECK-SAME: cq4p.sme_rotation = @cq4p_embedding_100x128_sme_rotation
// CHECK-LABEL: func.func private @cq4p_embedding_100x128_sme_rotation
// CHECK-SAME: (%{{.*}}: memref<128x128xf16>, %{{.*}}: memref<?x128xf32>, %{{.*}}: memref<?x128xf32>
// CALL-LABEL: func.func @cq4p_embedding_100x128
// CALL: call @cq4p_embedding_100x128_sme_rotation(%{{.*}}) : (memref<128x128xf16>, memref<?x128xf32>, memref<?x128xf32>, index, index, index, index) -> ()
// CALL-NOT: math.fma
func.func @cq4p_embedding_100x128(%panels: memref<2x1x32x128xi8>, %norms: memref<100x1xf16>,
                                  %cb: memref<16xf16>, %rotation_t: memref<128x128xf16>,
                                  %isr: memref<128xf16>, %ids: memref<?xi64>,
                                  %out: memref<?x128xf32>) {
  cq4p.decode_embedding %panels, %norms, %cb, %rotation_t, %isr, %ids, %out
      : memref<2x1x32x128xi8>, memref<100x1xf16>, memref<16xf16>, memref<128x128xf16>,
        memref<128xf16>, memref<?xi64>, memref<?x128xf32>
  return
}
