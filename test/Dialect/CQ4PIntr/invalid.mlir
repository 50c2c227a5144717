// RUN: cq4p-opt %s -split-input-file -verify-diagnostics

// The types the cq4p_intr operations refuse: each intrinsic's operands and
// results as LLVM declares them.

llvm.func @tbl1_on_8_bytes(%t: vector<16xi8>, %i: vector<8xi8>) {
  // expected-error @+1 {{operand #1 must be vector of 8-bit signless integer values of length 16}}
  %0 = cq4p_intr.aarch64.neon.tbl1 %t, %i : (vector<16xi8>, vector<8xi8>) -> vector<8xi8>
  llvm.return
}

// -----

llvm.func @ld1x4_of_three(%p: !llvm.ptr) {
  // expected-error @+1 {{result #0 must be a literal struct of 4 vector of 8-bit signless integer values of length 16}}
  %0 = cq4p_intr.aarch64.neon.ld1x4 %p : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<16xi8>, vector<16xi8>)>
  llvm.return
}

// -----

llvm.func @ld2_of_mixed(%p: !llvm.ptr) {
  // expected-error @+1 {{result #0 must be a literal struct of 2 vector of 8-bit signless integer values of length 16}}
  %0 = cq4p_intr.aarch64.neon.ld2 %p : (!llvm.ptr) -> !llvm.struct<(vector<16xi8>, vector<8xi16>)>
  llvm.return
}

// -----

llvm.func @sqxtn_to_the_same_width(%w: vector<4xi32>) {
  // expected-error @+1 {{result #0 must be vector of 16-bit signless integer or 8-bit signless integer values of length 4/8, but got 'vector<4xi32>'}}
  %0 = cq4p_intr.aarch64.neon.sqxtn %w : (vector<4xi32>) -> vector<4xi32>
  llvm.return
}

// -----

llvm.func @sqxtn_changing_the_lanes(%h: vector<8xi16>) {
  // expected-error @+1 {{failed to verify that the source has the result's lanes at twice the width}}
  %0 = cq4p_intr.aarch64.neon.sqxtn %h : (vector<8xi16>) -> vector<4xi16>
  llvm.return
}

// -----

llvm.func @tbx4_fallback_of_another_type(%f: vector<8xi8>, %t: vector<16xi8>) {
  // expected-error @+1 {{operand #0 must be vector of 8-bit signless integer values of length 16}}
  %0 = cq4p_intr.aarch64.neon.tbx4 %f, %t, %t, %t, %t, %t : (vector<8xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>, vector<16xi8>) -> vector<16xi8>
  llvm.return
}

// -----

llvm.func @luti4_segment_out_of_range(%b: vector<[16]xi8>) {
  // expected-error @+1 {{attribute 'segment' failed to satisfy constraint: 32-bit signless integer attribute whose minimum value is 0 whose maximum value is 1}}
  %0 = cq4p_intr.aarch64.sme.luti4.lane.zt.x2 %b {segment = 2 : i32, zt = 0 : i32} : (vector<[16]xi8>) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  llvm.return
}

// -----

llvm.func @ldr_zt1(%p: !llvm.ptr) {
  // expected-error @+1 {{attribute 'zt' failed to satisfy constraint: 32-bit signless integer attribute whose minimum value is 0 whose maximum value is 0}}
  cq4p_intr.aarch64.sme.ldr.zt %p {zt = 1 : i32} : (!llvm.ptr) -> ()
  llvm.return
}

// -----

llvm.func @luti4_on_fixed_vectors(%b: vector<16xi8>) {
  // expected-error @+1 {{operand #0 must be scalable vector of 8-bit signless integer values of length 16}}
  %0 = cq4p_intr.aarch64.sme.luti4.lane.zt.x2 %b {segment = 0 : i32, zt = 0 : i32} : (vector<16xi8>) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  llvm.return
}

// -----

llvm.func @fmla_lane_of_int_vectors(%s: i32, %w: vector<[4]xi32>) {
  // expected-error @+1 {{operand #1 must be scalable vector of 32-bit float values of length 4}}
  cq4p_intr.aarch64.sme.fmla.lane.vg1x4 %s, %w, %w, %w, %w, %w {lane = 0 : i32} : (i32, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>, vector<[4]xi32>) -> ()
  llvm.return
}

// -----

llvm.func @sdot_lane_out_of_range(%s: i32, %b: vector<[16]xi8>) {
  // expected-error @+1 {{attribute 'lane' failed to satisfy constraint: 32-bit signless integer attribute whose minimum value is 0 whose maximum value is 3}}
  cq4p_intr.aarch64.sme.sdot.lane.za32.vg1x4 %s, %b, %b, %b, %b, %b {lane = 4 : i32} : (i32, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>) -> ()
  llvm.return
}

// -----

llvm.func @ld1_pn_with_a_predicate(%pg: vector<[16]xi1>, %p: !llvm.ptr) {
  // expected-error @+1 {{operand #0 must be a predicate-as-counter (!llvm.target<"aarch64.svcount">)}}
  %0 = cq4p_intr.aarch64.sve.ld1.pn.x2 %pg, %p : (vector<[16]xi1>, !llvm.ptr) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>)>
  llvm.return
}

// -----

llvm.func @st1_pn_of_mixed_vectors(%w: vector<[4]xi32>, %f: vector<[4]xf32>, %p: !llvm.ptr) {
  %pn = cq4p_intr.aarch64.sve.ptrue.c32 : () -> !llvm.target<"aarch64.svcount">
  // expected-error @+1 {{failed to verify that all of {v0, v1, v2, v3} have same type}}
  cq4p_intr.aarch64.sve.st1.pn.x4 %w, %f, %w, %w, %pn, %p : (vector<[4]xi32>, vector<[4]xf32>, vector<[4]xi32>, vector<[4]xi32>, !llvm.target<"aarch64.svcount">, !llvm.ptr) -> ()
  llvm.return
}

// -----

llvm.func @read_vg1x4_of_bytes(%s: i32) {
  // expected-error @+1 {{result #0 must be a literal struct of 4 scalable vector of 32-bit signless integer values of length 4}}
  %0 = cq4p_intr.aarch64.sme.read.vg1x4 %s : (i32) -> !llvm.struct<(vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>, vector<[16]xi8>)>
  llvm.return
}

// -----

llvm.func @vpdpbusd_on_words(%d: vector<16xi32>) {
  // expected-error @+1 {{operand #1 must be vector of 8-bit signless integer values of length 64}}
  %0 = cq4p_intr.x86.avx512.vpdpbusd.512 %d, %d, %d : (vector<16xi32>, vector<16xi32>, vector<16xi32>) -> vector<16xi32>
  llvm.return
}

// -----

llvm.func @pmadd_wd_result_of_words(%w: vector<16xi16>) {
  // expected-error @+1 {{result #0 must be vector of 32-bit signless integer values of length 8}}
  %0 = cq4p_intr.x86.avx2.pmadd.wd %w, %w : (vector<16xi16>, vector<16xi16>) -> vector<16xi16>
  llvm.return
}

// -----

llvm.func @opaque_vector(%v: vector<16xi8>) {
  // expected-error @+1 {{operand #0 must be signless integer or LLVM pointer type}}
  %0 = cq4p_intr.opaque %v : vector<16xi8>
  llvm.return
}

// -----

llvm.func @fmlal_lane_out_of_range(%s: i32, %h: vector<[8]xf16>) {
  // expected-error @+1 {{attribute 'lane' failed to satisfy constraint: 32-bit signless integer attribute whose minimum value is 0 whose maximum value is 7}}
  cq4p_intr.aarch64.sme.fmlal.lane.vg2x4 %s, %h, %h, %h, %h, %h {lane = 8 : i32} : (i32, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>, vector<[8]xf16>) -> ()
  llvm.return
}

// -----

llvm.func @fcvt_of_fp32(%f: vector<[4]xf32>, %pg: vector<[4]xi1>) {
  // expected-error @+1 {{operand #2 must be scalable vector of 16-bit float values of length 8}}
  %0 = cq4p_intr.aarch64.sve.fcvt.f32f16 %f, %pg, %f : (vector<[4]xf32>, vector<[4]xi1>, vector<[4]xf32>) -> vector<[4]xf32>
  llvm.return
}
