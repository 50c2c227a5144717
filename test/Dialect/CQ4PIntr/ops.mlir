// RUN: cq4p-opt %s -split-input-file | cq4p-opt -split-input-file | FileCheck %s

// Round trip of every cq4p_intr operation: the types the verifier accepts.

// CHECK-LABEL: llvm.func @neon
llvm.func @neon(%p: !llvm.ptr, %t: vector<16xi8>, %i: vector<16xi8>,
                %w: vector<4xi32>, %h: vector<8xi16>, %f: vector<4xf32>) {
  // CHECK: cq4p_intr.aarch64.neon.ld1x4 %{{.*}} : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>)>
  %0 = cq4p_intr.aarch64.neon.ld1x4 %p : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>)>
  // CHECK: cq4p_intr.aarch64.neon.ld2 %{{.*}} : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>)>
  %1 = cq4p_intr.aarch64.neon.ld2 %p : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>)>
  // CHECK: cq4p_intr.aarch64.neon.tbl1 %{{.*}}, %{{.*}} : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  %2 = cq4p_intr.aarch64.neon.tbl1 %t, %i : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: cq4p_intr.aarch64.neon.tbl2
  %3 = cq4p_intr.aarch64.neon.tbl2 %t, %t, %i : (vector<16xi8>, vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: cq4p_intr.aarch64.neon.tbl4
  %4 = cq4p_intr.aarch64.neon.tbl4 %t, %t, %t, %t, %i : (vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: cq4p_intr.aarch64.neon.tbx4
  %5 = cq4p_intr.aarch64.neon.tbx4 %4, %t, %t, %t, %t, %i : (vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: cq4p_intr.aarch64.neon.fcvtns %{{.*}} : (vector<4xf32>) -> vector<4xi32>
  %6 = cq4p_intr.aarch64.neon.fcvtns %f : (vector<4xf32>) -> vector<4xi32>
  // CHECK: cq4p_intr.aarch64.neon.sqxtn %{{.*}} : (vector<4xi32>) -> vector<4xi16>
  %7 = cq4p_intr.aarch64.neon.sqxtn %w : (vector<4xi32>) -> vector<4xi16>
  // CHECK: cq4p_intr.aarch64.neon.sqxtn %{{.*}} : (vector<8xi16>) -> vector<8xi8>
  %8 = cq4p_intr.aarch64.neon.sqxtn %h : (vector<8xi16>) -> vector<8xi8>
  // CHECK: cq4p_intr.opaque %{{.*}} : !llvm.ptr
  %9 = cq4p_intr.opaque %p : !llvm.ptr
  // CHECK: cq4p_intr.opaque %{{.*}} : i64
  %c = llvm.mlir.constant(64 : i64) : i64
  %10 = cq4p_intr.opaque %c : i64
  llvm.return
}

// -----

// CHECK-LABEL: llvm.func @sme
llvm.func @sme(%p: !llvm.ptr, %s: i32, %b: vector<[16]xi8>, %w: vector<[4]xi32>,
               %f: vector<[4]xf32>, %pg: vector<[16]xi1>) {
  // CHECK: cq4p_intr.aarch64.sve.ptrue.c8 : () -> !llvm.target<"aarch64.svcount">
  %pn8 = cq4p_intr.aarch64.sve.ptrue.c8 : () -> !llvm.target<"aarch64.svcount">
  // CHECK: cq4p_intr.aarch64.sve.ptrue.c32 : () -> !llvm.target<"aarch64.svcount">
  %pn32 = cq4p_intr.aarch64.sve.ptrue.c32 : () -> !llvm.target<"aarch64.svcount">
  // CHECK: cq4p_intr.aarch64.sme.ldr.zt %{{.*}} {zt = 0 : i32} : (!llvm.ptr) -> ()
  cq4p_intr.aarch64.sme.ldr.zt %p {zt = 0 : i32} : (!llvm.ptr) -> ()
  // CHECK: cq4p_intr.aarch64.sme.luti4.lane.zt.x2 %{{.*}} {segment = 1 : i32, zt = 0 : i32}
  %0 = cq4p_intr.aarch64.sme.luti4.lane.zt.x2 %b {segment = 1 : i32, zt = 0 : i32} : (vector<[16]xi8>) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  // CHECK: cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 {{.*}} {lane = 3 : i32}
  cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %s, %b, %b, %b, %b, %b {lane = 3 : i32} : (i32, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> ()
  // CHECK: cq4p_intr.aarch64.sme.fmla.lane.vg1x4 {{.*}} {lane = 2 : i32}
  cq4p_intr.aarch64.sme.fmla.lane.vg1x4 %s, %f, %f, %f, %f, %f {lane = 2 : i32} : (i32, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>) -> ()
  // CHECK: cq4p_intr.aarch64.sme.read.vg1x4 %{{.*}} : (i32) -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  %1 = cq4p_intr.aarch64.sme.read.vg1x4 %s : (i32) -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  // CHECK: cq4p_intr.aarch64.sme.read.ver.vg4 %{{.*}} {tile = 2 : i32}
  %2 = cq4p_intr.aarch64.sme.read.ver.vg4 %s {tile = 2 : i32} : (i32) -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  // CHECK: cq4p_intr.aarch64.sve.ld1rq %{{.*}}, %{{.*}} : (vector<[16]xi1>, !llvm.ptr) -> vector<[16]xi8>
  %3 = cq4p_intr.aarch64.sve.ld1rq %pg, %p : (vector<[16]xi1>, !llvm.ptr) -> vector<[16]xi8>
  // CHECK: cq4p_intr.aarch64.sve.ld1.pn.x2
  %4 = cq4p_intr.aarch64.sve.ld1.pn.x2 %pn8, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  // CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 {{.*}} -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>)>
  %5 = cq4p_intr.aarch64.sve.ld1.pn.x4 %pn8, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>)>
  // CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 {{.*}} -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  %6 = cq4p_intr.aarch64.sve.ld1.pn.x4 %pn32, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  // CHECK: cq4p_intr.aarch64.sve.st1.pn.x4 {{.*}} : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, !llvm.target<"aarch64.svcount">, !llvm.ptr) -> ()
  cq4p_intr.aarch64.sve.st1.pn.x4 %f, %f, %f, %f, %pn32, %p : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, !llvm.target<"aarch64.svcount">, !llvm.ptr) -> ()
  // CHECK: cq4p_intr.aarch64.sve.st1.pn.x4 {{.*}} : (vector<[4]xi32>,
  cq4p_intr.aarch64.sve.st1.pn.x4 %w, %w, %w, %w, %pn32, %p : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, !llvm.target<"aarch64.svcount">, !llvm.ptr) -> ()
  // CHECK: cq4p_intr.aarch64.sve.scvtf.x4
  %7 = cq4p_intr.aarch64.sve.scvtf.x4 %w, %w, %w, %w : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  llvm.return
}

// -----

// CHECK-LABEL: llvm.func @sme_halves
llvm.func @sme_halves(%p: !llvm.ptr, %s: i32, %h: vector<[8]xf16>, %f: vector<[4]xf32>,
                      %pg: vector<[4]xi1>) {
  // CHECK: cq4p_intr.aarch64.sve.ptrue.c16 : () -> !llvm.target<"aarch64.svcount">
  %pn16 = cq4p_intr.aarch64.sve.ptrue.c16 : () -> !llvm.target<"aarch64.svcount">
  // CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 {{.*}} -> !llvm.struct<(vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>)>
  %0 = cq4p_intr.aarch64.sve.ld1.pn.x4 %pn16, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>)>
  // CHECK: cq4p_intr.aarch64.sve.fcvt.f32f16 %{{.*}}, %{{.*}}, %{{.*}} : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
  %1 = cq4p_intr.aarch64.sve.fcvt.f32f16 %f, %pg, %h : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
  // CHECK: cq4p_intr.aarch64.sve.fcvtlt.f32f16
  %2 = cq4p_intr.aarch64.sve.fcvtlt.f32f16 %f, %pg, %h : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
  // CHECK: cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 {{.*}} {lane = 7 : i32}
  cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 %s, %h, %h, %h, %h, %h {lane = 7 : i32} : (i32, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>) -> ()
  llvm.return
}

// -----

// CHECK-LABEL: llvm.func @x86
llvm.func @x86(%b16: vector<16xi8>, %b32: vector<32xi8>, %b64: vector<64xi8>,
               %w8: vector<8xi16>, %w16: vector<16xi16>, %w32: vector<32xi16>,
               %d8: vector<8xi32>, %d16: vector<16xi32>, %f16: vector<16xf32>, %m: i16) {
  // CHECK: cq4p_intr.x86.ssse3.pshuf.b.128
  %0 = cq4p_intr.x86.ssse3.pshuf.b.128 %b16, %b16 : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: cq4p_intr.x86.avx2.pshuf.b
  %1 = cq4p_intr.x86.avx2.pshuf.b %b32, %b32 : (vector<32xi8>, vector<32xi8>) -> vector<32xi8>
  // CHECK: cq4p_intr.x86.avx512.pshuf.b.512
  %2 = cq4p_intr.x86.avx512.pshuf.b.512 %b64, %b64 : (vector<64xi8>, vector<64xi8>) -> vector<64xi8>
  // CHECK: cq4p_intr.x86.avx2.psign.b
  %3 = cq4p_intr.x86.avx2.psign.b %b32, %b32 : (vector<32xi8>, vector<32xi8>) -> vector<32xi8>
  // CHECK: cq4p_intr.x86.avx2.pmadd.ub.sw %{{.*}}, %{{.*}} : (vector<32xi8>, vector<32xi8>) -> vector<16xi16>
  %4 = cq4p_intr.x86.avx2.pmadd.ub.sw %b32, %b32 : (vector<32xi8>, vector<32xi8>) -> vector<16xi16>
  // CHECK: cq4p_intr.x86.avx2.pmadd.wd %{{.*}}, %{{.*}} : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
  %5 = cq4p_intr.x86.avx2.pmadd.wd %w16, %w16 : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
  // CHECK: cq4p_intr.x86.avx512.vpdpbusd.256 {{.*}} : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
  %6 = cq4p_intr.x86.avx512.vpdpbusd.256 %d8, %b32, %b32 : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
  // CHECK: cq4p_intr.x86.avx512.vpdpbusd.512 {{.*}} : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
  %7 = cq4p_intr.x86.avx512.vpdpbusd.512 %d16, %b64, %b64 : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
  // CHECK: cq4p_intr.x86.avx512.packssdw.512 {{.*}} -> vector<32xi16>
  %8 = cq4p_intr.x86.avx512.packssdw.512 %d16, %d16 : (vector<16xi32>, vector<16xi32>) -> vector<32xi16>
  // CHECK: cq4p_intr.x86.avx512.packsswb.512 {{.*}} -> vector<64xi8>
  %9 = cq4p_intr.x86.avx512.packsswb.512 %w32, %w32 : (vector<32xi16>, vector<32xi16>) -> vector<64xi8>
  // CHECK: cq4p_intr.x86.avx512.permvar.hi.128
  %10 = cq4p_intr.x86.avx512.permvar.hi.128 %w8, %w8 : (vector<8xi16>, vector<8xi16>) -> vector<8xi16>
  // CHECK: cq4p_intr.x86.avx512.permvar.hi.256
  %11 = cq4p_intr.x86.avx512.permvar.hi.256 %w16, %w16 : (vector<16xi16>, vector<16xi16>) -> vector<16xi16>
  // CHECK: cq4p_intr.x86.avx512.permvar.hi.512
  %12 = cq4p_intr.x86.avx512.permvar.hi.512 %w32, %w32 : (vector<32xi16>, vector<32xi16>) -> vector<32xi16>
  // CHECK: cq4p_intr.x86.avx512.vpermi2var.hi.512
  %13 = cq4p_intr.x86.avx512.vpermi2var.hi.512 %w32, %w32, %w32 : (vector<32xi16>, vector<32xi16>, vector<32xi16>) -> vector<32xi16>
  // CHECK: cq4p_intr.x86.avx512.mask.cvtps2dq.512 {{.*}} {rounding = 8 : i32} : (vector<16xf32>, vector<16xi32>, i16) -> vector<16xi32>
  %14 = cq4p_intr.x86.avx512.mask.cvtps2dq.512 %f16, %d16, %m {rounding = 8 : i32} : (vector<16xf32>, vector<16xi32>, i16) -> vector<16xi32>
  llvm.return
}

// -----

// CHECK-LABEL: llvm.func @sve_transform
llvm.func @sve_transform(%f: vector<[4]xf32>, %w: vector<[4]xi32>, %b: vector<[16]xi8>) {
  // CHECK: cq4p_intr.aarch64.sve.tbl %{{.*}}, %{{.*}} : (vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
  %0 = cq4p_intr.aarch64.sve.tbl %f, %w : (vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
  // CHECK: cq4p_intr.aarch64.sve.tbl2 {{.*}} : (vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> vector<[16]xi8>
  %1 = cq4p_intr.aarch64.sve.tbl2 %b, %b, %b : (vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> vector<[16]xi8>
  // CHECK: cq4p_intr.aarch64.sve.frintn.x4 {{.*}} -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  %2 = cq4p_intr.aarch64.sve.frintn.x4 %f, %f, %f, %f : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  // CHECK: cq4p_intr.aarch64.sve.fcvtzs.x4 {{.*}} -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  %3 = cq4p_intr.aarch64.sve.fcvtzs.x4 %f, %f, %f, %f : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>) -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  // CHECK: cq4p_intr.aarch64.sve.sqcvt.x4 {{.*}} -> vector<[16]xi8>
  %4 = cq4p_intr.aarch64.sve.sqcvt.x4 %w, %w, %w, %w : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>) -> vector<[16]xi8>
  llvm.return
}

// -----

// The streaming softmax's power of two, and four rows of a ZA tile.
// CHECK-LABEL: llvm.func @sve_exp2
llvm.func @sve_exp2(%f: vector<[4]xf32>, %w: vector<[4]xi32>, %pg: vector<[4]xi1>, %s: i32) {
  // CHECK: cq4p_intr.aarch64.sve.fcvtzs %{{.*}}, %{{.*}}, %{{.*}} : (vector<[4]xi32>, vector<[4]xi1>, vector<[4]xf32>) -> vector<[4]xi32>
  %0 = cq4p_intr.aarch64.sve.fcvtzs %w, %pg, %f : (vector<[4]xi32>, vector<[4]xi1>, vector<[4]xf32>) -> vector<[4]xi32>
  // CHECK: cq4p_intr.aarch64.sve.fscale %{{.*}}, %{{.*}}, %{{.*}} : (vector<[4]xi1>, vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
  %1 = cq4p_intr.aarch64.sve.fscale %pg, %f, %0 : (vector<[4]xi1>, vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
  // CHECK: cq4p_intr.aarch64.sme.read.hor.vg4 %{{.*}} {tile = 1 : i32}
  %2 = cq4p_intr.aarch64.sme.read.hor.vg4 %s {tile = 1 : i32} : (i32) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  llvm.return
}

// -----

// CHECK-LABEL: llvm.func @cpuid_vendor
llvm.func @cpuid_vendor() -> i32 {
  // CHECK: cq4p_intr.x86.cpuid_vendor : i32
  %0 = cq4p_intr.x86.cpuid_vendor : i32
  llvm.return %0 : i32
}
