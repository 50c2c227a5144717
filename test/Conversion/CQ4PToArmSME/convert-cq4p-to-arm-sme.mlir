// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme | FileCheck %s

// GEMV: the partials of every group of a super-block in one streaming leaf:
// ZT0 from the int8 codebook, per kg-block two LUTI4 x2 and one multi-vector
// SDOT (lane = the kg-block's place among 4) into the group's ZA slice,
// 16 groups per ZA fill, stored with `str za`.
// CHECK-LABEL: func.func @cq4p_gemv_100x256_gs128
// CHECK: call @cq4p_gemv_100x256_gs128_sme_row_partials(%{{.*}}) : (memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>, index, index, index) -> ()
// CHECK-NOT: cq4p.panel_partials
// CHECK-LABEL: func.func private @cq4p_gemv_100x256_gs128_sme_row_partials
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: memref.alloca() : memref<16xi32>
// CHECK: arith.extui %{{.*}} : vector<[4]xi8> to vector<[4]xi32>
// CHECK: llvm.call_intrinsic "llvm.aarch64.sme.ldr.zt"
// CHECK: scf.for
// CHECK: llvm.call_intrinsic "llvm.aarch64.sme.zero"
// CHECK: scf.for
// CHECK: scf.for
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.ld1rq.nxv16i8"
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x2.nxv16i8"
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8"
// CHECK: llvm.call_intrinsic "llvm.aarch64.sme.sdot.lane.za32.vg1x4.nxv16i8"
// CHECK-COUNT-6: llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8"
// CHECK: scf.for
// CHECK-COUNT-4: llvm.call_intrinsic "llvm.aarch64.sme.str"
func.func @cq4p_gemv_100x256_gs128(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                                   %act: memref<1x256xi8>, %partials: memref<2x1x64xi32>,
                                   %sb: index, %row: index, %g0: index) {
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %g0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>
  return
}

// -----

// GEMM: per group and four kg-blocks, one four-vector load of the packed
// activation tile and two of the panels (512 bytes); per kg-block two LUTI4
// x2 and four 4-way SMOPA, one per 32-bit ZA tile (16 channels each); the
// group's [16 rows][64 channels] partials are ZA's 64 array vectors in
// order, stored with `str za`.
// CHECK-LABEL: func.func private @cq4p_gemm_100x256_gs128_sme_tile_partials
// CHECK: llvm.call_intrinsic "llvm.aarch64.sme.ldr.zt"
// CHECK: scf.for
// CHECK: llvm.call_intrinsic "llvm.aarch64.sme.zero"
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c4
// CHECK: %[[ACTS:.*]] = llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv16i8"
// CHECK: %[[ACT0:.*]] = llvm.extractvalue %[[ACTS]][0]
// CHECK: %[[ACT1:.*]] = llvm.extractvalue %[[ACTS]][1]
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv16i8"
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8"
// CHECK-COUNT-4: llvm.call_intrinsic "llvm.aarch64.sme.smopa.wide.nxv16i8"(%{{.*}}, %{{.*}}, %{{.*}}, %[[ACT0]]
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8"
// CHECK-COUNT-4: llvm.call_intrinsic "llvm.aarch64.sme.smopa.wide.nxv16i8"(%{{.*}}, %{{.*}}, %{{.*}}, %[[ACT1]]
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv16i8"
// CHECK-COUNT-8: llvm.call_intrinsic "llvm.aarch64.sme.smopa.wide.nxv16i8"
// CHECK-NOT: llvm.call_intrinsic "llvm.aarch64.sme.smopa
// CHECK-COUNT-64: llvm.call_intrinsic "llvm.aarch64.sme.str"
func.func @cq4p_gemm_100x256_gs128(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                                   %packed: memref<2x32x16x4xi8>, %partials: memref<2x16x64xi32>,
                                   %sb: index, %row: index, %g0: index) {
  cq4p.panel_partials %panels, %cb, %packed, %partials, %sb, %row, %g0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<2x32x16x4xi8>, memref<2x16x64xi32>
  return
}

// -----

// GEMV with its rescale loop (as cq4p-tile-super-blocks emits it): one leaf
// that rescales each group straight out of ZA: one multi-vector read of the
// group's ZA slice (its 64 partials in channel order), SCVTF x4, a multiply
// by the activation scale, one by the norms, then the add to the
// accumulators (four-vector load and store): the contract's order, no
// fused multiply-add. Nothing is stored from ZA and the partials buffer
// is gone.
// CHECK-LABEL: func.func @cq4p_gemv_fused
// CHECK-NOT: memref.alloca
// CHECK: call @cq4p_gemv_fused_sme_row_matmul(%{{.*}}) : (memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<?x2xf32>, memref<2x2x64xf32>, memref<1x64xf32>, index, index, index) -> ()
// CHECK-NOT: cq4p.rescale
// CHECK-LABEL: func.func private @cq4p_gemv_fused_sme_row_matmul
// CHECK: llvm.call_intrinsic "llvm.aarch64.sme.sdot.lane.za32.vg1x4.nxv16i8"
// CHECK: scf.for
// CHECK: %[[READ:.*]] = llvm.call_intrinsic "llvm.aarch64.sme.read.vg1x4.nxv4i32"
// CHECK: %[[SCALE:.*]] = vector.broadcast %{{.*}} : f32 to vector<[4]xf32>
// CHECK: %[[NORMS:.*]] = llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv4f32"
// CHECK: %[[FLOATS:.*]] = llvm.call_intrinsic "llvm.aarch64.sve.scvtf.x4.nxv4f32.nxv4i32"
// CHECK: %[[F0:.*]] = llvm.extractvalue %[[FLOATS]][0]
// CHECK: %[[ACC:.*]] = llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv4f32"
// CHECK: %[[A0:.*]] = llvm.extractvalue %[[ACC]][0]
// CHECK: %[[S0:.*]] = arith.mulf %[[F0]], %[[SCALE]] : vector<[4]xf32>
// CHECK: %[[T0:.*]] = arith.mulf %[[S0]], %{{.*}} : vector<[4]xf32>
// CHECK: arith.addf %[[A0]], %[[T0]] : vector<[4]xf32>
// CHECK-COUNT-3: arith.addf
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.st1.pn.x4.nxv4f32"
// CHECK-NOT: llvm.aarch64.sme.str
// CHECK: return
func.func @cq4p_gemv_fused(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                           %act: memref<1x256xi8>, %scales: memref<?x2xf32>,
                           %norms: memref<2x2x64xf32>, %accum: memref<1x64xf32>,
                           %sb: index, %row: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %partials = memref.alloca() : memref<2x1x64xi32>
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %c0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>
  scf.for %g = %c0 to %c2 step %c1 {
    %slice = memref.subview %partials[%g, 0, 0] [1, 1, 64] [1, 1, 1]
        : memref<2x1x64xi32> to memref<1x64xi32, strided<[64, 1], offset: ?>>
    cq4p.rescale %slice, %scales, %norms, %accum, %sb, %g, %row
        : memref<1x64xi32, strided<[64, 1], offset: ?>>, memref<?x2xf32>,
          memref<2x2x64xf32>, memref<1x64xf32>
  }
  return
}

// -----

// GEMM tile with its rescale loop: per group, row r of the tile is
// horizontal slice r of the four 32-bit ZA tiles, read with four MOVA and
// rescaled like the GEMV's; the group's norms are loaded once for its 16
// rows.
// CHECK-LABEL: func.func @cq4p_gemm_fused
// CHECK: call @cq4p_gemm_fused_sme_tile_matmul
// CHECK-LABEL: func.func private @cq4p_gemm_fused_sme_tile_matmul
// CHECK-COUNT-16: llvm.call_intrinsic "llvm.aarch64.sme.smopa.wide.nxv16i8"
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv4f32"
// CHECK-NOT: llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv4f32"
// CHECK-COUNT-4: llvm.call_intrinsic "llvm.aarch64.sme.read.horiz.nxv4i32"
// CHECK: vector.broadcast
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.scvtf.x4.nxv4f32.nxv4i32"
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.ld1.pn.x4.nxv4f32"
// CHECK: llvm.call_intrinsic "llvm.aarch64.sve.st1.pn.x4.nxv4f32"
// CHECK-COUNT-60: llvm.call_intrinsic "llvm.aarch64.sme.read.horiz.nxv4i32"
// CHECK-NOT: llvm.aarch64.sme.read.horiz
// CHECK-NOT: llvm.aarch64.sme.str
// CHECK: return
func.func @cq4p_gemm_fused(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                           %packed: memref<2x32x16x4xi8>, %scales: memref<16x2xf32>,
                           %norms: memref<2x2x64xf32>, %accum: memref<16x64xf32>,
                           %sb: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %partials = memref.alloca() : memref<2x16x64xi32>
  cq4p.panel_partials %panels, %cb, %packed, %partials, %sb, %c0, %c0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<2x32x16x4xi8>, memref<2x16x64xi32>
  scf.for %j = %c0 to %c2 step %c1 {
    %g = arith.addi %c0, %j : index
    %slice = memref.subview %partials[%j, 0, 0] [1, 16, 64] [1, 1, 1]
        : memref<2x16x64xi32> to memref<16x64xi32, strided<[64, 1], offset: ?>>
    cq4p.rescale %slice, %scales, %norms, %accum, %sb, %g, %c0
        : memref<16x64xi32, strided<[64, 1], offset: ?>>, memref<16x2xf32>,
          memref<2x2x64xf32>, memref<16x64xf32>
  }
  return
}

// -----

// A rescale loop of another shape (here over the groups in reverse) is not
// fused: the partials are stored from ZA and rescaled by cq4p.rescale.
// CHECK-LABEL: func.func @cq4p_gemv_not_fused
// CHECK: call @cq4p_gemv_not_fused_sme_row_partials
// CHECK: cq4p.rescale
func.func @cq4p_gemv_not_fused(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                               %act: memref<1x256xi8>, %scales: memref<?x2xf32>,
                               %norms: memref<2x2x64xf32>, %accum: memref<1x64xf32>,
                               %sb: index, %row: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %partials = memref.alloca() : memref<2x1x64xi32>
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row, %c0
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>
  scf.for %j = %c0 to %c2 step %c1 {
    %g = arith.subi %c1, %j : index
    %slice = memref.subview %partials[%g, 0, 0] [1, 1, 64] [1, 1, 1]
        : memref<2x1x64xi32> to memref<1x64xi32, strided<[64, 1], offset: ?>>
    cq4p.rescale %slice, %scales, %norms, %accum, %sb, %g, %row
        : memref<1x64xi32, strided<[64, 1], offset: ?>>, memref<?x2xf32>,
          memref<2x2x64xf32>, memref<1x64xf32>
  }
  return
}
