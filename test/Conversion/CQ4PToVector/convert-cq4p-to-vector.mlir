// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-ssse3 | FileCheck %s --check-prefix=SSSE3
// RUN: cq4p-opt %s -convert-cq4p-to-vector | FileCheck %s --check-prefix=GENERIC
// RUN: cq4p-opt %s -convert-cq4p-to-vector="x86-ssse3 x86-vnni" | FileCheck %s --check-prefix=VNNI

// The host's panel dot: the same pair-zip structure; the lookup is pshufb on
// x86 with SSSE3 and a select per level otherwise; the 4-way dot is
// generic (sign extension, multiply, lane sums).
// SSSE3-LABEL: func.func @panel_dot
// SSSE3: llvm.call_intrinsic "llvm.x86.ssse3.pshuf.b.128"
// SSSE3: arith.extsi %{{.*}} : vector<16xi8> to vector<16xi32>
// SSSE3: arith.muli %{{.*}} : vector<16xi32>
// SSSE3: vector.shuffle %{{.*}} [0, 4, 8, 12]
// SSSE3-NOT: arm_neon
// VNNI-LABEL: func.func @panel_dot
// VNNI-DAG: %[[BIAS:.*]] = arith.constant dense<-128> : vector<16xi8>
// VNNI-DAG: %[[ZERO:.*]] = arith.constant dense<0> : vector<4xi32>
// VNNI: %[[W:.*]] = llvm.call_intrinsic "llvm.x86.ssse3.pshuf.b.128"
// VNNI: %[[CORR:.*]] = llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.128"(%[[ZERO]], %[[BIAS]], %[[W]])
// VNNI: %[[A:.*]] = arith.xori %{{.*}}, %[[BIAS]] : vector<16xi8>
// VNNI: %[[DOT:.*]] = llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.128"(%{{.*}}, %[[A]], %[[W]])
// VNNI: arith.subi %[[DOT]], %[[CORR]] : vector<4xi32>
// VNNI-NOT: arith.extsi
// GENERIC-LABEL: func.func @panel_dot
// GENERIC-NOT: llvm.call_intrinsic
// GENERIC: arith.cmpi eq
// GENERIC: arith.select
func.func @panel_dot(%panels: memref<1x1x8x128xi8>, %cb: memref<16xi8>,
                     %act: memref<?x32xi8>, %partials: memref<1x64xi32>,
                     %sb: index, %g: index, %row: index) {
  cq4p.panel_dot %panels, %cb, %act, %partials, %sb, %g, %row
      : memref<1x1x8x128xi8>, memref<16xi8>, memref<?x32xi8>, memref<1x64xi32>
  return
}
