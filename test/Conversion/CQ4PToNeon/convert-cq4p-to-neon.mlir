// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-neon | FileCheck %s

// The GEMV panel dot: per step of 32 K, one LD2 of the activations (evens
// and odds), then per pair of kg-blocks two four-register LD1s per half of
// the blocks, each from its own pointer stepped by an opaque register (64,
// then 192 bytes) so that it becomes the load's post-index; per 16-byte
// slice a 16-bit zip, and/shift, two TBL lookups and two SDOT per half into
// 16 accumulators. The loop carries the accumulators and three pointers.
// CHECK-LABEL: func.func @panel_dot_gemv
// CHECK-DAG: %[[TABLE:.*]] = vector.load %{{.*}}[%{{.*}}] : memref<16xi8>, vector<16xi8>
// CHECK-DAG: %[[STEP64:.*]] = cq4p_intr.opaque %{{.*}} : i64
// CHECK-DAG: %[[STEP192:.*]] = cq4p_intr.opaque %{{.*}} : i64
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, !llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK: cq4p_intr.aarch64.neon.ld2
// CHECK: %[[A:.*]] = cq4p_intr.aarch64.neon.ld1x4 %[[PA:.*]] :
// CHECK: %[[A0:.*]] = llvm.extractvalue %[[A]][0]
// CHECK: llvm.getelementptr %[[PA]][%[[STEP64]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: %[[B:.*]] = cq4p_intr.aarch64.neon.ld1x4 %[[PB:.*]] :
// CHECK: %[[B0:.*]] = llvm.extractvalue %[[B]][0]
// CHECK: llvm.getelementptr %[[PB]][%[[STEP64]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: %[[A16:.*]] = vector.bitcast %[[A0]] : vector<16xi8> to vector<8xi16>
// CHECK: %[[B16:.*]] = vector.bitcast %[[B0]] : vector<16xi8> to vector<8xi16>
// CHECK: vector.shuffle %[[A16]], %[[B16]] [0, 8, 1, 9, 2, 10, 3, 11]
// CHECK: vector.shuffle %[[A16]], %[[B16]] [4, 12, 5, 13, 6, 14, 7, 15]
// CHECK: arith.andi
// CHECK: arith.shrui
// CHECK: cq4p_intr.aarch64.neon.tbl1 %[[TABLE]], %{{.*}}
// CHECK: cq4p_intr.aarch64.neon.tbl1 %[[TABLE]], %{{.*}}
// CHECK: arm_neon.intr.sdot
// CHECK: arm_neon.intr.sdot
// CHECK: llvm.getelementptr %{{.*}}[%[[STEP192]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK-COUNT-3: cq4p_intr.opaque %{{.*}} : !llvm.ptr
// CHECK: scf.yield
// CHECK-COUNT-16: vector.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<1x64xi32>, vector<4xi32>
// CHECK-NOT: cq4p.panel_dot
func.func @panel_dot_gemv(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                          %act: memref<?x256xi8>, %partials: memref<1x64xi32>,
                          %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<1x64xi32>
  return
}

// -----

// Activations in a strided layout (rows 512 bytes apart): the structure
// loads need contiguous identity layouts, so this GEMV indexes the memrefs.
// CHECK-LABEL: func.func @panel_dot_gemv_strided
// CHECK-NOT: llvm.aarch64.neon.ld1x4
// CHECK: vector.load %{{.*}} : memref<?x256xi8, strided<[512, 1]>>, vector<16xi8>
// CHECK: arm_neon.intr.sdot
// CHECK-NOT: llvm.aarch64.neon.ld1x4
// CHECK: return
func.func @panel_dot_gemv_strided(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                                  %act: memref<?x256xi8, strided<[512, 1]>>,
                                  %partials: memref<1x64xi32>,
                                  %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8, strided<[512, 1]>>, memref<1x64xi32>
  return
}

// -----

// A 4-row GEMM tile: 8 passes of 8 channels, 2 accumulators per row; each
// looked-up weight vector feeds the 4 rows.
// CHECK-LABEL: func.func @panel_dot_gemm
// CHECK: scf.for
// CHECK: scf.for {{.*}} -> (vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>)
// CHECK: %[[W:.*]] = cq4p_intr.aarch64.neon.tbl1
// CHECK: %[[W2:.*]] = cq4p_intr.aarch64.neon.tbl1
// CHECK: arm_neon.intr.sdot %{{.*}}, %[[W]], %{{.*}}
// CHECK: arm_neon.intr.sdot %{{.*}}, %[[W2]], %{{.*}}
// CHECK: arm_neon.intr.sdot %{{.*}}, %[[W]], %{{.*}}
// CHECK: arm_neon.intr.sdot %{{.*}}, %[[W2]], %{{.*}}
func.func @panel_dot_gemm(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                          %act: memref<?x256xi8>, %partials: memref<4x64xi32>,
                          %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<?x256xi8>, memref<4x64xi32>
  return
}

// -----

// A packed 8-row tile (paired_activations): per pass of 8 channels, 16
// accumulators; per two pairs of kg-blocks 8 looked-up weight vectors, then
// each row's 16 packed bytes once, fed by lane to 8 SDOTs (lanes 0-3:
// evens and odds of the two pairs).
// CHECK-LABEL: func.func @panel_dot_paired
// CHECK: scf.for
// CHECK: scf.for {{.*}} -> (vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>)
// CHECK-COUNT-8: cq4p_intr.aarch64.neon.tbl1
// CHECK: %[[ROW0:.*]] = vector.load %{{.*}}[%c0, %{{.*}}] : memref<8x256xi8>, vector<16xi8>
// CHECK: %[[LANES:.*]] = vector.bitcast %[[ROW0]] : vector<16xi8> to vector<4xi32>
// CHECK: vector.shuffle %[[LANES]], %[[LANES]] [0, 0, 0, 0]
// CHECK: arm_neon.intr.sdot
// CHECK: vector.shuffle %[[LANES]], %[[LANES]] [1, 1, 1, 1]
// CHECK: arm_neon.intr.sdot
// CHECK: vector.shuffle %[[LANES]], %[[LANES]] [3, 3, 3, 3]
// CHECK: vector.load %{{.*}}[%c1, %{{.*}}] : memref<8x256xi8>, vector<16xi8>
func.func @panel_dot_paired(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                            %act: memref<8x256xi8>, %partials: memref<8x64xi32>,
                            %sb: index, %g: index) {
  %c0 = arith.constant 0 : index
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %c0 {paired_activations}
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<8x256xi8>, memref<8x64xi32>
  return
}

// -----

// The rescale: float(P) * act_scale * norm, accumulated.
// CHECK-LABEL: func.func @rescale
// CHECK: %[[SCALE:.*]] = memref.load %{{.*}} : memref<?x2xf32>
// CHECK: %[[SPLAT:.*]] = vector.broadcast %[[SCALE]] : f32 to vector<4xf32>
// CHECK: %[[P:.*]] = vector.load {{.*}} : memref<1x64xi32>, vector<4xi32>
// CHECK: %[[N:.*]] = vector.load {{.*}} : memref<2x2x64xf32>, vector<4xf32>
// CHECK: %[[ACC:.*]] = vector.load {{.*}} : memref<1x64xf32>, vector<4xf32>
// CHECK: %[[F:.*]] = arith.sitofp %[[P]] : vector<4xi32> to vector<4xf32>
// CHECK: %[[M1:.*]] = arith.mulf %[[F]], %[[SPLAT]]
// CHECK: %[[M2:.*]] = arith.mulf %[[M1]], %[[N]]
// CHECK: %[[SUM:.*]] = arith.addf %[[ACC]], %[[M2]]
// CHECK: vector.store %[[SUM]]
func.func @rescale(%partials: memref<1x64xi32>, %scales: memref<?x2xf32>,
                   %norm_panels: memref<2x2x64xf32>, %accum: memref<1x64xf32>,
                   %sb: index, %g: index, %row: index) {
  cq4p.rescale %partials, %scales, %norm_panels, %accum, %sb, %g, %row
      : memref<1x64xi32>, memref<?x2xf32>, memref<2x2x64xf32>, memref<1x64xf32>
  return
}

// -----

// The activation transform in vectors (ActivationTransform.cpp): per call
// the signs and the permutation's table indices; per group x * (isr * left)
// from de-interleaved loads, the butterflies between pieces, the abs-max, the
// scale; then the division, FCVTNS and saturating narrows, the right signs
// on the bytes and a TBL per 16 bytes.
// CHECK-LABEL: func.func @quantize
// CHECK-DAG: arith.constant dense<0.176776692> : vector<4xf32>
// CHECK-DAG: arith.constant 1.000000e-10 : f32
// CHECK: vector.load %{{.*}} : memref<32xi8>, vector<16xi8>
// CHECK: arith.sitofp %{{.*}} : vector<4xi8> to vector<4xf32>
// CHECK: vector.load %{{.*}} : memref<32xi32>, vector<16xi32>
// CHECK: scf.for %[[G:.*]] = %{{.*}} to %{{.*}} step
// CHECK: arith.extf %{{.*}} : vector<4xf16> to vector<4xf32>
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step
// CHECK: vector.load %{{.*}}[%[[ROW]], %{{.*}}] : memref<?x64xf32>, vector<16xf32>
// CHECK: arith.addf %{{.*}} : vector<4xf32>
// CHECK: arith.subf %{{.*}} : vector<4xf32>
// CHECK: math.absf %{{.*}} : vector<4xf32>
// CHECK: vector.reduction <maximumf>, %{{.*}} : vector<4xf32> into f32
// CHECK: arith.divf %{{.*}} : f32
// CHECK: arith.maximumf %{{.*}} : f32
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[ROW]], %[[G]]] : memref<?x2xf32>
// CHECK: arith.divf %{{.*}} : vector<4xf32>
// CHECK: cq4p_intr.aarch64.neon.fcvtns
// CHECK: cq4p_intr.aarch64.neon.sqxtn
// CHECK: cq4p_intr.aarch64.neon.sqxtn
// CHECK: arith.muli %{{.*}} : vector<16xi8>
// CHECK: cq4p_intr.aarch64.neon.tbl2
// CHECK: vector.store %{{.*}}, %{{.*}}[%[[ROW]], %{{.*}}] : memref<?x64xi8>, vector<16xi8>
// CHECK-NOT: memref.alloca
func.func @quantize(%x: memref<?x64xf32>, %isr: memref<64xf16>, %left: memref<32xi8>,
                    %right: memref<32xi8>, %perm: memref<32xi32>, %act: memref<?x64xi8>,
                    %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %x, %isr, %left, %right, %perm, %act, %scales, %g0, %g1
      {group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<32xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}
