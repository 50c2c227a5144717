// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-neon | FileCheck %s --check-prefixes=CHECK,NEON
// RUN: cq4p-opt %s -split-input-file -convert-cq4p-to-vector="x86-dot=avx2" | FileCheck %s --check-prefixes=CHECK,AVX2

// The orthogonal lm_head's rotation as fused multiply-adds along the
// rotation's rows, in tiles of 4, 2 and 1 rows: per rotation row one wide
// fp16 load and one conversion of the tile's outputs (16 for 4 rows, 32 for
// one), then one fma per row into its sums (reloaded once per span of
// rotation rows). NEON takes a row's values four at a time and multiplies
// by lane (FMLA by element); AVX2 broadcasts each value from memory.
// CHECK-LABEL: func.func @lm_head_rotation
// CHECK-NOT: cq4p.rotate_quantize_activations
// CHECK: %[[SUMS:.*]] = vector.load %{{.*}} : memref<128x256xf32>, vector<16xf32>
// CHECK-COUNT-3: vector.load %{{.*}} : memref<128x256xf32>, vector<16xf32>
// CHECK: scf.for %{{.*}} iter_args(%[[ACC:[^ ]*]] = %[[SUMS]], {{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// NEON: %[[VALUES:.*]] = vector.load %{{.*}} : memref<128x256xf32>, vector<4xf32>
// CHECK: %[[HALF:.*]] = vector.load %{{.*}} : memref<256x256xf16>, vector<16xf16>
// CHECK: %[[COLUMN:.*]] = arith.extf %[[HALF]] : vector<16xf16> to vector<16xf32>
// NEON: %[[SCALAR:.*]] = vector.extract %[[VALUES]][0] : f32 from vector<4xf32>
// AVX2: %[[SCALAR:.*]] = memref.load %{{.*}} : memref<128x256xf32>
// CHECK: %[[VALUE:.*]] = vector.broadcast %[[SCALAR]] : f32 to vector<16xf32>
// CHECK: math.fma %[[COLUMN]], %[[VALUE]], %[[ACC]] : vector<16xf32>
// The single rows: 32 outputs at a time.
// CHECK: vector.load %{{.*}} : memref<256x256xf16>, vector<32xf16>
// CHECK: arith.extf %{{.*}} : vector<32xf16> to vector<32xf32>
// CHECK: math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: vector.store %{{.*}}, %{{.*}} : memref<128x256xf32>, vector<32xf32>
// CHECK: arith.fptosi
func.func @lm_head_rotation(%x: memref<?x256xf32>, %isr: memref<256xf16>,
                            %rotation: memref<256x256xf16>, %act: memref<?x256xi8>,
                            %scales: memref<?x2xf32>, %g0: index, %g1: index) {
  cq4p.rotate_quantize_activations %x, %isr, %rotation, %act, %scales, %g0, %g1
      {group_size = 128 : i64}
      : memref<?x256xf32>, memref<256xf16>, memref<256x256xf16>, memref<?x256xi8>,
        memref<?x2xf32>
  return
}

// -----

// The embedding's product reads rotation_t's rows with the same fused
// multiply-adds, the sums waiting in the output rows: the decoded values
// are the raw codebook levels (no norm: fp16 x fp16 products, exact in
// fp32, as SME2's FMLAL makes them), and each sum is then multiplied by
// the row's norm, then by isr.
// CHECK-LABEL: func.func @embedding_rotation
// CHECK-NOT: cq4p.decode_embedding
// CHECK: %[[LEVEL:.*]] = arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT: memref.store %[[LEVEL]], %{{.*}} : memref<{{[0-9]+}}x128xf32>
// CHECK: vector.load %{{.*}} : memref<?x128xf32>, vector<32xf32>
// CHECK: vector.load %{{.*}} : memref<128x128xf16>, vector<32xf16>
// CHECK: math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<32xf32>
// CHECK: vector.store %{{.*}}, %{{.*}} : memref<?x128xf32>, vector<32xf32>
// CHECK: %[[NORM16:.*]] = memref.load %{{.*}} : memref<100x1xf16>
// CHECK: %[[NORM:.*]] = arith.extf %[[NORM16]] : f16 to f32
// CHECK: %[[NORMS:.*]] = vector.broadcast %[[NORM]] : f32 to vector<{{[0-9]+}}xf32>
// CHECK: %[[SUM:.*]] = vector.load %{{.*}} : memref<?x128xf32>, vector<{{[0-9]+}}xf32>
// CHECK: %[[SCALED:.*]] = arith.mulf %[[SUM]], %[[NORMS]]
// CHECK: arith.mulf %[[SCALED]], %{{.*}}
func.func @embedding_rotation(%panels: memref<2x1x32x128xi8>, %norms: memref<100x1xf16>,
                              %cb: memref<16xf16>, %rotation_t: memref<128x128xf16>,
                              %isr: memref<128xf16>, %ids: memref<?xi64>,
                              %out: memref<?x128xf32>) {
  cq4p.decode_embedding %panels, %norms, %cb, %rotation_t, %isr, %ids, %out
      : memref<2x1x32x128xi8>, memref<100x1xf16>, memref<16xf16>, memref<128x128xf16>,
        memref<128xf16>, memref<?xi64>, memref<?x128xf32>
  return
}
