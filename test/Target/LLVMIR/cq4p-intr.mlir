// RUN: cq4p-translate --cq4p-to-llvmir %s -split-input-file | FileCheck %s

// Each cq4p_intr operation becomes one call of its intrinsic, the overloaded
// ones named by their types; cq4p_intr.opaque an empty inline asm,
// cq4p_intr.x86.cpuid_vendor an inline asm of CPUID.

// CHECK-LABEL: define void @neon
llvm.func @neon(%p: !llvm.ptr, %t: vector<16xi8>, %i: vector<16xi8>,
                %w: vector<4xi32>, %h: vector<8xi16>, %f: vector<4xf32>) {
  // CHECK: call { <16 x i8>, <16 x i8>, <16 x i8>, <16 x i8> } @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr %0)
  %0 = cq4p_intr.aarch64.neon.ld1x4 %p : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>)>
  // CHECK: call { <16 x i8>, <16 x i8> } @llvm.aarch64.neon.ld2.v16i8.p0(ptr %0)
  %1 = cq4p_intr.aarch64.neon.ld2 %p : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>)>
  // CHECK: call <16 x i8> @llvm.aarch64.neon.tbl1.v16i8(<16 x i8> %1, <16 x i8> %2)
  %2 = cq4p_intr.aarch64.neon.tbl1 %t, %i : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: call <16 x i8> @llvm.aarch64.neon.tbl2.v16i8(<16 x i8> %1, <16 x i8> %1, <16 x i8> %2)
  %3 = cq4p_intr.aarch64.neon.tbl2 %t, %t, %i : (vector<16xi8>, vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: %[[TBL4:.*]] = call <16 x i8> @llvm.aarch64.neon.tbl4.v16i8(<16 x i8> %1, <16 x i8> %1, <16 x i8> %1, <16 x i8> %1, <16 x i8> %2)
  %4 = cq4p_intr.aarch64.neon.tbl4 %t, %t, %t, %t, %i : (vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: call <16 x i8> @llvm.aarch64.neon.tbx4.v16i8(<16 x i8> %[[TBL4]], <16 x i8> %1, <16 x i8> %1, <16 x i8> %1, <16 x i8> %1, <16 x i8> %2)
  %5 = cq4p_intr.aarch64.neon.tbx4 %4, %t, %t, %t, %t, %i : (vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: call <4 x i32> @llvm.aarch64.neon.fcvtns.v4i32.v4f32(<4 x float> %5)
  %6 = cq4p_intr.aarch64.neon.fcvtns %f : (vector<4xf32>) -> vector<4xi32>
  // CHECK: call <4 x i16> @llvm.aarch64.neon.sqxtn.v4i16(<4 x i32> %3)
  %7 = cq4p_intr.aarch64.neon.sqxtn %w : (vector<4xi32>) -> vector<4xi16>
  // CHECK: call <8 x i8> @llvm.aarch64.neon.sqxtn.v8i8(<8 x i16> %4)
  %8 = cq4p_intr.aarch64.neon.sqxtn %h : (vector<8xi16>) -> vector<8xi8>
  // CHECK: call ptr asm "", "=r,0"(ptr %0)
  %9 = cq4p_intr.opaque %p : !llvm.ptr
  // CHECK: call i64 asm "", "=r,0"(i64 64)
  %c = llvm.mlir.constant(64 : i64) : i64
  %10 = cq4p_intr.opaque %c : i64
  llvm.return
}

// -----

// CHECK-LABEL: define void @sme
llvm.func @sme(%p: !llvm.ptr, %s: i32, %b: vector<[16]xi8>, %w: vector<[4]xi32>,
               %f: vector<[4]xf32>, %pg: vector<[16]xi1>) {
  // CHECK: %[[PN8:.*]] = call target("aarch64.svcount") @llvm.aarch64.sve.ptrue.c8()
  %pn8 = cq4p_intr.aarch64.sve.ptrue.c8 : () -> !llvm.target<"aarch64.svcount">
  // CHECK: %[[PN32:.*]] = call target("aarch64.svcount") @llvm.aarch64.sve.ptrue.c32()
  %pn32 = cq4p_intr.aarch64.sve.ptrue.c32 : () -> !llvm.target<"aarch64.svcount">
  // CHECK: call void @llvm.aarch64.sme.ldr.zt(i32 0, ptr %0)
  cq4p_intr.aarch64.sme.ldr.zt %p {zt = 0 : i32} : (!llvm.ptr) -> ()
  // CHECK: call { <vscale x 16 x i8>, <vscale x 16 x i8> } @llvm.aarch64.sme.luti4.lane.zt.x2.nxv16i8(i32 0, <vscale x 16 x i8> %2, i32 1)
  %0 = cq4p_intr.aarch64.sme.luti4.lane.zt.x2 %b {segment = 1 : i32, zt = 0 : i32} : (vector<[16]xi8>) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  // CHECK: call void @llvm.aarch64.sme.sdot.lane.za32.vg1x4.nxv16i8(i32 %1, <vscale x 16 x i8> %2, <vscale x 16 x i8> %2, <vscale x 16 x i8> %2, <vscale x 16 x i8> %2, <vscale x 16 x i8> %2, i32 3)
  cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %s, %b, %b, %b, %b, %b {lane = 3 : i32} : (i32, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> ()
  // CHECK: call void @llvm.aarch64.sme.fmla.lane.vg1x4.nxv4f32(i32 %1, <vscale x 4 x float> %4, <vscale x 4 x float> %4, <vscale x 4 x float> %4, <vscale x 4 x float> %4, <vscale x 4 x float> %4, i32 2)
  cq4p_intr.aarch64.sme.fmla.lane.vg1x4 %s, %f, %f, %f, %f, %f {lane = 2 : i32} : (i32, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>) -> ()
  // CHECK: call { <vscale x 4 x i32>, <vscale x 4 x i32>, <vscale x 4 x i32>, <vscale x 4 x i32> } @llvm.aarch64.sme.read.vg1x4.nxv4i32(i32 %1)
  %1 = cq4p_intr.aarch64.sme.read.vg1x4 %s : (i32) -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  // CHECK: call { <vscale x 4 x i32>, <vscale x 4 x i32>, <vscale x 4 x i32>, <vscale x 4 x i32> } @llvm.aarch64.sme.read.ver.vg4.nxv4i32(i32 2, i32 %1)
  %2 = cq4p_intr.aarch64.sme.read.ver.vg4 %s {tile = 2 : i32} : (i32) -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  // CHECK: call <vscale x 16 x i8> @llvm.aarch64.sve.ld1rq.nxv16i8(<vscale x 16 x i1> %5, ptr %0)
  %3 = cq4p_intr.aarch64.sve.ld1rq %pg, %p : (vector<[16]xi1>, !llvm.ptr) -> vector<[16]xi8>
  // CHECK: call { <vscale x 16 x i8>, <vscale x 16 x i8> } @llvm.aarch64.sve.ld1.pn.x2.nxv16i8(target("aarch64.svcount") %[[PN8]], ptr %0)
  %4 = cq4p_intr.aarch64.sve.ld1.pn.x2 %pn8, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  // CHECK: call { <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float> } @llvm.aarch64.sve.ld1.pn.x4.nxv4f32(target("aarch64.svcount") %[[PN32]], ptr %0)
  %5 = cq4p_intr.aarch64.sve.ld1.pn.x4 %pn32, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  // CHECK: call void @llvm.aarch64.sve.st1.pn.x4.nxv4i32(<vscale x 4 x i32> %3, <vscale x 4 x i32> %3, <vscale x 4 x i32> %3, <vscale x 4 x i32> %3, target("aarch64.svcount") %[[PN32]], ptr %0)
  cq4p_intr.aarch64.sve.st1.pn.x4 %w, %w, %w, %w, %pn32, %p : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, !llvm.target<"aarch64.svcount">, !llvm.ptr) -> ()
  // CHECK: call { <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float> } @llvm.aarch64.sve.scvtf.x4.nxv4f32.nxv4i32(<vscale x 4 x i32> %3, <vscale x 4 x i32> %3, <vscale x 4 x i32> %3, <vscale x 4 x i32> %3)
  %6 = cq4p_intr.aarch64.sve.scvtf.x4 %w, %w, %w, %w : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  llvm.return
}

// -----

// The fp16 operations of the rotation leaf: PTRUE PN.H, the four-vector
// LD1H, FCVT/FCVTLT of the even and odd halves, the multi-vector FMLAL.
// CHECK-LABEL: define void @sme_halves
llvm.func @sme_halves(%p: !llvm.ptr, %s: i32, %h: vector<[8]xf16>, %f: vector<[4]xf32>,
                      %pg: vector<[4]xi1>) {
  // CHECK: %[[PN16:.*]] = call target("aarch64.svcount") @llvm.aarch64.sve.ptrue.c16()
  %pn16 = cq4p_intr.aarch64.sve.ptrue.c16 : () -> !llvm.target<"aarch64.svcount">
  // CHECK: call { <vscale x 8 x half>, <vscale x 8 x half>, <vscale x 8 x half>, <vscale x 8 x half> } @llvm.aarch64.sve.ld1.pn.x4.nxv8f16(target("aarch64.svcount") %[[PN16]], ptr %0)
  %0 = cq4p_intr.aarch64.sve.ld1.pn.x4 %pn16, %p : (!llvm.target<"aarch64.svcount">, !llvm.ptr) -> !llvm.struct<(vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>)>
  // CHECK: call <vscale x 4 x float> @llvm.aarch64.sve.fcvt.f32f16(<vscale x 4 x float> %3, <vscale x 4 x i1> %4, <vscale x 8 x half> %2)
  %1 = cq4p_intr.aarch64.sve.fcvt.f32f16 %f, %pg, %h : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
  // CHECK: call <vscale x 4 x float> @llvm.aarch64.sve.fcvtlt.f32f16(<vscale x 4 x float> %3, <vscale x 4 x i1> %4, <vscale x 8 x half> %2)
  %2 = cq4p_intr.aarch64.sve.fcvtlt.f32f16 %f, %pg, %h : (vector<[4]xf32>, vector<[4]xi1>, vector<[8]xf16>) -> vector<[4]xf32>
  // CHECK: call void @llvm.aarch64.sme.fmlal.lane.vg2x4.nxv8f16(i32 %1, <vscale x 8 x half> %2, <vscale x 8 x half> %2, <vscale x 8 x half> %2, <vscale x 8 x half> %2, <vscale x 8 x half> %2, i32 7)
  cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 %s, %h, %h, %h, %h, %h {lane = 7 : i32} : (i32, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>) -> ()
  llvm.return
}

// -----

// CHECK-LABEL: define void @x86
llvm.func @x86(%b16: vector<16xi8>, %b32: vector<32xi8>, %b64: vector<64xi8>,
               %w8: vector<8xi16>, %w16: vector<16xi16>, %w32: vector<32xi16>,
               %d8: vector<8xi32>, %d16: vector<16xi32>, %f16: vector<16xf32>, %m: i16) {
  // CHECK: call <16 x i8> @llvm.x86.ssse3.pshuf.b.128(<16 x i8> %0, <16 x i8> %0)
  %0 = cq4p_intr.x86.ssse3.pshuf.b.128 %b16, %b16 : (vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  // CHECK: call <32 x i8> @llvm.x86.avx2.pshuf.b(<32 x i8> %1, <32 x i8> %1)
  %1 = cq4p_intr.x86.avx2.pshuf.b %b32, %b32 : (vector<32xi8>, vector<32xi8>) -> vector<32xi8>
  // CHECK: call <64 x i8> @llvm.x86.avx512.pshuf.b.512(<64 x i8> %2, <64 x i8> %2)
  %2 = cq4p_intr.x86.avx512.pshuf.b.512 %b64, %b64 : (vector<64xi8>, vector<64xi8>) -> vector<64xi8>
  // CHECK: call <32 x i8> @llvm.x86.avx2.psign.b(<32 x i8> %1, <32 x i8> %1)
  %3 = cq4p_intr.x86.avx2.psign.b %b32, %b32 : (vector<32xi8>, vector<32xi8>) -> vector<32xi8>
  // CHECK: call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %1, <32 x i8> %1)
  %4 = cq4p_intr.x86.avx2.pmadd.ub.sw %b32, %b32 : (vector<32xi8>, vector<32xi8>) -> vector<16xi16>
  // CHECK: call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %4, <16 x i16> %4)
  %5 = cq4p_intr.x86.avx2.pmadd.wd %w16, %w16 : (vector<16xi16>, vector<16xi16>) -> vector<8xi32>
  // CHECK: call <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32> %6, <32 x i8> %1, <32 x i8> %1)
  %6 = cq4p_intr.x86.avx512.vpdpbusd.256 %d8, %b32, %b32 : (vector<8xi32>, vector<32xi8>, vector<32xi8>) -> vector<8xi32>
  // CHECK: call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> %7, <64 x i8> %2, <64 x i8> %2)
  %7 = cq4p_intr.x86.avx512.vpdpbusd.512 %d16, %b64, %b64 : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
  // CHECK: call <32 x i16> @llvm.x86.avx512.packssdw.512(<16 x i32> %7, <16 x i32> %7)
  %8 = cq4p_intr.x86.avx512.packssdw.512 %d16, %d16 : (vector<16xi32>, vector<16xi32>) -> vector<32xi16>
  // CHECK: call <64 x i8> @llvm.x86.avx512.packsswb.512(<32 x i16> %5, <32 x i16> %5)
  %9 = cq4p_intr.x86.avx512.packsswb.512 %w32, %w32 : (vector<32xi16>, vector<32xi16>) -> vector<64xi8>
  // CHECK: call <8 x i16> @llvm.x86.avx512.permvar.hi.128(<8 x i16> %3, <8 x i16> %3)
  %10 = cq4p_intr.x86.avx512.permvar.hi.128 %w8, %w8 : (vector<8xi16>, vector<8xi16>) -> vector<8xi16>
  // CHECK: call <16 x i16> @llvm.x86.avx512.permvar.hi.256(<16 x i16> %4, <16 x i16> %4)
  %11 = cq4p_intr.x86.avx512.permvar.hi.256 %w16, %w16 : (vector<16xi16>, vector<16xi16>) -> vector<16xi16>
  // CHECK: call <32 x i16> @llvm.x86.avx512.permvar.hi.512(<32 x i16> %5, <32 x i16> %5)
  %12 = cq4p_intr.x86.avx512.permvar.hi.512 %w32, %w32 : (vector<32xi16>, vector<32xi16>) -> vector<32xi16>
  // CHECK: call <32 x i16> @llvm.x86.avx512.vpermi2var.hi.512(<32 x i16> %5, <32 x i16> %5, <32 x i16> %5)
  %13 = cq4p_intr.x86.avx512.vpermi2var.hi.512 %w32, %w32, %w32 : (vector<32xi16>, vector<32xi16>, vector<32xi16>) -> vector<32xi16>
  // CHECK: call <16 x i32> @llvm.x86.avx512.mask.cvtps2dq.512(<16 x float> %8, <16 x i32> %7, i16 %9, i32 8)
  %14 = cq4p_intr.x86.avx512.mask.cvtps2dq.512 %f16, %d16, %m {rounding = 8 : i32} : (vector<16xf32>, vector<16xi32>, i16) -> vector<16xi32>
  llvm.return
}

// -----

// The streaming activation transform's TBL (one fp32 vector, and two byte
// vectors as one table), FRINTN, FCVTZS and SQCVT of four vectors.
// CHECK-LABEL: define void @sve_transform
llvm.func @sve_transform(%f: vector<[4]xf32>, %w: vector<[4]xi32>, %b: vector<[16]xi8>) {
  // CHECK: call <vscale x 4 x float> @llvm.aarch64.sve.tbl.nxv4f32(<vscale x 4 x float> %0, <vscale x 4 x i32> %1)
  %0 = cq4p_intr.aarch64.sve.tbl %f, %w : (vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
  // CHECK: call <vscale x 16 x i8> @llvm.aarch64.sve.tbl2.nxv16i8(<vscale x 16 x i8> %2, <vscale x 16 x i8> %2, <vscale x 16 x i8> %2)
  %1 = cq4p_intr.aarch64.sve.tbl2 %b, %b, %b : (vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> vector<[16]xi8>
  // CHECK: call { <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float> } @llvm.aarch64.sve.frintn.x4.nxv4f32(<vscale x 4 x float> %0, <vscale x 4 x float> %0, <vscale x 4 x float> %0, <vscale x 4 x float> %0)
  %2 = cq4p_intr.aarch64.sve.frintn.x4 %f, %f, %f, %f : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  // CHECK: call { <vscale x 4 x i32>, <vscale x 4 x i32>, <vscale x 4 x i32>, <vscale x 4 x i32> } @llvm.aarch64.sve.fcvtzs.x4.nxv4i32.nxv4f32(<vscale x 4 x float> %0, <vscale x 4 x float> %0, <vscale x 4 x float> %0, <vscale x 4 x float> %0)
  %3 = cq4p_intr.aarch64.sve.fcvtzs.x4 %f, %f, %f, %f : (vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>) -> !llvm.struct<(vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>)>
  // CHECK: call <vscale x 16 x i8> @llvm.aarch64.sve.sqcvt.x4.nxv4i32(<vscale x 4 x i32> %1, <vscale x 4 x i32> %1, <vscale x 4 x i32> %1, <vscale x 4 x i32> %1)
  %4 = cq4p_intr.aarch64.sve.sqcvt.x4 %w, %w, %w, %w : (vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>) -> vector<[16]xi8>
  llvm.return
}

// -----

// CHECK-LABEL: define void @sve_exp2
llvm.func @sve_exp2(%f: vector<[4]xf32>, %w: vector<[4]xi32>, %pg: vector<[4]xi1>, %s: i32) {
  // CHECK: %[[K:.*]] = call <vscale x 4 x i32> @llvm.aarch64.sve.fcvtzs.nxv4i32.nxv4f32(<vscale x 4 x i32> %1, <vscale x 4 x i1> %2, <vscale x 4 x float> %0)
  %0 = cq4p_intr.aarch64.sve.fcvtzs %w, %pg, %f : (vector<[4]xi32>, vector<[4]xi1>, vector<[4]xf32>) -> vector<[4]xi32>
  // CHECK: call <vscale x 4 x float> @llvm.aarch64.sve.fscale.nxv4f32(<vscale x 4 x i1> %2, <vscale x 4 x float> %0, <vscale x 4 x i32> %[[K]])
  %1 = cq4p_intr.aarch64.sve.fscale %pg, %f, %0 : (vector<[4]xi1>, vector<[4]xf32>, vector<[4]xi32>) -> vector<[4]xf32>
  // CHECK: call { <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float>, <vscale x 4 x float> } @llvm.aarch64.sme.read.hor.vg4.nxv4f32(i32 1, i32 %3)
  %2 = cq4p_intr.aarch64.sme.read.hor.vg4 %s {tile = 1 : i32} : (i32) -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
  llvm.return
}

// -----

// CHECK-LABEL: define i32 @cpuid_vendor
llvm.func @cpuid_vendor() -> i32 {
  // CHECK: %[[REGS:.*]] = call { i32, i32, i32, i32 } asm sideeffect "cpuid", "={ax},={bx},={cx},={dx},{ax},{cx}"(i32 0, i32 0)
  // CHECK: %[[EBX:.*]] = extractvalue { i32, i32, i32, i32 } %[[REGS]], 1
  // CHECK: ret i32 %[[EBX]]
  %0 = cq4p_intr.x86.cpuid_vendor : i32
  llvm.return %0 : i32
}
