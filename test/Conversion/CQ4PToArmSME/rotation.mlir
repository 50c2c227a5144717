// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-sme2 -convert-cq4p-to-arm-sme=fmlal-rotation=false \
// RUN:   | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-sme2 -convert-cq4p-to-arm-sme=fmlal-rotation=false \
// RUN:   -convert-cq4p-to-neon | FileCheck %s --check-prefix=CALL
// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-sme2 -convert-cq4p-to-arm-sme | FileCheck %s --check-prefix=FMLAL
// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-sme2 -convert-cq4p-to-arm-sme -convert-cq4p-to-neon \
// RUN:   | FileCheck %s --check-prefix=FMLALCALL

// The orthogonal lm_head's rotation on SME2: the op names its streaming
// leaf, which the shared lowering then calls with the chunk's scaled rows
// and basis as [?][K] rows instead of emitting its vector loops. In the
// leaf, rows in groups of 8 (then at most one group of 4, 2 and 1), passes
// of 1, 2, 4, 8 blocks of 128 outputs per row (then halves); per 4
// rotation rows one LD1RQ of each row's fp32 values, then per rotation row
// and block one four-vector LD1H of fp16, FCVT and FCVTLT of each vector
// (even and odd outputs) shared by the group's rows, and two multi-vector
// FMLA by lane per row (ZA vector pairs); the sums read from ZA four
// vectors at a time, even and odd interleaved back and stored.
// CHECK-LABEL: func.func @cq4p_quantize_256_orthogonal
// CHECK: cq4p.rotate_quantize_activations
// CHECK-SAME: cq4p.sme_rotation = @cq4p_quantize_256_orthogonal_sme_rotation
// CHECK-LABEL: func.func private @cq4p_quantize_256_orthogonal_sme_rotation
// CHECK-SAME: (%{{.*}}: memref<256x256xf16>, %{{.*}}: memref<?x256xf32>, %{{.*}}: memref<?x256xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index)
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: cq4p_intr.aarch64.sve.ptrue.c16
// CHECK: scf.for
// CHECK: scf.for
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c256{{.*}} step %c4
// CHECK-COUNT-8: cq4p_intr.aarch64.sve.ld1rq
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 {{.*}} -> !llvm.struct<(vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>)>
// CHECK: cq4p_intr.aarch64.sve.fcvt.f32f16 {{.*}} : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
// CHECK: cq4p_intr.aarch64.sve.fcvtlt.f32f16
// CHECK-COUNT-3: cq4p_intr.aarch64.sve.fcvtlt.f32f16
// CHECK-NOT: llvm.fpext
// CHECK-COUNT-16: cq4p_intr.aarch64.sme.fmla.lane.vg1x4 {{.*}} {lane = 0 : i32}
// CHECK: cq4p_intr.aarch64.sme.fmla.lane.vg1x4 {{.*}} {lane = 1 : i32}
// CHECK: %[[EVEN:.*]] = cq4p_intr.aarch64.sme.read.vg1x4
// CHECK: %[[ODD:.*]] = cq4p_intr.aarch64.sme.read.vg1x4
// CHECK: vector.interleave %{{.*}}, %{{.*}} : vector<[4]xf32> -> vector<[8]xf32>
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<[8]xf32>, !llvm.ptr
// CALL-LABEL: func.func @cq4p_quantize_256_orthogonal
// CALL-NOT: cq4p.rotate_quantize_activations
// CALL: memref.cast %{{.*}} : memref<{{[0-9]+}}x256xf32> to memref<?x256xf32>
// CALL: call @cq4p_quantize_256_orthogonal_sme_rotation(%{{.*}}) : (memref<256x256xf16>, memref<?x256xf32>, memref<?x256xf32>, index, index, index, index) -> ()
// CALL-NOT: math.fma
// CALL: arith.fptosi
//
// With fmlal-rotation (the default), the lm_head's leaf takes fp16 rows as
// the embedding's does: per rotation row and block one LD1H x4 and one
// FMLAL by lane per row, no FCVT. The shared lowering rounds each row of
// a = x * isr to fp16 after a power-of-two scaling (its largest |a| to
// [2^14, 2^15): the exponent field of the row's max), calls the leaf with
// the fp16 rows, and multiplies the sums by the inverse power before the
// quantization.
// FMLAL-LABEL: func.func @cq4p_quantize_256_orthogonal
// FMLAL: cq4p.rotate_quantize_activations
// FMLAL-SAME: cq4p.sme_rotation = @cq4p_quantize_256_orthogonal_sme_rotation
// FMLAL-SAME: cq4p.sme_rotation_f16
// FMLAL-LABEL: func.func private @cq4p_quantize_256_orthogonal_sme_rotation
// FMLAL-SAME: (%{{.*}}: memref<256x256xf16>, %{{.*}}: memref<?x256xf16>, %{{.*}}: memref<?x256xf32>
// FMLAL: scf.for %{{.*}} = %c0{{.*}} to %c256{{.*}} step %c8
// FMLAL: cq4p_intr.aarch64.sve.ld1.pn.x4
// FMLAL-NOT: fcvt
// FMLAL: cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 {{.*}} {lane = 0 : i32}
// FMLAL-NOT: fmla.lane
// FMLAL: cq4p_intr.aarch64.sme.read.vg1x4
// FMLALCALL-LABEL: func.func @cq4p_quantize_256_orthogonal
// FMLALCALL: vector.reduction <maximumf>
// FMLALCALL: arith.shrui %{{.*}}, %c23{{.*}} : i32
// FMLALCALL: arith.truncf %{{.*}} : vector<{{[0-9]+}}xf32> to vector<{{[0-9]+}}xf16>
// FMLALCALL: call @cq4p_quantize_256_orthogonal_sme_rotation(%{{.*}}) : (memref<256x256xf16>, memref<?x256xf16>, memref<?x256xf32>, index, index, index, index) -> ()
// FMLALCALL: arith.mulf
// FMLALCALL: arith.fptosi
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

// The embedding's product: the decoded rows (fp16 codebook levels) times
// rotation_t, the sums stored straight into the output rows: per 8
// rotation rows one LD1RQ of each row's 8 levels, then per rotation row
// and block one four-vector LD1H and one multi-vector FMLAL by lane per
// row (exact fp16 products into ZA vector pairs), no conversion.
// CHECK-LABEL: func.func @cq4p_embedding_100x128
// CHECK: cq4p.decode_embedding
// CHECK-SAME: cq4p.sme_embedding_mopa = @cq4p_embedding_100x128_sme_embedding
// CHECK-SAME: cq4p.sme_rotation = @cq4p_embedding_100x128_sme_rotation
// CHECK-LABEL: func.func private @cq4p_embedding_100x128_sme_rotation
// CHECK-SAME: (%{{.*}}: memref<128x128xf16>, %{{.*}}: memref<?x128xf16>, %{{.*}}: memref<?x128xf32>
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c128{{.*}} step %c8
// CHECK-COUNT-8: cq4p_intr.aarch64.sve.ld1rq
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 {{.*}} -> !llvm.struct<(vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>)>
// CHECK-NOT: fcvt
// CHECK-COUNT-8: cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 {{.*}} {lane = 0 : i32} : (i32, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>) -> ()
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 {{.*}} {lane = 1 : i32}
// CHECK: cq4p_intr.aarch64.sme.read.vg1x4
// CHECK: vector.interleave
//
// Prompt rows (a chunk of at least 32 of its 64 rows): the outer-product
// leaf. Per 64 values of c, each row's 16 kg-blocks' index bytes (16
// halfword loads 128 bytes apart) widened to one index a byte and written
// as a horizontal slice of the byte tile, whose vertical slices (the 64
// rows' indices of one c) are packed back to nibbles (truncating store of
// h | h >> 4). Then ZT0 <- the levels as fp32 and, per 16 outputs, per c:
// a four-vector LUTI4 (the 64 rows' levels), an extending load and FCVT of
// rotation_t's 16 fp16 values, four FP32 FMOPA (no widening FMOPA, no
// FMLAL); the rows that exist stored from the tiles' horizontal slices.
// CHECK-LABEL: func.func private @cq4p_embedding_100x128_sme_embedding
// CHECK-SAME: (%{{.*}}: memref<128x128xf16>, %{{.*}}: memref<2x1x32x128xi8>, %{{.*}}: memref<16xf16>, %{{.*}}: memref<?xi64>, %{{.*}}: memref<128x32xi8>, %{{.*}}: memref<?x128xf32>, %{{.*}}: index, %{{.*}}: index)
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c2{{.*}} step %c1
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %{{.*}} step %c1
// CHECK-COUNT-16: llvm.load %{{.*}} {alignment = 1 : i64} : !llvm.ptr -> i16
// CHECK: llvm.zext %{{.*}} : vector<[8]xi8> to vector<[8]xi16>
// CHECK: "arm_sme.intr.write.horiz"({{.*}}) <{tile_id = 0 : i32}> : (i32, vector<[16]xi1>, vector<[16]xi8>) -> ()
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c64{{.*}} step %c1
// CHECK: "arm_sme.intr.read.vert"({{.*}}) <{tile_id = 0 : i32}> : (vector<[16]xi8>, vector<[16]xi1>, i32) -> vector<[16]xi8>
// CHECK: llvm.trunc %{{.*}} : vector<[8]xi16> to vector<[8]xi8>
// CHECK: cq4p_intr.aarch64.sme.ldr.zt
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c8{{.*}} step %c1
// CHECK: "arm_sme.intr.zero"() <{tile_mask = 255 : i32}>
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c128{{.*}} step %c8
// CHECK: cq4p_intr.aarch64.sme.luti4.lane.zt.x4 %{{.*}} {segment = 0 : i32, zt = 0 : i32} : (vector<[16]xi8>) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
// CHECK: llvm.fpext %{{.*}} : vector<[4]xf16> to vector<[4]xf32>
// CHECK: "arm_sme.intr.mopa"({{.*}}) <{tile_id = 0 : i32}> : (vector<[4]xi1>, vector<[4]xi1>, vector<[4]xf32>, vector<[4]xf32>) -> ()
// CHECK: "arm_sme.intr.mopa"({{.*}}) <{tile_id = 1 : i32}>
// CHECK: "arm_sme.intr.mopa"({{.*}}) <{tile_id = 2 : i32}>
// CHECK: "arm_sme.intr.mopa"({{.*}}) <{tile_id = 3 : i32}>
// CHECK: cq4p_intr.aarch64.sme.luti4.lane.zt.x4 %{{.*}} {segment = 1 : i32, zt = 0 : i32}
// CHECK-COUNT-4: "arm_sme.intr.mopa"
// CHECK-NOT: mopa.wide
// CHECK-NOT: fmlal
// CHECK: "arm_sme.intr.st1w.horiz"({{.*}}) <{tile_id = 0 : i32}>
// CHECK: "arm_sme.intr.st1w.horiz"({{.*}}) <{tile_id = 3 : i32}>
// CALL-LABEL: func.func @cq4p_embedding_100x128
// CALL: memref.alloca() : memref<31x128xf16>
// CALL: %[[NIBBLES:.*]] = memref.alloca() : memref<128x32xi8>
// CALL: scf.for %[[FIRST:.*]] = %c0{{.*}} to %{{.*}} step %c64
// CALL: %[[COUNT:.*]] = arith.minui
// CALL: %[[MANY:.*]] = arith.cmpi uge, %[[COUNT]], %c32
// CALL: scf.if %[[MANY]] {
// CALL: call @cq4p_embedding_100x128_sme_embedding(%{{.*}}, %[[NIBBLES]], %{{.*}}, %[[FIRST]], %[[COUNT]]) : (memref<128x128xf16>, memref<2x1x32x128xi8>, memref<16xf16>, memref<?xi64>, memref<128x32xi8>, memref<?x128xf32>, index, index) -> ()
// CALL: } else {
// CALL: call @cq4p_embedding_100x128_sme_rotation(%{{.*}}) : (memref<128x128xf16>, memref<?x128xf16>, memref<?x128xf32>, index, index, index, index) -> ()
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
