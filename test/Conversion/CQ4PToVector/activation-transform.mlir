// RUN: cq4p-opt %s -convert-cq4p-to-vector | FileCheck %s --check-prefix=GENERIC
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=ssse3 | FileCheck %s --check-prefix=SSSE3

// The activation transform on the host (ActivationTransform.cpp): the same
// vector code as on NEON up to the bytes; round-half-even, a saturating
// integer clamp and a truncation, then the output permutation: PSHUFB per
// 16-byte chunk or-ed together on x86, a byte gather from a stack copy of
// the group in generic code.
// GENERIC-LABEL: func.func @quantize
// GENERIC: scf.for %[[G:.*]] = %{{.*}} to %{{.*}} step
// GENERIC: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step
// GENERIC: arith.addf %{{.*}} : vector<4xf32>
// GENERIC: arith.subf %{{.*}} : vector<4xf32>
// GENERIC: vector.reduction <maximumf>, %{{.*}} : vector<4xf32> into f32
// GENERIC: memref.store %{{.*}}, %{{.*}}[%[[ROW]], %[[G]]] : memref<?x2xf32>
// GENERIC: arith.divf %{{.*}} : vector<4xf32>
// GENERIC: math.roundeven %{{.*}} : vector<4xf32>
// GENERIC: arith.fptosi %{{.*}} : vector<4xf32> to vector<4xi32>
// GENERIC: arith.maxsi
// GENERIC: arith.minsi
// GENERIC: arith.trunci %{{.*}} : vector<16xi32> to vector<16xi8>
// GENERIC: arith.muli %{{.*}} : vector<16xi8>
// GENERIC: %[[COPY:.*]] = memref.alloca() : memref<32xi8>
// GENERIC: scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// GENERIC: %[[P:.*]] = memref.load %{{.*}}[%[[J]]] : memref<32xi32>
// GENERIC: %[[SOURCE:.*]] = arith.index_castui %[[P]] : i32 to index
// GENERIC: memref.load %[[COPY]][%[[SOURCE]]] : memref<32xi8>
// GENERIC: memref.store %{{.*}}, %{{.*}}[%[[ROW]], %{{.*}}] : memref<?x64xi8>

// SSSE3-LABEL: func.func @quantize
// SSSE3: arith.cmpi ult, %{{.*}} : vector<16xi8>
// SSSE3: arith.select
// SSSE3: scf.for %[[G:.*]] = %{{.*}} to %{{.*}} step
// SSSE3: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step
// SSSE3: llvm.call_intrinsic "llvm.x86.ssse3.pshuf.b.128"
// SSSE3: llvm.call_intrinsic "llvm.x86.ssse3.pshuf.b.128"
// SSSE3: arith.ori %{{.*}} : vector<16xi8>
// SSSE3: vector.store %{{.*}}, %{{.*}}[%[[ROW]], %{{.*}}] : memref<?x64xi8>, vector<16xi8>
// SSSE3-NOT: memref.alloca
func.func @quantize(%x: memref<?x64xf32>, %isr: memref<64xf16>, %left: memref<32xi8>,
                    %right: memref<32xi8>, %perm: memref<32xi32>, %act: memref<?x64xi8>,
                    %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %x, %isr, %left, %right, %perm, %act, %scales, %g0, %g1
      {group_size = 32 : i64}
      : memref<?x64xf32>, memref<64xf16>, memref<32xi8>, memref<32xi8>, memref<32xi32>,
        memref<?x64xi8>, memref<?x2xf32>
  return
}
