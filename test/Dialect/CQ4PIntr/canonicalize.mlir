// RUN: cq4p-opt %s -canonicalize -cse | FileCheck %s

// What canonicalization and CSE may and may not do with the cq4p_intr
// operations: the ZA and ZT0 operations, which write state no MLIR resource
// models, and the stores stay although nothing uses a result; unused pure
// operations and loads go; identical pure lookups merge.

// CHECK-LABEL: llvm.func @effects
llvm.func @effects(%p: !llvm.ptr, %s: i32, %b: vector<[16]xi8>, %f: vector<[4]xf32>,
                   %t: vector<16xi8>, %i: vector<16xi8>) -> vector<16xi8> {
  // CHECK: cq4p_intr.aarch64.sme.ldr.zt
  cq4p_intr.aarch64.sme.ldr.zt %p {zt = 0 : i32} : (!llvm.ptr) -> ()
  // CHECK-NEXT: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4
  cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %s, %b, %b, %b, %b, %b {lane = 0 : i32} : (i32, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> ()
  // CHECK-NEXT: cq4p_intr.aarch64.sme.luti4.lane.zt.x2
  %unused_lookup = cq4p_intr.aarch64.sme.luti4.lane.zt.x2 %b {segment = 0 : i32, zt = 0 : i32} : (vector<[16]xi8>) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  // CHECK-NEXT: %[[PN:.*]] = cq4p_intr.aarch64.sve.ptrue.c32
  %pn = cq4p_intr.aarch64.sve.ptrue.c32 : () -> !llvm.target<"aarch64.svcount">
  %pn_again = cq4p_intr.aarch64.sve.ptrue.c32 : () -> !llvm.target<"aarch64.svcount">
  %unused_load = cq4p_intr.aarch64.sve.ld1.pn.x4 %pn, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  // CHECK-NEXT: cq4p_intr.aarch64.sve.st1.pn.x4 {{.*}}, %[[PN]], %{{.*}}
  cq4p_intr.aarch64.sve.st1.pn.x4 %f, %f, %f, %f, %pn_again, %p : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, !llvm.target<"aarch64.svcount">, !llvm.ptr) -> ()
  // CHECK-NEXT: %[[R:.*]] = cq4p_intr.aarch64.neon.tbl1
  %r0 = cq4p_intr.aarch64.neon.tbl1 %t, %i : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  %r1 = cq4p_intr.aarch64.neon.tbl1 %t, %i : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK-NEXT: %[[SUM:.*]] = llvm.add %[[R]], %[[R]]
  %sum = llvm.add %r0, %r1 : vector<16xi8>
  // CHECK-NEXT: llvm.return %[[SUM]]
  llvm.return %sum : vector<16xi8>
}
