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
// SSSE3: cq4p_intr.x86.ssse3.pshuf.b.128
// SSSE3: cq4p_intr.x86.ssse3.pshuf.b.128
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

// AVX2 and AVX-512 (WideQuantizeLowering): a group in natural order, 8 or
// 16 lanes; the butterflies inside a vector are a lane swap and an FMA by
// +-1, max|w| an integer max of the magnitudes' bits, the right signs a
// byte negate under a per-call mask; AVX2 looks each source chunk up for two
// output chunks at once (256-bit PSHUFB). AVX-512 rounds with VCVTPS2DQ under
// round-to-nearest-even and permutes a group of up to 128 bytes with word
// permutes and one PSHUFB pick per parity; a 128-byte group is narrowed by
// VPACKSSDW + VPACKSSWB, whose byte order the per-call indices absorb.
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=avx2 | FileCheck %s --check-prefix=AVX2
// RUN: cq4p-opt %s -convert-cq4p-to-vector=x86-dot=avx512vnni | FileCheck %s --check-prefix=AVX512

// AVX2-LABEL: func.func @quantize
// AVX2: scf.for
// AVX2: scf.for
// AVX2: vector.shuffle %{{.*}} [1, 0, 3, 2, 5, 4, 7, 6] : vector<8xf32>, vector<8xf32>
// AVX2: math.fma %{{.*}} : vector<8xf32>
// AVX2: vector.reduction <maxsi>, %{{.*}} : vector<8xi32> into i32
// AVX2: math.roundeven %{{.*}} : vector<8xf32>
// AVX2: arith.trunci %{{.*}} : vector<16xi32> to vector<16xi8>
// AVX2: arith.select %{{.*}} : vector<16xi1>, vector<16xi8>
// AVX2: cq4p_intr.x86.avx2.pshuf.b
// AVX2: vector.store %{{.*}} : memref<?x64xi8>, vector<32xi8>
// AVX2-NOT: arith.muli %{{.*}} : vector<16xi8>

// AVX512-LABEL: func.func @quantize
// AVX512: scf.for
// AVX512: scf.for
// AVX512: math.fma %{{.*}} : vector<16xf32>
// AVX512: vector.reduction <maxsi>, %{{.*}} : vector<16xi32> into i32
// The quotients: below an infinite scale, the reciprocal, a multiply and
// one FMA refinement per vector; otherwise the division.
// AVX512: %[[FINITE:.*]] = arith.cmpf olt, %[[SCALE:.*]], %{{.*}} : f32
// AVX512: scf.if %[[FINITE]] -> (vector<16xi32>, vector<16xi32>)
// AVX512: %[[RECIP:.*]] = arith.divf %{{.*}}, %[[SCALE]] : f32
// AVX512: %[[Q:.*]] = arith.mulf %{{.*}}, %{{.*}} : vector<16xf32>
// AVX512: %[[R:.*]] = math.fma %{{.*}}, %[[Q]], %{{.*}} : vector<16xf32>
// AVX512: %[[Q2:.*]] = math.fma %[[R]], %{{.*}}, %[[Q]] : vector<16xf32>
// AVX512: cq4p_intr.x86.avx512.mask.cvtps2dq.512 %[[Q2]]
// AVX512: } else {
// AVX512: arith.divf %{{.*}} : vector<16xf32>
// AVX512: cq4p_intr.x86.avx512.mask.cvtps2dq.512
// AVX512: arith.trunci %{{.*}} : vector<32xi32> to vector<32xi8>
// AVX512: cq4p_intr.x86.avx512.permvar.hi.256
// AVX512: cq4p_intr.x86.avx2.pshuf.b
// AVX512: vector.store %{{.*}} : memref<?x64xi8>, vector<32xi8>

// AVX512-LABEL: func.func @quantize128
// AVX512: scf.for
// AVX512: scf.for
// AVX512-COUNT-2: cq4p_intr.x86.avx512.packssdw.512
// AVX512: cq4p_intr.x86.avx512.packsswb.512
// AVX512: cq4p_intr.x86.avx512.vpermi2var.hi.512
// AVX512: cq4p_intr.x86.avx512.pshuf.b.512
// AVX512: vector.store %{{.*}} : memref<?x256xi8>, vector<64xi8>
func.func @quantize128(%x: memref<?x256xf32>, %isr: memref<256xf16>, %left: memref<128xi8>,
                       %right: memref<128xi8>, %perm: memref<128xi32>, %act: memref<?x256xi8>,
                       %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.quantize_activations %x, %isr, %left, %right, %perm, %act, %scales, %g0, %g1
      {group_size = 128 : i64}
      : memref<?x256xf32>, memref<256xf16>, memref<128xi8>, memref<128xi8>, memref<128xi32>,
        memref<?x256xi8>, memref<?x2xf32>
  return
}
