// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-arm-sme -convert-cq4p-to-neon \
// RUN:   | FileCheck %s --check-prefix=LOWERED

// The Hadamard activation transform on SME2: one call of a streaming leaf
// per kernel call, with the op's operands. In the leaf, per call: the
// in-vector stages' TBL indices (lane ^ h) and signs, the left signs and
// 1/sqrt(gs) * right, the permutation's byte indices; per group isr * left;
// per row the group's 8 vectors in two four-vector LD1W, 4 in-vector stages
// of TBL and FMA per vector, 3 stages of FADD/FSUB between vectors, the
// magnitudes' integer max, the scale, FDIV per vector, FRINTN, FCVTZS and
// SQCVT per four vectors, and one two-vector TBL per 64 output bytes.
// CHECK-LABEL: func.func @quantize_128
// CHECK-NOT: cq4p.quantize_activations
// CHECK: call @quantize_128_sme_quantize(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8)
// CHECK-SAME: : (memref<?x256xf32>, memref<256xf16>, memref<128xi8>, memref<128xi8>, memref<128xi32>, memref<?x256xi8>, memref<?x2xf32>, index, index) -> ()
// CHECK-LABEL: func.func private @quantize_128_sme_quantize
// CHECK-SAME: attributes {cq4p.sme_leaf}
// CHECK: cq4p_intr.aarch64.sve.ptrue.c32
// CHECK: llvm.intr.stepvector : vector<[4]xi32>
// CHECK-COUNT-16: llvm.load {{.*}} : !llvm.ptr -> vector<[4]xi8>
// CHECK-COUNT-8: llvm.load {{.*}} : !llvm.ptr -> vector<[4]xi32>
// CHECK-COUNT-2: llvm.load {{.*}} : !llvm.ptr -> vector<[16]xi8>
// CHECK: scf.for
// CHECK-COUNT-8: llvm.load {{.*}} : !llvm.ptr -> vector<[4]xf16>
// CHECK: scf.for
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4 {{.*}} -> !llvm.struct<(vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>, vector<[4]xf32>)>
// CHECK-COUNT-4: arith.mulf {{.*}} : vector<[4]xf32>
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK-COUNT-4: arith.mulf {{.*}} : vector<[4]xf32>
// CHECK-COUNT-32: cq4p_intr.aarch64.sve.tbl
// CHECK-NOT: cq4p_intr.aarch64.sve.tbl
// CHECK: arith.addf {{.*}} : vector<[4]xf32>
// CHECK: arith.subf {{.*}} : vector<[4]xf32>
// CHECK: vector.reduction <maxsi>
// CHECK: arith.maximumf
// CHECK: llvm.store {{.*}} : f32, !llvm.ptr
// CHECK-COUNT-4: arith.divf {{.*}} : vector<[4]xf32>
// CHECK: cq4p_intr.aarch64.sve.frintn.x4
// CHECK: cq4p_intr.aarch64.sve.fcvtzs.x4
// CHECK: cq4p_intr.aarch64.sve.sqcvt.x4 {{.*}} -> vector<[16]xi8>
// CHECK: cq4p_intr.aarch64.sve.sqcvt.x4
// CHECK: cq4p_intr.aarch64.sve.tbl2
// CHECK-NOT: arith.ori
// CHECK: llvm.store {{.*}} : vector<[16]xi8>, !llvm.ptr
// CHECK: cq4p_intr.aarch64.sve.tbl2
// CHECK-NOT: arith.ori
// CHECK: llvm.store {{.*}} : vector<[16]xi8>, !llvm.ptr
// CHECK-NOT: cq4p_intr.aarch64.sve.tbl2
// CHECK: return
// LOWERED-LABEL: func.func @quantize_128
// LOWERED-NOT: cq4p_intr.aarch64.neon
// LOWERED: call @quantize_128_sme_quantize
func.func @quantize_128(%x: memref<?x256xf32>, %isr: memref<256xf16>, %left: memref<128xi8>,
                        %right: memref<128xi8>, %perm: memref<128xi32>, %act: memref<?x256xi8>,
                        %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %x, %isr, %left, %right, %perm, %act, %scales, %g0, %g1
      {group_size = 128 : i64}
      : memref<?x256xf32>, memref<256xf16>, memref<128xi8>, memref<128xi8>, memref<128xi32>,
        memref<?x256xi8>, memref<?x2xf32>
  return
}

// -----

// Groups of 256: four byte vectors, each output vector two two-vector TBL
// (the first 128 bytes and the last) or-ed.
// CHECK-LABEL: func.func private @quantize_256_sme_quantize
// CHECK: cq4p_intr.aarch64.sve.tbl2
// CHECK-NEXT: cq4p_intr.aarch64.sve.tbl2
// CHECK-NEXT: arith.ori {{.*}} : vector<[16]xi8>
func.func @quantize_256(%x: memref<?x256xf32>, %isr: memref<256xf16>, %left: memref<256xi8>,
                        %right: memref<256xi8>, %perm: memref<256xi32>, %act: memref<?x256xi8>,
                        %scales: memref<?x1xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %x, %isr, %left, %right, %perm, %act, %scales, %g0, %g1
      {group_size = 256 : i64}
      : memref<?x256xf32>, memref<256xf16>, memref<256xi8>, memref<256xi8>, memref<256xi32>,
        memref<?x256xi8>, memref<?x1xf32>
  return
}

// -----

// Gated (silu): the gate and up rows load four vectors at a time and
// act(gate) * up is formed before the input scale, cq4p.glu's operations in
// its order (activateLanes: x sigmoid(x) from expNonPositive of -|x|, no
// math.exp).
// CHECK-LABEL: func.func @silu
// CHECK: call @silu_sme_quantize_silu(%arg0, %arg1,
// CHECK-LABEL: func.func private @silu_sme_quantize_silu
// CHECK: scf.for
// CHECK: %[[GATE:.*]] = llvm.extractvalue %{{.*}}[3]
// CHECK: cq4p_intr.aarch64.sve.ld1.pn.x4
// CHECK: math.absf %{{.*}} : vector<[4]xf32>
// CHECK: arith.negf %{{.*}} : vector<[4]xf32>
// CHECK: arith.maximumf %{{.*}} : vector<[4]xf32>
// CHECK: arith.cmpf olt, %{{.*}} : vector<[4]xf32>
// CHECK: arith.select
// CHECK: arith.divf %{{.*}} : vector<[4]xf32>
// LOWERED-LABEL: func.func private @silu_sme_quantize_silu
// LOWERED-NOT: math.exp
// LOWERED: cq4p_intr.aarch64.sve.sqcvt.x4
// LOWERED-NOT: math.exp
func.func @silu(%g: memref<?x128xf32>, %u: memref<?x128xf32>, %isr: memref<128xf16>,
                %left: memref<64xi8>, %right: memref<64xi8>, %perm: memref<64xi32>,
                %act: memref<?x128xi8>, %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %g gated by %u : memref<?x128xf32>, %isr, %left, %right, %perm,
      %act, %scales, %g0, %g1 {gating = #cq4p.activation<silu>, group_size = 64 : i64}
      : memref<?x128xf32>, memref<128xf16>, memref<64xi8>, memref<64xi8>, memref<64xi32>,
        memref<?x128xi8>, memref<?x2xf32>
  return
}

// -----

// Gated (gelu_tanh): x sigmoid(2u) from the same exponential, no tanh.
// CHECK-LABEL: func.func private @gelu_sme_quantize_gelu_tanh
// CHECK-NOT: math.tanh
// CHECK: math.absf %{{.*}} : vector<[4]xf32>
// CHECK: arith.divf %{{.*}} : vector<[4]xf32>
// CHECK-NOT: math.tanh
// LOWERED-LABEL: func.func private @gelu_sme_quantize_gelu_tanh
// LOWERED-NOT: math.tanh
func.func @gelu(%g: memref<?x128xf32>, %u: memref<?x128xf32>, %isr: memref<128xf16>,
                %left: memref<128xi8>, %right: memref<128xi8>, %perm: memref<128xi32>,
                %act: memref<?x128xi8>, %scales: memref<?x1xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %g gated by %u : memref<?x128xf32>, %isr, %left, %right, %perm,
      %act, %scales, %g0, %g1 {gating = #cq4p.activation<gelu_tanh>, group_size = 128 : i64}
      : memref<?x128xf32>, memref<128xf16>, memref<128xi8>, memref<128xi8>, memref<128xi32>,
        memref<?x128xi8>, memref<?x1xf32>
  return
}

// -----

// @negative: groups of 32 fill no 64-byte vector: not refused, the op stays
// for the NEON lowering (no leaf).
// CHECK-LABEL: func.func @negative
// CHECK: cq4p.quantize_activations
// CHECK-NOT: sme_quantize
// LOWERED-LABEL: func.func @negative
// LOWERED: cq4p_intr.aarch64.neon.tbl2
// LOWERED-NOT: sme_quantize
func.func @negative(%x: memref<?x64xf32>, %isr: memref<64xf16>, %left: memref<32xi8>,
                    %right: memref<32xi8>, %perm: memref<32xi32>, %act: memref<?x64xi8>,
                    %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %x, %isr, %left, %right, %perm, %act, %scales, %g0, %g1
      {group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<32xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}
