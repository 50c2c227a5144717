// RUN: cq4p-opt %s -split-input-file -cq4p-tile-super-blocks | FileCheck %s
// RUN: cq4p-opt %s -split-input-file -cq4p-tile-super-blocks=gemm-rows=2 | FileCheck %s --check-prefix=ROWS2
// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-sme2 -cq4p-tile-super-blocks | FileCheck %s --check-prefix=SME2
// RUN: cq4p-opt %s -split-input-file -cq4p-select-strategy=target=aarch64-neon -cq4p-tile-super-blocks=gemm-rows=8 | FileCheck %s --check-prefix=PAIRED

// A GEMV: one-row tiles; per group the int32 partials, then the rescale.
// CHECK-LABEL: func.func @gemv
// CHECK-SAME: (%[[P:.*]]: memref<2x2x32x128xi8>, %[[NP:.*]]: memref<2x2x64xf32>, %[[CB:.*]]: memref<16xi8>, %[[A:.*]]: memref<1x256xi8>, %[[S:.*]]: memref<1x2xf32>, %[[Y:.*]]: memref<1x100xf32>, %[[SB0:.*]]: index, %[[SB1:.*]]: index)
// CHECK-DAG: %[[PART:.*]] = memref.alloca() : memref<1x64xi32>
// CHECK-DAG: %[[ACC:.*]] = memref.alloca() : memref<1x64xf32>
// CHECK: scf.for %[[SB:.*]] = %[[SB0]] to %[[SB1]]
// CHECK: %[[VALID:.*]] = arith.minsi
// CHECK: scf.for %[[ROW:.*]] =
// CHECK: vector.store %{{.*}}, %[[ACC]]
// CHECK: scf.for %[[G:.*]] =
// CHECK-NEXT: cq4p.panel_dot %[[P]], %[[CB]], %[[A]], %[[PART]], %[[SB]], %[[G]], %[[ROW]]
// CHECK-NEXT: cq4p.rescale %[[PART]], %[[S]], %[[NP]], %[[ACC]], %[[SB]], %[[G]], %[[ROW]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[VALID]]
// CHECK: memref.load %[[ACC]]
// CHECK: memref.store %{{.*}}, %[[Y]]
// CHECK-NOT: cq4p.panel_matmul
// SME2 GEMV: every group's partials at once, then the rescale per group.
// SME2-LABEL: func.func @gemv
// SME2: %[[PART:.*]] = memref.alloca() : memref<2x1x64xi32>
// SME2: cq4p.panel_partials %{{.*}}, %{{.*}}, %{{.*}}, %[[PART]], %{{.*}}, %{{.*}}, %{{.*}} {rescale = #cq4p.partials_rescale<group_loop>} : {{.*}}, memref<1x256xi8>, memref<2x1x64xi32>
// SME2: scf.for %[[G:.*]] =
// SME2: %[[SLICE:.*]] = memref.subview %[[PART]][%[[G]], 0, 0] [1, 1, 64] [1, 1, 1]
// SME2: cq4p.rescale %[[SLICE]]
func.func @gemv(%panels: memref<2x2x32x128xi8>, %norm_panels: memref<2x2x64xf32>,
                %cb: memref<16xi8>, %act: memref<1x256xi8>, %scales: memref<1x2xf32>,
                %y: memref<1x100xf32>, %sb0: index, %sb1: index) {
  cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
      : memref<2x2x32x128xi8>, memref<2x2x64xf32>, memref<16xi8>, memref<1x256xi8>,
        memref<1x2xf32>, memref<1x100xf32>
  return
}

// -----

// A GEMM: row tiles of 4 (buffers of 4 rows), then one-row tiles for the rest.
// CHECK-LABEL: func.func @gemm
// CHECK: memref.dim %{{.*}}, %{{.*}} : memref<?x128xi8>
// CHECK-DAG: memref.alloca() : memref<4x64xi32>
// CHECK-DAG: memref.alloca() : memref<4x64xf32>
// CHECK-DAG: memref.alloca() : memref<1x64xi32>
// CHECK: cq4p.panel_dot {{.*}} : {{.*}}, memref<4x64xi32>
// CHECK: cq4p.panel_dot {{.*}} : {{.*}}, memref<1x64xi32>
// ROWS2-LABEL: func.func @gemm
// ROWS2: memref.alloca() : memref<2x64xi32>
// NEON GEMM (paired tiles): tiles of 8 rows, then at most one of 4, each
// packed once per call (per 8 K values the even bytes, then the odd ones),
// super-blocks inside, the pair loop over the packed tile (row 0 of it) and
// the rescale at the tile's rows; then the rows past the tiles one by one.
// PAIRED-LABEL: func.func @gemm
// PAIRED: %[[ROWS:.*]] = memref.dim
// PAIRED: %[[PACK8:.*]] = memref.alloca() : memref<8x128xi8>
// PAIRED: %[[PART8:.*]] = memref.alloca() : memref<8x64xi32>
// PAIRED: scf.for %[[ROW:.*]] = %c0 to %{{.*}} step %c8
// PAIRED: vector.shuffle %{{.*}} [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15] : vector<16xi8>, vector<16xi8>
// PAIRED: vector.store %{{.*}}, %[[PACK8]]
// PAIRED: scf.for %[[SB:.*]] =
// PAIRED: scf.for %[[G:.*]] =
// PAIRED-NEXT: cq4p.panel_dot %{{.*}}, %{{.*}}, %[[PACK8]], %[[PART8]], %[[SB]], %[[G]], %c0 {paired_activations} : {{.*}}, memref<8x128xi8>, memref<8x64xi32>
// PAIRED-NEXT: cq4p.rescale %[[PART8]], %{{.*}}, %{{.*}}, %{{.*}}, %[[SB]], %[[G]], %[[ROW]]
// PAIRED: memref.alloca() : memref<4x128xi8>
// PAIRED: step %c4
// PAIRED: cq4p.panel_dot {{.*}} {paired_activations} : {{.*}}, memref<4x128xi8>, memref<4x64xi32>
// PAIRED: cq4p.panel_dot {{.*}} : {{.*}}, memref<?x128xi8>, memref<1x64xi32>
// SME2 GEMM: tiles of 16 rows packed once, super-blocks inside, partials of
// every group (4 here) per streaming call. A last tile of fewer than 7 rows
// is not padded: (rows + 9) / 16 tiles, then the R = 1 to 6 rows past them
// as one block of R rows (a switch on R; nothing when R = 0), with R-row
// partials and accumulators. A whole tile (16 rows, 64 channels below N)
// is zeroed and rescaled in y itself; a partial one in the tile's
// accumulator, then copied (whole rows of 64 channels as vectors). Both are
// a [16][64] view with a dynamic row stride.
// SME2-LABEL: func.func @gemm
// SME2-DAG: %[[PACKED:.*]] = memref.alloca() : memref<4x8x16x4xi8>
// SME2-DAG: %[[SCALES:.*]] = memref.alloca() : memref<16x4xf32>
// SME2-DAG: %[[PART:.*]] = memref.alloca() : memref<4x16x64xi32>
// SME2-DAG: %[[ACCUM:.*]] = memref.alloca() : memref<16x64xf32>
// SME2: %[[ROWS:.*]] = memref.dim
// SME2: %[[PLUS:.*]] = arith.addi %[[ROWS]], %c9
// SME2: %[[TILES:.*]] = arith.divui %[[PLUS]], %c16
// SME2: %[[TILED:.*]] = arith.muli %[[TILES]], %c16
// SME2: %[[END:.*]] = arith.minsi %[[TILED]], %[[ROWS]]
// SME2: scf.for %[[TILE:.*]] = %{{.*}} to %[[TILES]]
// SME2: cq4p.pack_activation_tile %{{.*}}, %{{.*}}, %[[PACKED]], %[[SCALES]]
// SME2: %[[VALID_ROWS:.*]] = arith.minsi
// SME2: scf.for %[[SB:.*]] =
// SME2: %[[FULL_ROWS:.*]] = arith.cmpi eq, %[[VALID_ROWS]], %c16
// SME2: %[[FULL_CHANNELS:.*]] = arith.cmpi eq, %{{.*}}, %c64
// SME2: %[[WHOLE:.*]] = arith.andi %[[FULL_ROWS]], %[[FULL_CHANNELS]]
// SME2: %[[VIEW:.*]] = scf.if %[[WHOLE]] -> (memref<16x64xf32, strided<[?, 1], offset: ?>>)
// SME2: %[[Y_TILE:.*]] = memref.subview %{{.*}}[%[[TILE_ROW:.*]], %{{.*}}] [16, 64] [1, 1] : memref<?x64xf32> to memref<16x64xf32, strided<[64, 1], offset: ?>>
// SME2: memref.cast %[[Y_TILE]]
// SME2: } else {
// SME2: memref.cast %[[ACCUM]] : memref<16x64xf32> to memref<16x64xf32, strided<[?, 1], offset: ?>>
// SME2-COUNT-256: vector.store %{{.*}}, %[[VIEW]]
// SME2: cq4p.panel_partials %{{.*}}, %{{.*}}, %[[PACKED]], %[[PART]], %[[SB]]
// SME2: cq4p.rescale %{{.*}}, %[[SCALES]], %{{.*}}, %[[VIEW]]
// SME2: %[[PARTIAL:.*]] = arith.xori %[[WHOLE]], %true
// SME2: scf.if %[[PARTIAL]] {
// SME2: scf.if
// SME2-COUNT-4: vector.load %[[ACCUM]]
// SME2: } else {
// SME2: memref.store
// SME2: %[[PART1:.*]] = memref.alloca() : memref<4x1x64xi32>
// SME2: %[[ACC1:.*]] = memref.alloca() : memref<1x64xf32>
// SME2: %[[PART2:.*]] = memref.alloca() : memref<4x2x64xi32>
// SME2: %[[ACC2:.*]] = memref.alloca() : memref<2x64xf32>
// SME2: %[[PART6:.*]] = memref.alloca() : memref<4x6x64xi32>
// SME2: %[[ACC6:.*]] = memref.alloca() : memref<6x64xf32>
// SME2: %[[LEFT:.*]] = arith.subi %[[ROWS]], %[[END]]
// SME2: scf.index_switch %[[LEFT]]
// SME2-NEXT: case 1 {
// SME2-NEXT: scf.for
// SME2: scf.for %{{.*}} = %[[END]] to %[[ROWS]] step %c1
// SME2: cq4p.panel_partials {{.*}}, %[[PART1]], {{.*}} : {{.*}}, memref<?x128xi8>, memref<4x1x64xi32>
// SME2: cq4p.rescale %{{.*}}, %{{.*}}, %{{.*}}, %[[ACC1]]
// SME2: case 2 {
// SME2-NEXT: scf.for
// SME2: scf.for %{{.*}} = %[[END]] to %[[ROWS]] step %c2
// SME2: cq4p.panel_partials {{.*}}, %[[PART2]], {{.*}} : {{.*}}, memref<?x128xi8>, memref<4x2x64xi32>
// SME2: cq4p.rescale %{{.*}}, %{{.*}}, %{{.*}}, %[[ACC2]]
// SME2-COUNT-2: vector.load %[[ACC2]]
// SME2: case 6 {
// SME2: cq4p.panel_partials {{.*}}, %[[PART6]], {{.*}} : {{.*}}, memref<?x128xi8>, memref<4x6x64xi32>
// SME2: default {
// SME2-NEXT: }
func.func @gemm(%panels: memref<1x4x8x128xi8>, %norm_panels: memref<1x4x64xf32>,
                %cb: memref<16xi8>, %act: memref<?x128xi8>, %scales: memref<?x4xf32>,
                %y: memref<?x64xf32>, %sb0: index, %sb1: index) {
  cq4p.panel_matmul %panels, %norm_panels, %cb, %act, %scales, %y, %sb0, %sb1
      : memref<1x4x8x128xi8>, memref<1x4x64xf32>, memref<16xi8>, memref<?x128xi8>,
        memref<?x4xf32>, memref<?x64xf32>
  return
}
