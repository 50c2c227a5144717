// RUN: cq4p-opt %s -convert-cq4p-to-arm-sme | FileCheck %s

// The partials of every group of a super-block move into a streaming leaf:
// ZT0 from the int8 codebook, per kg-block two LUTI4 x2 and one
// multi-vector SDOT (lane = the kg-block's place among 4) into the group's
// ZA slice, 16 groups per ZA fill, stored with `str za`.
// CHECK-LABEL: func.func @cq4p_gemv_100x256_gs128
// CHECK: call @cq4p_gemv_100x256_gs128_sme_partials(%{{.*}}) : (memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<1x2x64xi32>, index, index) -> ()
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
// CHECK-COUNT-2: llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8"
// CHECK: llvm.call_intrinsic "llvm.aarch64.sme.sdot.lane.za32.vg1x4.nxv16i8"
// CHECK-COUNT-6: llvm.call_intrinsic "llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8"
// CHECK: scf.for
// CHECK-COUNT-4: llvm.call_intrinsic "llvm.aarch64.sme.str"
func.func @cq4p_gemv_100x256_gs128(%panels: memref<2x2x32x128xi8>, %cb: memref<16xi8>,
                                   %act: memref<1x256xi8>, %partials: memref<1x2x64xi32>,
                                   %sb: index, %row: index) {
  cq4p.panel_partials %panels, %cb, %act, %partials, %sb, %row
      : memref<2x2x32x128xi8>, memref<16xi8>, memref<1x256xi8>, memref<1x2x64xi32>
  return
}
