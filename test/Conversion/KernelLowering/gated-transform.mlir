// RUN: cq4p-opt %s -convert-cq4p-to-vector | FileCheck %s --check-prefix=GENERIC
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=avx2 | FileCheck %s --check-prefix=AVX2
// RUN: cq4p-opt %s -convert-cq4p-to-neon | FileCheck %s --check-prefix=NEON

// A gated activation transform (a dense MLP's down projection): the gate
// and up pieces are loaded side by side and act(gate) * up is formed before
// the input scale, with cq4p.glu's operations in its order (silu: g / (1 +
// exp(-g))); the exp and tanh are polynomials (no math.exp or math.tanh
// left for a libm call). The rest is the ungated transform.

// GENERIC-LABEL: func.func @silu
// GENERIC: scf.for %[[G:.*]] = %{{.*}} to %{{.*}} step
// GENERIC: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step
// GENERIC: %[[GATE:.*]] = vector.load %arg0[%[[ROW]], %{{.*}}] : memref<?x64xf32>, vector<16xf32>
// GENERIC: %[[UP:.*]] = vector.load %arg1[%[[ROW]], %{{.*}}] : memref<?x64xf32>, vector<16xf32>
// GENERIC: %[[NEG:.*]] = arith.negf %{{.*}} : vector<4xf32>
// GENERIC: %[[SILU:.*]] = arith.divf %{{.*}}, %{{.*}} : vector<4xf32>
// GENERIC: %[[GATED:.*]] = arith.mulf %[[SILU]], %{{.*}} : vector<4xf32>
// GENERIC: arith.mulf %[[GATED]], %{{.*}} : vector<4xf32>
// GENERIC: vector.reduction <maximumf>
// GENERIC-NOT: math.exp
// GENERIC-LABEL: func.func @gelu
// GENERIC-NOT: math.tanh
// GENERIC: vector.reduction <maximumf>
// GENERIC-NOT: math.tanh

// AVX2-LABEL: func.func @silu
// AVX2: vector.load %arg0{{.*}} : memref<?x64xf32>, vector<8xf32>
// AVX2: vector.load %arg1{{.*}} : memref<?x64xf32>, vector<8xf32>
// AVX2: arith.negf %{{.*}} : vector<8xf32>
// AVX2: arith.divf %{{.*}} : vector<8xf32>
// AVX2: vector.reduction <maxsi>
// AVX2-NOT: math.exp

// NEON-LABEL: func.func @silu
// NEON: arith.negf %{{.*}} : vector<4xf32>
// NEON: arith.divf %{{.*}} : vector<4xf32>
// NEON: cq4p_intr.aarch64.neon.fcvtns
// NEON: cq4p_intr.aarch64.neon.tbl2
// NEON-NOT: math.exp
func.func @silu(%g: memref<?x64xf32>, %u: memref<?x64xf32>, %isr: memref<64xf16>,
                %left: memref<32xi8>, %right: memref<32xi8>, %perm: memref<32xi32>,
                %act: memref<?x64xi8>, %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %g gated by %u : memref<?x64xf32>, %isr, %left, %right, %perm,
      %act, %scales, %g0, %g1 {gating = #cq4p.activation<silu>, group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<32xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}

func.func @gelu(%g: memref<?x64xf32>, %u: memref<?x64xf32>, %isr: memref<64xf16>,
                %left: memref<32xi8>, %right: memref<32xi8>, %perm: memref<32xi32>,
                %act: memref<?x64xi8>, %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %g gated by %u : memref<?x64xf32>, %isr, %left, %right, %perm,
      %act, %scales, %g0, %g1 {gating = #cq4p.activation<gelu_tanh>, group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<32xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}
