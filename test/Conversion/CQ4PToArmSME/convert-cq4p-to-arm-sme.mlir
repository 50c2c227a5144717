// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme | FileCheck %s

// GEMV: the partials of every group of a super-block in one streaming leaf:
// ZT0 from the int8 codebook, per kg-block two LUTI4 x2 and one multi-vector
// SDOT (lane = the kg-block's place among 4) into the group's ZA slice,
// 16 groups per ZA fill, stored with `str za`.
// CHECK-LABEL: func.func @cq4p_gemv_100x256_gs128
// CHECK: call @cq4p_gemv_100x256_gs128_sme_partials(%{{.*}}) : (memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<2x1x64xi32>, index, index, index) -> ()
// CHECK-NOT: cq4p.panel_partials
// CHECK-LABEL: func.func private @cq4p_gemv_100x256_gs128_sme_partials
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: memref.alloca() : memref<16xi32>
// CHECK: arith.extui %{{.*}} : i8 to i32
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
// CHECK-LABEL: func.func private @cq4p_gemm_100x256_gs128_sme_partials
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
